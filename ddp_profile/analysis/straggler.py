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
        return pd.DataFrame({"rank": [], "step": [], "collective": [], "start_ns": [], "key": [], "n_ranks": [],
                             "lateness_ns": [], "last": []})
    df = pd.DataFrame({"rank": ints(coll["rank"]), "pid": ints(coll["pid"]), "device": ints(coll["device"]),
                       "stream": ints(coll["stream"]), "seq": ints(coll["seq"]), "step": coll["step"].to_numpy(),
                       "collective": coll["collective"].to_numpy(), "start_ns": ints(coll["start_ns"])})
    first = df.groupby(["pid", "device", "stream"])["start_ns"].transform("min")
    comm = df.assign(_f=first).groupby(["pid", "device"])["_f"].rank(method="dense").astype("int64")
    df["key"] = comm.to_numpy() * (int(df["seq"].max()) + 1) + df["seq"].to_numpy()
    g = df.groupby("key")
    df["n_ranks"] = g["rank"].transform("nunique")
    df["lateness_ns"] = df["start_ns"] - g["start_ns"].transform("min")
    df["last"] = df["lateness_ns"] == g["lateness_ns"].transform("max")
    return df.loc[df["n_ranks"] >= 2, ["rank", "step", "collective", "start_ns", "key", "n_ranks", "lateness_ns",
                                       "last"]].reset_index(drop=True)


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
        return pd.DataFrame({"step": pd.Series(dtype="int64"), "rank": pd.Series(dtype="int64"),
                             "lead_ns": pd.Series(dtype="int64")})
    grad = np.isin(kind_codes(a["collective"]), [KINDS.index(k) for k in GRADIENT])  # per distinct name
    step = ints(a["step"])
    has_grad = pd.Series(grad).groupby(step).transform("any").to_numpy()
    a = a.loc[grad | ~has_grad]
    out = a.groupby([ints(a["step"]), ints(a["rank"])])["lateness_ns"].max()
    out.index.names = ["step", "rank"]
    return out.rename("lead_ns").reset_index()


def call_stats(waits: pd.DataFrame | None, rank: int, lo: int, hi: int) -> pd.DataFrame:
    """Per function (index) of the host-wait calls on the rank's main thread (tid = pid) ending in [lo, hi):
    ``ns`` (their time), ``calls`` and ``sync`` (the nsys layer's kind is "sync")."""
    if waits is None or waits.empty:
        return pd.DataFrame({"ns": [], "calls": [], "sync": []}, dtype=float)
    end = ints(waits["end_ns"])
    m = (ints(waits["rank"]) == rank) & (ints(waits["tid"]) == ints(waits["pid"])) & (end >= lo) & (end < hi)
    sub = waits.loc[m]
    df = pd.DataFrame({"name": sub["name"].astype(str).to_numpy(),
                       "ns": (ints(sub["end_ns"]) - ints(sub["start_ns"])).astype(float),
                       "sync": (sub["kind"].astype(str) == "sync").to_numpy()})
    return df.groupby("name").agg(ns=("ns", "sum"), calls=("ns", "size"), sync=("sync", "any"))


def _evidence_call(waits: pd.DataFrame | None, s: int, me: pd.Series, peers: pd.DataFrame, lead: float
                   ) -> str | None:
    """The host-wait functions that set the straggler apart, each rank within its own step span: those it
    calls more often than its peers' median, or spends at least CALL_SHARE of the lead longer in (a sync that
    returns at once still empties the GPU's queue: ``loss.item()`` on one rank), as
    'host waits on the main thread: <function> ×N (peers ×M) + ..., X ms (peers Y ms)' (X: the straggler's
    time in those functions in the step); None without any."""
    mine = call_stats(waits, s, int(me["start_ns"]), int(me["end_ns"]))
    if mine.empty:
        return None
    theirs = [call_stats(waits, int(p), int(r["start_ns"]), int(r["end_ns"])) for p, r in peers.iterrows()]

    def base(col):
        got = pd.DataFrame([t[col] for t in theirs]) if theirs else pd.DataFrame()
        return got.reindex(columns=mine.index).fillna(0.0).median() if len(got) else pd.Series(0.0, index=mine.index)

    t_base, n_base = base("ns").reindex(mine.index).fillna(0.0), base("calls").reindex(mine.index).fillna(0.0)
    named = mine.index[((mine["ns"] - t_base) >= CALL_SHARE * lead) | (mine["calls"] > n_base)]
    if not len(named):
        return None
    named = mine.loc[named].sort_values("ns", ascending=False, kind="stable").index
    calls = " + ".join(f"{n} ×{int(mine.loc[n, 'calls'])} (other ranks' median ×{n_base[n]:g})" for n in named)
    return (f"host waits on the main thread: {calls}, {fmt_ms(mine.loc[named, 'ns'].sum())} "
            f"(other ranks' median {fmt_ms(t_base[named].sum())})")


