"""Who arrives last at the collectives, by how much, and why.

Arrival: a rank reaches collective c when its NCCL kernel of c starts (the collective table's ``start_ns``;
c = the same (stream number, issue order) on every rank, as ``collectives`` matches them). Over the
collectives seen on at least two ranks::

    lateness_r(c)     = start_r(c) − min over ranks of start(c)
    last_arrival_pct  = 100 · #{c : lateness_r(c) = max over ranks of lateness(c)} / #{c of rank r}
                        (per rank; a tie counts for each tied rank)

Per step (the step's *gradient* collectives, AllReduce and ReduceScatter, launched in the step on each rank;
all its collectives when it has none)::

    lead_r            = max over those c of lateness_r(c)
    straggler_rank    = argmax_r lead_r   (ties: the lowest rank; none when that lead is 0: every rank
                        arrived at once)
    straggler_lead_ns = lead of the straggler rank: how much later than the first rank it arrived

Cause, from the per-(rank, step) parts of ``critical_path.rank_paths`` (each rank over its own step span),
the straggler s against the median of its peers P::

    host  when host_s − median_P(host) ≥ CAUSE_SHARE · lead and ≥ the GPU difference below:
          its GPU sat idle because its host had not launched the work yet
    gpu   when extra_ns + max(0, like_ns) ≥ CAUSE_SHARE · lead: it ran more GPU work than its peers
          (``kernel_diff``: kernels by name and count that its peers do not run, plus longer time on the
          kernels they all run, like for like; without the per-step kernel sums, compute_s −
          median_P(compute)). Comparing total compute would charge the straggler's extra work with the
          peers' own slowdown beside their waiting NCCL kernels, and hide it.
    unknown otherwise (or without a CUDA API trace: no launch times, no host time)

A lead under MIN_LEAD_PCT % of the straggler's step span leaves the cause unknown (noise). Evidence, what
proves the cause first: for ``host``, the time its GPU sat idle awaiting launches (``host_ns``, against its
peers' median), then the host-wait functions (``Trace.host_waits``: synchronize calls, copies to the host)
on the straggler's main thread (thread id = process id; calls ending inside the rank's step span) that it
calls more often than its peers or spends at least CALL_SHARE of the lead longer in, with their counts and
their time in the step (a sync that returns at once still empties the GPU's queue: ``loss.item()`` on one
rank); for ``gpu``, the extra kernels by name with their count against the peers' median and their time,
then the like-for-like difference. Times in the text are ``fmt.fmt_ms``'s.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from ddp_profile.analysis import kernel_diff as kd
from ddp_profile.analysis.kernel_arrays import ints
from ddp_profile.analysis.kernel_groups import GRADIENT, KINDS, kind_codes
from ddp_profile.fmt import fmt_ms_many
from ddp_profile.schema import STEP_STRAGGLER_COLUMNS

CAUSE_SHARE = 0.5
"""A cause must account for at least this share of the straggler's lead."""
CALL_SHARE = 0.1
"""A host-wait function is named as evidence when the straggler spends at least this share of its lead more
in it than its peers do."""
MIN_LEAD_PCT = 1.0
"""A lead under this share of the straggler's step span is noise: its cause is left unknown."""
STEP_COLUMNS = STEP_STRAGGLER_COLUMNS


def arrivals(coll: pd.DataFrame) -> pd.DataFrame:
    """The collective table's rows (rank, step, collective, start_ns) with ``key`` (one id per collective across
    ranks, as ``collectives`` matches them: stream number by first use within (pid, device), then issue order),
    ``n_ranks``, ``lateness_ns`` and ``last`` (this rank arrived last), for collectives seen on ≥ 2 ranks."""
    if coll is None or coll.empty:
        return pd.DataFrame(
            {
                "rank": [],
                "step": [],
                "collective": [],
                "start_ns": [],
                "key": [],
                "n_ranks": [],
                "lateness_ns": [],
                "last": [],
            }
        )
    df = pd.DataFrame(
        {
            "rank": ints(coll["rank"]),
            "pid": ints(coll["pid"]),
            "device": ints(coll["device"]),
            "stream": ints(coll["stream"]),
            "seq": ints(coll["seq"]),
            "step": coll["step"].to_numpy(),
            "collective": coll["collective"].to_numpy(),
            "start_ns": ints(coll["start_ns"]),
        }
    )
    first = df.groupby(["pid", "device", "stream"])["start_ns"].transform("min")
    comm = df.assign(_f=first).groupby(["pid", "device"])["_f"].rank(method="dense").astype("int64")
    df["key"] = comm.to_numpy() * (int(df["seq"].max()) + 1) + df["seq"].to_numpy()
    g = df.groupby("key")
    df["n_ranks"] = g["rank"].transform("nunique")
    df["lateness_ns"] = df["start_ns"] - g["start_ns"].transform("min")
    df["last"] = df["lateness_ns"] == g["lateness_ns"].transform("max")
    return df.loc[
        df["n_ranks"] >= 2,
        ["rank", "step", "collective", "start_ns", "key", "n_ranks", "lateness_ns", "last"],
    ].reset_index(drop=True)


