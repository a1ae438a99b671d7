"""A confidence interval for the median step time of repeated runs: a seeded two-level bootstrap.

A configuration timed in R repeats (launches, or rebuilds in one process) of n measured steps each has two
sources of spread: between repeats (clocks, placement, allocator and NCCL state of that repeat) and between
the steps of one repeat. Resampling the pooled steps alone would treat 5 × 10 steps as 50 independent draws
and give an interval that is too narrow whenever repeats differ, so the bootstrap resamples both levels:

1. draw R repeats from the R, with replacement;
2. within each drawn repeat, draw its n steps from its own n, with replacement;
3. pool the drawn steps and take their median (the harness's rule: the upper median of an even count).

Done ``resamples`` times (default 4000) with ``random.Random(seed)``, the interval is the percentile range
(2.5th and 97.5th percentiles for ``level`` 0.95, nearest-rank) of those medians. The point estimate is the
median of every measured step; where the percentile range would not contain it (rare with a skewed few
repeats) the range is widened to it, so ``ci_low <= median <= ci_high`` always holds. With one repeat only
the step level is resampled and the interval says nothing about launch-to-launch spread (``repeats`` is in
the result, so a reader can tell).

Standard library only: it runs on the GPU hosts inside ddp_profile.harness.repeats.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ddp_profile.errors import TraceError

DEFAULT_RESAMPLES = 4000
DEFAULT_SEED = 0
DEFAULT_LEVEL = 0.95
METHOD = (
    "two-level percentile bootstrap of the median: repeats resampled with replacement, then steps "
    "within each drawn repeat; upper median of the pooled steps; nearest-rank percentiles"
)


def upper_median(values: list[float]) -> float:
    """The harness's median rule (``step_ms_median``): the upper median for an even count."""
    if not values:
        raise TraceError("no measured steps to take a median of")
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


@dataclass(frozen=True)
class Interval:
    """A median with its bootstrap confidence interval, all in ms."""

    median_ms: float
    low_ms: float
    high_ms: float
    level: float
    resamples: int
    seed: int
    repeats: int
    steps: int

    def fields(self) -> dict:
        """The run-JSON keys (``unprofiled_*``) this interval fills."""
        return {
            "unprofiled_step_ms_median": self.median_ms,
            "unprofiled_ci_low_ms": self.low_ms,
            "unprofiled_ci_high_ms": self.high_ms,
            "unprofiled_ci_level": self.level,
            "unprofiled_ci_method": METHOD,
            "unprofiled_ci_resamples": self.resamples,
            "unprofiled_ci_seed": self.seed,
            "unprofiled_repeats": self.repeats,
            "unprofiled_steps": self.steps,
        }


def _percentile(ordered: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 1]) of a sorted list."""
    k = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[k]


def bootstrap_median(
    repeats: list[list[float]],
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    level: float = DEFAULT_LEVEL,
) -> Interval:
    """The median of every step of ``repeats`` (one list of step times per repeat) and its two-level
    bootstrap interval (module docstring). Deterministic for a given seed."""
    reps = [[float(v) for v in r] for r in repeats if r]
    if not reps:
        raise TraceError("no repeat has measured steps")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    every = [v for r in reps for v in r]
    median = upper_median(every)
    rng = random.Random(seed)
    medians = []
    for _ in range(resamples):
        drawn: list[float] = []
        for rep in rng.choices(reps, k=len(reps)):
            drawn.extend(rng.choices(rep, k=len(rep)))
        medians.append(upper_median(drawn))
    medians.sort()
    tail = (1.0 - level) / 2.0
    low = min(_percentile(medians, tail), median)
    high = max(_percentile(medians, 1.0 - tail), median)
    return Interval(median, low, high, level, resamples, seed, len(reps), len(every))


def separated(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether two intervals (low, high) do not overlap (touching counts as overlapping)."""
    return a[1] < b[0] or b[1] < a[0]


__all__ = [
    "DEFAULT_LEVEL",
    "DEFAULT_RESAMPLES",
    "DEFAULT_SEED",
    "Interval",
    "METHOD",
    "bootstrap_median",
    "separated",
    "upper_median",
]
