"""NCCL time by collective kind, gradient tail vs parameter sync, and exposed communication split into
waiting for the slowest peer and transfer.

Kinds (``KINDS``), from the collective parsed out of NCCL's kernel names (``nsys.names``)::

    AllReduce, AllGather, ReduceScatter, Broadcast, AllToAll, SendRecv (also Send, Recv), other

*Gradient* collectives (``GRADIENT``: AllReduce, ReduceScatter) synchronise gradients; *parameter*
collectives (``PARAM``: AllGather, Broadcast) distribute parameters (ZeRO-1 broadcasts updated shards after
the optimizer; FSDP all-gathers each layer's parameters before its forward and backward).

Sets per rank, merged across streams: C = compute kernels, N_k = NCCL kernels of kind k, N = ∪_k N_k,
Wt = ∪ wait intervals [own start, own start + wait_ns) of the collective table's matched kernels
(``collectives``: wait_ns = time the kernel waits for the last peer to arrive; Wt ⊆ N), W = the step's GPU
window [start_ns, end_ns), B = backward_end_ns (last GPU end of compute launched in backward).
|X|_I = |X ∩ I| for an interval I; exposed(X) = X minus C.

Per (rank, step, kind k) — the ``comm_kinds`` table::

    count              = NCCL kernels of kind k launched inside the step's host range (collective table)
    comm_ns            = |N_k|_W
    exposed_comm_ns    = |N_k|_W − |N_k ∩ C|_W
    wait_ns            = |Wt_k|_W                    (Wt_k: wait intervals of kind-k kernels)
    exposed_wait_ns    = |Wt_k|_W − |Wt_k ∩ C|_W
    forward_ns, backward_ns, optimizer_ns = |N_k|_P for the phase's GPU window P (NaN without the phase;
                         the backward window spans backward's compute kernels only, so the tail's
                         collectives are in after_backward_ns, and windows of several micro-steps may
                         hold another phase: these need not add up to comm_ns)
    after_backward_ns  = |N_k|_[B, W.end)            (NaN without a backward range)

Σ_k comm_ns ≥ the step's comm_ns = |N|_W, with equality when kernels of different kinds never run at the
same time on the rank (e.g. every run whose NCCL kernels are all AllReduce); the same holds for exposed_comm_ns.

Per (rank, step) — columns appended to the step table::

    exposed_wait_ns       = |Wt|_W − |Wt ∩ C|_W  (exposed NCCL time spent waiting for the slowest peer)
    exposed_transfer_ns   = exposed_comm_ns − exposed_wait_ns  (≥ 0 since Wt ⊆ N)
    param_sync_ns         = |P|_[B, W.end),  P = N_AllGather ∪ N_Broadcast  (NaN without backward)
    exposed_param_sync_ns = |P|_[B, W.end) − |P ∩ C|_[B, W.end)
    exposed_allgather_ns  = |N_AllGather|_[W.start, B) − |N_AllGather ∩ C|_[W.start, B) (the GPU waiting for
                            parameters in forward and backward; the whole W without a backward range)

``comm_tail_ns`` and ``job_comm_tail_ns`` (``steps``) count gradient collectives only.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddp_profile import intervals as iv
from ddp_profile import schema
from ddp_profile.analysis.kernel_arrays import COMPUTE, NCCL, equal_range
from ddp_profile.analysis.kernel_groups import KINDS, PARAM, kind_codes, nccl_rows
from ddp_profile.analysis.kernel_groups import OTHER_KIND as OTHER

STEP_COLUMNS = [
    "exposed_wait_ns",
    "exposed_transfer_ns",
    "param_sync_ns",
    "exposed_param_sync_ns",
    "exposed_allgather_ns",
]


def _rank_nccl(karr, rank) -> tuple[np.ndarray, np.ndarray]:
    """(positions, KINDS codes) of the rank's NCCL kernels, ascending: two binary searches where the NCCL
    rows are sorted by rank (the loader's order), else one comparison per NCCL row."""
    idx, kcode, krank = nccl_rows(karr)
    if karr.memo("nccl_rank_sorted", lambda: bool(len(krank) < 2 or (krank[1:] >= krank[:-1]).all())):
        lo, hi = equal_range(krank, rank)
        return idx[lo:hi], kcode[lo:hi]
    mine = krank == rank
    return idx[mine], kcode[mine]


def phase_index(phases: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """GPU windows (start_ns, end_ns as float) of the forward, backward and optimizer phases, indexed by
    (rank, step): computed once per analysis, looked up per rank."""
    out = {}
    for name in schema.GRAD_PHASES:
        p = phases.loc[phases["phase"] == name]
        out[name] = pd.DataFrame(
            {"start_ns": p["start_ns"].to_numpy(float), "end_ns": p["end_ns"].to_numpy(float)},
            index=pd.MultiIndex.from_arrays([p["rank"].to_numpy(), p["step"].to_numpy()]),
        )
    return out


def _phase_bounds(index: dict, rank, steps: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
    """GPU window [start, end) of phase ``name`` per step of ``rank``; NaN where the step lacks the phase."""
    p = index[name].reindex(pd.MultiIndex.from_arrays([np.full(len(steps), rank), steps]))
    return p["start_ns"].to_numpy(float), p["end_ns"].to_numpy(float)


def phase_bounds(
    index: dict, ranks: np.ndarray, steps: np.ndarray
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """:func:`_phase_bounds` of every phase for many (rank, step) rows at once: one lookup per phase."""
    out = {}
    for name in schema.GRAD_PHASES:
        p = index[name].reindex(pd.MultiIndex.from_arrays([ranks, steps]))
        out[name] = (p["start_ns"].to_numpy(float), p["end_ns"].to_numpy(float))
    return out


def _cov(qs: np.ndarray, qe: np.ndarray, ss: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """|S ∩ [qs, qe)| per query; NaN bounds give NaN."""
    bad = np.isnan(qs) | np.isnan(qe)
    q0 = np.where(bad, 0, qs).astype(np.int64)
    q1 = np.where(bad, 0, qe).astype(np.int64)
    out = iv.covered_by_normalized(q0, q1, *ss).astype(float)
    out[bad] = np.nan
    return out


def _exposed(qs, qe, s, c) -> np.ndarray:
    """|S|_Q − |S ∩ C|_Q per query (S, C normalised)."""
    return _cov(qs, qe, s) - _cov_both(qs, qe, s, c)


_BUILD_BELOW = 4096  # compute sets shorter than this: S ∩ C is built (cheap), not counted first


def _cov_both(
    qs: np.ndarray, qe: np.ndarray, s: tuple[np.ndarray, np.ndarray], c: tuple[np.ndarray, np.ndarray]
) -> np.ndarray:
    """|S ∩ C ∩ [qs, qe)| per query (NaN bounds give NaN): :func:`_cov` of ``iv.intersect_normalized(s, c)``.
    When S ∩ C has many intervals (S's intervals span many compute kernels: at least |C| / 4 pairs, and
    |C| >= 4,096; below that building it costs less than counting) it is not built: with G(t) = |S ∩ C ∩ (−∞, t)|, k = #{i : S.start[i] <= t} and L_i = |C ∩ S_i|::

        G(t) = Σ_{i<k−1} L_i + |C ∩ [S.start[k−1], min(S.end[k−1], t))|   (0 when k = 0)
        out  = G(max(qe, qs)) − G(qs)

    every |C ∩ ·| taken in one covered_by_normalized call; the same integers either way."""  # noqa: E501
    (ss, se), (cs, ce) = s, c
    if len(cs) < _BUILD_BELOW:
        return _cov(qs, qe, iv.intersect_normalized(s, c))
    pairs = np.searchsorted(cs, se, side="left") - np.searchsorted(ce, ss, side="right")
    if int(np.maximum(pairs, 0).sum()) * 4 < len(cs):
        return _cov(qs, qe, iv.intersect_normalized(s, c))
    bad = np.isnan(qs) | np.isnan(qe)
    q0 = np.where(bad, 0, qs).astype(np.int64)
    q1 = np.maximum(np.where(bad, 0, qe).astype(np.int64), q0)  # inverted queries cover nothing
    k0, k1 = np.searchsorted(ss, q0, side="right"), np.searchsorted(ss, q1, side="right")
    h0, h1 = k0 > 0, k1 > 0
    j0, j1 = k0[h0] - 1, k1[h1] - 1
    part = iv.covered_by_normalized(
        np.concatenate([ss, ss[j0], ss[j1]]),
        np.concatenate([se, np.minimum(se[j0], q0[h0]), np.minimum(se[j1], q1[h1])]),
        cs,
        ce,
    )
    n = len(ss)
    before = np.concatenate([[0], np.cumsum(part[:n])])  # Σ_{i<j} L_i
    g0 = np.zeros(len(q0), dtype=np.int64)
    g1 = np.zeros(len(q1), dtype=np.int64)
    g0[h0] = before[j0] + part[n : n + len(j0)]
    g1[h1] = before[j1] + part[n + len(j0) :]
    out = (g1 - g0).astype(float)
    out[bad] = np.nan
    return out


def rank_breakdown(
    rank,
    sets: dict,
    karr,
    steps: pd.DataFrame,
    phases: dict[str, pd.DataFrame],
    coll: pd.DataFrame | None,
    bounds: dict | None = None,
    waits=None,
    with_kinds: bool = True,
) -> tuple[dict, pd.DataFrame]:
    """For one rank: (step columns STEP_COLUMNS as arrays aligned with ``steps`` rows, COMM_KIND rows; with
    ``with_kinds`` False, no COMM_KIND rows: an empty frame, the step columns alone).

    ``steps``: this rank's step rows with start_ns, end_ns, step, exposed_comm_ns, backward_end_ns (a frame,
    or a mapping of those names to arrays);
    ``phases``: :func:`phase_index` of the GPU phase windows (or ``bounds``: their :func:`phase_bounds` for
    these rows, already looked up); ``waits``: :func:`wait_rows` of ``coll``, made once for all ranks; ``sets``: the rank's normalised kernel sets (``KernelArrays.rank_sets``); ``coll``: the collective table
    (None: no wait information, wait columns NaN)."""  # noqa: E501
    # Every set S met with C below lies within N (N_k, P, N_AllGather; Wt when the waits are the rank's own
    # kernels'), so S ∩ C = S ∩ (C ∩ N): the rank's overlap set (a few intervals per NCCL kernel) stands for
    # C (about one per compute kernel), the same integers.
    c = sets["overlap"]
    idx, kcode = _rank_nccl(karr, rank)
    ks, ke = karr.start[idx], karr.end[idx]
    step_ids = np.asarray(steps["step"])
    ws = np.asarray(steps["start_ns"], dtype=float)
    we = np.asarray(steps["end_ns"], dtype=float)
    bend = np.asarray(steps["backward_end_ns"], dtype=float)
    bend_or_end = np.where(np.isnan(bend), we, np.minimum(bend, we))
    if coll is not None:
        wc, w0, w1, cstep, cvalid = (waits if waits is not None else wait_rows(coll)).of(rank)
    out = {}
    if coll is not None:
        wt = iv.normalize(w0, w1)
        if not _within(wt, sets[NCCL]):  # waits of other kernels than the rank's (a table from elsewhere)
            c = sets[COMPUTE] if COMPUTE in sets else _compute_set(karr, rank)
        out["exposed_wait_ns"] = _exposed(ws, we, wt, c)
        out["exposed_transfer_ns"] = (
            np.asarray(steps["exposed_comm_ns"], dtype=float) - out["exposed_wait_ns"]
        )
    else:
        out["exposed_wait_ns"] = out["exposed_transfer_ns"] = np.full(len(step_ids), np.nan)
    par = np.isin(kcode, [KINDS.index(k) for k in PARAM])
    pset = iv.normalize(ks[par], ke[par])
    out["param_sync_ns"] = _cov(bend, we, pset)
    out["exposed_param_sync_ns"] = _exposed(bend, we, pset, c)
    ag = kcode == KINDS.index("AllGather")
    out["exposed_allgather_ns"] = _exposed(ws, bend_or_end, iv.normalize(ks[ag], ke[ag]), c)
    if not with_kinds:
        return out, schema.empty_frame(schema.COMM_KIND_COLUMNS)
    phase = (
        bounds
        if bounds is not None
        else {n: _phase_bounds(phases, rank, step_ids, n) for n in schema.GRAD_PHASES}
    )
    rows = []
    for k in np.unique(np.concatenate([kcode, wc if coll is not None else np.zeros(0, np.int8)])):
        nk = iv.normalize(ks[kcode == k], ke[kcode == k])
        part = {
            "rank": rank,
            "step": step_ids,
            "collective": KINDS[int(k)],
            "comm_ns": _cov(ws, we, nk),
            "exposed_comm_ns": _exposed(ws, we, nk, c),
        }
        if coll is not None:
            sel = wc == k
            wk = iv.normalize(w0[sel], w1[sel])
            part["wait_ns"] = _cov(ws, we, wk)
            part["exposed_wait_ns"] = _exposed(ws, we, wk, c)
            part["count"] = _counts(cstep[sel & cvalid], step_ids)
        else:
            part["wait_ns"] = part["exposed_wait_ns"] = np.full(len(step_ids), np.nan)
            part["count"] = np.zeros(len(step_ids), np.int64)  # filled by launch below when no table
        for n, (ps, pe) in phase.items():
            part[f"{n}_ns"] = _cov(ps, pe, nk)
        part["after_backward_ns"] = _cov(bend, we, nk)
        rows.append(part)
    if not rows:
        return out, schema.empty_frame(schema.COMM_KIND_COLUMNS)
    # Rows of no count and no time dropped before the frame is built (one frame per rank, not one per
    # kind plus a concat and a filter); the index keeps the positions they had among all kinds' rows.
    n = len(step_ids)
    keep = np.concatenate([(r["count"] > 0) | (r["comm_ns"] > 0) for r in rows])
    cols = {
        c: np.concatenate(
            [np.broadcast_to(np.asarray(r[c], dtype=object if c == "collective" else None), n) for r in rows]
        )
        for c in rows[0]
    }
    kinds = pd.DataFrame({c: v[keep] for c, v in cols.items()}, index=np.flatnonzero(keep))
    kinds["rank"] = kinds["rank"].astype(np.asarray(rank).dtype)
    return out, kinds


def _within(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> bool:
    """Whether normalised set a lies within normalised set b: each interval of a inside the interval of b
    that starts last at or before it (b's intervals are disjoint and non-touching)."""
    (as_, ae), (bs, be) = a, b
    j = np.searchsorted(bs, as_, side="right") - 1
    return bool(((j >= 0) & (be[np.maximum(j, 0)] >= ae)).all()) if len(bs) else not len(as_)


def _compute_set(karr, rank) -> tuple[np.ndarray, np.ndarray]:
    """C: the rank's compute kernels, merged (normalised)."""
    idx = karr.rank_index(rank)
    return iv.normalize_rows(karr.start[idx], karr.end[idx], karr.is_compute[idx])


def _counts(values: np.ndarray, at: np.ndarray) -> np.ndarray:
    """How many of ``values`` equal each of ``at`` (int64)."""
    u, n = np.unique(values, return_counts=True)
    pos = np.minimum(np.searchsorted(u, at), max(len(u) - 1, 0))
    hit = (u[pos] == at) if len(u) else np.zeros(len(at), dtype=bool)
    return np.where(hit, n[pos] if len(u) else 0, 0).astype(np.int64)


class WaitRows:
    """The collective table's wait intervals per rank (kind code, start, start + wait_ns, step and whether
    it is known), its columns converted once: :func:`rank_breakdown` asks once per rank."""

    def __init__(self, coll: pd.DataFrame):
        self.code = kind_codes(coll["collective"])
        self.w0 = coll["start_ns"].to_numpy(np.int64)
        self.w1 = self.w0 + coll["wait_ns"].to_numpy(np.int64)
        step = coll["step"]
        self.valid = step.notna().to_numpy()
        self.step = step.to_numpy(dtype=np.int64, na_value=0) if len(step) else np.zeros(0, np.int64)
        self.rows = coll.groupby("rank", sort=False).indices if len(coll) else {}

    def of(self, rank):
        rows = self.rows.get(rank, np.zeros(0, dtype=np.intp))
        return self.code[rows], self.w0[rows], self.w1[rows], self.step[rows], self.valid[rows]


def wait_rows(coll: pd.DataFrame) -> WaitRows:
    return WaitRows(coll)


def finish(kinds: list[pd.DataFrame]) -> pd.DataFrame:
    """COMM_KIND_COLUMNS from the per-rank parts, rows by (rank, step, order of KINDS)."""
    parts = [k for k in kinds if len(k)]
    if not parts:
        return schema.empty_frame(schema.COMM_KIND_COLUMNS)
    out = pd.concat(parts, ignore_index=True)
    out["_o"] = out["collective"].map({k: i for i, k in enumerate(KINDS)})
    out = out.sort_values(["rank", "step", "_o"], kind="stable")
    out["count"] = out["count"].astype("int64")
    return schema.select(out, schema.COMM_KIND_COLUMNS)


def other_kind_note(karr) -> str | None:
    """A note when some NCCL kernels have no known kind: they count in comm_ns but never in the tail."""
    n, names = other_kinds(karr)
    return other_kind_message(n, names) if n else None


def other_kinds(karr) -> tuple[int, list]:
    """(count, first three distinct names) of the NCCL kernels of no known kind."""
    idx, kcode, _ = nccl_rows(karr)
    other = idx[kcode == OTHER]
    n = len(other)
    return n, list(pd.unique(karr.name_values()[karr.name_code[other].astype(np.int64)])[:3]) if n else []


def other_kind_message(n: int, names: list) -> str:
    return (
        f"{n} NCCL kernels of no known collective kind (e.g. {', '.join(map(str, names))}): they count in "
        "comm_ns and comm_kinds as 'other', but not in comm_tail_ns or job_comm_tail_ns (gradient "
        "collectives: AllReduce, ReduceScatter)"
    )
