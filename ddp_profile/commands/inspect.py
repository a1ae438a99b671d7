"""`ddp-profile inspect PATH... [--format table|json] [--jobs N]`: what is in the trace(s).

NVTX ranges are listed by domain and name, names that differ only in their numbers grouped into one entry
(the harness's ``step N`` and ``allreduce b<bucket> <bytes>B`` ranges would otherwise give hundreds of
lines). JSON keys (``--format json``): files, nsys_version, schema_version, scrubbed, rank_source, clock,
ranks, kernels_by_kind, nccl_by_collective, time_span_ns, warnings, and ``nvtx_ranges``: a list of
``{"domain", "name", "grouped", "count", "distinct", "examples"}`` where ``name`` is the range name, or with
``grouped`` true a pattern with ``<N>`` for each number; ``count`` is the number of ranges, ``distinct`` the
number of distinct names in the entry, ``examples`` up to 3 of them in numeric order. ``steps``: where
``analyze`` finds the training steps: ``{"source": "nvtx" | "inferred" | "none", "per_rank": {rank: count},
"labels": "steps 3–7", "notes": [...]}``; "inferred" means no NVTX range matched the step pattern and the steps are
the gradient-synchronisation cycles of the kernel sequence (``ddp_profile.analysis.infer``); ``per_rank`` counts
the steps every rank ran (one step identity across ranks) and ``labels`` names them, as ``--steps`` selects them.
"""

from __future__ import annotations

import json
from pathlib import Path

from ddp_profile.commands.options import (
    add_export_argument,
    add_jobs_argument,
    add_step_selection,
    cli_progress,
    input_paths,
    step_selection,
)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "inspect",
        help="show files, versions, ranks, kernel and NVTX counts of nsys SQLite export(s)",
        description="Load nsys SQLite export(s) (one file, one per rank, or a folder) and print what they "
        "hold: files, nsys and schema versions, scrubbed or not, ranks (and how they were "
        "found), kernel counts by kind, NCCL kernels by collective, NVTX ranges by domain and "
        "name (names differing only in numbers grouped, e.g. 'step <N>'), time span.",
    )
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="export file(s) or folder")
    parser.add_argument("--format", choices=["table", "json"], default="table", help="output format")
    add_step_selection(parser)
    add_export_argument(parser)
    add_jobs_argument(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    from ddp_profile.nsys.loader import load_trace
    from ddp_profile.nsys.summary import format_table, summarize

    paths = input_paths(args)
    trace = load_trace(paths, jobs=args.jobs, progress=cli_progress(paths, args.jobs))
    summary = summarize(trace)
    summary["steps"] = step_summary(trace, step_selection(args))
    print(json.dumps(summary, indent=2) if args.format == "json" else format_table(summary))
    return 0


def step_summary(trace, selection=None) -> dict:
    """How ``analyze`` would find this trace's steps (``selection``: a StepSelection; default all steps by the
    default pattern): source, count per rank after the common step identity across ranks, the labels
    (``labels``, e.g. "steps 3–7"), notes."""
    from ddp_profile.analysis.identity import describe
    from ddp_profile.analysis.pipeline import labelled_steps

    pattern, which = (selection.pattern, selection.steps) if selection is not None else (None, "all")
    steps, notes, inferred = labelled_steps(trace, step_pattern=pattern, steps=which)
    source = "none" if steps.empty else "inferred" if inferred else "nvtx"
    per_rank = {} if steps.empty else {str(int(r)): int(c) for r, c in steps.groupby("rank").size().items()}
    return {
        "source": source,
        "per_rank": per_rank,
        "labels": describe(steps["step"].to_numpy()),
        "notes": notes,
    }