def last_arrival_pct(arr: pd.DataFrame, ranks) -> np.ndarray:
    """``last_arrival_pct`` for each rank of ``ranks`` (NaN for a rank without a shared collective)."""
    if arr.empty:
        return np.full(len(ranks), np.nan)
    pct = 100.0 * arr.groupby("rank")["last"].mean()
    return pct.reindex(np.asarray(ranks, dtype=np.int64)).to_numpy(dtype=float)


def step_leads(arr: pd.DataFrame) -> pd.DataFrame:
    """(step, rank, lead_ns) per step and rank: the rank's latest arrival behind the first rank over the step's
    gradient collectives (all collectives of a step without any)."""
    a = arr.loc[arr["step"].notna()]
    if a.empty:
        return pd.DataFrame(
            {
                "step": pd.Series(dtype="int64"),
                "rank": pd.Series(dtype="int64"),
                "lead_ns": pd.Series(dtype="int64"),
            }
        )
    grad = np.isin(kind_codes(a["collective"]), [KINDS.index(k) for k in GRADIENT])  # per distinct name
    step = ints(a["step"])
    has_grad = pd.Series(grad).groupby(step).transform("any").to_numpy()
    a = a.loc[grad | ~has_grad]
    out = a.groupby([ints(a["step"]), ints(a["rank"])])["lateness_ns"].max()
    out.index.names = ["step", "rank"]
    return out.rename("lead_ns").reset_index()


class CallTable(NamedTuple):
    """Host-wait calls on each rank's main thread (tid = pid) per row of ``critical_path.rank_paths``, calls
    ending in that row's span [start_ns, end_ns): ``ns[row, f]`` their time and ``calls[row, f]`` their count in
    function ``names[f]`` (names sorted)."""

    names: np.ndarray
    ns: np.ndarray
    calls: np.ndarray


def call_table(waits: pd.DataFrame | None, paths: pd.DataFrame) -> CallTable:
    """:class:`CallTable` of ``waits`` (HOST_WAIT_COLUMNS) over the spans of ``paths``: per rank, the calls sorted
    by end once, and per function a running sum read at both ends of every span (``np.searchsorted``), so the cost
    grows with calls and spans, not with their product."""
    n = len(paths) if paths is not None else 0
    if waits is None or waits.empty or n == 0:
        return CallTable(np.zeros(0, dtype=object), np.zeros((n, 0), np.int64), np.zeros((n, 0), np.int64))
    main = ints(waits["tid"]) == ints(waits["pid"])
    names, code = np.unique(waits["name"].astype(str).to_numpy()[main], return_inverse=True)
    w_rank, w_end = ints(waits["rank"])[main], ints(waits["end_ns"])[main]
    w_dur = w_end - ints(waits["start_ns"])[main]
    ns = np.zeros((n, len(names)), np.int64)
    calls = np.zeros((n, len(names)), np.int64)
    p_rank, lo, hi = ints(paths["rank"]), ints(paths["start_ns"]), ints(paths["end_ns"])
    for rank in np.intersect1d(np.unique(p_rank), w_rank).tolist():
        rows = np.flatnonzero(p_rank == rank)
        mine = np.flatnonzero(w_rank == rank)
        for f in np.unique(code[mine]).tolist():
            sel = mine[code[mine] == f]
            order = np.argsort(w_end[sel], kind="stable")
            end = w_end[sel][order]
            total = np.concatenate([[0], np.cumsum(w_dur[sel][order])])
            a, b = np.searchsorted(end, lo[rows], "left"), np.searchsorted(end, hi[rows], "left")
            calls[rows, f] = b - a
            ns[rows, f] = total[b] - total[a]
    return CallTable(names, ns, calls)


