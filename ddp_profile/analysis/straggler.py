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

from collections.abc import Mapping
from typing import NamedTuple

import numpy as np
import pandas as pd

from ddp_profile.analysis import kernel_diff as kd
from ddp_profile.analysis.kernel_arrays import ints
from ddp_profile.analysis.kernel_groups import GRADIENT, KINDS, kind_codes
from ddp_profile.fmt import fmt_ms
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


def _evidence_call(table: CallTable, x: StepInputs, lead: float) -> str | None:
    """The host-wait functions that set the straggler (``table`` row ``x.me_row``) apart from its peers (their
    medians ``x.peers_ns``, ``x.peers_calls``), each rank within its own step span: those it calls more often
    than its peers' median, or spends at least CALL_SHARE of the lead longer in (a sync that returns at once
    still empties the GPU's queue: ``loss.item()`` on one rank), as 'host waits on the main thread: <function>
    ×N (peers ×M) + ..., X ms (peers Y ms)' (X: the straggler's time in those functions in the step); None
    without any."""
    mine_calls = table.calls[x.me_row]
    have = np.flatnonzero(mine_calls > 0)
    if not have.size:
        return None
    mine_ns, mine_calls = table.ns[x.me_row, have].astype(float), mine_calls[have]
    t_base, n_base = x.peers_ns[have], x.peers_calls[have]
    named = np.flatnonzero(((mine_ns - t_base) >= CALL_SHARE * lead) | (mine_calls > n_base))
    if not named.size:
        return None
    named = named[np.argsort(-mine_ns[named], kind="stable")]
    calls = " + ".join(
        f"{table.names[have[i]]} ×{int(mine_calls[i])} (other ranks' median ×{n_base[i]:g})"
        for i in named.tolist()
    )
    return (
        f"host waits on the main thread: {calls}, {fmt_ms(mine_ns[named].sum())} "
        f"(other ranks' median {fmt_ms(t_base[named].sum())})"
    )


class StepInputs(NamedTuple):
    """What decides a step's cause: the straggler's ``rank_paths`` row and its parts, its peers' (the step's other
    ranks') medians of the same parts, and of its host-wait calls per function (:class:`CallTable`)."""

    me_row: int
    host: float
    peers_host: float
    compute: float
    peers_compute: float
    span: float
    peers_ns: np.ndarray
    peers_calls: np.ndarray


