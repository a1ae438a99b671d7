"""Is a step launch-bound? GPU idle, CUDA API time and host time per kernel launch, per (rank, step).

A step is *launch-bound* (host-bound) when the host needs longer to issue its kernels than the GPU needs to
run them: the GPU then waits for the next launch in many short gaps spread over the whole step, and making
the GPU faster (bf16, a better kernel) does not make the step faster. The cure is on the host: fewer,
larger kernels (bigger batch, fusion, ``torch.compile``, CUDA graphs).

Steps are the NVTX step ranges ``analyze`` uses (``windows.find_steps``, else inferred from the kernel
sequence: ``infer.steps_from_trace``, with the same step labels on every rank, selected by label as in
``analyze``), given by the caller (``analysis.pipeline``). Everything is measured over the step's *host* range H = [start_ns, end_ns] (the time the
process spent in the step on the CPU), not ``analyze``'s GPU window: whether the GPU waited while the host
was busy with the step is the question. A CUDA API call or kernel belongs to the step when the call (for a
kernel: the call that launched it, ``launch_ns``) started inside H on the same process, any thread.
A = the rank's kernels, memcpys and memsets, merged across streams::

    step_ns            = |H|
    gpu_busy_ns        = |A ∩ H|
    gpu_idle_ns        = step_ns − gpu_busy_ns
    idle_pct           = 100 · gpu_idle_ns / step_ns
    kernels            = number of kernels (not memcpy/memset) launched in H
    launches           = number of kernel launch calls in H (calls of kind "launch")
    api_ns             = Σ duration of every CUDA API call in H (any thread, each call in full)
    sync_ns            = |∪ synchronize calls (kind "sync") ∩ H|: time the host sat waiting for the GPU
    host_us_per_launch = (step_ns − sync_ns) / launches / 1000: host time to issue one launch
    gpu_us_per_kernel  = mean duration of the step's kernels / 1000
    launch_bound       = idle_pct > IDLE_THRESHOLD_PCT  and  host_us_per_launch > gpu_us_per_kernel

    host:  |launch launch launch ... launch|== cudaDeviceSynchronize ==|   (H)
    GPU:     [k1]  [k2]   [k3] ...   [kn]                                  idle = the gaps
             launch-bound: gaps between kernels, little sync wait at the end
             GPU-bound:    kernels back to back, the host waits in the sync

Why sync time is taken out of the host time: a host blocked in a synchronize call is waiting for the GPU,
not issuing work; left in, host time per launch would exceed GPU time per kernel in every step with any
idle time, and the second condition would say nothing. The comparison assumes one kernel per launch, as in
eager PyTorch; with CUDA graphs (``cudaGraphLaunch``, counted as one launch) compare ``kernels`` with
``launches``. NaN where the step has no launches or kernels (then ``launch_bound`` is False).

Which call is a launch or a synchronize is the nsys layer's knowledge: each API row arrives with its
``kind`` (``schema.API_CALL_COLUMNS``); this module reads kinds, never call names.

Summaries over the selected steps: per (rank, API function) calls and time (``api_functions``) and per
(rank, kernel group) kernels and GPU time (``kernel_groups``; groups from the kernel's short name, first
match of KERNEL_GROUPS wins, NCCL kernels by kind).
"""  # noqa: E501

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ddp_profile import intervals as iv
from ddp_profile import schema
from ddp_profile.analysis.kernel_arrays import KernelArrays, ints, pct
from ddp_profile.analysis.kernel_groups import GROUPS, kernel_group_codes, of_kind
from ddp_profile.memory import python_strings

IDLE_THRESHOLD_PCT = 25.0
"""Above this share of the step with the GPU idle, host-side waiting matters (the GPU waits a quarter of the
time; the findings' host/launch-bound line is the same). Below it, shaving host time buys little."""