def _evidence_calls(
    table: CallTable, me_row: np.ndarray, peers_ns: np.ndarray, peers_calls: np.ndarray, lead: np.ndarray
) -> list[str | None]:
    """Per straggler i: the host-wait functions that set it (``table`` row ``me_row[i]``) apart from its peers
    (their medians ``peers_ns[i]``, ``peers_calls[i]``), each rank within its own step span: those it calls more
    often than its peers' median, or spends at least CALL_SHARE of the lead longer in (a sync that returns at
    once still empties the GPU's queue: ``loss.item()`` on one rank), as 'host waits on the main thread:
    <function> ×N (peers ×M) + ..., X ms (peers Y ms)' (X: the straggler's time in those functions in the step,
    functions by that time, longest first); None without any. All stragglers at once: one (straggler, function)
    matrix, text only for the functions named."""
    n = len(me_row)
    if not n or not table.ns.shape[1]:
        return [None] * n
    mine_calls, mine_ns = table.calls[me_row], table.ns[me_row].astype(float)
    named = (mine_calls > 0) & (
        ((mine_ns - peers_ns) >= CALL_SHARE * lead[:, None]) | (mine_calls > peers_calls)
    )
    order = np.argsort(-mine_ns, axis=1, kind="stable")  # per straggler, its functions by time, longest first
    rows = np.arange(n)[:, None]
    named, mine_calls, peers_calls = named[rows, order], mine_calls[rows, order], peers_calls[rows, order]
    # integer ns (and half-integer medians) as floats: the sums are exact in any order
    mine_sum = np.where(named, mine_ns[rows, order], 0.0).sum(axis=1)
    peers_sum = np.where(named, peers_ns[rows, order], 0.0).sum(axis=1)
    r, k = np.nonzero(named)  # row-major: each straggler's named functions together, in order
    names = table.names[order[r, k]]
    parts = [
        f"{name} ×{int(c)} (other ranks' median ×{b:g})"
        for name, c, b in zip(
            names.tolist(), mine_calls[r, k].tolist(), peers_calls[r, k].tolist(), strict=True
        )
    ]
    out: list[str | None] = [None] * n
    has = np.flatnonzero(named.any(axis=1))
    if not has.size:
        return out
    cuts = np.searchsorted(r, has, side="left").tolist() + [len(r)]
    mine_t, peers_t = fmt_ms_many(mine_sum[has]), fmt_ms_many(peers_sum[has])
    for j, i in enumerate(has.tolist()):
        calls = " + ".join(parts[cuts[j] : cuts[j + 1]])
        out[i] = f"host waits on the main thread: {calls}, {mine_t[j]} (other ranks' median {peers_t[j]})"
    return out


class StepInputs(NamedTuple):
    """What decides each step's cause, one entry per straggler (rank, step): ``ok`` (False: the step has no
    ``rank_paths`` row of the straggler or fewer than two rows; the other fields are then meaningless), the
    straggler's ``rank_paths`` row and its parts, its peers' (the step's other ranks') medians of the same parts,
    and of its host-wait calls per function (:class:`CallTable`; rows: stragglers, columns: functions)."""

    ok: np.ndarray
    me_row: np.ndarray
    host: np.ndarray
    peers_host: np.ndarray
    compute: np.ndarray
    peers_compute: np.ndarray
    span: np.ndarray
    peers_ns: np.ndarray
    peers_calls: np.ndarray


