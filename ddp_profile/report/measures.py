"""Facts of a run JSON that the pages and the findings read the same way: the step time a set of runs is
ranked by, the un-profiled timing beside the trace, and the GPU memory of a run.

The step time to rank by. nsys changes the order of configurations (the profiler's cost differs
from one configuration to the next), so the harness times every campaign configuration again without nsys
(CUDA events; ``python -m ddp_profile.harness.timings`` folds the median into the run JSON as
``unprofiled_step_ms_median``). A set of runs is ranked by that median when **every** run of the set has
one (:func:`ranking_basis` = :data:`UNPROFILED`), and by the trace's step time (the median over ranks and
profiled steps of ``step_ns``) otherwise (:data:`TRACE`): never a mix of the two on one axis. The pages
(``report.compare.comparison``) and the findings (``findings.campaign``) both go through
:func:`ranking_basis` and :func:`rank_ns`, so they cannot name different winners.

Spread. A run JSON written by the interleaved-repeats protocol (``ddp_profile.harness.repeats``,
or ``harness.timings`` folding repeats) carries a bootstrap confidence interval of the un-profiled median,
``unprofiled_ci_low_ms`` / ``unprofiled_ci_high_ms`` (:func:`ci_ns`). Two runs are called faster or slower
than each other only when both intervals are known and do not overlap (:func:`versus`); overlapping intervals
are "within noise", and runs without intervals (the older JSONs) are compared by their medians with the
spread stated as unknown.

Memory: the harness records per rank ``torch.cuda.max_memory_allocated`` / ``max_memory_reserved`` after
set-up and the bytes of the rank's optimizer-state tensors; a run's value is the largest over its ranks
(:func:`peak_bytes`), the GPU that runs out first.
"""

from __future__ import annotations

import math

UNPROFILED = "un-profiled"
TRACE = "trace"

MEMORY_KEYS = {
    "peak_allocated_bytes": "peak_memory_allocated_bytes_per_rank",
    "peak_reserved_bytes": "peak_memory_reserved_bytes_per_rank",
    "optimizer_state_bytes": "optimizer_state_bytes_per_rank",
}
"""Comparison column -> the run JSON's per-rank list it is the maximum of."""


def _number(v) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan


def unprofiled_ns(meta: dict | None) -> float:
    """The un-profiled median step (ns) from the run JSON; NaN when the run was not timed without nsys."""
    return _number((meta or {}).get("unprofiled_step_ms_median")) * 1e6


def unprofiled_range_ns(meta: dict | None) -> tuple[float, float]:
    """(fastest, slowest) un-profiled step (ns) over every repeat; NaN when not recorded."""
    m = meta or {}
    return _number(m.get("unprofiled_step_ms_min")) * 1e6, _number(m.get("unprofiled_step_ms_max")) * 1e6


def unprofiled_repeats(meta: dict | None) -> float:
    """How many un-profiled repeats the median pools (NaN when not recorded)."""
    m = meta or {}
    n = m.get("unprofiled_repeats")
    if not isinstance(n, (int, float)):
        reps = m.get("unprofiled_repeat_medians_ms")
        n = len(reps) if isinstance(reps, list) and reps else None
    return _number(n)


def ci_ns(meta: dict | None) -> tuple[float, float]:
    """(low, high) of the un-profiled median's confidence interval (ns); NaN when the run JSON has none."""
    m = meta or {}
    return _number(m.get("unprofiled_ci_low_ms")) * 1e6, _number(m.get("unprofiled_ci_high_ms")) * 1e6


def ci_level_pct(meta: dict | None) -> float:
    """The interval's confidence level in percent (95 when the JSON does not say); NaN without an interval."""
    m = meta or {}
    if not all(math.isfinite(v) for v in ci_ns(m)):
        return math.nan
    level = _number(m.get("unprofiled_ci_level"))
    return 100.0 * level if math.isfinite(level) else 95.0


FASTER, SLOWER, WITHIN_NOISE, SAME = "faster", "slower", "within noise", "equal"
SPREAD_UNKNOWN = "spread unknown"
NO_STOCK = "no stock run in the set"
"""A timing set's best configuration against stock DDP when the set timed no stock torch_ddp run."""


def versus(
    a_ns: float, a_ci: tuple[float, float], b_ns: float, b_ci: tuple[float, float]
) -> tuple[str, bool]:
    """(word, established) for step time ``a`` against ``b``: with both intervals known, FASTER / SLOWER when
    they do not overlap (established) and WITHIN_NOISE when they do; with an interval missing, the medians'
    order (FASTER / SLOWER / SAME) and established False (the spread is unknown). ("n/a", False) when a
    median is missing."""
    if not (math.isfinite(a_ns) and math.isfinite(b_ns)):
        return "n/a", False
    if all(math.isfinite(v) for v in (*a_ci, *b_ci)):
        if a_ci[1] < b_ci[0]:
            return FASTER, True
        if b_ci[1] < a_ci[0]:
            return SLOWER, True
        return WITHIN_NOISE, False
    return (FASTER if a_ns < b_ns else SLOWER if a_ns > b_ns else SAME), False


def profiler_overhead_pct(meta: dict | None) -> float:
    """100 · (profiled / un-profiled CUDA-event median − 1), as the harness's timings wrote it."""
    return _number((meta or {}).get("profiler_overhead_pct"))


def ranking_basis(metas) -> str:
    """:data:`UNPROFILED` when every run JSON in ``metas`` has an un-profiled median, else :data:`TRACE`."""
    metas = list(metas)
    return UNPROFILED if metas and all(math.isfinite(unprofiled_ns(m)) for m in metas) else TRACE


def rank_ns(meta: dict | None, trace_step_ns, basis: str | None) -> float:
    """The step time a run is ranked by under ``basis``: its un-profiled median or its trace step time."""
    if basis == UNPROFILED:
        return unprofiled_ns(meta)
    return _number(trace_step_ns) if trace_step_ns is not None else math.nan


def peak_bytes(meta: dict | None, column: str) -> float:
    """The largest per-rank value of the run JSON list behind ``column`` (:data:`MEMORY_KEYS`); NaN when
    the run JSON does not carry it."""
    vals = [_number(v) for v in ((meta or {}).get(MEMORY_KEYS[column]) or [])]
    vals = [v for v in vals if math.isfinite(v)]
    return max(vals) if vals else math.nan


def basis_text(basis: str) -> str:
    """What a ranking by ``basis`` means, for a verdict."""
    if basis == UNPROFILED:
        return (
            "un-profiled step time (median of the harness's CUDA-event timings of the same configuration "
            "without nsys; every run here has one)"
        )
    return "profiled step time (the trace's median over ranks and profiled steps)"


def places_changed(order: list, other: list) -> int:
    """How many of ``order``'s items stand at another place in ``other`` (the same items re-ranked): the
    runs nsys reorders when ``order`` is the un-profiled ranking and ``other`` the profiled one."""
    return sum(1 for i, x in enumerate(order) if other.index(x) != i)


def overhead_span(values) -> str:
    """Profiler overheads (percent) as one figure or a range: '0.7 %' when all round alike, else
    '0.3–10.8 %'; '' when there are none."""
    vals = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    if not vals:
        return ""
    lo, hi = f"{min(vals):.1f}", f"{max(vals):.1f}"
    return f"{lo} %" if lo == hi else f"{lo}–{hi} %"
