"""`ddp-profile report`: render traces into a folder of self-contained HTML pages (and the findings)."""

from __future__ import annotations

import sys
from pathlib import Path

from ddp_profile.commands.options import (
    add_export_argument,
    add_step_selection,
    check_jobs,
    input_paths,
    step_selection,
)
from ddp_profile.safeio import check_output_folder


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "report",
        help="render interactive offline HTML reports and the findings (default: traces/ -> reports/)",
        description="Load every run (a run folder with *.sqlite[.xz] + run.json, a single export, or a folder "
        "of run folders), analyse it and write index, per-run, comparison and bucket-sweep pages. "
        "When the input is one campaign folder (run folders in it and in its scaling/), FINDINGS.md "
        "and findings.html are written too, from the same loaded runs. The output folder is "
        "replaced atomically. Exit 0 when every run rendered, 3 when some failed (the report "
        "lists them) or none was found.",
    )
    p.add_argument("paths", nargs="*", default=["traces"], help="runs or folders of runs (default: traces/)")
    p.add_argument("-o", "--output", default="reports", help="output folder (default: reports/)")
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="runs loaded, and run pages rendered, in parallel processes (default: one per CPU)",
    )
    p.add_argument(
        "--no-findings",
        action="store_true",
        help="skip FINDINGS.md and findings.html (written by default when the input is a campaign "
        "folder such as traces/)",
    )
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="analyse every run again and keep no cache (by default each run's results are kept in "
        "OUTPUT/.cache/, keyed by its files' contents, the step selection and the tool's version, "
        "and reused while all are unchanged)",
    )
    p.add_argument(
        "--folder-is-one-job",
        action="store_true",
        help="report a folder's exports as one job's per-rank files even when their captures do not "
        "overlap in time (by default such exports are reported as separate runs)",
    )
    add_step_selection(p)
    add_export_argument(p)
    p.set_defaults(func=run)


def default_jobs() -> int:
    """One process per CPU this process may run on."""
    import os

    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def run(args) -> int:
    from ddp_profile.findings.pages import FindingsPages
    from ddp_profile.report import build_report

    if args.jobs is not None:
        check_jobs(args.jobs)
    jobs = args.jobs if args.jobs is not None else default_jobs()
    check_output_folder(args.output, args.paths)
    paths = input_paths(args)
    extras = [] if getattr(args, "no_findings", False) else [FindingsPages()]
    sizes, failures = build_report(
        paths,
        Path(args.output),
        jobs=jobs,
        extras=extras,
        selection=step_selection(args),
        cache=not getattr(args, "no_cache", False),
        split_jobs=not getattr(args, "folder_is_one_job", False),
    )
    out = Path(args.output)
    extra = " and FINDINGS.md + findings.html" if "FINDINGS.md" in sizes else ""
    print(
        f"wrote {len(sizes)} page(s) to {out}/{extra} (open {out / 'index.html'} in a browser; works offline)"
    )
    if failures:
        print(
            f"ddp-profile report: {len(failures)} run(s) failed to load; listed on the index page",
            file=sys.stderr,
        )
        return 3
    return 0
