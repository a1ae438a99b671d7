"""Per (rank, step) metrics over the step's GPU window W = [start_ns, end_ns) (see ``windows``).

Kernel sets are per rank, merged across streams (a union: two kernels running at once count once).
C = compute kernels, N = NCCL kernels, M = memcpy/memset, A = all GPU work, each clipped to W::

    step_ns          = |W|
    compute_ns       = |C ∩ W|
    comm_ns          = |N ∩ W|
    overlap_ns       = |C ∩ N ∩ W|          (communication hidden behind compute)
    exposed_comm_ns  = comm_ns − overlap_ns (communication nothing else was hiding)
    copy_ns          = |M ∩ W|
    idle_ns          = step_ns − |A ∩ W|
    forward_ns, backward_ns, optimizer_ns = length of the phase's GPU window (NaN when the phase has no range)
    backward_end_ns  = latest GPU end of compute kernels launched inside the step's backward range(s)
    comm_tail_ns     = max(0, last_grad_comm_end − backward_end_ns), where last_grad_comm_end is the latest
                       GPU end of NCCL kernels launched between the start of backward and the end of the
                       step (the gradient collectives); 0 when none remains after backward; NaN without a
                       backward range
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
from ddp_profile.analysis._common import COMPUTE, NCCL, KernelArrays, covered_by_normalized, pct


def _phase_len(phases: pd.DataFrame, name: str) -> pd.DataFrame:
    p = phases.loc[phases["phase"] == name, ["rank", "step", "start_ns", "end_ns"]]
    return pd.DataFrame({"rank": p["rank"].to_numpy(), "step": p["step"].to_numpy(),
                         f"{name}_ns": (p["end_ns"] - p["start_ns"]).to_numpy(dtype=float)})


def _latest_end(ranges: pd.DataFrame, karr: KernelArrays, mask: np.ndarray) -> np.ndarray:
    """Latest GPU end of kernels selected by ``mask`` launched inside each host range (NaN if none)."""
    from ddp_profile.analysis.windows import project

    _, ge, anyk = project(ranges, karr.start, karr.end, karr.launch, karr.pid, mask)
    return np.where(anyk, ge.astype(float), np.nan)


def step_metrics(phases: pd.DataFrame, karr: KernelArrays) -> pd.DataFrame:
    """STEP_METRIC_COLUMNS from the GPU-projected windows (``phases`` = windows.phase_windows output)."""
    steps = phases.loc[phases["phase"] == "step"].reset_index(drop=True)
    if steps.empty:
        return schema.empty_frame(schema.STEP_METRIC_COLUMNS)
    parts = []
    for rank, sg in steps.groupby("rank", sort=True):
        sets = karr.rank_sets(rank)
        ws, we = sg["start_ns"].to_numpy(np.int64), sg["end_ns"].to_numpy(np.int64)
        cov = {k: covered_by_normalized(ws, we, *sets[k]) for k in (COMPUTE, NCCL, "copy", "all", "overlap")}
        step_ns = iv.window_length(ws, we)
        parts.append(pd.DataFrame({
            "rank": rank, "step": sg["step"].to_numpy(), "start_ns": ws, "end_ns": we, "step_ns": step_ns,
            "compute_ns": cov[COMPUTE], "comm_ns": cov[NCCL], "overlap_ns": cov["overlap"],
            "exposed_comm_ns": cov[NCCL] - cov["overlap"], "copy_ns": cov["copy"],
            "idle_ns": step_ns - cov["all"],
        }))
    out = pd.concat(parts, ignore_index=True)
    for name in ("forward", "backward", "optimizer"):
        out = out.merge(_phase_len(phases, name), on=["rank", "step"], how="left")
    out = out.merge(_tail(phases, karr), on=["rank", "step"], how="left")
    out["comm_pct"] = pct(out["comm_ns"], out["step_ns"])
    out["exposed_comm_pct"] = pct(out["exposed_comm_ns"], out["step_ns"])
    return schema.select(out.sort_values(["rank", "step"], kind="stable"), schema.STEP_METRIC_COLUMNS)


def _tail(phases: pd.DataFrame, karr: KernelArrays) -> pd.DataFrame:
    """backward_end_ns and comm_tail_ns per (rank, step) having a backward phase."""
    bwd = phases.loc[phases["phase"] == "backward"].reset_index(drop=True)
    if bwd.empty:
        return pd.DataFrame({"rank": pd.Series(dtype="int64"), "step": pd.Series(dtype="int64"),
                             "backward_end_ns": pd.Series(dtype=float), "comm_tail_ns": pd.Series(dtype=float)})
    step_end = phases.loc[phases["phase"] == "step"].set_index(["rank", "step"])["host_end_ns"]
    bwd_end = _latest_end(bwd, karr, karr.is_compute)
    grad = pd.DataFrame({
        "pid": bwd["pid"].to_numpy(), "host_start_ns": bwd["host_start_ns"].to_numpy(),
        "host_end_ns": step_end.reindex(pd.MultiIndex.from_frame(bwd[["rank", "step"]])).to_numpy(),
    })
    comm_end = _latest_end(grad, karr, karr.is_nccl)
    tail = np.where(np.isnan(comm_end), 0.0, np.maximum(comm_end - bwd_end, 0.0))
    tail = np.where(np.isnan(bwd_end), np.nan, tail)
    return pd.DataFrame({"rank": bwd["rank"].to_numpy(), "step": bwd["step"].to_numpy(),
                         "backward_end_ns": bwd_end, "comm_tail_ns": tail})