@dataclass
class LaunchAnalysis:
    """Per-step launch diagnosis of one trace; frames follow their ``schema`` contracts."""

    steps: pd.DataFrame
    """LAUNCH_STEP_COLUMNS, one row per (rank, step)."""
    api_functions: pd.DataFrame
    """API_FUNCTION_COLUMNS, rows by rank then total time (largest first)."""
    kernel_groups: pd.DataFrame
    """KERNEL_GROUP_COLUMNS, rows by rank then kernels (most first)."""
    notes: list[str] = field(default_factory=list)
    made: bool = True
    """False when the diagnosis could not be made (no CUDA API table, a trace held on Dask workers): the
    frames are then empty and ``notes`` says why."""

    @classmethod
    def missing(cls, why: str) -> LaunchAnalysis:
        """No diagnosis, with the reason as its one note."""
        return cls(
            schema.empty_frame(schema.LAUNCH_STEP_COLUMNS),
            schema.empty_frame(schema.API_FUNCTION_COLUMNS),
            schema.empty_frame(schema.KERNEL_GROUP_COLUMNS),
            [why],
            made=False,
        )

    def summary(self) -> dict:
        """Medians over (rank, step) rows of the step table, the steps counted and launch-bound."""
        s = self.steps
        out = {"n_steps": len(s), "launch_bound_steps": int(s["launch_bound"].sum()) if len(s) else 0}
        for col in schema.LAUNCH_STEP_COLUMNS[4:-1]:
            out[col] = float(s[col].median()) if len(s) else None
        return out

    def verdicts(self) -> list[str]:
        """One sentence per rank: in how many steps it is launch-bound, with the medians behind the call."""
        lines = []
        for rank, g in self.steps.groupby("rank", sort=True):
            n, bound = len(g), int(g["launch_bound"].sum())
            idle, host, gpu = (g[c].median() for c in ("idle_pct", "host_us_per_launch", "gpu_us_per_kernel"))
            what = "launch-bound" if 2 * bound > n else "not launch-bound"
            lines.append(
                f"rank {rank}: {what} ({bound} of {n} steps launch-bound; median GPU idle {idle:.1f} % "
                f"{'>' if idle > IDLE_THRESHOLD_PCT else '<='} {IDLE_THRESHOLD_PCT:g} %, host "
                f"{host:.1f} µs per launch {'>' if host > gpu else '<='} GPU {gpu:.1f} µs per kernel)"
            )
        return lines


STEP_TABLE = (  # (column, header, scale): the one launch step table; `ddp-profile launches`
    # prints it (times in ms), the run page shows a subset of its columns
    ("rank", "rank", None),
    ("step", "step", None),
    ("step_ns", "step_ms", 1e6),
    ("gpu_busy_ns", "busy_ms", 1e6),
    ("gpu_idle_ns", "idle_ms", 1e6),
    ("idle_pct", "idle_%", 1),
    ("kernels", "kernels", None),
    ("launches", "launches", None),
    ("api_ns", "api_ms", 1e6),
    ("sync_ns", "sync_ms", 1e6),
    ("host_us_per_launch", "host_us/launch", 1),
    ("gpu_us_per_kernel", "gpu_us/kernel", 1),
    ("launch_bound", "launch_bound", None),
)