def step_inputs(
    paths: pd.DataFrame, step: np.ndarray, rank: np.ndarray, table: CallTable
) -> list[StepInputs | None]:
    """:class:`StepInputs` of straggler ``rank[i]`` in step ``step[i]`` (steps distinct), None where the step has
    no row of that rank in ``paths`` or fewer than two rows. All steps at once: each ``paths`` row is given the
    position of its step, and the peers' medians are read from one sort per part (:func:`_group_median`)."""
    n = len(step)
    if paths is None or not len(paths) or not n:
        return [None] * n
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

    host, compute, span = (paths[c].to_numpy() for c in ("host_ns", "compute_ns", "span_ns"))
    peers_host, peers_compute = peers(host, np.nan), peers(compute, np.nan)
    f = table.ns.shape[1]
    peers_ns = np.stack([peers(table.ns[:, j], 0.0) for j in range(f)], axis=1) if f else np.zeros((n, 0))
    peers_calls = (
        np.stack([peers(table.calls[:, j], 0.0) for j in range(f)], axis=1) if f else np.zeros((n, 0))
    )
    return [
        StepInputs(
            int(r),
            host[r],
            float(peers_host[i]),
            compute[r],
            float(peers_compute[i]),
            span[r],
            peers_ns[i],
            peers_calls[i],
        )
        if ok[i]
        else None
        for i, r in enumerate(me_row.tolist())
    ]


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
    cause_of: list = [None] * len(idx)
    evidence_of: list = [None] * len(idx)
    if not leads.empty:
        best = leads.sort_values(["step", "lead_ns", "rank"], ascending=[True, False, True], kind="stable")
        best = best.drop_duplicates("step")
        best = best.loc[best["lead_ns"].to_numpy(dtype=float) > 0]  # a zero lead names no straggler
        at = idx.get_indexer(ints(best["step"]))  # -1: a step not asked for
        table = call_table(waits, paths)  # every (rank, step) span's host-wait calls at once
        inputs = step_inputs(paths, ints(best["step"]), ints(best["rank"]), table)
        extra = kd.diff(kernel_sums, pd.Series(ints(best["rank"]), index=ints(best["step"])), kernel_table)
        # the straggler's kernel_diff row of every step, looked up once (-1: none)
        row = (
            pd.Index(ints(extra["step"])).get_indexer(ints(best["step"]))
            if len(extra)
            else np.full(len(best), -1)
        )
        cols = [extra[c].tolist() for c in ("extra_ns", "like_ns", "extra_kernels")] if len(extra) else []
        for pos, r, s, lead, x in zip(
            at.tolist(),
            row.tolist(),
            ints(best["rank"]).tolist(),
            best["lead_ns"].to_numpy(dtype=float).tolist(),
            inputs,
            strict=True,
        ):
            if pos < 0:
                continue
            work = (
                dict(zip(("extra_ns", "like_ns", "extra_kernels"), (c[r] for c in cols), strict=True))
                if r >= 0
                else None
            )
            cause, evidence = _cause(x, lead, table, work)
            rank_of[pos], lead_of[pos], cause_of[pos], evidence_of[pos] = s, lead, cause, evidence
    return pd.DataFrame(
        {
            "straggler_rank": pd.array([r if r >= 0 else pd.NA for r in rank_of.tolist()], dtype="Int64"),
            "straggler_lead_ns": lead_of,
            "straggler_cause": pd.Series(cause_of, dtype=object, index=idx),
            "straggler_evidence": pd.Series(evidence_of, dtype=object, index=idx),
        },
        index=idx,
    )


def _cause(
    x: StepInputs | None, lead: float, calls: CallTable, work: Mapping | None = None
) -> tuple[str, str | None]:
    """(straggler_cause, straggler_evidence) of a straggler whose step's inputs are ``x`` (:func:`step_inputs`).
    ``work``: the straggler's row of ``kernel_diff.diff`` for the step (extra_ns, like_ns, extra_kernels), or
    None: then its GPU work is its total compute against its peers' median."""
    if x is None:
        return "unknown", None
    me_host, me_compute, peers_host, peers_compute = x.host, x.compute, x.peers_host, x.peers_compute
    d_host = float(me_host - peers_host)
    if (
        work is not None
    ):  # extra work by name and count, plus slower shared kernels (never the peers' contention)
        d_gpu = float(work["extra_ns"]) + max(0.0, float(work["like_ns"]))
    else:
        d_gpu = float(me_compute - peers_compute)
    material = 100.0 * lead >= MIN_LEAD_PCT * float(x.span)
    if not material:
        return "unknown", f"lead {fmt_ms(lead)}, under {MIN_LEAD_PCT:g} % of the step"
    if d_host >= CAUSE_SHARE * lead and d_host >= d_gpu:
        evidence = f"GPU idle awaiting launches {fmt_ms(me_host)} (other ranks' median {fmt_ms(peers_host)})"
        call = _evidence_call(calls, x, lead)
        return "host", evidence if call is None else f"{evidence}; {call}"
    if d_gpu >= CAUSE_SHARE * lead:
        if work is not None:
            return "gpu", kd.evidence(work["extra_kernels"], float(work["extra_ns"]), float(work["like_ns"]))
        return "gpu", f"GPU busy {fmt_ms(me_compute)} (other ranks' median {fmt_ms(peers_compute)})"
    return "unknown", (
        f"lead {fmt_ms(lead)}: neither its GPU idle awaiting launches ({d_host / 1e6:+.1f} ms) "
        f"nor its GPU work ({d_gpu / 1e6:+.1f} ms) against its peers accounts for half of it"
    )
