"""The launch-bound check where users look: the run page's "Is the step launch-bound?" block (verdict per
rank and the per-step table, or why it is missing) and the findings' sentence on each set's 1-GPU run.

Synthetic exports are built so every number is known in advance; the real launch-bound run
(none_small_fp32_1xh200) is checked against its launch section recomputed beside the report."""

from __future__ import annotations

import io
import re
import shutil
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from ddp_profile import nvtx_names as nn
from ddp_profile import report, schema
from ddp_profile.analysis.launches import LaunchAnalysis
from ddp_profile.findings import reference as qb
from ddp_profile.findings import run_sets
from ddp_profile.findings.data import RunData, launches_of

pytest.importorskip("plotly")
TRACES = Path(__file__).resolve().parents[2] / "traces"
SAMPLE = Path(__file__).resolve().parents[1] / "data" / "ddp_mlp_2xh200.sqlite"
PID = 777
H = 100_000  # each step's host range: [t0, t0 + 100 us]
T0 = (1_000_000, 2_000_000)


def _export(build_export, kernel_us: int, name: str) -> Path:
    """One rank, two steps. Per step: 4 kernels of ``kernel_us`` launched 20 us apart from t0 (each starts
    1 us after its launch), one cudaDeviceSynchronize [90, 95) us.

    Known answers per step: launches = kernels = 4, sync = 5 us, host per launch = (100 - 5) / 4 = 23.75 us,
    GPU per kernel = ``kernel_us``. kernel_us=2: busy 8 us, idle 92% -> launch-bound. kernel_us=19: busy
    76 us (kernels end 1 us before the next launch's kernel starts), idle 24% and 23.75 > 19 -> not bound
    (idle under the 25% line)."""
    starts = [t0 + 20_000 * i for t0 in T0 for i in range(4)]
    kernels = {
        "pid": [PID] * 8,
        "device": [0] * 8,
        "stream": [7] * 8,
        "start": [s + 1_000 for s in starts],
        "end": [s + 1_000 + kernel_us * 1_000 for s in starts],
        "name": ["vectorized_elementwise_kernel"] * 8,
        "correlation_id": list(range(1, 9)),
        "launch_start": starts,
    }
    api = {
        "pid": [PID] * 2,
        "start": [t0 + 90_000 for t0 in T0],
        "end": [t0 + 95_000 for t0 in T0],
        "name": ["cudaDeviceSynchronize_v3020"] * 2,
    }
    nvtx = {
        "pid": [PID] * 3,
        "tid": [PID] * 3,
        "start": [T0[0] - 500_000, *T0],
        "end": [-1, T0[0] + H, T0[1] + H],
        "text": [f"{nn.RANK_MARKER} 0/1", f"{nn.STEP} 0", f"{nn.STEP} 1"],
        "event_type": [34, 59, 59],
        "domain": [nn.DOMAIN] * 3,
        "payload": [0, 0, 1],
    }
    return build_export(name, processes=[{"pid": PID, "device": 0}], kernels=kernels, api=api, nvtx=nvtx)


def _page(path: Path) -> tuple[str, report.Run]:
    runs, failures = report.load_runs([path], progress=io.StringIO())
    assert not failures and len(runs) == 1
    return report.render_run_page(runs[0]), runs[0]


def _block(page: str) -> str:
    """The launch block's text: from its heading to the next h2, tags stripped."""
    m = re.search(r"<h2>Is the step launch-bound\?</h2>(.*?)(?=<h2>)", page, re.S)
    assert m, "launch block missing"
    return re.sub(r"<[^>]+>", " ", m.group(1))


def _rows(page: str) -> list[list[str]]:
    m = re.search(r"<h2>Is the step launch-bound\?</h2>.*?<tbody>(.*?)</tbody>", page, re.S)
    return [
        [c.replace(",", "") for c in re.findall(r"<td[^>]*>(.*?)</td>", tr)]
        for tr in re.findall(r"<tr>(.*?)</tr>", m.group(1))
    ]


def test_run_page_says_launch_bound_with_the_step_table(build_export):
    page, run = _page(_export(build_export, 2, "bound.sqlite"))
    text = _block(page)
    assert (
        "rank 0: launch-bound (2 of 2 steps launch-bound; median GPU idle 92.0 % &gt; 25 %, host 23.8 µs per "
        "launch &gt; GPU 2.0 µs per kernel)"
    ) in text
    # rank, step, host range/busy/idle ms, idle %, launches, host us/launch, GPU us/kernel, launch_bound
    assert _rows(page) == [
        ["0", "0", "0.100", "0.008", "0.092", "92.0", "4", "23.8", "2.0", "yes"],
        ["0", "1", "0.100", "0.008", "0.092", "92.0", "4", "23.8", "2.0", "yes"],
    ]
    assert isinstance(run.launches, LaunchAnalysis) and run.launches.steps["launch_bound"].all()


