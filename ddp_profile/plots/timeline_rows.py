"""The timeline's rows: per rank an NVTX (or inferred phases) row, a CPU row when the rank has host calls, then
its streams, with many streams folded into one row that the page can unfold."""

from __future__ import annotations

import pandas as pd

# A rank keeps at most this many stream rows; beyond it (a CUDA-graph run launches every graph node on its own
# stream: hundreds of streams of one kernel each) its NCCL streams and its busiest streams keep their own rows
# and the rest share one folded row, so the page stays a few screens high.
MAX_STREAM_ROWS = 6


def _stream_rows(mine: pd.DataFrame, busy: pd.Series, nccl: set) -> tuple[list[int], int]:
    """For one rank's streams (rows of ``mine``, sorted for display): the positions that keep a row, and how
    many fold into the shared row. Kept: every stream when they fit; else the NCCL streams first, then the
    busiest (GPU time, ties by display order) until ``MAX_STREAM_ROWS - 1`` rows, the last row holding the
    rest."""
    n = len(mine)
    if n <= MAX_STREAM_ROWS:
        return list(range(n)), 0
    keys = list(mine.itertuples(index=False, name=None))
    order = sorted(range(n), key=lambda i: (keys[i] not in nccl, -busy.get(keys[i], 0), i))
    keep = sorted(order[: MAX_STREAM_ROWS - 1])
    return keep, n - len(keep)


def timeline_rows(
    kernels: pd.DataFrame, phases: pd.DataFrame, cpu_ranks=(), inferred: bool = False
) -> tuple[list[str], pd.DataFrame, list[int], list[int]]:
    """Row labels (per rank: an NVTX row, a CPU row when the rank has host calls, then its streams), a frame
    mapping (rank, pid, device, stream) to a row index (stream -1 marks the NVTX row, -2 the CPU row), each
    row's rank, and each row's fold: -1, or for a folded stream the row of its rank's shared "N more streams
    (folded)" row, which holds no track itself and is followed by the streams it folds (each with its own
    row and label, drawn on the shared row until the page unfolds it). Only streams with a kernel in
    ``kernels`` get a row."""
    ranks = sorted(set(kernels["rank"].dropna().astype(int)) | set(phases["rank"].dropna().astype(int)))
    cols = ["rank", "pid", "device", "stream"]
    k = kernels.dropna(subset=["rank", "pid", "device", "stream", "start_ns", "end_ns"])
    k = k.astype({c: "int64" for c in cols})
    streams = k[cols].drop_duplicates().sort_values(["rank", "device", "stream", "pid"])
    busy = (k["end_ns"] - k["start_ns"]).groupby([k[c] for c in ("pid", "device", "stream")]).sum()
    nccl = set(k.loc[k["kind"] == "nccl", ["pid", "device", "stream"]].itertuples(index=False, name=None))
    labels: list[str] = []
    keys: list[tuple[int, ...]] = []
    row_rank: list[int] = []
    row_fold: list[int] = []

    def add(label, key_rows, r, fold=-1):
        row = len(labels)
        labels.append(label)
        row_rank.append(r)
        row_fold.append(fold)
        keys.extend((*key, row) for key in key_rows)
        return row

    for r in ranks:
        add(f"rank {r} · " + ("phases (inferred)" if inferred else "NVTX"), [(r, -1, -1, -1)], r)
        if r in cpu_ranks:
            add(f"rank {r} · CPU main thread", [(r, -2, -2, -2)], r)
        mine = streams[streams["rank"] == r]
        multi = mine["device"].nunique() > 1
        ids = mine[["pid", "device", "stream"]]
        keep, folded = _stream_rows(ids, busy, nccl)

        def label(row, r=r, multi=multi):
            return f"rank {r} · " + (f"dev {row.device} " if multi else "") + f"stream {row.stream}"

        for i, row in enumerate(mine.itertuples(index=False)):
            if i in keep:
                add(label(row), [(r, row.pid, row.device, row.stream)], r)
        if folded:
            head = add(f"rank {r} · {folded} more streams (folded)", [], r)
            for i, row in enumerate(mine.itertuples(index=False)):
                if i not in keep:
                    add(label(row), [(r, row.pid, row.device, row.stream)], r, head)
    table = pd.DataFrame(keys, columns=[*cols, "row"]).astype("int64")
    return labels, table, row_rank, row_fold
