"""A folder holding several jobs' exports is reported as several runs, grouped by which captures overlap in
time; one job's per-rank files stay one run; the grouping is printed and can be overridden."""

import shutil
from pathlib import Path

import pytest

from ddp_profile.errors import TraceError
from ddp_profile.report.runs import discover_runs, job_groups

ROOT = Path(__file__).resolve().parents[2] / "traces"
HF = ROOT / "foreign" / "hf-ddp" / "hf-ddp.sqlite.xz"
PL = ROOT / "foreign" / "pl-ddp" / "pl-ddp.sqlite.xz"
PER_RANK = ROOT / "per-rank" / "bucketed-25mb_small_fp32_2xh200"


def test_two_jobs_in_one_folder_are_two_runs_and_the_grouping_is_said(tmp_path):
    two = tmp_path / "two"
    two.mkdir()
    for f in (HF, PL):
        shutil.copy(f, two / f.name)
    notes: list[str] = []
    found = discover_runs([two], notes=notes)
    assert [(p.name, rid) for p, rid in found] == [
        ("hf-ddp.sqlite.xz", "hf-ddp"),
        ("pl-ddp.sqlite.xz", "pl-ddp"),
    ]
    assert len(notes) == 1 and "2 runs" in notes[0] and "--folder-is-one-job" in notes[0]
    assert discover_runs([two], split_jobs=False) == [(two, "two")]  # the override: one job, as before


def test_per_rank_files_of_one_job_stay_one_run():
    files = sorted(PER_RANK.glob("*.sqlite.xz"))
    assert len(files) == 2 and job_groups(files) == [files]
    assert [rid for _, rid in discover_runs([PER_RANK])] == [PER_RANK.name]


def test_a_folder_mixing_per_rank_files_with_another_job_is_refused_in_one_line(tmp_path):
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for f in [*PER_RANK.glob("*.sqlite.xz"), HF]:
        shutil.copy(f, mixed / f.name)
    with pytest.raises(TraceError, match="2 jobs whose captures do not overlap") as err:
        discover_runs([mixed])
    assert "\n" not in str(err.value) and "--folder-is-one-job" in str(err.value)
