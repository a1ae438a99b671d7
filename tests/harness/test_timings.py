"""``python -m ddp_profile.harness.timings``: un-profiled repeats folded into the profiled run's JSON.

The run JSONs are real: the harness runs three times on CPU (gloo, two ranks, model tiny); one plays the
profiled run, two the un-profiled repeats. Expected values are derived from those files in the test.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cli

from ddp_profile.harness import timings

ROOT = Path(__file__).resolve().parents[2]
TIMINGS = "ddp_profile.harness.timings"
RUN = "bucketed-25mb_tiny_fp32_2xcpu"


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    base = tmp_path_factory.mktemp("timings")
    paths = []
    for name in ("profiled", "rep1", "rep2"):
        out = base / name
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "ddp_profile.harness",
                "--strategy",
                "bucketed",
                "--model",
                "tiny",
                "--nproc",
                "2",
                "--seq-len",
                "8",
                "--batch",
                "2",
                "--warmup",
                "1",
                "--steps",
                "3",
                "--out",
                str(out),
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        paths.append(out / f"{RUN}.json")
    return paths


def _copy(records, tmp_path):
    prof = tmp_path / "profiled.json"
    shutil.copyfile(records[0], prof)
    return prof, records[1:]


@pytest.mark.slow
def test_fold_writes_the_unprofiled_numbers(records, tmp_path):
    prof, reps = _copy(records, tmp_path)
    before = json.loads(prof.read_text())
    proc = run_cli([prof, *reps, "--host", "campaign-cpu-test"], module=TIMINGS)
    assert proc.returncode == 0, proc.stderr
    after = json.loads(prof.read_text())
    rep = [json.loads(p.read_text()) for p in reps]
    every = rep[0]["step_ms_slowest_rank"] + rep[1]["step_ms_slowest_rank"]
    median = sorted(every)[len(every) // 2]  # the harness's rule for step_ms_median
    assert after["unprofiled_step_ms_median"] == median
    assert after["unprofiled_ci_low_ms"] <= median <= after["unprofiled_ci_high_ms"]
    assert after["unprofiled_ci_seed"] == 0 and after["unprofiled_ci_resamples"] > 0
    # each repeat's median by the same rule is the harness's own step_ms_median of that run
    assert after["unprofiled_repeat_medians_ms"] == [r["step_ms_median"] for r in rep]
    assert after["unprofiled_step_ms_min"] == min(every) and after["unprofiled_step_ms_max"] == max(every)
    assert after["unprofiled_repeats"] == 2 and after["unprofiled_steps"] == len(every) == 6
    assert after["profiler_overhead_pct"] == pytest.approx(
        100 * (before["step_ms_median"] / median - 1), abs=1e-3
    )
    assert after["host"] == "campaign-cpu-test"
    assert {k: v for k, v in after.items() if k in before} == before  # nothing of the record changed
    assert "profiler overhead" in proc.stdout
    # folding again (e.g. after one more repeat) replaces the numbers instead of mixing them
    assert run_cli([prof, reps[0]], module=TIMINGS).returncode == 0
    again = json.loads(prof.read_text())
    assert again["unprofiled_repeats"] == 1 and "host" not in again
    assert again["unprofiled_repeat_medians_ms"] == [rep[0]["step_ms_median"]]


@pytest.mark.slow
def test_records_without_the_slowest_rank_list_are_folded_alike(records):
    rep = [json.loads(p.read_text()) for p in records[1:]]
    prof = json.loads(records[0].read_text())
    full = timings.fold(prof, rep)
    older = [{k: v for k, v in r.items() if k != "step_ms_slowest_rank"} for r in rep]
    assert timings.fold(prof, older) == full


@pytest.mark.slow
def test_a_different_configuration_is_refused_and_nothing_is_written(records, tmp_path):
    prof, reps = _copy(records, tmp_path)
    other = json.loads(reps[0].read_text())
    other["config"]["batch"] += 1
    bad = tmp_path / "other.json"
    bad.write_text(json.dumps(other))
    text = prof.read_text()
    proc = run_cli([prof, reps[1], bad], module=TIMINGS)
    assert proc.returncode != 0 and "differs from the profiled run in 'config'" in proc.stderr
    assert prof.read_text() == text


def test_missing_or_broken_inputs_are_one_line_errors(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    listed = tmp_path / "list.json"
    listed.write_text("[]")
    for args in ((tmp_path / "absent.json", broken), (broken, broken), (listed, listed)):
        proc = run_cli(args, module=TIMINGS)
        assert proc.returncode != 0 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    with pytest.raises(Exception, match="at least one"):
        timings.fold({}, [])
