"""One dict of metric definitions, with the header label (unit included) of every column a page shows.

Numbers are formatted by :mod:`ddp_profile.fmt` (the one formatter of the CLI, pages and findings; its
functions are re-exported here for the report's modules). Tables show the number in the header's unit;
prose uses :func:`fmt_ms`, :func:`fmt_mib`, :func:`fmt_pct`. Definitions (:data:`METRICS`) follow docs/metrics.md and
are shown as hover titles on table headers and as the glossary block at the end of each page.
"""

from __future__ import annotations

from ddp_profile.fmt import (  # noqa: F401  (the report's modules import the formatters from here too)
    GIB_COLUMNS,
    cell_text,
    display_value,
    fmt_cap,
    fmt_gib,
    fmt_mib,
    fmt_ms,
    fmt_pct,
    missing,
    no_negative_zero,
    unit_label,
)

# column -> (header label with unit, definition). Keys are the analysis' column names.
METRICS: dict[str, tuple[str, str]] = {
    "step_ns": (
        "step time (ms)",
        "GPU window of the step: first GPU start to last GPU end of the kernels "
        "launched inside the step's NVTX range (median over ranks and steps in comparisons); the step "
        "span adds the GPU idle before it.",
    ),
    "span_ns": (
        "step span (ms)",
        "The iteration as the training loop times it: end of the rank's previous "
        "step to the end of this one (the step window plus the GPU idle before it, while the host "
        "syncs, fetches the batch or prepares the forward); the critical path divides it.",
    ),
    "compute_ns": ("compute (ms)", "Time some compute kernel runs in the step window (union over streams)."),
    "comm_ns": ("comm (ms)", "Time some NCCL kernel runs in the step window (union over streams)."),
    "overlap_ns": (
        "hidden comm (ms)",
        "Communication hidden under compute: time compute and NCCL kernels run together in the step window.",
    ),
    "exposed_comm_ns": ("exposed comm (ms)", "Communication not hidden by compute: comm_ns − overlap_ns."),
    "exposed_wait_ns": (
        "exposed wait (ms)",
        "Part of the exposed communication spent waiting for the slowest peer to reach the collective.",
    ),
    "exposed_transfer_ns": ("exposed transfer (ms)", "Part of the exposed communication spent moving data."),
    "copy_ns": ("copy (ms)", "Time some memcpy/memset runs in the step window."),
    "idle_ns": ("GPU idle in step (ms)", "Step window minus the time any kernel, copy or memset runs."),
    "forward_ns": ("forward (ms)", "GPU window of the forward phase."),
    "backward_ns": ("backward (ms)", "GPU window of the backward phase."),
    "optimizer_ns": ("optimizer (ms)", "GPU window of the optimizer phase."),
    "backward_end_ns": (
        "backward end",
        "Last GPU end of the compute kernels launched in backward before the "
        "step's last gradient collective.",
    ),
    "comm_tail_ns": (
        "comm tail (ms)",
        "Communication still running after the last backward kernel: "
        "last end of the step's NCCL kernels − backward end (0 if none).",
    ),
    "job_comm_tail_ns": (
        "job comm tail (ms)",
        "Comm tail measured against the latest backward end of all ranks (the tail the whole job waits for).",
    ),
    "param_sync_ns": ("param sync (ms)", "Time spent copying averaged gradients back / syncing parameters."),
    "comm_pct": ("comm (%)", "100 · comm_ns / step_ns."),
    "exposed_comm_pct": (
        "exposed comm (%)",
        "100 · exposed_comm_ns / step_ns: share of the step the GPU "
        "spends on communication with no compute beside it.",
    ),
    "overlap_pct": (
        "comm hidden (%)",
        "100 · hidden comm / comm, all ranks and steps pooled "
        "(per kernel name: share of its time another class of kernel ran beside it).",
    ),
    "wait_pct_of_comm": ("wait (% of comm)", "Share of the NCCL kernel time spent waiting for a peer."),
    "duration_ns": ("duration (ms)", "NCCL kernel duration."),
    "duration_us": ("duration (µs)", "NCCL kernel duration (median)."),
    "wait_ns": ("wait (ms)", "min(duration, latest peer start − own start): waiting for the slowest peer."),
    "wait_us": (
        "wait (µs)",
        "min(duration, latest peer start − own start): waiting for the slowest peer (median).",
    ),
    "transfer_ns": ("transfer (ms)", "duration − wait: time spent moving data."),
    "transfer_us": ("transfer (µs)", "duration − wait: time spent moving data (median)."),
    "busbw_gb_per_s": ("bus bandwidth (GB/s)", "bytes · 2(n−1)/n / transfer time (NCCL's bus bandwidth)."),
    "bytes": ("message (MiB)", "Bytes all-reduced by the collective (from the harness's NVTX payload)."),
    "min_bytes": ("smallest message (MiB)", "Smallest message in this size regime of the fit."),
    "max_bytes": ("largest message (MiB)", "Largest message in this size regime of the fit."),
    "s_mib": ("gradient bytes s (MiB)", "Gradient bytes all-reduced per step."),
    "b_star_mib": ("b* (MiB)", "Bucket size minimising n_b·o + s/(n_b·w): b* = √(s·w·o)."),
    "o_us": ("latency o (µs)", "Fitted per-collective latency in t = o + bytes / w."),
    "w_gb_per_s": ("bandwidth w (GB/s)", "Fitted bandwidth in t = o + bytes / w."),
    "r2": ("R²", "Coefficient of determination of the fit."),
    "n_points": ("kernels fitted", "Collectives the fit used."),
    "median_rel_err_pct": ("median error (%)", "Median of |predicted − measured| / measured."),
    "p90_rel_err_pct": ("90th pct error (%)", "90th percentile of |predicted − measured| / measured."),
    "gpu_busy_ns": (
        "GPU busy in host range (ms)",
        "Time any GPU work runs inside the step's host NVTX range "
        "(the launch check's population: host range, not the GPU window).",
    ),
    "gpu_idle_ns": ("GPU idle in host range (ms)", "Host NVTX range of the step − GPU busy."),
    "host_range_ns": (
        "host range (ms)",
        "Length of the step's host NVTX range (the launch check's step; the "
        "step time elsewhere is the GPU window).",
    ),
    "idle_pct": ("GPU idle in host range (%)", "100 · GPU idle / host range."),
    "launches": ("launches", "Kernel-launch API calls started in the step's host range."),
    "host_us_per_launch": ("host µs / launch", "(host range − synchronize time) / launches."),
    "gpu_us_per_kernel": ("GPU µs / kernel", "Mean kernel time."),
    "launch_bound": ("launch-bound", "GPU idle > 25 % of the host range and host µs/launch > GPU µs/kernel."),
    "slowdown_pct": (
        "slowdown (%)",
        "100 · time lost / alone baseline, per compute kernel name: each instance "
        "under NCCL against the same kernel alone (same name and position in the step).",
    ),
    "baseline_ns": (
        "alone baseline (ms)",
        "Σ over the counted instances under NCCL of the same kernel's median "
        "time alone (same name and position in the step, other steps and ranks).",
    ),
    "lost_ns": (
        "time lost (ms)",
        "Σ over the counted instances under NCCL of duration − alone baseline; only "
        "kernels seen both alone and under NCCL count.",
    ),
    "overlapped_ns": (
        "all time under NCCL (ms)",
        "Σ duration of all the name's instances with ≥ 50 % of it "
        "under NCCL, in steps (also those never seen alone, which the counted columns leave out).",
    ),
    "beside_other_ns": (
        "beside the other class (ms)",
        "Time the kernel name ran while a kernel of the other "
        "class ran beside it (NCCL for a compute kernel, compute for an NCCL kernel), summed over "
        "its instances, ranks and steps.",
    ),
    "beside_other_pct": (
        "beside the other class (%)",
        "100 · time beside the other class / total time of the kernel name.",
    ),
    "n_alone": (
        "counted alone",
        "Instances run with no NCCL kernel beside them, of the kernels seen both alone "
        "and under NCCL (same name and position in the step): the like-for-like sample.",
    ),
    "n_overlapped": (
        "counted under NCCL",
        "Instances with ≥ 50 % of their duration under NCCL, of the kernels "
        "seen both alone and under NCCL: the sample the slowdown and time lost come from.",
    ),
    "alone_median_ns": ("alone (ms)", "Median duration with no NCCL kernel beside it (counted kernels)."),
    "overlapped_median_ns": (
        "under NCCL (ms)",
        "Median duration with ≥ 50 % of it under NCCL (counted kernels).",
    ),
    "speedup_vs_1gpu": (
        "speedup",
        "n · t₁ / tₙ with t₁ the step time of the run's 1-GPU baseline (fixed per-GPU batch).",
    ),
    "bound_by": (
        "bound by",
        "What limits the step: the analysis' verdict, the largest removable part of the "
        "critical path (exposed communication, a straggler rank, the host) with the ms per step it "
        "would save, else compute; the run page says what to change.",
    ),
    "efficiency_pct": (
        "efficiency vs 1 GPU (%)",
        "100 · t₁ / tₙ: step time of the run's 1-GPU baseline / "
        "step time of the run (100 % = perfect weak scaling).",
    ),
    "serial_fraction": ("serial fraction", "Amdahl serial fraction (Karp–Flatt): (1/S − 1/n) / (1 − 1/n)."),
    "samples_per_s": (
        "samples / s",
        "world_size · per-GPU batch / step time (the time the run set is ranked "
        "by: un-profiled when the whole set has it, see ranked by).",
    ),
    "bucket_mb": ("bucket cap (MiB)", "Gradient bucket cap (binary MiB) of bucketed and torch_ddp runs."),
    "world_size": ("GPUs", "Number of ranks."),
    "n_steps": ("steps", "Profiled steps."),
    "baseline": ("1-GPU baseline", "The run efficiency and speedup are measured against."),
    "unprofiled_step_ns": (
        "un-profiled step (ms)",
        "Median step time of the same configuration run again "
        "without nsys, timed with CUDA events over every repeat (run JSON "
        "unprofiled_step_ms_median, written by python -m ddp_profile.harness.timings).",
    ),
    "unprofiled_repeats": ("un-profiled repeats", "How many runs without nsys the un-profiled median pools."),
    "profiler_overhead_pct": (
        "profiler overhead (%)",
        "100 · (CUDA-event median under nsys / un-profiled "
        "median − 1): how much nsys slowed this configuration.",
    ),
    "rank_basis": (
        "ranked by",
        "The step time this run's set is ranked by: un-profiled when every run of "
        "the set (same folder, model, dtype and GPU) has an un-profiled median, else trace.",
    ),
    "rank_step_ns": (
        "ranked step (ms)",
        "The step time the ranking uses (un-profiled or trace, see ranked by); "
        "efficiency and speedup use it too.",
    ),
    "peak_allocated_bytes": (
        "peak allocated (GiB)",
        "torch.cuda.max_memory_allocated after set-up, largest over ranks (run JSON).",
    ),
    "peak_reserved_bytes": (
        "peak reserved (GiB)",
        "torch.cuda.max_memory_reserved (allocator cache included), largest over ranks (run JSON).",
    ),
    "optimizer_state_bytes": (
        "optimizer state (GiB/GPU)",
        "Bytes of the optimizer-state tensors one rank "
        "holds, largest over ranks (run JSON); sharding divides it.",
    ),
    "memory_bytes": ("GPU memory (GiB)", "The GPU's total memory, as the trace's host reported it."),
    "kernels_per_step": ("kernels / step", "NCCL kernels of the kind per rank and step (median)."),
    "after_backward_ns": (
        "after backward (ms)",
        "NCCL time of the kind after the step's last backward kernel.",
    ),
    "straggler_steps": (
        "straggler in steps",
        "Steps in which this rank reached the step's gradient "
        "collectives last (the analysis's straggler_rank).",
    ),
    "critical_rank": ("critical rank", "The rank whose work ends the step (docs/metrics.md: critical path)."),
    "host_ns": (
        "host (ms)",
        "Critical path: GPU idle gaps of the critical rank that end with work launched "
        "after the gap began (the GPU ran dry before the host issued the next work).",
    ),
    "rest_ns": (
        "other idle (ms)",
        "Critical path: the rest of the step (the analysis's idle_ns there): work "
        "issued but not yet started, stream/event waits, the µs between queued kernels.",
    ),
    "last_arrival_pct": (
        "last at collectives (%)",
        "Share of the rank's collectives (not steps) it reached last of "
        'all ranks; a step counts once in "straggler in steps" however many collectives it holds.',
    ),
}

