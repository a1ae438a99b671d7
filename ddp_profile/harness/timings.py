"""Fold the step times of un-profiled repeats into the profiled run's JSON.

    python -m ddp_profile.harness.timings PROFILED_JSON UNPROFILED_JSON... [--host LABEL]

The campaign (scripts/campaign.sh) runs every configuration a few times with plain torchrun and once under
nsys. The profiled run's record is the one committed next to its trace; this adds to it what the plain runs
measured, so a reader can see what the step costs without the profiler and how much nsys added:

* ``unprofiled_step_ms_median``: median over every measured step of every repeat, each step taken at its
  slowest rank (the same per-step time, and the same median rule, as the record's ``step_ms_median``);
* ``unprofiled_repeat_medians_ms``: each repeat's own ``step_ms_median`` (spread between launches);
* ``unprofiled_step_ms_min`` / ``unprofiled_step_ms_max``: the fastest and slowest step of all repeats;
* ``unprofiled_repeats`` and ``unprofiled_steps``: how many runs and steps the numbers come from;
* ``unprofiled_ci_low_ms`` / ``unprofiled_ci_high_ms`` (with ``unprofiled_ci_level``, ``_method``,
  ``_resamples``, ``_seed``): the median's 95 % bootstrap interval over repeats and their steps
  (:mod:`ddp_profile.harness.spread`; with few repeats it is wide, as it should be);
* ``profiler_overhead_pct``: 100 * (profiled ``step_ms_median`` / ``unprofiled_step_ms_median`` - 1);
* ``host``: a label for the machine (``--host``), never its real name.

Every repeat must be the same configuration on the same GPU model and world size as the profiled run,
or nothing is written. Standard library only (GPU hosts have no reporting dependencies); the JSON is
replaced atomically.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ddp_profile.errors import TraceError, UsageError, run_main
from ddp_profile.harness import spread
from ddp_profile.safeio import read_side_json, write_record_atomic

# Keys that must agree between the profiled run and every repeat for the comparison to mean anything.
SAME_KEYS = ("run", "config", "world_size", "gpu_name", "timing_source")
ADDED_KEYS = (
    "unprofiled_step_ms_median",
    "unprofiled_repeat_medians_ms",
    "unprofiled_step_ms_min",
    "unprofiled_step_ms_max",
    "unprofiled_repeats",
    "unprofiled_steps",
    "profiler_overhead_pct",
    "host",
    "unprofiled_ci_low_ms",
    "unprofiled_ci_high_ms",
    "unprofiled_ci_level",
    "unprofiled_ci_method",
    "unprofiled_ci_resamples",
    "unprofiled_ci_seed",
)


def slowest_rank_steps(record: dict) -> list[float]:
    """Per measured step, the slowest rank's time: the record's ``step_ms_slowest_rank``, or computed from
    ``step_ms_per_rank`` when an older record lacks it."""
    slowest = record.get("step_ms_slowest_rank")
    if slowest is None:
        per_rank = record.get("step_ms_per_rank") or []
        slowest = [max(col) for col in zip(*per_rank, strict=True)] if per_rank else []
    return [float(v) for v in slowest]


def fold(profiled: dict, repeats: list[dict], host: str | None = None) -> dict:
    """The profiled record with the un-profiled keys added (a new dict; the input is left alone)."""
    if not repeats:
        raise UsageError("give at least one un-profiled run JSON")
    for i, rec in enumerate(repeats, 1):
        for key in SAME_KEYS:
            if rec.get(key) != profiled.get(key):
                raise UsageError(
                    f"un-profiled run {i} differs from the profiled run in {key!r} "
                    f"({rec.get(key)!r} vs {profiled.get(key)!r}); not comparable"
                )
    per_repeat = [slowest_rank_steps(r) for r in repeats]
    if any(not steps for steps in per_repeat):
        raise TraceError("an un-profiled run has no measured steps")
    every = [v for steps in per_repeat for v in steps]
    out = dict(profiled)
    for key in ADDED_KEYS:  # folding twice replaces, never mixes, the earlier numbers
        out.pop(key, None)
    unprofiled = spread.upper_median(every)
    out["unprofiled_step_ms_median"] = unprofiled
    out["unprofiled_repeat_medians_ms"] = [spread.upper_median(steps) for steps in per_repeat]
    out["unprofiled_step_ms_min"] = min(every)
    out["unprofiled_step_ms_max"] = max(every)
    out["unprofiled_repeats"] = len(repeats)
    out["unprofiled_steps"] = len(every)
    out.update(spread.bootstrap_median(per_repeat).fields())
    prof = profiled.get("step_ms_median")
    out["profiler_overhead_pct"] = (
        round(100.0 * (float(prof) / unprofiled - 1.0), 3) if prof is not None and unprofiled > 0 else None
    )
    if host is not None:
        out["host"] = host
    return out


def _read(path: Path) -> dict:
    try:
        data = read_side_json(path)  # a regular file only, size-capped, depth-safe
    except TraceError as exc:
        raise TraceError(f"{exc}: not a readable run JSON") from None
    if data is None:
        raise UsageError(f"{path}: no such file")
    if not isinstance(data, dict):
        raise TraceError(f"{path}: holds a JSON {type(data).__name__}, not a run record")
    return data


def run(args: argparse.Namespace) -> int:
    target = Path(args.profiled)
    record = fold(_read(target), [_read(Path(p)) for p in args.unprofiled], args.host)
    write_record_atomic(target, record)
    prof = record.get("step_ms_median")
    print(
        f"{record['run']}: un-profiled median {record['unprofiled_step_ms_median']:.2f} ms over "
        f"{record['unprofiled_repeats']} runs ({record['unprofiled_steps']} steps); profiled "
        f"{'?' if prof is None else f'{prof:.2f}'} ms; profiler overhead {record['profiler_overhead_pct']} %"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ddp_profile.harness.timings",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("profiled", help="the profiled run's JSON (updated in place)")
    parser.add_argument("unprofiled", nargs="+", help="run JSONs of the un-profiled repeats")
    parser.add_argument("--host", default=None, help="machine label to record (never the real host name)")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks for errors")
    args = parser.parse_args(argv)
    return run_main("python -m ddp_profile.harness.timings", run, args, debug=args.debug)


if __name__ == "__main__":
    raise SystemExit(main())
