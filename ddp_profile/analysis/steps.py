"""Per (rank, step) metrics over the step's GPU window W = [start_ns, end_ns) (see ``windows``).

Kernel sets are per rank, merged across streams (a union: two kernels running at once count once).
C = compute kernels, N = NCCL kernels, M = memcpy/memset, A = all GPU work, each clipped to W::

    step_ns          = |W|
    span_ns          = end_ns − end_ns of the rank's previous step (step − 1 in the table; else = step_ns):
                       the iteration as the training loop sees it, the GPU idle before W included (the host
                       syncing on ``loss.item()``, fetching the batch, launching the forward), the same span
                       the critical path divides (``critical_path``); consecutive spans tile the rank's time
    compute_ns       = |C ∩ W|
    comm_ns          = |N ∩ W|
    overlap_ns       = |C ∩ N ∩ W|          (communication hidden behind compute)
    exposed_comm_ns  = comm_ns − overlap_ns (communication nothing else was hiding)
    copy_ns          = |M ∩ W|
    idle_ns          = step_ns − |A ∩ W|
    forward_ns, backward_ns, optimizer_ns = length of the phase's GPU window (NaN when the phase has no range)
    backward_end_ns  = latest GPU end of compute kernels launched inside the step's backward range(s), and
                       before the last gradient collective of the step was launched (what backward's threads
                       launch after it waits for reduced gradients: FSDP's post-reduce copies and gradient
                       division, an update run from the gradient hooks; the optimizer)
    comm_tail_ns     = max(0, last_grad_comm_end − backward_end_ns), where last_grad_comm_end is the latest
                       GPU end of the *gradient* NCCL kernels (AllReduce, ReduceScatter; kernel_groups.GRADIENT)
                       launched between the start of backward and the start of the optimizer phase (the
                       end of the step without one); 0 when none remains
                       after backward; NaN without a backward range. Parameter AllGather/Broadcast after
                       backward is param_sync_ns (comm_kinds), not tail.
    job_comm_tail_ns = max(0, max_ranks last_grad_comm_end − max_ranks backward_end_ns) over the rows of one
                       step index (same value on each rank's row): the job waits for its slowest rank's
                       backward and its last gradient collective; NaN when no rank has a backward range
    exposed_wait_ns, exposed_transfer_ns, param_sync_ns, exposed_param_sync_ns, exposed_allgather_ns:
                       see ``comm_kinds``
    comm_pct         = 100 · comm_ns / step_ns
    exposed_comm_pct = 100 · exposed_comm_ns / step_ns

    W:        |--------------------------------------------|
    compute:  [fwd][fwd]   [bwd][bwd][bwd]       [opt]
    nccl:                       [ar1]   [ar2-----]
                                        ^ bwd end  ^ last grad comm end: comm_tail = this gap
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddp_profile import intervals as iv
from ddp_profile import schema
from ddp_profile.analysis import comm_kinds as ck
from ddp_profile.analysis.kernel_arrays import COMPUTE, NCCL, TRIM_ROWS, KernelArrays, ints, pct
from ddp_profile.analysis.kernel_groups import GRADIENT, rows_of
from ddp_profile.analysis.projection import project
from ddp_profile.memory import return_freed_memory

STEP_FACTS = [
    "micro_steps",
    "extra_kernels",
    "extra_gpu_ns",
    "extra_host_ns",
]  # carried from the step windows


def _phase_len(phases: pd.DataFrame, name: str) -> pd.DataFrame:
    """The phase's GPU time per (rank, step): ``phase_ns`` (its micro-steps' windows summed) where the
    windows carry it, else the window's length."""
    p = phases.loc[phases["phase"] == name]
    length = (p["end_ns"] - p["start_ns"]).to_numpy(dtype=float)
    if "phase_ns" in p:
        length = np.where(p["phase_ns"].isna(), length, p["phase_ns"].to_numpy(dtype=float))
    return pd.DataFrame({"rank": p["rank"].to_numpy(), "step": p["step"].to_numpy(), f"{name}_ns": length})


def _latest_end(
    ranges: pd.DataFrame, karr: KernelArrays, mask: np.ndarray | None = None, rows: np.ndarray | None = None
) -> np.ndarray:
    """Latest GPU end of the kernels selected by ``mask`` (or at positions ``rows``) launched inside each
    host range (NaN if none)."""
    _, ge, anyk = project(ranges, karr.start, karr.end, karr.launch, karr.pid, mask, rows)
    return np.where(anyk, ge.astype(float), np.nan)


def _latest_launch(ranges: pd.DataFrame, karr: KernelArrays, rows: np.ndarray) -> np.ndarray:
    """Latest launch time of the kernels at positions ``rows`` launched inside each host range (NaN if none)."""
    _, last, anyk = project(ranges, karr.launch, karr.launch, karr.launch, karr.pid, None, rows)
    return np.where(anyk, last.astype(float), np.nan)


