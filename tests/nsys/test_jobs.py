"""``--jobs N`` of ``analyze`` and ``inspect``: per-rank files read in parallel give the same trace as one
job, and the progress bar goes to stderr (always with N > 1, with one job only once loading is slow)."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest

from ddp_profile.cli import main
from ddp_profile.commands import options as options_mod
from ddp_profile.nsys import progress as progress_mod
from ddp_profile.nsys import synth_scale
from ddp_profile.nsys.loader import load_trace


@pytest.fixture(scope="module")
def per_rank_files(tmp_path_factory):
    """Two per-rank exports of one synthetic run (rank 0 and rank 1 in separate files)."""
    folder = tmp_path_factory.mktemp("per_rank")
    for r in (0, 1):
        synth_scale.synth_scale_run(
            folder / f"job_rank{r}.sqlite",
            n_kernels=2_000,
            n_ranks=2,
            kernels_per_step=60,
            n_buckets=4,
            rank_of_file=r,
        )
    return sorted(folder.glob("*.sqlite"))


def test_jobs_2_gives_the_same_frames_as_jobs_1(per_rank_files):
    one = load_trace(per_rank_files, jobs=1)
    calls = []
    two = load_trace(per_rank_files, jobs=2, progress=calls.append)
    assert len(calls) == 2 and all("job_rank" in c for c in calls)
    assert sorted(one.kernels["rank"].unique().tolist()) == [0, 1]
    for name in ("kernels", "nvtx", "ranks", "gpus"):
        pd.testing.assert_frame_equal(getattr(one, name), getattr(two, name))
    assert one.meta["clock"] == two.meta["clock"]


@pytest.mark.parametrize("command", ["analyze", "inspect"])
def test_cli_jobs_same_output_and_progress_on_stderr(per_rank_files, command, capsys):
    files = [str(p) for p in per_rank_files]
    assert main([command, *files, "--format", "json"]) == 0
    out1 = capsys.readouterr()
    assert main([command, *files, "--format", "json", "--jobs", "2"]) == 0
    out2 = capsys.readouterr()
    assert json.loads(out1.out) == json.loads(out2.out)
    assert out1.err == ""  # one job and a quick load: no bar
    bar = out2.err.strip().splitlines()
    assert len(bar) == 2 and bar[-1].startswith("loading [") and "2/2 files" in bar[-1]


def test_cli_one_job_shows_the_bar_once_loading_is_slow(per_rank_files, capsys, monkeypatch):
    monkeypatch.setattr(options_mod, "SLOW_S", 0.0)  # every load counts as slow
    assert main(["inspect", *map(str, per_rank_files)]) == 0
    assert "2/2 files" in capsys.readouterr().err


def test_progress_bar_waits_min_s():
    stream = io.StringIO()
    bar = progress_mod.ProgressBar(2, stream=stream, min_s=3600)
    bar("a.sqlite")
    bar("b.sqlite")
    assert stream.getvalue() == "" and bar.done == 2


@pytest.mark.parametrize("command", ["analyze", "inspect"])
def test_jobs_below_one_is_a_usage_error(per_rank_files, command, capsys):
    assert main([command, str(per_rank_files[0]), "--jobs", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--jobs must be at least 1" in err[0]


def test_committed_per_rank_run_jobs_2_matches_jobs_1_and_finds_its_run_json():
    """The real per-rank campaign run (``<run>_rank0.sqlite.xz``, ``<run>_rank1.sqlite.xz``, ``<run>.json``)."""
    from pathlib import Path

    folders = sorted((Path(__file__).resolve().parents[2] / "traces" / "per-rank").iterdir())
    folder = next(f for f in folders if f.is_dir())
    files = sorted(folder.glob("*_rank*.sqlite.xz"))
    assert len(files) == 2
    one, two = load_trace(files, jobs=1), load_trace(folder, jobs=2)
    for name in ("kernels", "nvtx", "ranks"):
        pd.testing.assert_frame_equal(getattr(one, name), getattr(two, name))
    assert one.run is not None and one.run == two.run
    assert one.run == json.loads((folder / f"{folder.name}.json").read_text())
