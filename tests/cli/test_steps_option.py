"""``--steps A:B`` selects by step label (A <= step < B, open ends allowed) in analyze,
launches, export and report; a selection with no step in it is a usage error (exit 2, one line) that names
the labels the trace has.

The committed torch_ddp run's NVTX steps are numbered 3-7 by the harness's loop (warm-up steps before the
capture), so a selection by position would differ from one by label."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from ddp_profile.cli import main

RUN = Path(__file__).resolve().parents[2] / "traces" / "torch_ddp-25mb_small_fp32_2xh200"
pytestmark = pytest.mark.skipif(not RUN.exists(), reason="committed trace not present")


def _labels(rows) -> list[int]:
    return sorted({int(r["step"]) for r in rows if r.get("step") is not None})


def _one_line_exit_2(argv, capsys, want: str) -> None:
    """Exit 2 with one error line (``report`` also prints its progress lines before it, and a load slower than
    ``options.SLOW_S`` on a busy machine its progress bar)."""
    assert main(argv) == 2
    err = [
        line
        for line in capsys.readouterr().err.strip().splitlines()
        if not line.startswith(("report: ", "loading ["))
    ]
    assert len(err) == 1 and want in err[0], err


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory):
    out = {}
    for spec in ("all", "4:6", "6:", ":5", "5"):
        path = tmp_path_factory.mktemp("a") / "out.json"
        # --section all: comm_kinds is computed only when asked for
        assert (
            main(
                [
                    "analyze",
                    str(RUN),
                    "--format",
                    "json",
                    "--section",
                    "all",
                    "--steps",
                    spec,
                    "-o",
                    str(path),
                ]
            )
            == 0
        )
        out[spec] = json.loads(path.read_text())
    return out


def test_analyze_selects_by_label(analyzed):
    assert _labels(analyzed["all"]["steps"]) == [3, 4, 5, 6, 7]
    assert _labels(analyzed["4:6"]["steps"]) == [4, 5]
    assert _labels(analyzed["6:"]["steps"]) == [6, 7]
    assert _labels(analyzed[":5"]["steps"]) == [3, 4]
    assert _labels(analyzed["5"]["steps"]) == [5]


def test_every_section_follows_the_selection(analyzed):
    got = analyzed["4:6"]
    assert got["summary"]["population"] == "steps" and got["summary"]["n_steps"] == 2
    all_steps = analyzed["all"]["summary"]
    assert got["summary"]["n_collectives"] < all_steps["n_collectives"]
    for section in ("phases", "comm_kinds", "collectives"):
        assert set(_labels(got[section])) <= {4, 5} and _labels(got[section]), section
    assert all(r["step"] in (4, 5) for r in got["collectives"])  # none outside the selection
    # the per-rank overlap and per-kernel sums count the kernels of the selected steps only ...
    whole = analyzed["all"]
    for section, key in (("ranks", "comm_ns"), ("kernels", "total_ns")):
        picked = sum(r[key] for r in got[section])
        assert 0 < picked < sum(r[key] for r in whole[section]), section
    assert sum(r["count"] for r in got["kernels"]) < sum(r["count"] for r in whole["kernels"])
    # ... while the summary's trace_ keys stay whole-trace, as documented
    for key in ("trace_n_collectives", "trace_wait_pct_of_comm", "trace_overlap_pct"):
        assert got["summary"][key] == whole["summary"][key], key
    assert got["summary"]["n_collectives"] == len(got["collectives"])


def test_empty_selection_names_the_labels(capsys):
    _one_line_exit_2(
        ["analyze", str(RUN), "--steps", "10:20"], capsys, "no step in 10:20; the trace has steps 3–7"
    )
    _one_line_exit_2(["analyze", str(RUN), "--steps", ":3"], capsys, "the trace has steps 3–7")


def test_launches_selects_by_label(tmp_path, capsys):
    out = tmp_path / "l.json"
    assert main(["launches", str(RUN), "--steps", "4:6", "-o", str(out)]) == 0
    got = json.loads(out.read_text())
    assert _labels(got["steps"]) == [4, 5]
    assert {r["rank"] for r in got["steps"]} == {0, 1}
    capsys.readouterr()
    _one_line_exit_2(
        ["launches", str(RUN), "--steps", "8:"], capsys, "no step in 8:; the trace has steps 3–7"
    )


def test_export_selects_by_label(tmp_path, capsys):
    out = tmp_path / "t.json.gz"
    assert main(["export", str(RUN), "--steps", "6:", "-o", str(out)]) == 0
    events = json.loads(gzip.decompress(out.read_bytes()))
    events = events["traceEvents"] if isinstance(events, dict) else events
    steps = {
        e["args"]["step"]
        for e in events
        if e.get("name", "").startswith("step ") and "step" in e.get("args", {})
    }
    assert steps == {6, 7}
    capsys.readouterr()
    _one_line_exit_2(
        ["export", str(RUN), "--steps", "0:2", "-o", str(tmp_path / "x.json")],
        capsys,
        "no step in 0:2; the trace has steps 3–7",
    )
    assert not (tmp_path / "x.json").exists()


def test_report_selects_by_label(tmp_path, capsys):
    from ddp_profile.analysis.identity import StepSelection
    from ddp_profile.report.build import load_one

    _, analysis, launches, calls = load_one(RUN, StepSelection(steps="4:6"))
    assert sorted(analysis.steps["step"].unique()) == [4, 5]
    assert sorted(launches.steps["step"].unique()) == [4, 5]
    steps = analysis.phases[analysis.phases["phase"] == "step"]  # the CPU rows hold those steps' calls only
    lo, hi = steps[["start_ns", "host_start_ns"]].min().min(), steps[["end_ns", "host_end_ns"]].max().max()
    assert len(calls) and calls["start_ns"].between(lo, hi).all()
    capsys.readouterr()
    _one_line_exit_2(
        ["report", str(RUN), "-o", str(tmp_path / "r"), "--steps", "20:", "--no-findings"],
        capsys,
        "no step in 20:; the trace has steps 3–7",
    )
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("command", ["analyze", "launches", "report", "export", "inspect"])
def test_every_step_command_takes_one_step_selection(command):
    """--step-pattern, --phase and --steps are declared once (commands/options.py) and reach the command as
    one StepSelection, the later of two --phase items for one phase winning."""
    from ddp_profile.analysis.identity import StepSelection
    from ddp_profile.cli import build_parser
    from ddp_profile.commands.options import step_selection

    out = [] if command == "inspect" else ["-o", "out.json"]
    args = build_parser(command).parse_args(
        [
            command,
            "x.sqlite",
            *out,
            "--step-pattern",
            "^it ",
            "--phase",
            "backward=bw",
            "--phase",
            "backward=bwd",
            "--steps",
            "2:",
        ]
    )
    assert step_selection(args) == StepSelection(pattern="^it ", phases=(("backward", "bwd"),), steps="2:")
