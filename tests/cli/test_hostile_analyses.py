"""Hostile inputs for the analyses added since round 2 (critical path, straggler, verdict, launches, cycles):
each case is a synthetic run (``tests/synth_runs.py``) that is legal but odd, run through ``analyze`` (and
``launches`` or ``report`` where they read it) in process, with the promise it keeps: exit 0 (or the
documented code with one line), no traceback, every rank and step it holds still in the answer (nothing
lost), within a time bound."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest
from synth_runs import Rank, write_run

from ddp_profile.cli import main

BOUND_S = 120  # generous: CI's 2 shared cores; these runs take a second or two


def _run(argv, capfd) -> tuple[int, str, str]:
    t0 = time.monotonic()
    code = main([str(a) for a in argv])
    out, err = capfd.readouterr()
    assert time.monotonic() - t0 < BOUND_S
    assert "Traceback" not in err
    return code, out, err


def _analysis(paths, capfd, *extra) -> dict:
    code, out, err = _run(["analyze", *paths, "--format", "json", "--section", "all", *extra], capfd)
    assert code == 0, err
    return json.loads(out)


def _ranks_steps(doc: dict) -> set[tuple[int, int]]:
    return {(int(r["rank"]), int(r["step"])) for r in doc["steps"]}


def _strip(path: Path, sql: str, *args) -> None:
    con = sqlite3.connect(path)
    con.execute(sql, args)
    con.commit()
    con.close()


def test_ranks_that_share_no_collective(tmp_path, capfd):
    """Rank 1 runs no NCCL kernel: its steps stay, the straggler has nothing to compare (no lead), and a note
    says its communication is unknown."""
    paths = write_run(tmp_path, [Rank(), Rank(nccl=False)])
    doc = _analysis(paths, capfd)
    assert _ranks_steps(doc) == {(r, s) for r in (0, 1) for s in range(3)}
    assert all(row["straggler_lead_ns"] in (None, 0) or row["straggler_lead_ns"] >= 0 for row in doc["steps"])
    assert any("rank 1" in n or "NCCL" in n for n in doc.get("notes", [])), doc.get("notes")


def test_one_rank_without_cuda_api_rows(tmp_path, capfd):
    """Rank 1's launch calls are missing: the analysis keeps both ranks (its host time unknown, not an error);
    ``launches`` still answers for both."""
    paths = write_run(tmp_path, [Rank(), Rank(delays=[0, 20_000, 40_000])])
    _strip(
        paths[0],
        "DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE globalTid >= ? AND globalTid < ?",
        0x1000000000000 + (1001 << 24),
        0x1000000000000 + (1002 << 24),
    )
    doc = _analysis(paths, capfd)
    assert _ranks_steps(doc) == {(r, s) for r in (0, 1) for s in range(3)}
    code, out, err = _run(["launches", *paths], capfd)
    assert code == 0, err


@pytest.mark.parametrize("how", ["session starts seconds apart", "clock drift"])
def test_per_rank_files_whose_clocks_disagree(how, tmp_path, capfd):
    """Per-rank files whose session starts disagree by 3 s with the events (a host's clock off), or whose
    clock runs 1e-4 fast: both ranks and every step are kept and a straggler lead is never negative. Files
    named as one job's ranks whose session clocks put them apart in time are aligned on their collectives
    (the clock note says by how much); files of differently named jobs that do not overlap are refused
    (tests/nsys/test_loader.py)."""
    if how == "clock drift":
        paths = write_run(tmp_path, [Rank(), Rank()], per_rank_files=True, clock_rates=[1.0, 1.0001])
    else:
        paths = write_run(tmp_path, [Rank(), Rank()], per_rank_files=True)
        _strip(
            paths[1], "UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = utcEpochNs + ?", 3_000_000_000
        )
    code, out, err = _run(["analyze", *paths, "--format", "json", "--section", "all"], capfd)
    assert code == 0, err
    doc = json.loads(out)
    if how != "clock drift":  # named as one job's ranks: aligned on their collectives, never refused
        assert "rank 1 by -3,000 ms" in " ".join(doc["notes"]), doc["notes"]
    assert _ranks_steps(doc) == {(r, s) for r in (0, 1) for s in range(3)}
    assert all((row["straggler_lead_ns"] or 0) >= 0 for row in doc["steps"])
    cp = doc["critical_path"]
    parts = ["compute_ns", "exposed_transfer_ns", "wait_ns", "host_ns", "idle_ns"]
    assert all(sum(row[p] for p in parts) == row["span_ns"] for row in cp)


def test_one_ranks_last_step_cut_short(tmp_path, capfd):
    """Rank 1's last step stops after backward (no optimizer, its step range never closed): every complete
    step is kept on both ranks, and the parts of each critical-path step still add up."""
    paths = write_run(tmp_path, [Rank(), Rank(cut_last=True)], n_steps=4)
    doc = _analysis(paths, capfd)
    assert {(r, s) for r in (0, 1) for s in range(3)} <= _ranks_steps(doc)
    parts = ["compute_ns", "exposed_transfer_ns", "wait_ns", "host_ns", "idle_ns"]
    assert all(sum(row[p] for p in parts) == row["span_ns"] for row in doc["critical_path"])


def test_collectives_with_identical_start_times_on_every_rank(tmp_path, capfd):
    """Every rank starts every collective at the same ns: no rank leads (lead 0, the tie to the lowest rank),
    and every rank counts as last at every collective (100 % each)."""
    paths = write_run(tmp_path, [Rank(), Rank(), Rank()])
    doc = _analysis(paths, capfd)
    assert {row["straggler_lead_ns"] for row in doc["steps"]} <= {0, None}
    assert {row["straggler_rank"] for row in doc["steps"]} <= {0, None}
    assert [round(r["last_arrival_pct"]) for r in doc["ranks"]] == [100, 100, 100]


def test_optimizer_every_n_cycles_with_one_update_missing(tmp_path, capfd):
    """A DeepSpeed-like run: the optimizer runs every 2nd gradient cycle, and one of those updates is missing
    on rank 1; both ranks' steps are kept and the answer is exit 0."""
    paths = write_run(
        tmp_path, [Rank(optimizer_every=2), Rank(optimizer_every=2, skip_optimizer=(3,))], n_steps=6
    )
    doc = _analysis(paths, capfd)
    assert {r for r, _ in _ranks_steps(doc)} == {0, 1}


def test_kernels_of_one_rank_all_unnamed(tmp_path, capfd):
    """Rank 1's kernel names point at no string: its kernels are of unknown kind (a warning says so), and
    both ranks remain in the answer."""
    paths = write_run(tmp_path, [Rank(), Rank()])
    _strip(
        paths[0],
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET shortName = 999999, demangledName = 999999 "
        "WHERE globalPid = ?",
        0x1000000000000 + (1001 << 24),
    )
    doc = _analysis(paths, capfd)
    assert {r for r, _ in _ranks_steps(doc)} == {0, 1}


def test_steps_present_on_only_some_ranks(tmp_path, capfd):
    """Rank 1 ran steps 0-2, rank 0 steps 0-4: steps 3 and 4 are not every rank's iteration, so they are left
    out with a note naming them (not silently); ``--steps 1:4`` keeps the common steps 1 and 2 on both ranks;
    ``--steps 3:5`` (steps only rank 0 ran) is exit 2 with one line naming the steps the trace has."""
    paths = write_run(tmp_path, [Rank(), Rank(steps=3)], n_steps=5)
    doc = _analysis(paths, capfd)
    assert _ranks_steps(doc) == {(r, s) for r in (0, 1) for s in range(3)}
    assert any("left out" in n and "3, 4" in n for n in doc["notes"]), doc["notes"]
    doc = _analysis(paths, capfd, "--steps", "1:4")
    assert _ranks_steps(doc) == {(r, s) for r in (0, 1) for s in (1, 2)}
    code, _, err = _run(["analyze", *paths, "--steps", "3:5"], capfd)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "0–2" in err, err


def test_report_of_the_hostile_runs_lists_every_run(tmp_path, capfd):
    """The same odd runs in one report: every run gets its page, exit 0."""
    write_run(tmp_path / "runs" / "no_collective", [Rank(), Rank(nccl=False)])
    write_run(tmp_path / "runs" / "cut_short", [Rank(), Rank(cut_last=True)], n_steps=4)
    write_run(tmp_path / "runs" / "fewer_steps", [Rank(), Rank(steps=2)], n_steps=4)
    code, _, err = _run(
        ["report", tmp_path / "runs", "-o", tmp_path / "rep", "--no-findings", "--jobs", "1"], capfd
    )
    assert code == 0, err
    pages = sorted(p.name for p in (tmp_path / "rep").glob("run-*.html"))
    assert pages == ["run-cut_short.html", "run-fewer_steps.html", "run-no_collective.html"]


HUGE_STEPS = 100_000
HUGE_BOUND_S, HUGE_BOUND_MB = 600, 3_000  # generous: CI's 2 shared cores (about 20 s of CPU when idle)
CHILD = (
    "import resource, sys\n"
    "from ddp_profile.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "sys.stderr.write(f'\\npeak_mb {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f}\\n')\n"
    "sys.exit(code)\n"
)


@pytest.mark.slow  # ~45 s of CPU (the export's build and the analysis), a minute or more on 2 loaded cores
def test_one_hundred_thousand_steps(tmp_path):
    """100,000 inferred steps (2 ranks, 3 compute kernels and one all-reduce per rank and step, no step NVTX):
    ``analyze --format json -o`` in its own process exits 0 within HUGE_BOUND_S with no traceback, its peak
    RSS under HUGE_BOUND_MB, and every step of both ranks in the answer."""
    import re
    import subprocess
    import sys

    from ddp_profile.nsys.synth_scale import synth_scale_run

    path, out = tmp_path / "huge.sqlite", tmp_path / "huge.json"
    synth_scale_run(
        path,
        n_kernels=HUGE_STEPS * 4 * 2,
        n_ranks=2,
        kernels_per_step=3,
        n_buckets=1,
        nvtx_steps=False,
        chunk_steps=8192,
    )
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, "analyze", str(path), "--format", "json", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=HUGE_BOUND_S,
        cwd=Path(__file__).resolve().parents[2],
    )
    seconds = time.monotonic() - t0
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    peak = int(re.search(r"peak_mb (\d+)", proc.stderr).group(1))
    assert peak < HUGE_BOUND_MB, f"peak RSS {peak} MB after {seconds:.0f} s"
    with open(out, encoding="utf-8") as f:
        head = f.read(1 << 16)  # the summary comes first; the whole file is hundreds of MB
    assert re.search(r'"n_steps": (\d+)', head).group(1) == str(HUGE_STEPS)
    assert re.search(r'"n_ranks": (\d+)', head).group(1) == "2"
