"""The collective table: every NCCL kernel, matched across ranks, its time split into waiting and transfer.

Issue order: ``seq`` numbers each rank's NCCL kernels per (pid, device, stream) in GPU start order (one
stream = one communicator's queue). Streams of a rank are numbered by first use, and the collective
``(stream number, seq)`` is the same operation on every rank (all ranks issue a communicator's collectives
in the same order; NCCL requires it).

Waiting vs transfer. A collective can only progress once its last peer has arrived, so for kernel k of
operation c::

    wait_ns     = min(duration_ns, max(0, max_{peers p of c} start_p − start_k))
    transfer_ns = duration_ns − wait_ns

    rank 0:  [---- wait ----|== transfer ==]
    rank 1:                 [== transfer ==]      <- last to arrive: wait 0

(Assumes the ranks' clocks agree, which holds for processes on one host in one nsys report.)

Bucket and bytes come from the harness's NVTX range around each collective launch (message
``"allreduce b<bucket> <bytes>B"``, or ``"param_sync b<bucket> r<owner> <bytes>B"`` around the sharded
optimizer's parameter broadcasts; payload = bytes): a kernel belongs to the latest such range of its
process that started at or before its launch (``launch_ns``, runtime or driver API) and had not ended.
Without them, bytes (no bucket) come the same way from NCCL's own ranges (domain NCCL) whose payload the
loader decoded from their binary payload (``nsys.payloads``): NCCL's message size is the buffer for
AllReduce and Broadcast, one rank's share for AllGather and ReduceScatter (times the ranks here: the
buffer, as the bus-bandwidth factor below expects).

Bus bandwidth (NCCL's convention, comparable across world sizes n)::

    busbw_gb_per_s = bytes · f(n) / transfer_ns     (bytes per ns = GB/s)
    f = 2(n−1)/n for all-reduce; (n−1)/n for all-gather and reduce-scatter; 1 for the rest

Stock PyTorch DDP launches its all-reduces from C++, with no such range. Given DDP's own bucket sizes
(``ddp_bucket_bytes``: the run JSON's ``layout``, logged after the buckets were rebuilt), the k-th
all-reduce of a rank's step is bucket k, because DDP's reducer launches buckets strictly in index order;
this is used only when no range matched and only for steps whose all-reduce count equals the bucket count.

``step``: the step whose host range (same process) contains the kernel's launch.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ddp_profile import nvtx_names as nn
from ddp_profile import schema
from ddp_profile.activity_names import PEER_COPY
from ddp_profile.analysis.kernel_arrays import KernelArrays, ints
from ddp_profile.fmt import fmt_ms

# "allreduce b<bucket> <bytes>B" or "param_sync b<bucket> r<owner> <bytes>B" (bounded: fits int64)
_BUCKET_RX = re.compile(
    rf"^(?:{re.escape(nn.ALLREDUCE_PREFIX)}|{re.escape(nn.PARAM_SYNC_PREFIX)})"
    r"\s+b(\d{1,9})\s+(?:r\d{1,9}\s+)?(\d{1,18})\s*B"
)


def bus_factor(collective: pd.Series, n: np.ndarray) -> np.ndarray:
    """NCCL's bus-bandwidth factor per row (NaN where undefined, e.g. all-reduce on one rank)."""
    codes, uniq = _distinct(collective)  # few distinct names: classify each once, rows index it
    kind = []
    for u in uniq:
        key = re.sub(r"[^a-z]", "", u.lower())
        kind.append(2 if "allreduce" in key else 1 if ("allgather" in key or "reducescatter" in key) else 0)
    k = np.array(kind, dtype=np.int64)[codes]
    n = np.asarray(n, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        f = np.where(k == 2, 2 * (n - 1) / n, np.where(k == 1, (n - 1) / n, 1.0))
    return np.where(f > 0, f, np.nan)


def _distinct(values: pd.Series) -> tuple[np.ndarray, list[str]]:
    """(code per row, distinct values as ``str``): missing values (None, NaN) are ``""``, the last code, so
    ``uniq[code]`` is the row's ``values.astype(object).fillna("").astype(str)``."""
    codes, uniq = pd.factorize(values.astype("object"), use_na_sentinel=True)
    text = [str(u) for u in uniq] + [""]
    return np.where(codes < 0, len(text) - 1, codes), text


def _is_allreduce(collective: pd.Series) -> np.ndarray:
    """Rows whose collective name contains "allreduce" (lower-cased; missing: no), each distinct name once."""
    codes, uniq = _distinct(collective)
    return np.array(["allreduce" in u.lower() for u in uniq], dtype=bool)[codes]


def _impossible(start: np.ndarray, end: np.ndarray, group: np.ndarray, tolerance_ns: float = 0) -> np.ndarray:
    """Per row, whether its collective (``group``: one id per collective across ranks) has a kernel that ended
    more than ``tolerance_ns`` before a peer's kernel of it started: impossible, since a collective completes
    only after every rank joined it (wrong clocks or a wrong pairing)."""
    if not len(group):
        return np.zeros(0, dtype=bool)
    g = pd.Series(group)
    first_end = pd.Series(end).groupby(g).transform("min").to_numpy()
    last_start = pd.Series(start).groupby(g).transform("max").to_numpy()
    return first_end < last_start - tolerance_ns


def _uncalled_waits(start: np.ndarray, wait: np.ndarray, group: np.ndarray, residual_ns: float) -> np.ndarray:
    """Per row, whether its wait is not called with clocks known to ±``residual_ns``: a wait under the residual,
    or a wait of 0 (it arrived last) with a peer arriving within the residual before it."""
    if not residual_ns or not len(group):
        return np.zeros(len(group), dtype=bool)
    g = pd.Series(group)
    s = pd.Series(start.astype(np.float64))
    last = s.groupby(g).transform("max")
    second = s.where(s < last).groupby(g).transform("max").to_numpy()
    close = ~np.isnan(second) & (last.to_numpy() - second <= residual_ns)
    return ((wait > 0) & (wait <= residual_ns)) | ((wait == 0) & close)


def _all_receive(collective: pd.Series) -> np.ndarray:
    """Rows of collectives in which every rank receives from every other (all-reduce, all-gather,
    reduce-scatter, all-to-all): none of their kernels can end before every peer's has started. (A send, or a
    broadcast's root, can finish into a peer's buffers before that peer's kernel runs.)"""
    codes, uniq = _distinct(collective)
    keys = [re.sub(r"[^a-z]", "", u.lower()) for u in uniq]
    return np.array(
        [any(k in key for k in ("allreduce", "allgather", "reducescatter", "alltoall")) for key in keys],
        dtype=bool,
    )[codes]


def _assign(pid: np.ndarray, t: np.ndarray, rpid: np.ndarray, rs: np.ndarray, re_: np.ndarray) -> np.ndarray:
    """Index of the latest range (same pid) with start <= t <= end, else -1; vectorised per pid."""
    out = np.full(t.size, -1, dtype=np.int64)
    for p in np.unique(pid):
        rows = np.flatnonzero(rpid == p)
        if rows.size == 0:
            continue
        rows = rows[np.argsort(rs[rows], kind="stable")]
        k = np.flatnonzero(pid == p)
        j = np.searchsorted(rs[rows], t[k], side="right") - 1
        ok = (j >= 0) & (t[k] >= 0)
        ok[ok] = t[k][ok] <= re_[rows[j[ok]]]
        out[k[ok]] = rows[j[ok]]
    return out


def _nccl_sized(nvtx: pd.DataFrame) -> pd.DataFrame:
    """NCCL's own ranges (domain NCCL) whose payload holds the message size (the loader decodes it from their
    binary payload where the export has one): pid, start_ns, end_ns, bucket (NaN), bytes, per_rank (the size
    is one rank's share: AllGather, ReduceScatter)."""
    hit = (
        (nvtx["domain"] == "NCCL").to_numpy(dtype=bool)
        & nvtx["payload"].notna().to_numpy(dtype=bool)
        & nvtx["end_ns"].notna().to_numpy(dtype=bool)
    )
    r = nvtx.loc[hit]
    key = r["name"].astype(str).str.lower().str.replace(r"[^a-z]", "", regex=True)
    return pd.DataFrame(
        {
            "pid": ints(r["pid"]),
            "start_ns": ints(r["start_ns"]),
            "end_ns": ints(r["end_ns"]),
            "bucket": np.full(len(r), np.nan),
            "bytes": r["payload"].to_numpy(dtype=float),
            "per_rank": key.str.contains("allgather|reducescatter").to_numpy(dtype=bool),
        }
    )


def _buckets(nvtx: pd.DataFrame | None) -> pd.DataFrame:
    """The ranges that size collectives: the harness's (bucket and bytes), else NCCL's own (bytes only)."""
    if nvtx is None or nvtx.empty:
        return pd.DataFrame(
            {"pid": [], "start_ns": [], "end_ns": [], "bucket": [], "bytes": [], "per_rank": []}
        )
    # Names are few even when ranges are many: each distinct one is tested and parsed once, rows index it.
    codes, uniq = pd.factorize(nvtx["name"].astype("object"), use_na_sentinel=True)
    text = pd.Series(np.append(np.asarray(uniq, dtype=object), ""), dtype=object).fillna("").astype(str)
    prefixes = (nn.ALLREDUCE_PREFIX, nn.PARAM_SYNC_PREFIX)
    hit = text.str.startswith(prefixes).to_numpy(dtype=bool)[codes] & nvtx["end_ns"].notna().to_numpy()
    r = nvtx.loc[hit]
    parsed = text.str.extract(_BUCKET_RX).iloc[codes[hit]].set_axis(r.index)
    nbytes = pd.to_numeric(r["payload"], errors="coerce").fillna(pd.to_numeric(parsed[1], errors="coerce"))
    if r.empty:
        return _nccl_sized(nvtx)
    return pd.DataFrame(
        {
            "pid": ints(r["pid"]),
            "start_ns": ints(r["start_ns"]),
            "end_ns": ints(r["end_ns"]),
            "bucket": pd.to_numeric(parsed[0], errors="coerce").to_numpy(),
            "bytes": nbytes.to_numpy(dtype=float),
            "per_rank": np.zeros(len(r), dtype=bool),
        }
    )


def _ddp_bucket_sizes(df: pd.DataFrame, sizes: list[int], notes: list[str]) -> None:
    """Fill ``bucket``/``bytes`` of stock DDP's all-reduces from its logged bucket sizes, in place: per
    (pid, step), the k-th all-reduce (issue order) is bucket k, where the counts match."""
    ar = _is_allreduce(df["collective"]) & df["step"].notna().to_numpy()
    rows = df.loc[ar, ["pid", "step", "comm", "seq"]].sort_values(
        ["pid", "step", "comm", "seq"], kind="stable"
    )
    if rows.empty:
        return
    k = rows.groupby(["pid", "step"]).cumcount().to_numpy()
    n = rows.groupby(["pid", "step"])["seq"].transform("size").to_numpy()
    ok = n == len(sizes)
    idx = rows.index.to_numpy()[ok]
    df.loc[idx, "bucket"] = k[ok]
    df.loc[idx, "bytes"] = np.asarray(sizes, dtype=np.int64)[k[ok]]
    notes.append(
        f"all-reduce sizes from DDP's logged bucket sizes in the run JSON ({len(sizes)} buckets; the "
        "k-th all-reduce of a step is bucket k)"
        + (
            ""
            if ok.all()
            else f"; {int((~ok).sum())} all-reduces "
            "in steps whose count differs from the bucket count are left without bytes"
        )
    )


def collective_table(
    karr: KernelArrays,
    nvtx: pd.DataFrame | None,
    steps: pd.DataFrame,
    notes: list[str],
    ddp_bucket_bytes: list[int] | None = None,
) -> pd.DataFrame:
    """COLLECTIVE_COLUMNS, one row per NCCL kernel (``steps``: host step ranges with pid and step;
    ``ddp_bucket_bytes``: stock DDP's bucket sizes, used when no NVTX range gives the bytes).

    Two stages: :func:`collective_rows` (per process: issue order, step, bucket; a rank's own kernels and
    ranges suffice) and :func:`match_collectives` (across ranks: wait vs transfer, bandwidth), so a
    distributed run computes the first per rank and ships only the NCCL rows to the second."""
    rows = collective_rows(karr, nvtx, steps)
    if rows is None:
        n_unknown = int((karr.frame["kind"] == "unknown").sum()) if "kind" in karr.frame else 0
        notes.append(no_nccl_note(n_unknown, *peer_copies(karr)))
        return schema.empty_frame(schema.COLLECTIVE_COLUMNS)
    return match_collectives(
        [rows], notes, ddp_bucket_bytes, ranks=karr.distinct_ranks(), bytes_note=unknown_bytes_note(nvtx)
    )


def no_nccl_note(n_unknown: int = 0, n_peer: int = 0, peer_ns: int = 0) -> str:
    """The note for a trace without NCCL kernels; ``n_peer`` peer-to-peer copies of ``peer_ns`` in all
    (:func:`peer_copies`) are named, since they are communication this analysis does not count as such."""
    text = (
        f"no NCCL kernels identified, but {n_unknown} kernel(s) have no name (kind 'unknown'; the "
        "export's string table lacks them): NCCL kernels may be among them, so there is no collective "
        "table, cost model or overlap"
        if n_unknown
        else "no NCCL kernels in the trace: no collective table, cost model or overlap"
    )
    if n_peer:
        text += (
            f"; the trace has {n_peer} peer-to-peer copies ({PEER_COPY}, {fmt_ms(peer_ns)} in all): "
            "GPUs exchanged data outside NCCL (copy engines, e.g. PyTorch symmetric memory), and communication, "
            "overlap and exposed communication here count NCCL kernels only, so they read 0 for that exchange"
        )
    return text


def peer_copies(karr: KernelArrays) -> tuple[int, int]:
    """(count, summed duration in ns) of the peer-to-peer memcpy rows among ``karr``'s activities (by the
    arrays' name codes: one comparison per distinct name, not per row)."""
    code = np.flatnonzero(np.asarray(karr.names, dtype=object) == PEER_COPY)
    if not code.size:
        return 0, 0
    sel = karr.name_code == code[0]
    return int(sel.sum()), int((karr.end[sel] - karr.start[sel]).sum())


def collective_rows(
    karr: KernelArrays, nvtx: pd.DataFrame | None, steps: pd.DataFrame
) -> pd.DataFrame | None:
    """The per-process stage of :func:`collective_table`: one row per NCCL kernel with its issue order
    (``comm``, ``seq``), step, bucket and bytes (``_has``: bucket found from an NVTX range); None when there
    are no NCCL kernels. Rows sorted by (rank, pid, device, stream, start_ns)."""
    idx = np.flatnonzero(karr.is_nccl)
    if idx.size == 0:
        return None
    k = karr.frame[["device", "stream", "collective", "algorithm", "protocol", "dtype"]].iloc[
        idx
    ]  # only what is used
    df = (
        pd.DataFrame(
            {
                "rank": karr.rank[idx].astype(np.int64),
                "pid": karr.pid[idx].astype(np.int64),
                "device": ints(k["device"]),
                "stream": ints(k["stream"]),
                "collective": k["collective"].to_numpy(),
                "algorithm": k["algorithm"].to_numpy(),
                "protocol": k["protocol"].to_numpy(),
                "dtype": k["dtype"].to_numpy(),
                "start_ns": karr.start[idx],
                "end_ns": karr.end[idx],
                "launch": karr.launch[idx],
            }
        )
        .sort_values(["rank", "pid", "device", "stream", "start_ns"], kind="stable")
        .reset_index(drop=True)
    )
    df["duration_ns"] = df["end_ns"] - df["start_ns"]
    df["seq"] = df.groupby(["pid", "device", "stream"]).cumcount()
    first = df.groupby(["pid", "device", "stream"])["start_ns"].transform("min")
    df["comm"] = df.assign(_f=first).groupby(["pid", "device"])["_f"].rank(method="dense").astype("int64")
    # Step of each kernel, by launch time.
    if steps is not None and not steps.empty:
        j = _assign(
            df["pid"].to_numpy(),
            df["launch"].to_numpy(),
            ints(steps["pid"]),
            ints(steps["host_start_ns"]),
            ints(steps["host_end_ns"]),
        )
        df["step"] = pd.array(np.where(j >= 0, steps["step"].to_numpy()[np.maximum(j, 0)], 0), dtype="Int64")
        df.loc[j < 0, "step"] = pd.NA
    else:
        df["step"] = pd.array([pd.NA] * len(df), dtype="Int64")
    b = _buckets(nvtx)
    j = _assign(
        df["pid"].to_numpy(),
        df["launch"].to_numpy(),
        b["pid"].to_numpy(np.int64),
        b["start_ns"].to_numpy(np.int64),
        b["end_ns"].to_numpy(np.int64),
    )
    has = j >= 0
    df["bucket"] = pd.array(
        np.where(has, b["bucket"].to_numpy()[np.maximum(j, 0)] if len(b) else 0, np.nan), dtype="Float64"
    ).astype("Int64")
    df["bytes"] = pd.array(
        np.where(has, b["bytes"].to_numpy()[np.maximum(j, 0)] if len(b) else 0, np.nan), dtype="Float64"
    ).astype("Int64")
    df["_has"] = has
    df["_per_rank"] = np.where(
        has, b["per_rank"].to_numpy(dtype=bool)[np.maximum(j, 0)] if len(b) else False, False
    )
    return df


def match_collectives(
    parts: list[pd.DataFrame | None],
    notes: list[str],
    ddp_bucket_bytes: list[int] | None = None,
    *,
    ranks=None,
    bytes_note: str | None = None,
    residual_ns: float = 0,
    waits_unknown: bool = False,
) -> pd.DataFrame:
    """The cross-rank stage of :func:`collective_table` over :func:`collective_rows` outputs (one per rank or
    one for all, in rank order): the same collective on every rank is ``(comm, seq)``, grouped by hashing
    (O(rows)); its last arrival gives each kernel's wait. ``ranks``: every rank that ran GPU work (for the
    note on ranks without NCCL kernels); ``bytes_note``: the note when no collective has a size;
    ``residual_ns``: the clocks' residual disagreement (``clocks``), under which a wait is not called;
    ``waits_unknown``: some rank's NCCL kernels are unseen (missing, unnamed), so no wait is called.

    The table keeps a private ``_wait_unknown`` column (a wait not called: under the residual, or of a
    collective whose kernels cannot have overlapped; ``clocks.impossible``), which the analysis reports as
    missing wait and transfer."""
    frames: list[pd.DataFrame] = [p for p in parts if p is not None and len(p)]
    if not frames:
        notes.append(no_nccl_note())
        return schema.empty_frame(schema.COLLECTIVE_COLUMNS)
    df = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    grp = df.groupby(["comm", "seq"])
    df["_n"] = grp["rank"].transform("nunique")
    last_arrival = grp["start_ns"].transform("max")
    df["wait_ns"] = np.minimum(df["duration_ns"], np.maximum(0, last_arrival - df["start_ns"]))
    df["transfer_ns"] = df["duration_ns"] - df["wait_ns"]
    gid = grp.ngroup().to_numpy(np.int64)
    start, end = df["start_ns"].to_numpy(np.int64), df["end_ns"].to_numpy(np.int64)
    bad = _impossible(start, end, gid, residual_ns) & _all_receive(df["collective"])
    unknown = bad | _uncalled_waits(start, df["wait_ns"].to_numpy(np.int64), gid, residual_ns) | waits_unknown
    df["_wait_unknown"] = unknown
    if bad.any():
        n_bad, n_all = len(np.unique(gid[bad])), int(gid.max()) + 1
        notes.append(
            f"{n_bad} of {n_all} collectives end on one rank before a peer's kernel of the same collective "
            "starts, which cannot happen (a collective completes only once every rank joined it): the ranks' "
            "clocks or the pairing of collectives are wrong there, so their wait and transfer are unknown"
        )
    if unknown.any() and not bad.all() and not waits_unknown:
        notes.append(
            f"{int((unknown & ~bad).sum())} collective kernel(s) wait or arrive within the clock residual "
            f"({fmt_ms(residual_ns)}) of a peer: their wait and transfer are not called (left empty)"
        )
    if _names_differ(grp, df["collective"]):
        notes.append(
            "NCCL kernel sequences differ across ranks (a truncated capture?): the wait/transfer "
            "split pairs kernels by issue order and may be wrong for some collectives"
        )
    silent = sorted(
        set(np.asarray(ranks if ranks is not None else [], dtype=np.int64).tolist())
        - set(df["rank"].unique().tolist())
    )
    if silent:
        notes.append(
            f"rank(s) {', '.join(map(str, silent[:8]))} ran no NCCL kernel while others did: their "
            "communication is unknown (a capture that missed them, or a rank outside the collectives), "
            "not 0 (left empty); so is every rank's wait/transfer split and straggler lead, since the last "
            "arrival cannot be known without them"
        )
    if df["_n"].nunique() > 1:
        notes.append("some collectives were not seen on every rank (capture started or stopped mid-step?)")
    has = df["_has"].to_numpy()
    is_ar = _is_allreduce(df["collective"])
    if not has[is_ar].any() and ddp_bucket_bytes:  # stock DDP: no all-reduce sized by an NVTX range
        _ddp_bucket_sizes(df, ddp_bucket_bytes, notes)
    elif not has.any():
        notes.append(bytes_note if bytes_note is not None else bytes_note_text(False))
    if "_per_rank" in df and df["_per_rank"].any():  # NCCL's size of one rank's share: the whole buffer
        df["bytes"] = df["bytes"].where(~df["_per_rank"], df["bytes"] * df["_n"])
    df["kernel_variant"] = kernel_variant(df["algorithm"], df["protocol"])
    f = bus_factor(df["collective"], df["_n"].to_numpy())
    with np.errstate(divide="ignore", invalid="ignore"):
        bw = df["bytes"].to_numpy(dtype=float, na_value=np.nan) * f / df["transfer_ns"].to_numpy(float)
    df["busbw_gb_per_s"] = np.where(df["transfer_ns"].to_numpy() > 0, bw, np.nan)
    return schema.select(df, schema.COLLECTIVE_COLUMNS + ["_wait_unknown"])


def reported(table: pd.DataFrame) -> pd.DataFrame:
    """The collective table as reported: COLLECTIVE_COLUMNS, wait and transfer missing where not called."""
    out = schema.select(table, schema.COLLECTIVE_COLUMNS)
    if "_wait_unknown" in table and table["_wait_unknown"].to_numpy(dtype=bool).any():
        unknown = table["_wait_unknown"].to_numpy(dtype=bool)
        out = out.assign(
            **{
                c: np.where(unknown, np.nan, out[c].to_numpy(dtype=float))
                for c in ("wait_ns", "transfer_ns", "busbw_gb_per_s")
            }
        )
    return out


def _names_differ(grp, collective: pd.Series) -> bool:
    """Whether some collective (a group of ``grp``) has kernels of different names (missing = "?"): more
    distinct (group, name) pairs than groups."""
    codes, _ = pd.factorize(collective.astype("object").fillna("?"))
    ids = grp.ngroup().to_numpy(np.int64)
    pairs = np.unique(ids * (int(codes.max(initial=0)) + 1) + codes)
    return len(pairs) > len(np.unique(ids))


def kernel_variant(algorithm: pd.Series, protocol: pd.Series) -> np.ndarray:
    """ "<algorithm>_<protocol>" from the kernel name (either part alone when the other is missing, None when
    both are): what the trace proves is which kernel was launched, not the protocol NCCL chose inside it.
    Pairs are few: each distinct (algorithm, protocol) is joined once and rows index the result."""
    a = algorithm.astype("object").where(algorithm.notna(), None)
    p = protocol.astype("object").where(protocol.notna(), None)
    ca, ua = pd.factorize(a, use_na_sentinel=True)  # missing: -1, the appended None
    cp, up = pd.factorize(p, use_na_sentinel=True)
    va, vp = [*ua, None], [*up, None]
    width = len(vp)
    pair, inv = np.unique(
        np.where(ca < 0, len(ua), ca).astype(np.int64) * width + np.where(cp < 0, len(up), cp),
        return_inverse=True,
    )
    joined = np.array([None] * len(pair), dtype=object)
    joined[:] = ["_".join(x for x in (va[q // width], vp[q % width]) if x) or None for q in pair.tolist()]
    return joined[inv.reshape(-1)]


def has_nccl_ranges(nvtx: pd.DataFrame | None) -> bool:
    """Whether NCCL's own NVTX ranges (domain "NCCL") are in the trace."""
    # compared as it is (a categorical compares its codes; no object copy of every row's domain)
    return nvtx is not None and not nvtx.empty and bool((nvtx["domain"] == "NCCL").any())


def unknown_bytes_note(nvtx: pd.DataFrame | None) -> str:
    """Why message sizes are unknown, given the trace's NVTX ranges (:func:`bytes_note_text`)."""
    return bytes_note_text(has_nccl_ranges(nvtx))


def bytes_note_text(nccl_ranges: bool) -> str:
    """Why message sizes are unknown (``nccl_ranges``: :func:`has_nccl_ranges`). NCCL >= 2.19 annotates its
    calls with NVTX ranges in domain "NCCL" whose extended (binary, schema-described) payload holds the
    message size; the loader decodes it where the export carries it (``nsys.payloads``), so reaching here
    with NCCL ranges means the export did not."""
    base = (
        f"message sizes unknown: no '{nn.ALLREDUCE_PREFIX} b<bucket> <bytes>B' NVTX ranges around NCCL "
        "launches (the ddp-profile harness writes them)"
    )
    if nccl_ranges:
        return (
            base + "; NCCL's own NVTX ranges (domain NCCL) are in the trace, but the export carries no "
            "message size for them (their binary payloads and payload schemas were not exported: nsys "
            "2025.3 leaves them out; exports of nsys 2026.x are reported to keep them, profiled with "
            "`-t cuda,nvtx`; a slim scrub before this version dropped the schema tables): bytes, bus "
            "bandwidth and the cost model are left empty"
        )
    return base + " and no NCCL NVTX ranges: bytes, bus bandwidth and the cost model are left empty"


def ddp_bucket_bytes(run: dict | None) -> list[int] | None:
    """Stock torch_ddp's all-reduce sizes from the run record ``run`` (``layout.ddp_bucket_bytes``; with a compressing
    comm hook such as ``--ddp-comm-hook bf16``, ``layout.reduce_bytes``, the bytes the hook sends), else None."""
    run = run if isinstance(run, dict) else {}
    layout = run.get("layout")
    sizes = (
        (layout.get("reduce_bytes") or layout.get("ddp_bucket_bytes")) if isinstance(layout, dict) else None
    )
    if run.get("strategy") != "torch_ddp" or not isinstance(sizes, list) or not sizes:
        return None
    if not all(isinstance(s, int) and not isinstance(s, bool) and 0 < s < 2**63 for s in sizes):
        return None
    return sizes


def match_parts(
    parts: list,
    notes: list[str],
    ddp_bucket_bytes: list[int] | None = None,
    *,
    residual_ns: float = 0,
    unseen=(),
    waits_unknown: bool = False,
) -> pd.DataFrame:
    """Stage 2 of ``analysis.pipeline``: the collective table from every part's rows (``pipeline.StepPart``s:
    ``rows``, their ``step`` already the common labels, NA outside the selection; ``ranks``, ``n_unknown``,
    ``peer_copies``, ``nccl_nvtx``). Rows keep ``_file`` = the index of the part they came from.
    ``residual_ns``, ``waits_unknown``: as :func:`match_collectives`; ``unseen``: ranks whose NCCL kernels
    cannot be told (unnamed kernels), not named as ranks without NCCL kernels."""
    have = [(i, p.rows) for i, p in enumerate(parts) if p.rows is not None and len(p.rows)]
    ranks = sorted({r for p in parts for r in p.ranks} - set(unseen))
    if not have:
        notes.append(
            no_nccl_note(
                sum(p.n_unknown for p in parts),
                sum(p.peer_copies[0] for p in parts),
                sum(p.peer_copies[1] for p in parts),
            )
        )
        return schema.empty_frame(schema.COLLECTIVE_COLUMNS)
    # the rows as they are (one part: no copy), each row's part kept beside them
    keep = np.concatenate([np.full(len(r), i) for i, r in have])
    df = have[0][1]
    if len(have) > 1:
        df = pd.concat([r for _, r in have], ignore_index=True)
        order = np.argsort(df["rank"].to_numpy(), kind="stable")
        df, keep = df.iloc[order].reset_index(drop=True), keep[order]
    del have
    _steps_from_peers(df)
    bytes_note = bytes_note_text(any(p.nccl_nvtx for p in parts))
    table = match_collectives(
        [df],
        notes,
        ddp_bucket_bytes,
        ranks=np.asarray(ranks, dtype=np.int64),
        bytes_note=bytes_note,
        residual_ns=residual_ns,
        waits_unknown=waits_unknown,
    )  # keeps the row order; a new frame
    table["_file"] = keep
    return table


def _steps_from_peers(df: pd.DataFrame) -> None:
    """Rows of a rank none of whose collectives has a step (no launch times: no host step to tie them to) take
    the step label of the same collective (comm, seq) on the other ranks, in place."""
    has = df["step"].notna()
    lost = ~has.groupby(df["rank"]).transform("any").to_numpy(dtype=bool)
    if not lost.any() or not has.any():
        return
    key = df["comm"].to_numpy(np.int64) * (1 << 40) + df["seq"].to_numpy(np.int64)
    known = pd.Series(df["step"].to_numpy()[has.to_numpy()], index=key[has.to_numpy()])
    known = known[~known.index.duplicated()]
    df.loc[lost, "step"] = known.reindex(key[lost]).to_numpy()
