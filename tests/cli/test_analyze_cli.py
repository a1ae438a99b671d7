"""`ddp-profile analyze` formats, sections and error exits, on the real sample export."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from ddp_profile import schema
from ddp_profile.cli import main

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "ddp_mlp_2xh200.sqlite"
pytestmark = pytest.mark.skipif(not SAMPLE.exists(), reason="sample export not present")


def test_json_keys_are_stable(capsys):
    assert main(["analyze", str(SAMPLE), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"version", "summary", "notes", "steps", "ranks", "kernels", "collectives", "cost_model",
            "contention", "phases"} <= set(out)
    assert len(out["steps"]) == 12  # 2 ranks x 6 steps
    for key in ("step_ns", "compute_ns", "comm_ns", "overlap_ns", "exposed_comm_ns", "comm_tail_ns", "idle_ns"):
        assert all(isinstance(r[key], int | float) for r in out["steps"])
    assert all("overlap_pct" in r for r in out["ranks"])
    assert [r for r in out["kernels"] if r["kind"] == "nccl"]
    assert all("compute_overlap_pct" in r for r in out["kernels"] if r["kind"] == "nccl")
    assert out["notes"]  # no harness NVTX in this sample: the cost model explains why it is missing


def test_table_and_section(capsys):
    assert main(["analyze", str(SAMPLE), "--section", "ranks"]) == 0
    text = capsys.readouterr().out
    assert "== ranks (2 rows) ==" in text and "overlap_pct" in text and "== steps" not in text


def test_csv_to_file_and_steps_slice(tmp_path, capsys):
    out = tmp_path / "steps.csv"
    assert main(["analyze", str(SAMPLE), "--format", "csv", "--steps", "2:", "-o", str(out)]) == 0
    assert capsys.readouterr().out == ""
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert list(rows[0]) == schema.STEP_SECTION_COLUMNS
    assert sorted({int(r["step"]) for r in rows}) == [2, 3, 4, 5]  # warm-up steps 0 and 1 dropped
    assert [p.name for p in tmp_path.iterdir()] == ["steps.csv"]  # no temp file left behind


@pytest.mark.parametrize("argv, code, text", [
    (["--format", "csv", "--section", "all"], 2, "one table"),
    (["--phase", "backward"], 2, "NAME=REGEX"),
    (["--step-pattern", "(("], 2, "not a valid regex"),
])
def test_usage_errors(argv, code, text, capsys):
    assert main(["analyze", str(SAMPLE), *argv]) == code
    err = capsys.readouterr().err
    assert text in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_missing_file_is_one_line(tmp_path, capsys):
    assert main(["analyze", str(tmp_path / "nope.sqlite")]) == 3
    assert "Traceback" not in capsys.readouterr().err


def test_unwritable_output(tmp_path, capsys):
    assert main(["analyze", str(SAMPLE), "-o", str(tmp_path / "no" / "such" / "dir.json")]) == 5
    assert "cannot write" in capsys.readouterr().err
