"""Column contracts of every DataFrame the library returns. Declared once, used by producers (which end by
selecting exactly these columns, in this order) and by consumers (reports, tests). One time unit: ns.
Append new columns at the end; never rename one without updating every consumer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pandas is imported where frames are made, so the CLI can read these names cheaply
    import pandas as pd

# ---- loader (ddp_profile.nsys) -------------------------------------------------------------------------
# kind: "compute" | "nccl" | "memcpy" | "memset".  collective/algorithm/protocol/dtype: parsed from NCCL
# kernel names (None for other kinds); algorithm/protocol are the name's variant (RING_LL), not proof of what
# NCCL ran (its kernels dispatch on the work item at run time).  launch_ns / launch_tid: the CUDA API call that launched the kernel  # noqa: E501
# (runtime or driver API, joined on (pid, correlation_id)); phases are projected onto the GPU by launch_ns.
# bytes: memcpy/memset size, <NA> for kernels.
# dtypes from load_trace (chosen for memory; values are exact, a column is widened to int64 if a value needs
# it): rank, device, stream int16 (int32 if a value needs it); pid, correlation_id int32; start_ns, end_ns
# int64; name, kind, collective, algorithm, protocol, dtype categorical (int8 codes while under 128
# categories); launch_ns Int64; bytes Int32 (Int64 past 2 GiB); launch_tid Int32. Consumers needing int64
# arithmetic widen first (analysis.kernel_arrays.ints).
KERNEL_COLUMNS = [
    "rank",
    "pid",
    "device",
    "stream",
    "start_ns",
    "end_ns",
    "name",
    "kind",
    "collective",
    "algorithm",
    "protocol",
    "dtype",
    "correlation_id",
    "launch_ns",
    "launch_tid",
    "bytes",
]
# payload: the range's integer payload where present (<NA> otherwise). depth: nesting depth within its
# (pid, tid) push/pop stack, 0 = outermost.  end_ns is <NA> for ranges never closed.
NVTX_COLUMNS = ["rank", "pid", "tid", "domain", "name", "start_ns", "end_ns", "depth", "payload", "category"]
GPU_COLUMNS = ["file", "device", "name", "sm_count", "memory_bytes", "bus_location"]
# rank_source: how the rank was determined: "nvtx-marker" | "filename" | "nccl" | "device-order".
RANK_COLUMNS = ["rank", "pid", "device", "gpu_name", "file", "host", "rank_source"]

# ---- analysis (ddp_profile.analysis) -------------------------------------------------------------------
STEP_METRIC_COLUMNS = [
    "rank",
    "step",
    "start_ns",
    "end_ns",
    "step_ns",
    "span_ns",
    "compute_ns",
    "comm_ns",
    "overlap_ns",
    "exposed_comm_ns",
    "copy_ns",
    "idle_ns",
    "forward_ns",
    "backward_ns",
    "optimizer_ns",
    "backward_end_ns",
    "comm_tail_ns",
    "comm_pct",
    "exposed_comm_pct",
    # appended (definitions in analysis/comm_kinds.py and analysis/steps.py): exposed comm split
    # into waiting for the slowest peer and transfer; parameter AllGather/Broadcast after backward (not in
    # comm_tail_ns, which counts gradient collectives only); exposed AllGather before backward ends; the
    # job-level tail (last gradient collective on any rank − latest backward end over ranks, same step).
    "exposed_wait_ns",
    "exposed_transfer_ns",
    "param_sync_ns",
    "exposed_param_sync_ns",
    "exposed_allgather_ns",
    "job_comm_tail_ns",
    # appended (analysis/windows.py, analysis/cycles.py): backward ranges (micro-steps) in the
    # step; extra work beside the modal step of the rank (inferred steps; NaN for NVTX steps): kernels
    # beyond the modal sequence, their GPU time, host time beyond the median step's.
    "micro_steps",
    "extra_kernels",
    "extra_gpu_ns",
    "extra_host_ns",
]
# Per (rank, step, collective kind), NCCL time of the kind (analysis/comm_kinds.py). collective: AllReduce |
# AllGather | ReduceScatter | Broadcast | AllToAll | SendRecv | other. forward/backward/optimizer_ns: comm_ns
# inside that phase's GPU window; after_backward_ns: after the step's backward_end_ns.
COMM_KIND_COLUMNS = [
    "rank",
    "step",
    "collective",
    "count",
    "comm_ns",
    "exposed_comm_ns",
    "wait_ns",
    "exposed_wait_ns",
    "forward_ns",
    "backward_ns",
    "optimizer_ns",
    "after_backward_ns",
]
RANK_OVERLAP_COLUMNS = ["rank", "compute_ns", "comm_ns", "overlap_ns", "exposed_comm_ns", "overlap_pct"]
# Per kernel name, nsys nccl_gpu_overlap_trace semantics: for NCCL kernels, the duration-weighted share of
# their time during which a compute kernel ran on the same (pid, device); for compute kernels, vice versa.
KERNEL_OVERLAP_COLUMNS = ["kind", "name", "count", "total_ns", "overlapped_ns", "overlap_pct"]
# One row per NCCL kernel, paired across ranks by analysis/clocks.py (seq: the reference rank's numbering).
# wait_ns / transfer_ns / busbw_gb_per_s are empty where the wait is not called (under the clock residual, a
# collective that cannot have overlapped, or some rank's NCCL kernels unseen; analysis/collectives.py).
COLLECTIVE_COLUMNS = [
    "rank",
    "pid",
    "device",
    "stream",
    "seq",
    "step",
    "collective",
    "algorithm",
    "protocol",
    "dtype",
    "bucket",
    "bytes",
    "start_ns",
    "end_ns",
    "duration_ns",
    "wait_ns",
    "transfer_ns",
    "busbw_gb_per_s",
    # appended: "<algorithm>_<protocol>" as the kernel's *name* spells it (e.g. RING_LL). NCCL's
    # device kernels dispatch on the work item at run time, so the name does not prove the algorithm or
    # protocol that ran; algorithm / protocol keep their names (stable JSON keys) with the same meaning.
    "kernel_variant",
]
# One row per collective type and message-size regime (analysis.costmodel.regimes), rows by size; min_bytes /
# max_bytes: the sizes fitted in the regime.
COST_MODEL_COLUMNS = [
    "collective",
    "n_points",
    "o_us",
    "w_gb_per_s",
    "r2",
    "min_bytes",
    "max_bytes",
    # appended: fit quality, percentiles of |predicted − measured| / measured over the points
    "median_rel_err_pct",
    "p90_rel_err_pct",
]
CONTENTION_COLUMNS = [
    "name",
    "n_alone",
    "n_overlapped",
    "alone_median_ns",
    "overlapped_median_ns",
    "slowdown_pct",
    "baseline_ns",
    "lost_ns",
    "overlapped_ns",
]
# Per step, the time of the rank whose step ends last on the GPU (analysis/critical_path.py: its step span
# J = [end of its previous step, end of this step)), in parts that add up to span_ns exactly (integers):
# compute (GPU busy with anything but NCCL), exposed NCCL transfer, exposed NCCL waiting for a later peer,
# host (GPU idle because the next work was not launched yet) and idle (the rest).
CRITICAL_PATH_COLUMNS = [
    "step",
    "span_ns",
    "critical_rank",
    "compute_ns",
    "exposed_transfer_ns",
    "wait_ns",
    "host_ns",
    "idle_ns",
]
# One row per run in a comparison (strategies, bucket sweep, scaling).
COMPARISON_COLUMNS = [
    "run",
    "strategy",
    "bucket_mb",
    "model",
    "dtype",
    "world_size",
    "gpu_name",
    "n_steps",
    "step_ns",
    "compute_ns",
    "comm_ns",
    "exposed_comm_ns",
    "comm_tail_ns",
    "comm_pct",
    "overlap_pct",
    "speedup_vs_1gpu",
    "efficiency_pct",
    # appended by the analysis: Amdahl serial fraction (Karp-Flatt) and the cost model's
    # predicted overlap overhead n_b*o + s/(n_b*w) for comparison with comm_tail_ns.
    "serial_fraction",
    "predicted_overhead_ns",
]


def empty_frame(columns: list[str]) -> pd.DataFrame:
    """An empty frame with the given columns (so consumers never special-case 'no rows')."""
    import pandas as pd

    return pd.DataFrame({c: pd.Series(dtype="object") for c in columns})


def select(df: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """End every producer with this: exactly the contract's columns, in order (missing ones are a bug)."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise AssertionError(f"frame lacks contracted columns {missing}")
    return df.loc[:, columns].reset_index(drop=True)