def test_run_page_verdict_flips_when_kernels_fill_the_step(build_export):
    page, _ = _page(_export(build_export, 19, "busy.sqlite"))
    text = _block(page)
    assert "rank 0: not launch-bound (0 of 2 steps launch-bound; median GPU idle 24.0 % &lt;= 25 %" in text
    assert [r[-1] for r in _rows(page)] == ["no", "no"] and [r[5] for r in _rows(page)] == ["24.0", "24.0"]


def test_run_page_without_the_api_table_says_why(tmp_path):
    """The real sample with its CUDA API table dropped still renders; the block names the missing table."""
    if not SAMPLE.exists():
        pytest.skip("sample export not present")
    path = tmp_path / "noapi.sqlite"
    shutil.copy(SAMPLE, path)
    con = sqlite3.connect(path)
    con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME")
    con.commit()
    con.close()
    page, run = _page(path)
    text = _block(page)
    assert "No launch-bound check for this run:" in text and "CUPTI_ACTIVITY_KIND_RUNTIME" in text
    assert "launch-bound (" not in text and not run.launches.made and run.launches.steps.empty
    assert page.rstrip().endswith("</html>")


def test_run_page_of_a_hand_built_run_says_not_computed():
    from conftest import make_run

    trace, analysis = make_run()
    page = report.render_run_page(report.Run("r", trace, analysis, dict(trace.run)))
    assert "the launch diagnosis was not computed for this run" in _block(page)


@pytest.mark.skipif(not (TRACES / "none_small_fp32_1xh200").is_dir(), reason="committed traces not present")
def test_real_launch_bound_run_page_matches_analyze_launches(launch_section):
    from ddp_profile.nsys.api import load_api_calls
    from ddp_profile.nsys.loader import load_trace

    page, _ = _page(TRACES / "none_small_fp32_1xh200")
    trace = load_trace(TRACES / "none_small_fp32_1xh200")
    res = launch_section(trace, load_api_calls(trace))
    text = _block(page)
    for line in res.verdicts():
        assert line.replace(">", "&gt;").replace("<", "&lt;") in text
    assert "rank 0: launch-bound" in text
    rows = _rows(page)
    assert [int(r[1]) for r in rows] == res.steps["step"].tolist()
    assert [int(r[6]) for r in rows] == res.steps["launches"].tolist()
    assert [r[-1] for r in rows] == ["yes"] * len(res.steps)


# ---- findings ------------------------------------------------------------------------------------------


def _steps(idle_pct, host_us, gpu_us) -> pd.DataFrame:
    """LAUNCH_STEP rows of one rank, one per value; 10 ms steps; bound by the analysis rule."""
    n = len(idle_pct)
    df = pd.DataFrame({c: [0] * n for c in schema.LAUNCH_STEP_COLUMNS})
    df["step"] = range(n)
    df["step_ns"] = 10_000_000
    df["idle_pct"], df["host_us_per_launch"], df["gpu_us_per_kernel"] = idle_pct, host_us, gpu_us
    df["launch_bound"] = (df["idle_pct"] > 25.0) & (df["host_us_per_launch"] > df["gpu_us_per_kernel"])
    return df


def _run(strategy, model, dtype, world, launches=None) -> RunData:
    meta = {
        "strategy": strategy,
        "model": model,
        "dtype": dtype,
        "world_size": world,
        "config": {"batch": 4, "seq_len": 128},
    }
    return RunData(
        set="main",
        name=f"{strategy}_{model}_{dtype}_{world}x",
        folder=Path("."),
        meta=meta,
        trace=None,
        analysis=SimpleNamespace(),
        summary={"n_steps": 3},
        launches=launches,
    )


def _limits_text(small_launches, a_launches) -> str:
    runs = [
        _run("none", "small", "fp32", 1, small_launches),
        _run("naive", "small", "fp32", 2),
        _run("none", "xl", "fp32", 1, a_launches),
        _run("naive", "xl", "fp32", 2),
    ]
    sec = qb.limits(runs, {}, run_sets(runs))
    return " ".join(sec.paragraphs())