def _in_ranges(t_sorted: np.ndarray, hs: np.ndarray, he: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[lo, hi) slices of the sorted times falling in each [hs, he] (both ends included, as windows.project)."""
    return np.searchsorted(t_sorted, hs, side="left"), np.searchsorted(t_sorted, he, side="right")


def _slice_sums(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    csum = np.concatenate([[0], np.cumsum(values, dtype=np.int64)])
    return csum[hi] - csum[lo]


def _step_of(t: np.ndarray, hs: np.ndarray, he: np.ndarray) -> np.ndarray:
    """Index of the step range containing each time (ranges sorted, not overlapping), -1 outside all."""
    j = np.searchsorted(hs, t, side="right") - 1
    ok = j >= 0
    ok[ok] = t[ok] <= he[j[ok]]
    return np.where(ok, j, -1)


def host_steps(ranges: pd.DataFrame) -> pd.DataFrame:
    """The step host ranges (windows.RANGE_COLUMNS) of ranked processes, sorted by (rank, start)."""
    ranges = ranges.loc[ranges["rank"].notna()] if len(ranges) else ranges
    return ranges.sort_values(["rank", "host_start_ns"], kind="stable").reset_index(drop=True)


@python_strings()
def analyze_launches(karr: KernelArrays, api: pd.DataFrame, ranges: pd.DataFrame, notes=()) -> LaunchAnalysis:
    """Per-step launch diagnosis of the kernels ``karr``. ``api``: ``ddp_profile.nsys.api.load_api_calls(trace)``
    (the reader's job: analysis opens no file). ``ranges``: the selected host step ranges with their common
    labels, as the analysis' first stage finds them (``analysis.pipeline``); ``notes``: how they were found."""
    ranges, notes = host_steps(ranges), list(notes)
    kdur = karr.end - karr.start
    is_kernel = karr.is_compute | karr.is_nccl
    launch_rx, sync_rx = of_kind(api, "launch"), of_kind(api, "sync")
    api_rank, a_start, a_end = ints(api["rank"], -1), ints(api["start_ns"]), ints(api["end_ns"])
    group = _kernel_group(karr)
    step_parts, fn_parts, group_parts = [], [], []
    for rank, sg in ranges.groupby("rank", sort=True):
        rank = int(rank)
        pid = ints(sg["pid"])
        hs, he = ints(sg["host_start_ns"]), ints(sg["host_end_ns"])
        n = len(sg)
        # GPU busy: the rank's union of all GPU activity, clipped to each host range.
        busy = iv.covered_by_normalized(hs, he, *karr.rank_sets(rank)["all"])
        # Kernels launched in each range (same process), as sorted slices of launch times.
        kk = np.flatnonzero((karr.rank == rank) & is_kernel & (karr.launch >= 0) & np.isin(karr.pid, pid))
        kk = kk[np.argsort(karr.launch[kk], kind="stable")]
        klo, khi = _in_ranges(karr.launch[kk], hs, he)
        kernels, ktime = khi - klo, _slice_sums(kdur[kk], klo, khi)
        # API calls of the rank started in each range.
        aa = np.flatnonzero(api_rank == rank)
        aa = aa[np.argsort(a_start[aa], kind="stable")]
        alo, ahi = _in_ranges(a_start[aa], hs, he)
        launches = _slice_sums(launch_rx[aa].astype(np.int64), alo, ahi)
        api_ns = _slice_sums(a_end[aa] - a_start[aa], alo, ahi)
        sync = aa[sync_rx[aa]]
        sync_ns = iv.covered_by_normalized(hs, he, *iv.normalize(a_start[sync], a_end[sync]))
        step_ns = iv.window_length(hs, he)
        host_us = np.where(launches > 0, (step_ns - sync_ns) / np.maximum(launches, 1) / 1e3, np.nan)
        gpu_us = np.where(kernels > 0, ktime / np.maximum(kernels, 1) / 1e3, np.nan)
        idle = step_ns - busy
        idle_pct = pct(idle, step_ns)
        step_parts.append(
            pd.DataFrame(
                {
                    "rank": rank,
                    "step": sg["step"].to_numpy(),
                    "start_ns": hs,
                    "end_ns": he,
                    "step_ns": step_ns,
                    "gpu_busy_ns": busy,
                    "gpu_idle_ns": idle,
                    "idle_pct": idle_pct,
                    "kernels": kernels,
                    "launches": launches,
                    "api_ns": api_ns,
                    "sync_ns": sync_ns,
                    "host_us_per_launch": host_us,
                    "gpu_us_per_kernel": gpu_us,
                    "launch_bound": (idle_pct > IDLE_THRESHOLD_PCT) & (host_us > gpu_us),
                }
            )
        )
        # Summaries over the selected steps: per API function and per kernel group.
        inside = aa[_step_of(a_start[aa], hs, he) >= 0]
        fn = pd.DataFrame({"name": api["name"].to_numpy()[inside], "dur": a_end[inside] - a_start[inside]})
        fn = fn.groupby("name", observed=True)["dur"].agg(calls="size", total_ns="sum").reset_index()
        fn_parts.append(fn.assign(rank=rank, n=n))
        in_k = kk[
            np.concatenate([np.arange(a, b) for a, b in zip(klo, khi, strict=True)] or [np.zeros(0, int)])
        ]
        kg = pd.DataFrame({"group": group[in_k], "dur": kdur[in_k]})
        kg = kg.groupby("group")["dur"].agg(kernels="size", total_ns="sum").reset_index()
        group_parts.append(kg.assign(rank=rank, n=n))
    if not step_parts:
        return LaunchAnalysis(
            schema.empty_frame(schema.LAUNCH_STEP_COLUMNS),
            schema.empty_frame(schema.API_FUNCTION_COLUMNS),
            schema.empty_frame(schema.KERNEL_GROUP_COLUMNS),
            notes,
        )
    if len(api) == 0:
        notes.append("no CUDA API calls in the trace: launches, api_ns and sync_ns are 0")
    return LaunchAnalysis(
        steps=schema.select(
            pd.concat(step_parts, ignore_index=True).sort_values(["rank", "step"], kind="stable"),
            schema.LAUNCH_STEP_COLUMNS,
        ),
        api_functions=_per_step(fn_parts, "calls", schema.API_FUNCTION_COLUMNS),
        kernel_groups=_per_step(group_parts, "kernels", schema.KERNEL_GROUP_COLUMNS),
        notes=notes,
    )


def _per_step(parts: list[pd.DataFrame], count: str, columns: list[str]) -> pd.DataFrame:
    """Totals over a rank's selected steps -> means per call and per step, rows by rank then time or count."""
    df = pd.concat(parts, ignore_index=True)
    df["mean_ns"] = df["total_ns"] / df[count]
    df[f"{count}_per_step"] = df[count] / df["n"]
    if count == "calls":
        df["ns_per_step"] = df["total_ns"] / df["n"]
        df = df.sort_values(["rank", "total_ns"], ascending=[True, False], kind="stable")
    else:
        df["gpu_ns_per_step"] = df["total_ns"] / df["n"]
        df = df.sort_values(["rank", "kernels"], ascending=[True, False], kind="stable")
    return schema.select(df, columns)


def _kernel_group(karr: KernelArrays) -> np.ndarray:
    """Group label per row (:func:`kernel_group_codes` as GROUPS labels)."""
    return np.asarray(GROUPS, dtype=object)[kernel_group_codes(karr)]


__all__ = ["IDLE_THRESHOLD_PCT", "LaunchAnalysis", "analyze_launches", "host_steps"]