# The phases of a training step, each name spelled here once: the ``phase`` column's values besides "step",
# the ``--phase NAME=REGEX`` names, the timeline's bands. GRAD_PHASES: the three with a ``<name>_ns`` column.
PHASES = ("forward", "backward", "grad_wait", "optimizer")
GRAD_PHASES = ("forward", "backward", "optimizer")
# GPU-projected phase windows (timeline bands, per-step breakdown). phase: "step" or one of PHASES. start/end: first/last GPU activity of kernels launched inside the host range  # noqa: E501
# (by launch time within the process), or the host range itself when no kernel was launched in it.
PHASE_COLUMNS = ["rank", "step", "phase", "start_ns", "end_ns", "host_start_ns", "host_end_ns"]
# Beside PHASE_COLUMNS (and pid) in analysis.windows.phase_windows' frame (the per-rank windows, not the
# user's phases): phase_ns = union of the phase's GPU windows in the step (micro-steps summed); step rows:
# the step facts of STEP_METRIC_COLUMNS (NaN on phase rows).
WINDOW_FACT_COLUMNS = ["phase_ns", "micro_steps", "extra_kernels", "extra_gpu_ns", "extra_host_ns"]

# ---- CUDA API calls and launch-bound diagnosis (ddp_profile.nsys.api, ddp_profile.analysis.launches) -------
# One row per CUDA runtime or driver API call (read on request, not by load_trace). name: the function,
# version suffix dropped (cudaLaunchKernel, cuLaunchKernelEx, cudaDeviceSynchronize...). rank: <NA> for a
# process that ran no GPU work. kind: what the call does, one of nsys.api.CALL_KINDS (launch, sync, copy,
# other): the analysis reads kinds, never names. Times on the trace's clock (load_trace's per-file offsets).
API_CALL_COLUMNS = ["rank", "pid", "tid", "name", "kind", "start_ns", "end_ns"]
# The calls during which a process's main thread (tid = pid) may wait for its GPU (Trace.host_waits, read by
# load_trace; nsys.api.load_host_waits reads them again): kind "event" (cudaEventSynchronize: waits for one
# recorded point, the GPU's queue is not emptied), "sync" (cudaStreamSynchronize, cudaDeviceSynchronize...) or
# "copy" (a copy to the host, as tensor.item()'s: it returns when done; copies of other directions are left
# out). name: the function as API_CALL_COLUMNS names it.
HOST_WAIT_COLUMNS = ["rank", "pid", "tid", "name", "kind", "start_ns", "end_ns"]
# Per (rank, step): device-to-device copies and optimizer kernels that start at or after the step's
# backward_end_ns and end by its end_ns (how many, their summed GPU time), and the summed time of the step's
# AllReduce, ReduceScatter, and AllGather + Broadcast kernels (analysis/after_backward.py).
AFTER_BACKWARD_COLUMNS = [
    "rank",
    "step",
    "copies",
    "copy_ns",
    "optimizer_kernels",
    "optimizer_ns",
    "allreduce_kernel_ns",
    "reduce_scatter_kernel_ns",
    "gather_broadcast_kernel_ns",
    "step_kernels",
    "captured_kernels",
]
# Per (rank, step) over the step's host range [start_ns, end_ns]; definitions in analysis/launches.py.
# One row per candidate configuration (analysis.recommend); the first row is the recommendation.
RECOMMEND_COLUMNS = [
    "lever",
    "flags",
    "cap_bytes",
    "predicted_tail_ns",
    "predicted_step_ns",
    "measured_step_ns",
    "predicted_gain_ns",
    "upper_gain_ns",
    "basis",
    # the configuration the flags set, as the harness's config fields
    "strategy",
    "bucket_mb",
    "nccl_channels",
    "nccl_high_priority",
]
LAUNCH_STEP_COLUMNS = [
    "rank",
    "step",
    "start_ns",
    "end_ns",
    "step_ns",
    "gpu_busy_ns",
    "gpu_idle_ns",
    "idle_pct",
    "kernels",
    "launches",
    "api_ns",
    "sync_ns",
    "host_us_per_launch",
    "gpu_us_per_kernel",
    "launch_bound",
]
# Per (rank, API function), calls that started inside the selected steps.
API_FUNCTION_COLUMNS = ["rank", "name", "calls", "total_ns", "mean_ns", "calls_per_step", "ns_per_step"]
# Per (rank, kernel group), kernels launched inside the selected steps (groups: analysis/launches.py).
KERNEL_GROUP_COLUMNS = ["rank", "group", "kernels", "kernels_per_step", "gpu_ns_per_step", "mean_ns"]
# Kernel families of a step's GPU time (analysis/kernel_families.py; families: analysis/launches.py GROUPS), the
# kernels (and memcpys, memsets) starting in the critical path's step span: per (rank, step, family) the count
# and Σ duration; per rank, and per step on its critical rank, sums over the steps / steps.
FAMILY_STEP_COLUMNS = ["rank", "step", "family", "kernels", "gpu_ns"]
FAMILY_COLUMNS = ["rank", "family", "steps", "kernels_per_step", "gpu_ns_per_step", "mean_ns"]
CRITICAL_FAMILY_COLUMNS = ["family", "steps", "kernels_per_step", "gpu_ns_per_step", "mean_ns"]
# Like-for-like contention (CONTENTION_COLUMNS) summed per kernel family (analysis/kernel_families.py).
FAMILY_CONTENTION_COLUMNS = [
    "family",
    "names",
    "n_overlapped",
    "baseline_ns",
    "lost_ns",
    "slowdown_pct",
    "median_ratio",
]


