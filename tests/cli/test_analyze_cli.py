"""`ddp-profile analyze` formats, sections and error exits, on the real sample export."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest

from ddp_profile import schema
from ddp_profile.analysis import analyze
from ddp_profile.cli import main
from ddp_profile.commands.analyze import SECTIONS, render
from ddp_profile.fmt import fmt_ms
from ddp_profile.nsys.loader import load_trace
from ddp_profile.report.answer_text import per_rank_of, value_text, verdict_of

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "ddp_mlp_2xh200.sqlite"
pytestmark = pytest.mark.skipif(not SAMPLE.exists(), reason="sample export not present")


def test_json_keys_are_stable(capsys):
    assert main(["analyze", str(SAMPLE), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {
        "version",
        "summary",
        "notes",
        "steps",
        "ranks",
        "kernels",
        "collectives",
        "cost_model",
        "contention",
        "phases",
    } <= set(out)
    assert len(out["steps"]) == 12  # 2 ranks x 6 steps
    for key in (
        "step_ns",
        "compute_ns",
        "comm_ns",
        "overlap_ns",
        "exposed_comm_ns",
        "comm_tail_ns",
        "idle_ns",
    ):
        assert all(isinstance(r[key], int | float) for r in out["steps"])
    assert all("overlap_pct" in r for r in out["ranks"])
    assert [r for r in out["kernels"] if r["kind"] == "nccl"]
    assert all("compute_overlap_pct" in r for r in out["kernels"] if r["kind"] == "nccl")
    assert out["notes"]  # no harness NVTX in this sample: the cost model explains why it is missing


def test_table_and_section(capsys):
    assert main(["analyze", str(SAMPLE), "--section", "ranks"]) == 0
    text = capsys.readouterr().out
    assert "== ranks (2 rows) ==" in text and "overlap (%)" in text and "== steps" not in text


def test_table_default_is_short_with_units_and_no_e_notation(capsys):
    """Default table: per-rank summary in ms (units in the headers), the summary with units, no section."""
    assert main(["analyze", str(SAMPLE)]) == 0
    text = capsys.readouterr().out
    assert "== per rank" in text and "step (ms)" in text and "compute (ms)" in text
    assert "== steps" not in text and "== collectives" not in text and "--section all" in text
    assert len(text) < 8_000  # a screenful, not every section (35 KB here with --section all)
    assert not re.search(r"\d[eE][+-]\d", text)  # no nanoseconds in e-notation
    steps = analyze(load_trace(SAMPLE)).steps
    med0 = steps.loc[steps["rank"] == 0, "step_ns"].median()
    row0 = next(line for line in text.splitlines() if re.match(r"\s*0\s", line))
    assert fmt_ms(med0, unit=False) in row0  # rank 0's median step, in ms with 3 significant digits
    summary = next(line for line in text.splitlines() if line.startswith("summary: "))
    names = [kv.split("=", 1)[0] for kv in re.split(r", (?=[a-z_]+=)", summary.removeprefix("summary: "))]
    assert len(names) == len(set(names)), names  # 'comm=' once: the share of the step is comm_share
    assert "comm_share" in names and "overlap_share" in names


def test_section_all_and_repeatable(capsys):
    assert main(["analyze", str(SAMPLE), "--section", "all"]) == 0
    text = capsys.readouterr().out
    for name in SECTIONS:
        assert f"== {name} (" in text
    assert not re.search(r"\d[eE][+-]\d", text)
    assert main(["analyze", str(SAMPLE), "--section", "ranks", "--section", "model"]) == 0
    text = capsys.readouterr().out
    assert "== ranks (" in text and "== model (" in text and "== steps" not in text


def test_verdict_comes_first_and_per_rank_values_replace_the_median():
    """With the analysis's verdict (and per-rank values where ranks differ > 2x), the table starts with the
    verdict and the summary shows each rank's value for those metrics."""
    res = analyze(load_trace(SAMPLE))
    if verdict_of(res) is None:  # an analysis without a verdict: give it one to render
        res.verdict = {
            "bound_by": "straggler",
            "rank": 0,
            "removable_ns": 3_456_789,
            "share_pct": 12.5,
            "what_to_change": "log the loss every 50 steps",
            "expected_gain_ns": 3_000_000,
            "spread_ns": 250_000,
            "advice": [
                {
                    "rule": "host-sync",
                    "what_to_change": "avoid .item() in the loop",
                    "gain_upper_ns": 3_000_000,
                    "spread_ns": 250_000,
                    "evidence": "cudaStreamSynchronize 3.0 ms per step on rank 0",
                }
            ],
        }
        res.per_rank = {"exposed_wait_ns": {0: 1_000_000, 1: 5_000_000}}
    v = verdict_of(res)
    text = render(res, "table", None)
    first = text.splitlines()[:2]
    assert first[0] == "== verdict ==" and first[1].startswith("Bound by")
    assert fmt_ms(v["removable_ns"]) in first[1]
    assert per_rank_of(res)
    for metric, values in per_rank_of(res).items():  # in the summary line, or the line after it
        line = next(
            x
            for x in text.splitlines()
            if x.startswith("summary:" if metric in res.summary() else "ranks differ > 2× in:")
        )
        for r, x in values.items():
            assert f"rank {r} {value_text(metric, x)}" in line


def test_csv_to_file_and_steps_slice(tmp_path, capsys):
    out = tmp_path / "steps.csv"
    assert main(["analyze", str(SAMPLE), "--format", "csv", "--steps", "2:", "-o", str(out)]) == 0
    assert capsys.readouterr().out == ""
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert list(rows[0]) == schema.STEP_SECTION_COLUMNS
    assert sorted({int(r["step"]) for r in rows}) == [2, 3, 4, 5]  # warm-up steps 0 and 1 dropped
    assert [p.name for p in tmp_path.iterdir()] == ["steps.csv"]  # no temp file left behind


@pytest.mark.parametrize(
    "argv, code, text",
    [
        (["--format", "csv", "--section", "all"], 2, "one table"),
        (["--phase", "backward"], 2, "NAME=REGEX"),
        (["--step-pattern", "(("], 2, "not a valid regex"),
    ],
)
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