def step_tables(
    phases: pd.DataFrame,
    karr: KernelArrays,
    coll: pd.DataFrame | None = None,
    *,
    job_tail: bool = True,
    with_kinds: bool = True,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(STEP_METRIC_COLUMNS, COMM_KIND_COLUMNS). ``coll``: the collective table (wait intervals); without
    it the wait columns are NaN. ``with_kinds`` False: the COMM_KIND frame is left empty (not computed). ``job_tail=False`` (one rank of a distributed analysis): the step rows
    before the cross-rank job tail (:func:`with_job_tail`), and the per-rank kind frames unfinished."""  # noqa: E501
    steps = phases.loc[phases["phase"] == "step"].reset_index(drop=True)
    if steps.empty:
        return schema.empty_frame(schema.STEP_METRIC_COLUMNS), schema.empty_frame(schema.COMM_KIND_COLUMNS)
    tail = _tail(phases, karr)
    extras = [*(_phase_len(phases, name) for name in schema.GRAD_PHASES), tail]
    parts, kinds = [], []
    phase_idx = ck.phase_index(phases)
    groups = steps.groupby("rank", sort=True).indices
    step_col, start_col, end_col = (steps[c].to_numpy() for c in ("step", "start_ns", "end_ns"))
    facts = {
        c: steps[c].to_numpy(dtype=float) if c in steps else np.full(len(steps), np.nan) for c in STEP_FACTS
    }
    joined = _joined_once(steps, groups, extras)
    order = np.concatenate(list(groups.values())) if groups else np.zeros(0, dtype=np.intp)
    ranks_in_order = np.repeat(np.array(list(groups.keys())), [len(v) for v in groups.values()])
    bounds = ck.phase_bounds(phase_idx, ranks_in_order, step_col[order]) if joined is not None else {}
    waits = ck.wait_rows(coll) if coll is not None else None
    at = 0
    arrays: list[dict] = []
    for rank, rows in groups.items():
        ws, we = start_col[rows].astype(np.int64, copy=False), end_col[rows].astype(np.int64, copy=False)
        cov, sets = rank_cover(karr, rank, ws, we)
        step_ns = iv.window_length(ws, we)
        cols_now = {
            "rank": rank,
            "step": step_col[rows],
            "start_ns": ws,
            "end_ns": we,
            "step_ns": step_ns,
            "compute_ns": cov[COMPUTE],
            "comm_ns": cov[NCCL],
            "overlap_ns": cov["overlap"],
            "exposed_comm_ns": cov[NCCL] - cov["overlap"],
            "copy_ns": cov["copy"],
            "idle_ns": step_ns - cov["all"],
            **{c: v[rows] for c, v in facts.items()},
        }
        if joined is None:  # a (rank, step) repeated in a phase table: the join may add rows, done per rank
            part = pd.DataFrame(cols_now)
            for extra in extras:
                part = part.merge(extra, on=["rank", "step"], how="left")
            cols, k = ck.rank_breakdown(rank, sets, karr, part, phase_idx, coll, None, waits, with_kinds)
            parts.append(part.assign(**cols))
        else:  # columns as arrays, one frame for all ranks at the end (a frame per rank costs ~5 ms)
            cols_now["rank"] = np.full(len(rows), rank)
            cols_now.update({c: v[at : at + len(rows)] for c, v in joined.items()})
            mine = {n: (b[0][at : at + len(rows)], b[1][at : at + len(rows)]) for n, b in bounds.items()}
            at += len(rows)
            cols, k = ck.rank_breakdown(rank, sets, karr, cols_now, phase_idx, coll, mine, waits, with_kinds)
            arrays.append(cols_now | cols)
        kinds.append(k)
        del sets  # not held while the next rank's are built
    if arrays:
        out = pd.DataFrame({c: np.concatenate([a[c] for a in arrays]) for c in arrays[0]})
    else:
        out = pd.concat(parts, ignore_index=True)
    out["comm_pct"] = pct(out["comm_ns"], out["step_ns"])
    out["exposed_comm_pct"] = pct(out["exposed_comm_ns"], out["step_ns"])
    out = out.sort_values(["rank", "step"], kind="stable").reset_index(drop=True)
    out["span_ns"] = out["end_ns"].to_numpy(np.int64) - span_starts(out)
    if not job_tail:
        return out, kinds
    return schema.select(with_job_tail(out), schema.STEP_METRIC_COLUMNS), ck.finish(kinds)


def span_starts(steps: pd.DataFrame) -> np.ndarray:
    """Each row's span start (int64): the end of the same rank's previous step (label step − 1) when the
    frame has that row, else the row's own ``start_ns``. ``steps`` sorted by (rank, step)."""
    rank, step = steps["rank"].to_numpy(np.int64), steps["step"].to_numpy(np.int64)
    start, end = steps["start_ns"].to_numpy(np.int64), steps["end_ns"].to_numpy(np.int64)
    prev = np.r_[False, (rank[1:] == rank[:-1]) & (step[1:] == step[:-1] + 1)]
    begin = start.copy()
    begin[prev] = end[np.flatnonzero(prev) - 1]
    return begin


def rank_cover(
    karr: KernelArrays, rank, ws: np.ndarray, we: np.ndarray, chunk: int = 1 << 15
) -> tuple[dict[str, np.ndarray], dict[str, tuple[np.ndarray, np.ndarray]]]:
    """(|X ∩ [ws, we)| per window for X = C, N, M (``copy``), A (``all``) and C ∩ N (``overlap``), the sets N
    and C ∩ N) of one rank's kernels (int64), and its totals |C|, |N|, |C ∩ N| recorded for the rank overlap
    (``KernelArrays.note_rank_totals``).

    C, A and M hold about one interval per kernel of their class (~8 MB each for a rank of 500k kernels):
    they are merged a chunk of rows at a time (``intervals.normalized_pieces``) and each piece P_j is added
    up and dropped. The pieces are disjoint, so for X = ∪_j P_j::

        |X ∩ W| = Σ_j |P_j ∩ W|,   |X| = Σ_j |P_j|,   C ∩ N = ∪_j (P_j ∩ N)   (P_j: pieces of C)

    integer sums, the same numbers as from the whole sets. N and C ∩ N (NCCL-long intervals: few) are kept
    whole for ``comm_kinds``."""
    idx = karr.rank_index(rank)
    s, e = karr.start[idx], karr.end[idx]
    if len(s) >= TRIM_ROWS:
        # Freed temporaries of the previous stage or rank (heap memory, under glibc's mmap threshold) go back
        # to the OS first; without it this rank's pieces stack on them (~2 MB on the 1M-kernel replica).
        return_freed_memory()
    ns, ne = n_set = iv.normalize_rows(s, e, karr.is_nccl[idx], chunk)
    cov = {NCCL: iv.covered_by_normalized(ws, we, ns, ne)}
    totals = {NCCL: int((ne - ns).sum()), COMPUTE: 0, "overlap": 0}
    # C ∩ N has at most |C| + |N| intervals (each ends at an end of a C or an N interval, no two at the same
    # one) and |C| is at most the rank's compute kernels: its pieces are written into buffers that long as
    # they come, then cut to length in place (pages never written are never resident), not gathered and
    # copied whole (the pieces beside their concatenation: ~2 MB more on the 1M-kernel replica).
    cap = len(ns) + int(np.count_nonzero(karr.is_compute[idx]))
    over_s, over_e, n_over = np.empty(cap, dtype=np.int64), np.empty(cap, dtype=np.int64), 0
    windows = iv.WindowIndex(ws, we)
    for name, mask in ((COMPUTE, karr.is_compute), ("copy", karr.is_copy), ("all", None)):
        got = np.zeros(len(ws), dtype=np.int64)
        for ps, pe in iv.normalized_pieces(s, e, None if mask is None else mask[idx], chunk):
            windows.add_covered(got, ps, pe)
            if name != COMPUTE:
                continue
            totals[COMPUTE] += int((pe - ps).sum())
            lo, hi = np.searchsorted(ne, ps[0], side="right"), np.searchsorted(ns, pe[-1], side="left")
            if hi > lo:  # the NCCL intervals that can meet this piece
                os_, oe = iv.intersect_normalized((ps, pe), (ns[lo:hi], ne[lo:hi]))
                over_s[n_over : n_over + len(os_)] = os_
                over_e[n_over : n_over + len(oe)] = oe
                n_over += len(os_)
        cov[name] = got
    over_s.resize(n_over, refcheck=False)  # the buffers are this function's own: no view of them exists
    over_e.resize(n_over, refcheck=False)
    overlap = over_s, over_e
    totals["overlap"] = int((overlap[1] - overlap[0]).sum())
    cov["overlap"] = iv.covered_by_normalized(ws, we, *overlap)
    karr.note_rank_totals(rank, totals)
    return cov, {NCCL: n_set, "overlap": overlap}


def _joined_once(
    steps: pd.DataFrame, groups: dict, extras: list[pd.DataFrame]
) -> dict[str, np.ndarray] | None:
    """The ``extras``' columns left-joined on (rank, step) to the step rows in rank-group order, in one join
    per table for all ranks (a per-rank join costs ~5 ms, which a run of 1,024 per-rank files pays 1,024
    times per table). Only when no table repeats a (rank, step): the join then adds no row and is a lookup,
    the same values as joining rank by rank. None otherwise (the caller joins per rank, as before)."""
    if any(e.duplicated(["rank", "step"]).any() for e in extras):
        return None
    order = np.concatenate(list(groups.values())) if groups else np.zeros(0, dtype=np.intp)
    keys = pd.DataFrame(
        {
            "rank": np.repeat(np.array(list(groups.keys())), [len(v) for v in groups.values()]),
            "step": steps["step"].to_numpy()[order],
        }
    )
    if len(keys) != len(steps):  # steps without a rank (dropped by the grouping): joined per rank, as before
        return None
    out: dict[str, np.ndarray] = {}
    for extra in extras:
        got = keys.merge(extra, on=["rank", "step"], how="left")
        out.update({c: got[c].to_numpy() for c in extra.columns if c not in ("rank", "step")})
    return out


def with_job_tail(out: pd.DataFrame) -> pd.DataFrame:
    """``job_comm_tail_ns`` added over all ranks' step rows (they carry ``_grad_end``), in place."""
    g = out.groupby("step")
    last_grad = g["_grad_end"].transform("max")  # NaN-skipping: over the ranks that have one
    latest_bwd = g["backward_end_ns"].transform("max")
    job = np.where(last_grad.isna(), 0.0, np.maximum(last_grad - latest_bwd, 0.0))
    out["job_comm_tail_ns"] = np.where(latest_bwd.isna(), np.nan, job)
    return out


def _tail(phases: pd.DataFrame, karr: KernelArrays) -> pd.DataFrame:
    """backward_end_ns and comm_tail_ns per (rank, step) having a backward phase."""
    bwd = phases.loc[phases["phase"] == "backward"].reset_index(drop=True)
    if bwd.empty:
        return pd.DataFrame(
            {
                "rank": pd.Series(dtype="int64"),
                "step": pd.Series(dtype="int64"),
                "backward_end_ns": pd.Series(dtype=float),
                "comm_tail_ns": pd.Series(dtype=float),
                "_grad_end": pd.Series(dtype=float),
            }
        )
    step_end = phases.loc[phases["phase"] == "step"].set_index(["rank", "step"])["host_end_ns"]
    keys = pd.MultiIndex.from_frame(bwd[["rank", "step"]])
    opt = phases.loc[phases["phase"] == "optimizer"].set_index(["rank", "step"])["host_start_ns"]
    # Gradient collectives launched from backward's start until the optimizer's (else the step's end): a
    # logging all-reduce after the optimizer is no gradient's.
    until = step_end.reindex(keys).to_numpy(dtype=float)
    if len(opt) and not opt.index.has_duplicates:
        o = opt.reindex(keys).to_numpy(dtype=float) - 1
        until = np.where(np.isnan(o), until, np.minimum(until, o))
    grad = pd.DataFrame(
        {
            "pid": bwd["pid"].to_numpy(),
            "host_start_ns": bwd["host_start_ns"].to_numpy(),
            "host_end_ns": until.astype(np.int64),
        }
    )
    grad_rows = rows_of(karr, GRADIENT)
    comm_end = _latest_end(grad, karr, rows=grad_rows)
    # Backward ends with the compute launched before the last gradient collective was: what the backward's
    # threads launch after it (FSDP's post-reduce copies and gradient division, an update run from the
    # gradient hooks) waits for the reduced gradients and is no backward compute.
    last_launch = _latest_launch(grad, karr, grad_rows)
    bwd_host_end = bwd["host_end_ns"].to_numpy(dtype=float)
    bwd_host_end = np.where(np.isnan(last_launch), bwd_host_end, np.minimum(bwd_host_end, last_launch - 1))
    bwd_end = _latest_end(bwd.assign(host_end_ns=bwd_host_end.astype(np.int64)), karr, karr.is_compute)
    tail = np.where(np.isnan(comm_end), 0.0, np.maximum(comm_end - bwd_end, 0.0))
    tail = np.where(np.isnan(bwd_end), np.nan, tail)
    return pd.DataFrame(
        {
            "rank": bwd["rank"].to_numpy(),
            "step": bwd["step"].to_numpy(),
            "backward_end_ns": bwd_end,
            "comm_tail_ns": tail,
            "_grad_end": comm_end,
        }
    )


def spans(steps: pd.DataFrame) -> pd.DataFrame:
    """(rank, step, start_ns, end_ns) of each step span J from the step table's GPU windows
    (:func:`span_starts`: the step table's ``span_ns`` is J's length)."""
    s = steps[["rank", "step", "start_ns", "end_ns"]].sort_values(["rank", "step"], kind="stable")
    s = s.reset_index(drop=True)
    return pd.DataFrame(
        {
            "rank": ints(s["rank"]),
            "step": ints(s["step"]),
            "start_ns": span_starts(s),
            "end_ns": ints(s["end_ns"]),
        }
    )
