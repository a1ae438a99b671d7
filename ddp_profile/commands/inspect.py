"""`ddp-profile inspect PATH... [--format table|json]`: what is in the trace(s)."""

from __future__ import annotations

import json
from pathlib import Path


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "inspect", help="show files, versions, ranks, kernel and NVTX counts of nsys SQLite export(s)",
        description="Load nsys SQLite export(s) (one file, one per rank, or a folder) and print what they "
                    "hold: files, nsys and schema versions, scrubbed or not, ranks (and how they were "
                    "found), kernel counts by kind, NCCL kernels by collective, NVTX ranges, time span.")
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="export file(s) or folder")
    parser.add_argument("--format", choices=["table", "json"], default="table", help="output format")
    parser.add_argument("--export", action="store_true",
                        help="convert .nsys-rep inputs first with `nsys export --type sqlite` (needs nsys on PATH or NSYS=...); the export is written next to the report, never over an existing .sqlite")
    parser.set_defaults(func=run)


def run(args) -> int:
    from ddp_profile.nsys.loader import load_trace
    from ddp_profile.nsys.summary import format_table, summarize

    paths = args.paths
    if args.export:
        from ddp_profile.nsys.export import export_reports

        paths = export_reports(paths)
    summary = summarize(load_trace(paths))
    print(json.dumps(summary, indent=2) if args.format == "json" else format_table(summary))
    return 0
