"""`ddp-profile report` end to end on the real scrubbed sample export (real loader and analysis), with two
run folders loaded by two worker processes."""

import shutil
from pathlib import Path

import pytest

from ddp_profile.cli import main

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "ddp_mlp_2xh200.sqlite"
pytest.importorskip("plotly")


@pytest.mark.skipif(not SAMPLE.exists(), reason="sample export missing")
def test_report_command_on_real_sample(tmp_path, capsys):
    for run in ("a", "b"):
        (tmp_path / "traces" / run).mkdir(parents=True)
        shutil.copy(SAMPLE, tmp_path / "traces" / run / SAMPLE.name)
    before = SAMPLE.stat().st_mtime_ns
    out = tmp_path / "reports"
    assert main(["report", str(tmp_path / "traces"), "-o", str(out), "--jobs", "2"]) == 0
    captured = capsys.readouterr()
    assert "[2/2] analysed" in captured.err and "wrote 3 page(s)" in captured.out
    page = (out / "run-a.html").read_text()
    assert "NVIDIA H200" in page and "steps 0–5 (6)" in page  # the sample: 2 × H200, 6 steps
    # plotly figures: exposed comm, steps (the timeline is a canvas); no bytes in NCCL ranges: no α-β plot
    assert page.count("Plotly.newPlot(") == 2 and "ddpTimeline(" in page
    assert "ncclDevKernel_AllReduce_Sum_f32_RING_LL" in page
    assert 'href="run-a.html"' in (out / "index.html").read_text().replace("'", '"')
    assert SAMPLE.stat().st_mtime_ns == before
