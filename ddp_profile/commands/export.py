"""`ddp-profile export --format perfetto PATH... -o FILE`: one run as Chrome trace-event JSON for
ui.perfetto.dev (library: ddp_profile/report/perfetto.py)."""

from __future__ import annotations

import sys

from ddp_profile.commands.options import (
    add_export_argument,
    add_jobs_argument,
    add_step_selection,
    cli_progress,
    input_paths,
    step_selection,
)
from ddp_profile.safeio import check_output_file


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "export",
        help="write one run as Perfetto / Chrome trace-event JSON (open it on ui.perfetto.dev)",
        description="Load and analyse one run and write it as Chrome trace-event JSON: one process per rank, one "
        "track per CUDA stream, every kernel an event (NCCL kernels with collective, bucket, bytes, "
        "wait_ns and transfer_ns), NVTX steps and phases on a host track per rank; times in µs since "
        "the trace start. Drop the file on https://ui.perfetto.dev (it is opened in the browser, "
        "not uploaded). Written atomically; gzipped when FILE ends in .gz or with --gzip.",
    )
    p.add_argument(
        "paths", nargs="+", metavar="PATH", help="nsys SQLite export(s) of one run or a run folder"
    )
    p.add_argument(
        "--format", choices=["perfetto"], default="perfetto", help="output format (default: perfetto)"
    )
    p.add_argument(
        "-o", "--output", metavar="FILE", required=True, help="the JSON file to write (.json or .json.gz)"
    )
    p.add_argument("--gzip", action="store_true", help="gzip the output (implied by a .gz file name)")
    add_step_selection(p)
    add_export_argument(p)
    add_jobs_argument(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from ddp_profile.analysis import analyze
    from ddp_profile.nsys.loader import load_trace
    from ddp_profile.report.perfetto import write_perfetto

    out = check_output_file(args.output, args.paths)  # not an input, a folder or a device
    paths = input_paths(args)
    trace = load_trace(paths, jobs=args.jobs, progress=cli_progress(paths, args.jobs))
    path = write_perfetto(
        out,
        trace,
        analyze(trace, **step_selection(args).analyze_kwargs()),
        compress=True if args.gzip or out.suffix == ".gz" else False,
    )
    print(
        f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB, {len(trace.kernels):,} kernels); "
        "open it on https://ui.perfetto.dev",
        file=sys.stderr,
    )
    return 0
