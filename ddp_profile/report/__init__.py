"""The HTML report: ``build_report(paths, out_dir)`` finds runs, loads and analyses them, and writes every
page into one folder, swapped in atomically, with the pages of the extras its caller passes (the findings,
``ddp_profile.findings``, which sits beside the report: the report never imports it).

Floors inside the package: ``build`` → pages (``index``, ``run_page``, ``sweep``) → ``compare``, ``html`` →
``runs``. Nothing inside imports this face.

The face's names are imported on first use (PEP 562 ``__getattr__``): ``analyze``'s terminal answer imports
``report.answer_text`` only, and importing the package for it must not import the page writers (~0.3 s of
process start).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ddp_profile.report.build import (
        MARKER,
        build_report,
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

_FACE = {
    "build": ["MARKER", "build_report", "load_runs", "write_report", "write_report_dir"],
    "html": ["script_json"],
    "run_page": ["render_run_page"],
    "runs": ["Group", "Run", "discover", "discover_runs", "group_page_name", "group_runs", "run_page_name"],
}
_MODULE_OF = {name: module for module, names in _FACE.items() for name in names}

__all__ = [
    "MARKER",
    "Group",
    "Run",
    "build_report",
    "discover",
    "discover_runs",
    "group_page_name",
    "group_runs",
    "load_runs",
    "render_run_page",
    "run_page_name",
    "script_json",
    "write_report",
    "write_report_dir",
]


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:  # not a face name: a submodule (``from ddp_profile.report import measures``) or a typo
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