# Section of analysis.Analysis.to_json_dict() -> attribute holding its frame. Keys are stable (documented in docs/metrics.md).  # noqa: E501
JSON_SECTIONS = {
    "steps": "steps",
    "phases": "phases",
    "ranks": "rank_overlap",
    "kernels": "kernel_overlap",
    "collectives": "collectives",
    "cost_model": "cost_model",
    "contention": "contention",
    "comm_kinds": "comm_kinds",
    "recommendation": "recommendation",
    "critical_path": "critical_path",
}
OPTIONAL_SECTIONS = ("comm_kinds", "recommendation")
"""Sections ``analysis.analyze(sections=...)`` computes only when asked for (else on first access of the
attribute); ``analyze --format json`` leaves them out unless named."""
# Columns analysis/answers.py appends after a section's own contract (its producer selects that contract
# first): the steps section is STEP_METRIC_COLUMNS + STEP_STRAGGLER_COLUMNS (per step, the same value on each
# rank's row; analysis/straggler.py), the ranks section RANK_OVERLAP_COLUMNS + RANK_ARRIVAL_COLUMNS.
STEP_STRAGGLER_COLUMNS = ["straggler_rank", "straggler_lead_ns", "straggler_cause", "straggler_evidence"]
RANK_ARRIVAL_COLUMNS = ["last_arrival_pct"]
STEP_SECTION_COLUMNS = STEP_METRIC_COLUMNS + STEP_STRAGGLER_COLUMNS  # Analysis.steps, JSON "steps"
RANK_SECTION_COLUMNS = RANK_OVERLAP_COLUMNS + RANK_ARRIVAL_COLUMNS  # Analysis.rank_overlap, JSON "ranks"
# Top-level JSON keys beside the sections: verdict (dict: bound_by in VERDICT_BOUND_BY or null without steps,
# removable_ns, what_to_change, expected_gain_ns, spread_ns, rank, share_pct, advice = [ADVICE_KEYS dicts],
# span_ns = the median critical-path step span every share divides by),
# per_rank ({metric: {rank: median}}, only metrics whose ranks differ by more than 2x). analysis/verdict.py.
VERDICT_BOUND_BY = ("communication", "host", "straggler", "compute")
VERDICT_KEYS = [
    "bound_by",
    "removable_ns",
    "what_to_change",
    "expected_gain_ns",
    "gain_upper_ns",
    "spread_ns",
    "rank",
    "share_pct",
    "advice",
    "span_ns",
]
ADVICE_KEYS = [
    "rule",
    "what_to_change",
    "expected_gain_ns",
    "gain_upper_ns",
    "spread_ns",
    "gain_basis",
    "evidence",
]
"""An advice rule (analysis/verdict.py; gains: analysis/gains.py). ``ledger`` is added where the what-if
ledger's summary has a record for the rule (analysis/ledger.py)."""
