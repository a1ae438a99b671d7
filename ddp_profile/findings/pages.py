"""The findings as a report's extra pages (``build_report(..., extras=[FindingsPages()])``): FINDINGS.md and
findings.html from the runs the report already analysed, in the report's atomic swap, and the index's
Findings block with the timing sets' bullets. The report never imports this module; its caller does."""

from __future__ import annotations

import time
from pathlib import Path

from ddp_profile.errors import DdpProfileError
from ddp_profile.findings.data import find_runs, from_report_runs
from ddp_profile.findings.render import bullet_html
from ddp_profile.report.runs import Run


class FindingsPages:
    """The findings for ``build_report``'s ``extras`` (the protocol ``report.build.Extra``)."""

    def source(self, paths: list) -> Path | None:
        """The campaign folder the findings can answer from: the single folder passed, when the findings
        find run folders in it (``<root>/<run>/``, ``<root>/scaling/<run>/``); else None."""
        if len(paths) != 1 or not Path(paths[0]).is_dir():
            return None
        try:
            find_runs(Path(paths[0]))
        except DdpProfileError:
            return None
        return Path(paths[0])

    def skipped(self, runs: list[Run]) -> str | None:
        if not any(r.meta.get("strategy") for r in runs):  # own jobs only: the findings were never theirs
            return None
        return (
            "report: no findings: they need one campaign folder (run folders in <folder>/ and "
            "<folder>/scaling/), e.g. `ddp-profile report traces`"
        )

    def write(self, source: Path, runs: list[Run], folder: Path, out) -> tuple[dict[str, int], str]:
        from ddp_profile.findings import build_findings

        t0 = time.perf_counter()
        data = from_report_runs(source, runs)
        if not data:
            if not any(r.meta.get("strategy") for r in runs):  # own jobs only: the findings were never theirs
                return {}, ""
            if any(source.glob("*.sqlite*")):  # the folder passed is one run: the findings answer a campaign
                print(
                    f"report: no findings: {source} is one run (FINDINGS.md answers from a campaign folder of "
                    "run folders, e.g. traces/)",
                    file=out,
                    flush=True,
                )
            else:
                print(
                    f"report: no findings: none of the loaded runs is a run folder of {source}",
                    file=out,
                    flush=True,
                )
            return {}, ""
        headline: list = []  # the findings' timing bullets, repeated on the index
        written = build_findings(source, folder, runs=data, headline=headline)
        print(
            f"report: findings ({len(data)} runs) written in {time.perf_counter() - t0:.1f} s",
            file=out,
            flush=True,
        )
        return written, index_block(headline)


def index_block(headline: list) -> str:
    """The index's Findings block: the link, then the timing bullets (``findings.summary.Bullet``: per dtype,
    the configuration closest to one GPU, from interleaved un-profiled repeats), shown there since the runs
    profiled need not include it."""
    best = (
        (
            "<p>Closest to one GPU in the timing sets (interleaved un-profiled repeats; not every such "
            "configuration has a profiled run below):</p><ul>"
            + "".join(bullet_html(b, "findings.html") for b in headline)
            + "</ul>"
        )
        if headline
        else ""
    )
    return (
        "<h2>Findings</h2><p><a href='findings.html'>The CS336 DDP questions answered from these "
        "traces</a> (also as <a href='FINDINGS.md'>FINDINGS.md</a>).</p>" + best
    )


__all__ = ["FindingsPages", "index_block"]
