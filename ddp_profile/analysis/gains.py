"""Expected gains: what a change is predicted to save per step, for the job as it runs without the profiler.

Every advice rule (``verdict.advice``) carries three numbers per step:

- ``gain_upper_ns``: the critical-path part the change removes at most (median over steps), as measured in the
  profiled trace;
- ``expected_gain_ns``: the prediction, from a model of the step after the change (which parts shrink, what
  limits the step next; each rule's model is in the docs' advice section), stated for the un-profiled job;
- ``spread_ns``: the interquartile range over steps of the part the gain is read from (None where the gain is
  one run-level number).

``gain_basis`` says how a gain read from the profiled trace carries over to the un-profiled job (:func:`carry`):

``gpu``   GPU work (kernels, transfers, waits on a peer's kernels): nsys records kernels with their own
          times, so the gain carries as measured.
``lead``  a difference between ranks (a straggler's lead): the profiler's cost falls alike on every rank and
          cancels in the difference, so the gain carries as measured.
``host``  the GPU idle awaiting launches: CUPTI lengthens every launch call, so under nsys the host part is
          longer than in the job itself. With the profiler's overhead known (the harness's run JSON:
          ``profiler_overhead_pct`` = 100 · (profiled / un-profiled CUDA-event median − 1)), the profiled
          step's excess over the un-profiled one, ``excess = step · o / (100 + o)``, is charged to the host
          part first (the GPU's own work is what nsys does not change), so::

              expected_un-profiled = expected_profiled · max(0, host − excess) / host

          Without it the gain stays as measured under nsys and is flagged so, with its share of the
          profiled step: an upper reading, since the host part includes the profiler's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

GPU, LEAD, HOST = "gpu", "lead", "host"


@dataclass(frozen=True)
class Profile:
    """What the analysis knows of the profiler's cost on this job: the median critical-path step span and
    host part (ns, as profiled), and the profiler overhead in % (NaN when unknown: no run JSON, or one
    without un-profiled timings)."""

    step_ns: float
    host_ns: float
    overhead_pct: float = float("nan")

    @property
    def known(self) -> bool:
        return math.isfinite(self.overhead_pct) and self.overhead_pct >= 0 and self.step_ns > 0

    def host_scale(self) -> float:
        """max(0, host − excess) / host (1 when the overhead is unknown or the host part is 0)."""
        if not self.known or not self.host_ns > 0:
            return 1.0
        excess = self.step_ns * self.overhead_pct / (100.0 + self.overhead_pct)
        return max(0.0, self.host_ns - excess) / self.host_ns


def carry(gain_ns: float, kind: str, prof: Profile) -> tuple[float, str]:
    """(expected gain for the un-profiled job, ``gain_basis``) of a gain read from the profiled trace
    (module docstring)."""
    g = max(0.0, float(gain_ns)) if math.isfinite(float(gain_ns)) else 0.0
    if kind == HOST:
        if prof.known:
            return g * prof.host_scale(), (
                f"un-profiled: the host part less the profiler's excess "
                f"({prof.overhead_pct:.1f} % of the un-profiled step, run JSON)"
            )
        share = 100.0 * g / prof.step_ns if prof.step_ns > 0 else float("nan")
        return g, (
            f"measured under nsys, {share:.1f} % of the profiled step: host time includes the profiler's "
            "launch overhead (no un-profiled timing to remove it)"
        )
    if kind == LEAD:
        return g, "a difference between ranks: the profiler's cost, alike on every rank, cancels"
    return g, "GPU time: kernels keep their own times under nsys"


def overhead_pct(run: dict | None) -> float:
    """``profiler_overhead_pct`` of a harness run JSON (NaN when absent or not a finite number)."""
    v = (run or {}).get("profiler_overhead_pct") if isinstance(run, dict) else None
    try:
        x = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return float("nan")
    return x if math.isfinite(x) else float("nan")