def test_findings_sentence_follows_the_launch_diagnosis():
    bound = LaunchAnalysis(
        _steps([60.0, 70.0, 80.0], [30.0, 40.0, 50.0], [9.0, 10.0, 11.0]), pd.DataFrame(), pd.DataFrame()
    )
    gpu = LaunchAnalysis(
        _steps([3.0, 4.0, 30.0], [40.0, 45.0, 60.0], [50.0, 55.0, 20.0]), pd.DataFrame(), pd.DataFrame()
    )
    text = _limits_text(bound, gpu)
    assert (
        "set small's 1-GPU run is launch-bound in 3 of 3 steps (median GPU idle 70.0 %, host 40.0 µs per "
        "launch vs GPU 10.0 µs per kernel), so host-side launch overhead"
    ) in text
    assert (
        "set A's 1-GPU run is not launch-bound (1 of 3 steps launch-bound; median GPU idle 4.0 %, host 45.0 µs "
        "per launch vs GPU 50.0 µs per kernel)"
    ) in text
    flipped = _limits_text(gpu, bound)  # swap the diagnoses: the verdict words swap with them
    assert "set small's 1-GPU run is not launch-bound (1 of 3 steps" in flipped
    assert "set A's 1-GPU run is launch-bound in 3 of 3 steps (median GPU idle 70.0 %" in flipped
    assert "set small's 1-GPU run is launch-bound" not in flipped
    missing = _limits_text("x.sqlite: no CUPTI_ACTIVITY_KIND_RUNTIME table", bound)
    assert (
        "set small's 1-GPU run (none) has no launch-bound check: x.sqlite: no CUPTI_ACTIVITY_KIND_RUNTIME"
        in missing
    )


def test_findings_compute_the_diagnosis_once_per_run_that_needs_it(monkeypatch):
    """launches_of makes the diagnosis on first use (only for the 1-GPU runs the limits describe) and keeps it;
    a run that arrived with one (from the report) is not recomputed."""
    import ddp_profile.report.runs as rep

    calls = []
    made = LaunchAnalysis(_steps([60.0], [30.0], [9.0]), pd.DataFrame(), pd.DataFrame())
    monkeypatch.setattr(rep, "launch_diagnosis", lambda trace: calls.append(trace) or made)
    small = _run("none", "small", "fp32", 1)
    small.trace = "trace-of-small"
    given = LaunchAnalysis(_steps([5.0], [30.0], [40.0]), pd.DataFrame(), pd.DataFrame())
    runs = [small, _run("naive", "small", "fp32", 2), _run("none", "xl", "fp32", 1, given)]
    for r in runs[1:]:
        r.trace = "must not be read"
    text = " ".join(qb.limits(runs, {}, run_sets(runs)).paragraphs())
    assert calls == ["trace-of-small"] and launches_of(small) is made and calls == ["trace-of-small"]
    assert "set small's 1-GPU run is launch-bound in 1 of 1 steps" in text
    assert "set A's 1-GPU run is not launch-bound (0 of 1 steps" in text


def test_inferred_steps_launch_block_says_inferred_host_range_and_lists_no_note_twice():
    """gpt-accum has no NVTX: the launch block measures an inferred host range (not an "NVTX range") and
    leaves the step-inference note to the page's notes above, where it already stands."""
    page, run = _page(TRACES / "foreign" / "gpt-accum")
    text = _block(page)
    assert "host range, inferred from the kernel launches (no step NVTX ranges)" in text
    assert "NVTX range (median" not in text
    assert "steps inferred from the GPU trace" not in text
    assert page.count("steps inferred from the GPU trace (no closed NVTX") == 1


@pytest.mark.skipif(not (TRACES / "none_small_fp32_1xh200").is_dir(), reason="committed traces not present")
def test_report_and_launches_command_read_one_section(tmp_path):
    """The report's launch block and `ddp-profile launches -o x.json` read the same section of the analysis:
    the report's loader (trace with its host waits, API calls read once) and the command (its own load) give
    the same JSON, and the run's launches are its analysis' section, not a second computation."""
    from ddp_profile.cli import main
    from ddp_profile.commands.launches import render_json
    from ddp_profile.report.build import load_one

    run = TRACES / "none_small_fp32_1xh200"
    _, analysis, launches, _ = load_one(run)
    assert launches is analysis.launches and launches.made and len(launches.steps)
    out = tmp_path / "x.json"
    assert main(["launches", str(run), "-o", str(out)]) == 0
    assert out.read_text() == render_json(launches)
