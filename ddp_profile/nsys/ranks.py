"""Which process is which rank: from the best evidence available, recorded per process.

Order of preference (one source is chosen for the whole trace, so ranks are never mixed from two sources):

1. ``nvtx-marker``: the harness's start-up marker ``"ddp_profile.rank R/W"`` (``nvtx_names.RANK_MARKER``,
   payload R), emitted once per process;
2. ``filename``: one process per file and file names carrying the rank (``rank3``, ``_r3``, ``-r3``);
3. ``device-order``: processes sorted by (host order, CUDA device, pid): what torchrun does by default
   (LOCAL_RANK = device), right for single-node runs launched the usual way.

NCCL's own NVTX ranges would be a fourth source, but nsys (2025.3, NCCL 2.28) does not fill their payloads,
so they carry no rank; the source name "nccl" is reserved for when they do.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ddp_profile import nvtx_names
from ddp_profile.errors import TraceError

# At most 9 digits: a longer run (hostile or damaged text) is no rank, so it never overflows an int64 column.
MARKER_RE = re.compile(rf"^{re.escape(nvtx_names.RANK_MARKER)}\s+(\d{{1,9}})\s*/\s*(\d{{1,9}})(?!\d)")
FILENAME_RE = re.compile(r"(?:^|[^A-Za-z0-9])(?:rank|r)[-_]?(\d{1,9})(?![0-9])", re.I)


def rank_from_filename(stem: str) -> int | None:
    matches = FILENAME_RE.findall(stem)
    return int(matches[-1]) if matches else None


def marker_ranks(nvtx: pd.DataFrame) -> dict[tuple[int, int], tuple[int, int]]:
    """(file index, pid) -> (rank, world size) from rank markers. ``nvtx`` needs columns file, pid, name."""
    found: dict[tuple[int, int], tuple[int, int]] = {}
    if nvtx.empty:
        return found
    codes, uniq = pd.factorize(nvtx["name"])  # names repeat (steps, phases): test each distinct one once
    marked = np.array([isinstance(u, str) and u.startswith(nvtx_names.RANK_MARKER) for u in uniq] + [False])
    hits = nvtx[marked[codes]]  # code -1 (a missing name) indexes the trailing False
    for file_idx, pid, name in zip(hits["file"], hits["pid"], hits["name"], strict=False):
        m = MARKER_RE.match(str(name))
        if m:
            found[(int(file_idx), int(pid))] = (int(m.group(1)), int(m.group(2)))
    return found


def assign_ranks(procs: pd.DataFrame, nvtx: pd.DataFrame, files: list[str]) -> tuple[pd.DataFrame, str]:
    """Add ``rank`` and ``rank_source`` to ``procs`` (columns file, pid, device, host_order) and return it
    with the source used. Raises TraceError when the evidence is contradictory (duplicate ranks, markers
    from runs of different world sizes)."""
    procs = procs.sort_values(["host_order", "device", "pid"]).reset_index(drop=True)
    markers = marker_ranks(nvtx)
    keys = list(zip(procs["file"], procs["pid"], strict=False))
    if markers and all(k in markers for k in keys):
        worlds = {w for _, w in markers.values()}
        if len(worlds) > 1:
            raise TraceError(
                f"rank markers disagree on the world size ({sorted(worlds)}): "
                "the files come from different runs"
            )
        procs["rank"], source = [markers[k][0] for k in keys], "nvtx-marker"
    else:
        per_file = procs.groupby("file")["pid"].nunique()
        from_names = [rank_from_filename(files[f]) for f in procs["file"]]
        if len(files) > 1 and (per_file == 1).all() and all(r is not None for r in from_names):
            procs["rank"], source = from_names, "filename"
        else:
            procs["rank"], source = list(range(len(procs))), "device-order"
    dup = procs["rank"][procs["rank"].duplicated()]
    if not dup.empty:
        where = procs[procs["rank"].isin(dup)]
        detail = ", ".join(f"{files[f]} pid {p}" for f, p in zip(where["file"], where["pid"], strict=False))
        raise TraceError(
            f"rank {int(dup.iloc[0])} appears more than once ({source}): {detail}; "
            "were files from different runs mixed?"
        )
    procs["rank_source"] = source
    return procs.sort_values("rank").reset_index(drop=True), source
