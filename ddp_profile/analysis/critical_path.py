"""Where each step's time went, on the rank that ends it: parts that add up to the step exactly.

Per (rank, step) (:func:`rank_paths`) the rank's own timeline over its *step span*
J = [end of its previous step, end of this step), where the ends are the step's GPU window ends
(``windows``) and the previous step is step − 1 of the same rank when selected (else J starts at the
step's own GPU start). Consecutive spans tile the rank's timeline, so the gap between two steps (the GPU
idle while the host syncs on ``loss.item()`` and launches the next forward) belongs to the next step. Sets
as in ``steps`` (merged across streams): N = NCCL kernels, X = every other GPU activity (compute kernels,
memcpy, memset), A = N ∪ X, Wt = the rank's waiting intervals [start, start + ``wait_ns``) of its NCCL
kernels (the collective table)::

    span_ns             = |J|
    compute_ns          = |X ∩ J|                          (GPU busy with anything but NCCL)
    exposed_ns          = |N ∩ J| − |N ∩ X ∩ J|            (NCCL running alone)
    wait_ns             = |N ∩ Wt ∩ J| − |N ∩ Wt ∩ X ∩ J|   (... while waiting for a later peer)
    exposed_transfer_ns = exposed_ns − wait_ns
    host_ns             = |H ∩ J|, H = the GPU idle gaps [g0, g1) (no activity of A) whose ending activity's
                          launch call started after g0: the GPU ran dry before the host began to issue the
                          next work (it was syncing, in Python, or launching slower than the GPU runs), so
                          the whole gap (the call's own time and its submission included) is the host's
    idle_ns             = span_ns − compute_ns − exposed_ns − host_ns   (the other gaps: work issued before
                          the GPU ran dry but not started yet, e.g. a stream waiting on an event, or the
                          few-µs switch between queued kernels)

so ``compute_ns + exposed_transfer_ns + wait_ns + host_ns + idle_ns == span_ns`` in integers (A's length is
|X| + |N| − |N ∩ X|; H lies in A's gaps). When several activities start the busy period at once, the
earliest launch call counts; an activity without a launch call (no CUDA API trace) leaves its gap in
``idle_ns``. (The launch call's end is not read by the loader, so a gap that began while the call ran counts
as idle.)

**Compute slowed by a waiting NCCL kernel is waiting.** An NCCL kernel waiting for a late peer holds SMs while
it spins, and the compute beside it runs slower (a persistent GEMM spills into a second wave): that extra time
is the peer's lateness, not the rank's own work. With G = the rank's GEMM-family kernels
(``kernel_groups.GEMM``) and r = the like-for-like GEMM slowdown beside NCCL (the GEMMs' median time beside
NCCL over alone, ``kernel_families.gemm_wave_ratio``), :func:`with_contention_wait` moves::

    beside_wait_ns = |G ∩ N ∩ Wt ∩ J|                    (GEMM time beside a waiting NCCL kernel)
    moved          = floor(beside_wait_ns · (1 − 1/r))   (what those GEMMs took over their time alone)
    compute_ns    −= moved;   wait_ns += moved

so the parts still add up to ``span_ns`` in integers (moved ≤ beside_wait_ns ≤ compute_ns). Nothing moves when
r is unknown (NaN) or ≤ 1. :func:`rank_paths` records ``beside_wait_ns`` and moves when given r; the
analysis moves once the contention table (r, over every rank) is done.

Per step (:func:`critical_path`): the *critical rank* is the rank whose step ends last on the GPU (the
step cannot end before it; ties: the lowest rank), and the step's row is that rank's parts::

    rank 0:  |..host..[fwd][bwd][ar: transfer][opt]|          ends at 120 ms
    rank 1:  |[fwd][bwd][ar: wait.......|transfer][opt]|      ends at 121 ms  -> critical rank 1:
             wait_ns = rank 1 waiting for rank 0, whose host was late (rank 0's own row: host_ns)
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddp_profile import intervals as iv
from ddp_profile.analysis.kernel_arrays import KernelArrays, ints
from ddp_profile.analysis.kernel_groups import GEMM, GROUPS, kernel_group_codes
from ddp_profile.analysis.steps import spans

PATH_COLUMNS = [
    "rank",
    "step",
    "start_ns",
    "end_ns",
    "span_ns",
    "compute_ns",
    "exposed_transfer_ns",
    "wait_ns",
    "host_ns",
    "idle_ns",
    "beside_wait_ns",
]
"""Per (rank, step), :func:`rank_paths`: the same parts as ``schema.CRITICAL_PATH_COLUMNS`` on each rank, and
``beside_wait_ns`` (the GEMM time beside a waiting NCCL kernel: the module docstring)."""
PARTS = ["compute_ns", "exposed_transfer_ns", "wait_ns", "host_ns", "idle_ns"]


def _host_gaps(karr: KernelArrays, idx) -> tuple[np.ndarray, np.ndarray]:
    """H of the module docstring for one rank (rows ``idx``), normalised. In start order, a gap opens before
    row i when its start is past every earlier end (their running maximum); row i and any rows starting at
    the same instant end it, and the earliest of their launch calls decides."""
    start, end, launch = karr.start[idx], karr.end[idx], karr.launch[idx]
    if len(start) < 2:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if not iv.is_sorted(start):
        order = np.argsort(start, kind="stable")
        start, end, launch = start[order], end[order], launch[order]
    reach = np.maximum.accumulate(end[:-1])
    i = np.flatnonzero(start[1:] > reach) + 1  # rows that end a gap
    g0, g1 = reach[i - 1].astype(np.int64), start[i].astype(np.int64)
    first = launch[i].astype(np.int64)
    tied = np.flatnonzero((i + 1 < len(start)) & (start[np.minimum(i + 1, len(start) - 1)] == start[i]))
    for k in tied:  # several activities start the busy period at once (rare): the earliest known launch
        j = i[k]
        hi = j + int(np.searchsorted(start[j:], start[j], side="right"))
        ls = launch[j:hi]
        ls = ls[ls >= 0]
        first[k] = ls.min() if len(ls) else -1
    keep = (first >= 0) & (first > g0)
    return g0[keep], g1[keep]


def with_contention_wait(paths: pd.DataFrame, gemm_ratio: float) -> pd.DataFrame:
    """``paths`` (PATH_COLUMNS) with the compute slowed beside waiting NCCL kernels moved to ``wait_ns`` (the
    module docstring); ``gemm_ratio``: r, NaN or ≤ 1 moves nothing (``paths`` itself is returned)."""
    if paths.empty or not np.isfinite(gemm_ratio) or gemm_ratio <= 1.0:
        return paths
    beside = ints(paths["beside_wait_ns"], 0)
    moved = np.floor(beside * (1.0 - 1.0 / float(gemm_ratio))).astype(np.int64)
    moved = np.minimum(moved, ints(paths["compute_ns"]))  # beside ≤ compute already: a guard, not a clip
    return paths.assign(compute_ns=ints(paths["compute_ns"]) - moved, wait_ns=ints(paths["wait_ns"]) + moved)


def rank_paths(
    steps: pd.DataFrame, karr: KernelArrays, coll: pd.DataFrame | None, gemm_ratio: float = float("nan")
) -> pd.DataFrame:
    """PATH_COLUMNS, one row per (rank, step) of the step table (``steps``: STEP_METRIC_COLUMNS). Needs the
    kernels' launch times (``karr.launch``); ``coll``: the collective table (waits), None: no wait;
    ``gemm_ratio``: r of the module docstring (NaN: ``compute_ns`` keeps the slowed GEMMs' time)."""
    if steps is None or steps.empty:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in PATH_COLUMNS})
    sp = spans(steps)
    out = []
    waits = coll.groupby(ints(coll["rank"])).indices if coll is not None and len(coll) else {}
    is_gemm = kernel_group_codes(karr) == GROUPS.index(GEMM)
    for rank, rows in sp.groupby("rank", sort=True).indices.items():
        js, je = sp["start_ns"].to_numpy()[rows], sp["end_ns"].to_numpy()[rows]
        idx = karr.rank_index(rank)
        s, e = karr.start[idx], karr.end[idx]
        nccl = karr.is_nccl[idx]
        x_set = iv.normalize_rows(s, e, ~nccl)
        n_set = iv.normalize_rows(s, e, nccl)
        if coll is not None and rank in waits:
            mine = coll.iloc[waits[rank]]
            ws = ints(mine["start_ns"])
            wt = iv.normalize(ws, ws + ints(mine["wait_ns"], 0))
        else:
            wt = (np.zeros(0, np.int64), np.zeros(0, np.int64))
        nw = iv.intersect_normalized(n_set, wt)
        span_ns = iv.window_length(js, je)
        compute = iv.covered_by_normalized(js, je, *x_set)
        exposed = iv.covered_by_normalized(js, je, *n_set) - iv.covered_by_normalized(
            js, je, *iv.intersect_normalized(x_set, n_set)
        )
        wait = iv.covered_by_normalized(js, je, *nw) - iv.covered_by_normalized(
            js, je, *iv.intersect_normalized(x_set, nw)
        )
        host = iv.covered_by_normalized(js, je, *_host_gaps(karr, idx))
        g_set = iv.normalize_rows(s, e, is_gemm[idx])
        beside = iv.covered_by_normalized(js, je, *iv.intersect_normalized(g_set, nw))
        out.append(
            pd.DataFrame(
                {
                    "rank": rank,
                    "step": sp["step"].to_numpy()[rows],
                    "start_ns": js,
                    "end_ns": je,
                    "span_ns": span_ns,
                    "compute_ns": compute,
                    "exposed_transfer_ns": exposed - wait,
                    "wait_ns": wait,
                    "host_ns": host,
                    "idle_ns": span_ns - compute - exposed - host,
                    "beside_wait_ns": beside,
                }
            )
        )
        del x_set, n_set, g_set
    return with_contention_wait(pd.concat(out, ignore_index=True)[PATH_COLUMNS], gemm_ratio)


def critical_path(paths: pd.DataFrame) -> pd.DataFrame:
    """``schema.CRITICAL_PATH_COLUMNS``: per step, the parts of its critical rank (the latest GPU end; ties:
    the lowest rank)."""
    from ddp_profile import schema

    if paths.empty:
        return schema.empty_frame(schema.CRITICAL_PATH_COLUMNS)
    order = paths.sort_values(["step", "end_ns", "rank"], ascending=[True, False, True], kind="stable")
    crit = order.drop_duplicates("step", keep="first").rename(columns={"rank": "critical_rank"})
    return schema.select(crit.sort_values("step", kind="stable"), schema.CRITICAL_PATH_COLUMNS)