def stragglers(leads: pd.DataFrame, paths: pd.DataFrame, waits: pd.DataFrame | None, steps: np.ndarray,
               kernel_sums: pd.DataFrame | None = None) -> pd.DataFrame:
    """STEP_COLUMNS per step of ``steps`` (index: step). ``paths``: ``critical_path.rank_paths``; ``waits``: HOST_WAIT_COLUMNS or None (then no call is named);
    ``kernel_sums``: ``kernel_diff.step_kernel_sums`` of every rank, or None (then GPU work is compared in
    total, not kernel by kernel). A step whose largest lead is 0 (every rank arrived at once) has no
    straggler."""
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
        by_step = _paths_by_step(paths)
        extra = kd.diff(kernel_sums, pd.Series(ints(best["rank"]), index=ints(best["step"])))
        extra = extra.set_index("step") if len(extra) else None
        for pos, step, s, lead in zip(at.tolist(), ints(best["step"]).tolist(), ints(best["rank"]).tolist(),
                                      best["lead_ns"].to_numpy(dtype=float).tolist(), strict=True):
            if pos < 0:
                continue
            work = extra.loc[step] if extra is not None and step in extra.index else None
            cause, evidence = _cause(by_step.get(step), s, lead, paths, waits, work)
            rank_of[pos], lead_of[pos], cause_of[pos], evidence_of[pos] = s, lead, cause, evidence
    return pd.DataFrame({"straggler_rank": pd.array([r if r >= 0 else pd.NA for r in rank_of.tolist()],
                                                    dtype="Int64"),
                         "straggler_lead_ns": lead_of,
                         "straggler_cause": pd.Series(cause_of, dtype=object, index=idx),
                         "straggler_evidence": pd.Series(evidence_of, dtype=object, index=idx)}, index=idx)


def _paths_by_step(paths: pd.DataFrame) -> dict[int, np.ndarray]:
    """Row positions of ``paths`` per step (in the rows' order)."""
    if paths is None or not len(paths):
        return {}
    return {int(k): v for k, v in pd.Series(np.arange(len(paths))).groupby(ints(paths["step"])).indices.items()}


def _cause(rows: np.ndarray | None, s: int, lead: float, paths: pd.DataFrame, waits: pd.DataFrame | None,
           work: pd.Series | None = None) -> tuple[str, str | None]:
    """(straggler_cause, straggler_evidence) of straggler ``s`` in a step whose ``paths`` rows are ``rows``.
    ``work``: the straggler's row of ``kernel_diff.diff`` for the step (extra_ns, like_ns, extra_kernels), or
    None: then its GPU work is its total compute against its peers' median."""
    if rows is None:
        return "unknown", None
    rank = ints(paths["rank"])[rows]
    mine = np.flatnonzero(rank == s)
    if not len(mine) or len(rows) < 2:
        return "unknown", None
    me_row, peer_rows = rows[mine[0]], rows[rank != s]

    def col(name):
        return paths[name].to_numpy()

    host, compute = col("host_ns"), col("compute_ns")
    me_host, me_compute = host[me_row], compute[me_row]
    peers_host, peers_compute = _median(host[peer_rows]), _median(compute[peer_rows])
    d_host = float(me_host - peers_host)
    if work is not None:  # extra work by name and count, plus slower shared kernels (never the peers' contention)
        d_gpu = float(work["extra_ns"]) + max(0.0, float(work["like_ns"]))
    else:
        d_gpu = float(me_compute - peers_compute)
    material = 100.0 * lead >= MIN_LEAD_PCT * float(col("span_ns")[me_row])
    if not material:
        return "unknown", f"lead {fmt_ms(lead)}, under {MIN_LEAD_PCT:g} % of the step"
    if d_host >= CAUSE_SHARE * lead and d_host >= d_gpu:
        evidence = f"GPU idle awaiting launches {fmt_ms(me_host)} (other ranks' median {fmt_ms(peers_host)})"
        me = paths.iloc[me_row].drop("step").rename(s)
        peers = paths.iloc[peer_rows].drop(columns="step").set_index("rank")
        call = _evidence_call(waits, s, me, peers, lead)
        return "host", evidence if call is None else f"{evidence}; {call}"
    if d_gpu >= CAUSE_SHARE * lead:
        if work is not None:
            return "gpu", kd.evidence(work["extra_kernels"], float(work["extra_ns"]), float(work["like_ns"]))
        return "gpu", f"GPU busy {fmt_ms(me_compute)} (other ranks' median {fmt_ms(peers_compute)})"
    return "unknown", (f"lead {fmt_ms(lead)}: neither its GPU idle awaiting launches ({d_host / 1e6:+.1f} ms) "
                       f"nor its GPU work ({d_gpu / 1e6:+.1f} ms) against its peers accounts for half of it")


def _median(values: np.ndarray) -> float:
    """pandas' Series.median (NaN skipped; NaN when none)."""
    v = values.astype(float)
    v = v[~np.isnan(v)]
    return float(np.median(v)) if len(v) else float("nan")