# docs/metrics.md names these; tests check every one of them is defined there.
README_METRICS = (
    "step_ns",
    "compute_ns",
    "comm_ns",
    "overlap_ns",
    "exposed_comm_ns",
    "copy_ns",
    "idle_ns",
    "comm_tail_ns",
    "comm_pct",
    "exposed_comm_pct",
    "overlap_pct",
    "wait_ns",
    "transfer_ns",
    "busbw_gb_per_s",
    "median_rel_err_pct",
    "p90_rel_err_pct",
    "gpu_busy_ns",
    "gpu_idle_ns",
    "idle_pct",
    "host_us_per_launch",
    "gpu_us_per_kernel",
    "launch_bound",
    "slowdown_pct",
    "lost_ns",
    "efficiency_pct",
)


def header(col: str) -> tuple[str, str]:
    """(label with unit, definition or '') for a column."""
    if col in METRICS:
        return METRICS[col]
    return unit_label(col), ""


def glossary_html(keys, esc) -> str:
    """A <dl> with the definitions of ``keys`` (those in METRICS), in the order given."""
    seen = [k for k in dict.fromkeys(keys) if k in METRICS]
    if not seen:
        return ""
    items = "".join(
        f"<dt>{esc(METRICS[k][0])} <code>{esc(k)}</code></dt><dd>{esc(METRICS[k][1])}</dd>" for k in seen
    )
    return f"<details class='glossary'><summary><h2>Definitions</h2></summary><dl>{items}</dl></details>"
