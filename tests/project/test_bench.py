"""The benchmark script runs end to end at a tiny size and reports every figure its targets name.

Not a timing test: it checks the script works and its output is complete and self-consistent (rows agree
between the floor and the analysis, the per-rank folder loads with --jobs and a progress bar)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_analyzer.py"


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    from ddp_profile.nsys.synth import synth_ddp_run

    out = tmp_path_factory.mktemp("bench")
    data = out / "data"
    runs = out / "runs" / "tiny_run"
    runs.mkdir(parents=True)
    synth_ddp_run(runs / "tiny_run.sqlite")
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--sizes",
            "0.02M",
            "--ranks",
            "2",
            "--repeat",
            "1",
            "--jobs",
            "2",
            "--per-rank-size",
            "0.01M",
            "--render-size",
            "0.02M",
            "--replica",
            "",
            "--sweep",
            "",
            "--data",
            str(data),
            "--out",
            str(out),
            "--report",
            str(runs.parent),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, out


def test_prints_the_figures(bench):
    proc, _ = bench
    line = next(x for x in proc.stdout.splitlines() if "rows |" in x)
    for field in ("floor", "M rows/s", "load+analyze", "ratio", "peak", "kernel cols"):
        assert field in line, (field, line)
    assert "machine:" in proc.stdout and "cores" in proc.stdout
    assert "per-rank files" in proc.stdout and "report of 0.02M: rendered" in proc.stdout
    assert "2/2 files" in proc.stderr  # the --jobs load drew its progress bar
    assert "arrow floor" in proc.stdout and "analyze CLI" in proc.stdout
    assert "second (unchanged)" in proc.stdout


def test_results_files_are_complete(bench):
    _, out = bench
    res = json.loads((out / "results.json").read_text())
    (size,) = res["sizes"]
    assert size["rows"] == size["analyze"]["rows"] == size["floor_concat"]["rows"] > 20_000
    assert size["analyze"]["n_ranks"] == 2 and size["analyze"]["n_collectives"] > 0
    assert size["ratio"] == pytest.approx(size["analyze"]["seconds"] / size["floor"]["seconds"])
    assert size["kernel_cols_int64_mb"] == pytest.approx(size["rows"] * 7 * 8 / 1e6)
    assert set(res["per_rank"]["by_jobs"]) == {"1", "2"}
    # the Arrow floor read the same rows; the command and the in-process split were measured
    assert size["floor_arrow"]["rows"] == size["rows"] and size["floor_arrow"]["launch_rows"] > 0
    assert size["ratio_arrow"] == pytest.approx(size["cli"]["seconds"] / size["floor_arrow"]["seconds"])
    assert size["cli"]["json_mb"] == pytest.approx(size["analyze"]["json_mb"], rel=1e-6)  # the same JSON text
    rep = res["report"]
    assert rep["pages"] >= 2 and rep["second_share"] == pytest.approx(rep["second_s"] / rep["first_s"])
    assert res["machine"]["cores"] >= 1 and res["command"].startswith("python benchmarks/bench_analyzer.py")
    md = (out / "RESULTS.md").read_text()
    for text in (
        "## Targets",
        "## Performance",
        res["command"],
        f"{size['rows']:,}",
        "nsys",
        "Arrow floor",
        "second `ddp-profile report`",
    ):
        assert text in md, text


@pytest.mark.browser
@pytest.mark.skipif(
    not Path("/usr/bin/chromium").exists(), reason="Chromium not installed at /usr/bin/chromium"
)
def test_browser_row_measures_the_run_page_open_from_its_own_marks(tmp_path):
    """--browser's figure: navigation start → the timeline's first draw and the first idle task after load,
    read from the page's performance timeline (median of 3 opens); then the plotly figures below the fold,
    drawn when scrolled to."""
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import bench_analyzer
    finally:
        sys.path.remove(str(SCRIPT.parent))
    from ddp_profile.nsys.synth import synth_ddp_run

    path = synth_ddp_run(tmp_path / "tiny.sqlite")["path"]
    r = bench_analyzer.measure_render(str(path), browser=True)
    assert len(r["browser_open_all_s"]) == 3 and r["browser_open_s"] == sorted(r["browser_open_all_s"])[1]
    assert 0 < r["html_read_s"] <= r["timeline_drawn_s"] <= r["browser_open_s"] < 60
    assert r["figures"] >= 2 and r["figures_s"] > 0 and r["loadavg"]
