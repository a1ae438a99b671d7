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
    parser.set_defaults(func=run)


def run(args) -> int:
    from ddp_profile.nsys.loader import load_trace
    from ddp_profile.nsys.summary import format_table, summarize

    summary = summarize(load_trace(args.paths))
    print(json.dumps(summary, indent=2) if args.format == "json" else format_table(summary))
    return 0
