"""The HTML report and the findings: ``build_report(paths, out_dir)`` finds runs, loads and analyses them,
and writes every page (plus FINDINGS.md for a campaign folder) into one folder, swapped in atomically.

Floors inside the package: ``build`` → pages (``index``, ``run_page``, ``sweep``) and ``findings`` →
``compare``, ``html`` → ``runs``. Nothing inside imports this face.
"""

from ddp_profile.report.build import (
    MARKER,
    build_report,
    findings_root_of,
    load_runs,
    write_report,
    write_report_dir,
)
from ddp_profile.report.html import script_json
from ddp_profile.report.run_page import render_run_page
from ddp_profile.report.runs import (
    Group,
    Run,
    discover,
    discover_runs,
    group_page_name,
    group_runs,
    run_page_name,
)

__all__ = ["MARKER", "Group", "Run", "build_report", "discover", "discover_runs", "findings_root_of",
           "group_page_name", "group_runs", "load_runs", "render_run_page", "run_page_name", "script_json",
           "write_report", "write_report_dir"]
