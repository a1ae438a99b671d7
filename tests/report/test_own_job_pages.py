"""Run pages of committed traces read as a user reads them: the answer first, and no rows that say nothing."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from ddp_profile import report

pytest.importorskip("plotly")
TRACES = Path(__file__).resolve().parents[2] / "traces"


def _page(path: Path) -> str:
    runs, failures = report.load_runs([path], progress=io.StringIO())
    assert not failures and len(runs) == 1
    return report.render_run_page(runs[0])


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_gpt_accum_page_names_the_straggler_and_its_fix_before_any_measurement():
    """gpt-accum (truth.json: rank 0 calls loss.item() every iteration): the verdict box opens with the
    straggler, rank 0, its host cause and what to change; the step and communication numbers follow."""
    page = _page(TRACES / "foreign" / "gpt-accum")
    box = _text(page.split("<div class='verdict'>", 1)[1].split("</div>", 1)[0]).strip()
    assert box.startswith("The step is bound by a straggler, rank 0 (removable ")
    first = box.split("Median step", 1)[0]
    assert "what to change: rank 0's host falls behind" in first and "cause host" in first
    # ranks differ > 2x in communication: each rank's value, not a pooled median
    assert re.search(r"Communication takes rank 0 [\d.]+ ms, rank 1 [\d.]+ ms per step \(ranks differ > 2×\)", box)


def test_one_gpu_headline_has_no_rows_of_communication_zeros():
    page = _page(TRACES / "none_xl_fp32_1xh200")
    head = page.split("Headline: medians over ", 1)[1].split("</table>", 1)[0]
    assert head.startswith("1 rank × ")
    assert "step time (ms)" in head and "compute (ms)" in head
    assert "comm tail (ms)" not in head and "exposed wait (ms)" not in head