def step_inputs(paths: pd.DataFrame, step: np.ndarray, rank: np.ndarray, table: CallTable) -> StepInputs:
    """:class:`StepInputs` of straggler ``rank[i]`` in step ``step[i]`` (steps distinct); ``ok[i]`` False where
    the step has no row of that rank in ``paths`` or fewer than two rows. All steps at once: each ``paths`` row is
    given the position of its step, and the peers' medians are read from one sort per part
    (:func:`_group_median`)."""
    n = len(step)
    f = table.ns.shape[1]
    if paths is None or not len(paths) or not n:
        nan = np.full(n, np.nan)
        return StepInputs(
            np.zeros(n, bool),
            np.full(n, -1, np.int64),
            nan,
            nan,
            nan,
            nan,
            nan,
            np.zeros((n, f)),
            np.zeros((n, f)),
        )
    g = pd.Index(step).get_indexer(ints(paths["step"]))
    p_rank = ints(paths["rank"])
    rows = np.flatnonzero(g >= 0)
    g_rows = g[rows]
    me = p_rank[rows] == rank[g_rows]
    me_row = np.full(n, -1, np.int64)
    me_row[g_rows[me][::-1]] = rows[me][::-1]  # the step's first row of the straggler
    ok = (me_row >= 0) & (np.bincount(g_rows, minlength=n) >= 2)
    peer, g_peer = rows[~me], g_rows[~me]
    has_peer = np.bincount(g_peer, minlength=n) > 0

    def peers(values: np.ndarray, missing: float) -> np.ndarray:
        return np.where(has_peer, _group_median(g_peer, values[peer].astype(float), n), missing)

    def mine(values: np.ndarray) -> np.ndarray:
        return np.where(ok, values.astype(float)[np.maximum(me_row, 0)], np.nan)

    host, compute, span = (paths[c].to_numpy() for c in ("host_ns", "compute_ns", "span_ns"))
    peers_ns = np.stack([peers(table.ns[:, j], 0.0) for j in range(f)], axis=1) if f else np.zeros((n, 0))
    peers_calls = (
        np.stack([peers(table.calls[:, j], 0.0) for j in range(f)], axis=1) if f else np.zeros((n, 0))
    )
    return StepInputs(
        ok,
        me_row,
        mine(host),
        peers(host, np.nan),
        mine(compute),
        peers(compute, np.nan),
        mine(span),
        peers_ns,
        peers_calls,
    )


