"""`ddp-profile findings`: answer the CS336 DDP questions from the committed traces (FINDINGS.md + HTML)."""

from __future__ import annotations

import sys
from pathlib import Path

from ddp_profile.safeio import check_output_folder


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "findings",
        help="answer the CS336 DDP questions from traces/ (writes FINDINGS.md and findings.html)",
        description="Load every run folder under TRACES_DIR (and TRACES_DIR/scaling/), analyse it and write "
        "FINDINGS.md and findings.html (offline, plotly.min.js beside it) into the output folder. "
        "Every number is computed from the traces and their run JSONs. `ddp-profile report` (the main "
        "job) already writes both files with the report pages; this command rewrites only them "
        "(atomically, other files in the folder untouched).",
    )
    p.add_argument("traces", nargs="?", default="traces", help="traces folder (default: traces/)")
    p.add_argument("-o", "--output", default="reports", help="output folder (default: reports/)")
    p.set_defaults(func=run)


def run(args) -> int:
    from ddp_profile.findings import build_findings

    def say(msg):
        print(f"findings: {msg}", file=sys.stderr, flush=True)

    check_output_folder(args.output, [args.traces])
    sizes = build_findings(Path(args.traces), Path(args.output), progress=say)
    out = Path(args.output)
    print(f"wrote {', '.join(sizes)} to {out}/ (open {out / 'findings.html'} in a browser; works offline)")
    return 0
