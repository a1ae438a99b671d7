"""`ddp-profile launches PATH...`: is each step launch-bound? Per-step GPU idle, CUDA API time, host time per
launch, plus API time by function and kernels by group (definitions: ddp_profile/analysis/launches.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ddp_profile.commands.options import add_step_selection, step_selection
from ddp_profile.errors import MissingDataError, UsageError
from ddp_profile.safeio import check_output_file, write_text_atomic

JSON_VERSION = 1


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "launches",
        help="is each step launch-bound? GPU idle, CUDA API time and host time per launch",
        description="Per (rank, step) of one run: GPU busy and idle time within the step's host range, kernel "
        "launches, CUDA API and synchronize time, host time per launch against GPU time per "
        "kernel, and the launch-bound verdict; then API calls by function and kernels by group "
        "per step. Reads the CUDA API table, which `analyze` does not load.",
    )
    p.add_argument(
        "paths", nargs="+", metavar="PATH", help="nsys SQLite export(s) of one run or a run folder"
    )
    add_step_selection(p)
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        default=None,
        help="write FILE.csv (the step table) or FILE.json (all tables) instead of printing",
    )
    p.set_defaults(func=run)


def render_json(res) -> str:
    from ddp_profile.analysis import records

    out = {
        "version": JSON_VERSION,
        "summary": res.summary(),
        "verdicts": res.verdicts(),
        "notes": res.notes,
        "steps": records(res.steps),
        "api_functions": records(res.api_functions),
        "kernel_groups": records(res.kernel_groups),
    }
    return json.dumps(out, indent=2) + "\n"


LABELS = {
    "host_us_per_launch": "host µs / launch",
    "gpu_us_per_kernel": "GPU µs / kernel",
    "launch_bound": "launch-bound",
    "per_step_ns": "per step (ms)",
    "gpu_per_step_ns": "GPU per step (ms)",
    "calls_per_step": "calls / step",
    "kernels_per_step": "kernels / step",
    "gpu_busy_ns": "GPU busy (ms)",
    "gpu_idle_ns": "GPU idle (ms)",
    "idle_pct": "GPU idle (%)",
    "api_ns": "CUDA API (ms)",
    "sync_ns": "sync (ms)",
    "step_ns": "host range (ms)",
}


def render_text(res) -> str:
    """The verdicts, then the step table, API calls and kernel groups: times in ms (µs per launch and per
    kernel), units in the headers (:func:`ddp_profile.fmt.text_table`)."""
    from ddp_profile.analysis.launches import STEP_TABLE
    from ddp_profile.fmt import text_table

    steps = res.steps[[col for col, _, _ in STEP_TABLE]]
    api = res.api_functions.assign(per_step_ns=res.api_functions["ns_per_step"])
    groups = res.kernel_groups.assign(gpu_per_step_ns=res.kernel_groups["gpu_ns_per_step"])
    return (
        "\n".join(
            [
                *res.verdicts(),
                *(f"note: {n}" for n in res.notes),
                "",
                f"== steps ({len(steps)} rows) ==",
                text_table(steps, LABELS),
                "",
                "== CUDA API calls per step, by function ==",
                text_table(api[["rank", "name", "calls_per_step", "per_step_ns", "mean_ns"]], LABELS),
                "",
                "== kernels per step, by group ==",
                text_table(
                    groups[["rank", "group", "kernels_per_step", "gpu_per_step_ns", "mean_ns"]], LABELS
                ),
            ]
        )
        + "\n"
    )


def run(args) -> int:
    from ddp_profile.analysis import analyze
    from ddp_profile.nsys.api import load_api_calls
    from ddp_profile.nsys.loader import load_trace

    out = Path(args.output) if args.output else None
    if out is not None and out.suffix not in (".csv", ".json"):
        raise UsageError(f"-o {out}: name a .csv (step table) or .json (all tables) file")
    if out is not None:
        check_output_file(out, args.paths)
    trace = load_trace([Path(p) for p in args.paths], host_waits=False)  # the diagnosis names no host wait
    # the launch section of the analysis (comm_kinds and the recommendation, not asked for, are not computed)
    res = analyze(
        trace, **step_selection(args).analyze_kwargs(), api=load_api_calls(trace), sections=[]
    ).launches
    if res.steps.empty:
        why = "; ".join(res.notes) or "no step ranges were found"
        raise MissingDataError(f"{', '.join(map(str, args.paths))}: no steps to diagnose: {why}")
    if out is None:
        sys.stdout.write(render_text(res))
    elif out.suffix == ".csv":
        write_text_atomic(out, res.steps.to_csv(index=False))
    else:
        write_text_atomic(out, render_json(res))
    return 0