def _group_median(group: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Per group 0..n-1: the median of its ``values`` (NaN skipped; NaN when none), as ``np.median`` computes it
    (the middle value, or the mean of the two middle ones), from one sort by (group, value)."""
    keep = ~np.isnan(values)
    group, values = group[keep], values[keep]
    order = np.lexsort((values, group))
    values = values[order]
    count = np.bincount(group, minlength=n)
    first = np.cumsum(count) - count
    out = np.full(n, np.nan)
    has = count > 0
    lo, hi = first[has] + (count[has] - 1) // 2, first[has] + count[has] // 2
    out[has] = (values[lo] + values[hi]) / 2
    return out


def stragglers(
    leads: pd.DataFrame,
    paths: pd.DataFrame,
    waits: pd.DataFrame | None,
    steps: np.ndarray,
    kernel_sums: pd.DataFrame | None = None,
    kernel_table: tuple | None = None,
) -> pd.DataFrame:
    """STEP_COLUMNS per step of ``steps`` (index: step). ``paths``: ``critical_path.rank_paths``; ``waits``:
    HOST_WAIT_COLUMNS or None (then no call is named); ``kernel_sums``: ``kernel_diff.step_kernel_sums`` of
    every rank, or None (then GPU work is compared in total, not kernel by kernel); ``kernel_table``: its
    ``kernel_diff.table`` when the caller has it. A step whose largest lead
    is 0 (every rank arrived at once) has no straggler."""
    idx = pd.Index(np.asarray(steps, dtype=np.int64), name="step")
    rank_of = np.full(len(idx), -1, dtype=np.int64)
    lead_of = np.full(len(idx), np.nan)
    cause_of = np.full(len(idx), None, dtype=object)
    evidence_of = np.full(len(idx), None, dtype=object)
    if not leads.empty:
        best = leads.sort_values(["step", "lead_ns", "rank"], ascending=[True, False, True], kind="stable")
        best = best.drop_duplicates("step")
        best = best.loc[best["lead_ns"].to_numpy(dtype=float) > 0]  # a zero lead names no straggler
        b_step, b_rank = ints(best["step"]), ints(best["rank"])
        at = idx.get_indexer(b_step)  # -1: a step not asked for
        keep = at >= 0
        table = call_table(waits, paths)  # every (rank, step) span's host-wait calls at once
        inputs = step_inputs(paths, b_step[keep], b_rank[keep], table)
        extra = kd.diff(kernel_sums, pd.Series(b_rank, index=b_step), kernel_table)
        # the straggler's kernel_diff row of every step, looked up once (-1: none)
        row = (
            pd.Index(ints(extra["step"])).get_indexer(b_step[keep]) if len(extra) else np.full(keep.sum(), -1)
        )
        lead = best["lead_ns"].to_numpy(dtype=float)[keep]
        pos = at[keep]
        rank_of[pos], lead_of[pos] = b_rank[keep], lead
        cause_of[pos], evidence_of[pos] = _causes(inputs, lead, table, extra, row)
    return pd.DataFrame(
        {
            "straggler_rank": pd.arrays.IntegerArray(rank_of, rank_of < 0),
            "straggler_lead_ns": lead_of,
            "straggler_cause": pd.Series(cause_of, dtype=object, index=idx),
            "straggler_evidence": pd.Series(evidence_of, dtype=object, index=idx),
        },
        index=idx,
    )


def _causes(
    x: StepInputs, lead: np.ndarray, calls: CallTable, extra: pd.DataFrame, row: np.ndarray
) -> tuple[list, list]:
    """(straggler_cause, straggler_evidence) of each straggler, whose step's inputs are ``x`` (:func:`step_inputs`)
    and lead ``lead``. ``row``: the straggler's row of ``extra`` (``kernel_diff.diff``: extra_ns, like_ns,
    extra_kernels) for the step, or -1: then its GPU work is its total compute against its peers' median. The
    decision is taken over whole columns; text is written only for the steps of each kind, each time one
    :func:`fmt.fmt_ms_many` per column."""
    n = len(lead)
    has_work = row >= 0
    at = np.maximum(row, 0)
    if len(extra):
        extra_ns = extra["extra_ns"].to_numpy(dtype=float)[at]
        like_ns = extra["like_ns"].to_numpy(dtype=float)[at]
    else:
        extra_ns = like_ns = np.zeros(n)
    d_host = x.host - x.peers_host
    # extra work by name and count, plus slower shared kernels (never the peers' contention)
    d_gpu = np.where(has_work, extra_ns + np.where(like_ns > 0.0, like_ns, 0.0), x.compute - x.peers_compute)
    with np.errstate(invalid="ignore"):
        material = 100.0 * lead >= MIN_LEAD_PCT * x.span
        is_host = x.ok & material & (d_host >= CAUSE_SHARE * lead) & (d_host >= d_gpu)
        is_gpu = x.ok & material & ~is_host & (d_gpu >= CAUSE_SHARE * lead)
    cause = np.full(n, "unknown", dtype=object)
    cause[is_host], cause[is_gpu] = "host", "gpu"
    evidence = np.full(n, None, dtype=object)

    small = np.flatnonzero(x.ok & ~material)
    evidence[small] = [f"lead {t}, under {MIN_LEAD_PCT:g} % of the step" for t in fmt_ms_many(lead[small])]
    sel = np.flatnonzero(is_host)
    if sel.size:
        mine, peers = fmt_ms_many(x.host[sel]), fmt_ms_many(x.peers_host[sel])
        found = _evidence_calls(calls, x.me_row[sel], x.peers_ns[sel], x.peers_calls[sel], lead[sel])
        evidence[sel] = [
            f"GPU idle awaiting launches {me} (other ranks' median {peer})"
            + ("" if call is None else f"; {call}")
            for me, peer, call in zip(mine, peers, found, strict=True)
        ]
    sel = np.flatnonzero(is_gpu & has_work)
    if sel.size:
        kernels = extra["extra_kernels"].to_numpy()[row[sel]]
        evidence[sel] = [
            kd.evidence(k, e, w)
            for k, e, w in zip(kernels.tolist(), extra_ns[sel].tolist(), like_ns[sel].tolist(), strict=True)
        ]
    sel = np.flatnonzero(is_gpu & ~has_work)
    if sel.size:
        evidence[sel] = [
            f"GPU busy {me} (other ranks' median {peer})"
            for me, peer in zip(fmt_ms_many(x.compute[sel]), fmt_ms_many(x.peers_compute[sel]), strict=True)
        ]
    sel = np.flatnonzero(x.ok & material & ~is_host & ~is_gpu)
    if sel.size:
        evidence[sel] = [
            f"lead {t}: neither its GPU idle awaiting launches ({h / 1e6:+.1f} ms) "
            f"nor its GPU work ({g / 1e6:+.1f} ms) against its peers accounts for half of it"
            for t, h, g in zip(fmt_ms_many(lead[sel]), d_host[sel].tolist(), d_gpu[sel].tolist(), strict=True)
        ]
    return cause.tolist(), evidence.tolist()
