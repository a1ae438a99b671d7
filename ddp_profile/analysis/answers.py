"""The answers ``analyze`` adds on top of its tables: straggler and cause, the critical path across ranks, the
verdict with advice, and per-rank values where ranks differ (modules ``straggler``, ``critical_path``,
``verdict``). Two calls from ``analyze``: :func:`paths` while the kernels' launch times are still held, and
:func:`attach` once the other tables are done."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddp_profile import schema
from ddp_profile.analysis import clocks, gains
from ddp_profile.analysis import critical_path as cp
from ddp_profile.analysis import kernel_diff as kd
from ddp_profile.analysis import straggler as st
from ddp_profile.analysis import verdict as vd
from ddp_profile.analysis.kernel_arrays import KernelArrays, ints


def paths(steps: pd.DataFrame, karr: KernelArrays, coll: pd.DataFrame | None) -> pd.DataFrame | None:
    """``critical_path.rank_paths`` (None without launch times: the host part cannot be told)."""
    if karr.launch is None or steps is None or steps.empty:
        return None
    return cp.rank_paths(steps, karr, coll)


def _sync_per_step(crit: pd.DataFrame, rank_paths: pd.DataFrame, waits: pd.DataFrame | None) -> pd.Series:
    """Per step: host-wait call time on the critical rank's main thread (tid = pid), calls ending in its span
    (``straggler.call_table``'s row of that rank and step, summed over functions)."""
    if waits is None or waits.empty or crit.empty:
        return pd.Series(dtype=float)
    table = st.call_table(waits, rank_paths)
    at = pd.MultiIndex.from_arrays([ints(rank_paths["rank"]), ints(rank_paths["step"])]).get_indexer(
        pd.MultiIndex.from_arrays([ints(crit["critical_rank"]), ints(crit["step"])])
    )
    if (at < 0).any():
        raise KeyError("a critical rank's step is missing from the rank paths")
    return pd.Series(table.ns[at].sum(axis=1).astype(float), index=ints(crit["step"]).tolist(), dtype=float)


def _drains_per_step(crit: pd.DataFrame, rank_paths: pd.DataFrame, waits: pd.DataFrame | None) -> pd.Series:
    """Per step: how many calls on the critical rank's main thread empty the GPU's queue (a stream or device
    sync, a copy to the host; not an event sync, which waits for one recorded point), calls ending in its span."""
    if waits is None or waits.empty or crit.empty:
        return pd.Series(dtype=float)
    table = st.call_table(waits, rank_paths)
    event = set(waits.loc[waits["kind"].astype(str).to_numpy() == "event", "name"].astype(str))
    keep = np.array([str(n) not in event for n in table.names], dtype=bool)
    at = pd.MultiIndex.from_arrays([ints(rank_paths["rank"]), ints(rank_paths["step"])]).get_indexer(
        pd.MultiIndex.from_arrays([ints(crit["critical_rank"]), ints(crit["step"])])
    )
    if (at < 0).any():
        raise KeyError("a critical rank's step is missing from the rank paths")
    calls = table.calls[at][:, keep].sum(axis=1) if keep.any() else np.zeros(len(at), np.int64)
    return pd.Series(calls.astype(float), index=ints(crit["step"]).tolist(), dtype=float)


def last_gradient_ns(coll: pd.DataFrame | None, crit: pd.DataFrame) -> pd.Series:
    """Per step: the duration of the critical rank's last-ending gradient collective (AllReduce or
    ReduceScatter) of the step; steps without one are left out."""
    if coll is None or coll.empty or crit.empty:
        return pd.Series(dtype=float)
    grad = coll.loc[
        coll["collective"].astype("object").isin(["AllReduce", "ReduceScatter"]).to_numpy()
        & coll["step"].notna().to_numpy()
    ]
    if grad.empty:
        return pd.Series(dtype=float)
    g = pd.DataFrame(
        {
            "rank": ints(grad["rank"]),
            "step": ints(grad["step"]),
            "end": ints(grad["end_ns"]),
            "d": (ints(grad["end_ns"]) - ints(grad["start_ns"])).astype(float),
        }
    )
    last = g.sort_values(["rank", "step", "end"], kind="stable").drop_duplicates(
        ["rank", "step"], keep="last"
    )
    last = last.set_index(["rank", "step"])["d"]
    want = pd.MultiIndex.from_arrays([ints(crit["critical_rank"]), ints(crit["step"])])
    return pd.Series(last.reindex(want).to_numpy(), index=ints(crit["step"])).dropna()


def attach(
    res,
    rank_paths: pd.DataFrame | None,
    waits: pd.DataFrame | None,
    contention_ns: float,
    gemm_ratio: float = float("nan"),
    after_backward: pd.DataFrame | None = None,
    step_kernels: pd.DataFrame | None = None,
    run: dict | None = None,
    min_lead_ns: float = 0,
) -> None:
    """Fill ``res`` (an Analysis) in place: straggler columns of ``steps``, ``last_arrival_pct`` of
    ``rank_overlap``, ``critical_path``, ``verdict`` and ``per_rank``. ``gemm_ratio``, ``after_backward``: see
    ``verdict.advice`` (``gemm_ratio`` also moves the GEMM time slowed beside waiting NCCL kernels from the
    rank paths' compute to their wait: ``critical_path.with_contention_wait``); ``step_kernels``:
    ``kernel_diff.step_kernel_sums`` of every rank (the straggler's extra work); ``run``: the harness's run
    JSON, None for a job of one's own (the profiler's overhead, and whether the harness's options may be named);
    ``min_lead_ns``: the clock residual (``clocks.refuse_leads``)."""
    arr = st.arrivals(res.collectives)
    ro = res.rank_overlap
    res.rank_overlap = ro.assign(
        last_arrival_pct=st.last_arrival_pct(arr, ints(ro["rank"])) if len(ro) else []
    )
    step_ids = np.unique(ints(res.steps["step"])) if len(res.steps) else np.zeros(0, np.int64)
    rp = (
        cp.with_contention_wait(rank_paths, gemm_ratio)  # the peers' GEMMs slowed while they wait: waiting
        if rank_paths is not None
        else pd.DataFrame(columns=cp.PATH_COLUMNS)
    )
    kernel_table = kd.table(step_kernels)  # built once: the straggler's extra work and every rank's
    per_step = clocks.refuse_leads(
        st.stragglers(st.step_leads(arr), rp, waits, step_ids, step_kernels, kernel_table), min_lead_ns
    )
    if len(res.steps):
        got = per_step.reindex(ints(res.steps["step"]))
        res.steps = res.steps.assign(**{c: got[c].to_numpy() for c in st.STEP_COLUMNS})
    else:
        res.steps = res.steps.assign(**{c: [] for c in st.STEP_COLUMNS})
    crit = cp.critical_path(rp) if len(rp) else schema.empty_frame(schema.CRITICAL_PATH_COLUMNS)
    res.critical_path = crit
    harness = isinstance(run, dict) and bool(run.get("strategy") or (run.get("config") or {}).get("strategy"))
    rules = (
        vd.advice(
            crit,
            res.steps,
            per_step,
            _sync_per_step(crit, rp, waits),
            contention_ns,
            res.recommendation,
            gemm_ratio,
            after_backward,
            overhead_pct=gains.overhead_pct(run),
            harness=harness,
            last_grad_ns=last_gradient_ns(res.collectives, crit),
            extra_work=kd.every_rank(step_kernels, pivot=kernel_table),
            drains_per_step=_drains_per_step(crit, rp, waits),
        )
        if len(crit)
        else []
    )
    res.verdict = vd.verdict(crit, per_step, rules)
    res.per_rank = vd.per_rank(res.steps, rp, res.rank_overlap)
    if rank_paths is None and len(res.steps):
        res.notes.append("no critical path: the kernels' launch times were not available to this analysis")
