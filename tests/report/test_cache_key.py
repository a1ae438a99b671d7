"""The report cache's key is the run: two exports of one folder are two runs with two entries, whatever the
order of reports, the folders they share and the number of worker processes; every page of a cached report
is the page a report without the cache writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddp_profile.nsys.synth import synth_ddp_run
from ddp_profile.report import build_report
from ddp_profile.report import cache as run_cache


def _pages(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.suffix == ".html"}


@pytest.fixture
def shared(tmp_path):
    """Two runs' exports side by side in one folder (steps of different lengths), and a third run elsewhere."""
    two = tmp_path / "two"
    two.mkdir()
    synth_ddp_run(two / "fast.sqlite", n_ranks=2, n_steps=3, kernel_ns=10_000)
    synth_ddp_run(two / "slow.sqlite", n_ranks=2, n_steps=3, kernel_ns=40_000)
    third = tmp_path / "third"
    third.mkdir()
    synth_ddp_run(third / "third.sqlite", n_ranks=2, n_steps=4, kernel_ns=20_000)
    return two / "fast.sqlite", two / "slow.sqlite", third


def test_two_exports_of_one_folder_have_two_keys(shared):
    fast, slow, _ = shared
    assert run_cache.run_key(fast) != run_cache.run_key(slow)
    assert run_cache.run_key(fast) == run_cache.run_key(fast)
    assert run_cache.run_key(fast, "steps=2:") != run_cache.run_key(fast)


@pytest.mark.parametrize("jobs", [1, 2])
def test_runs_sharing_a_folder_get_their_own_numbers_in_one_and_in_two_passes(shared, tmp_path, jobs):
    fast, slow, third = shared
    out = tmp_path / "rep"
    for n, inputs in enumerate(([fast, slow], [fast, slow, third])):
        build_report(inputs, out, jobs=jobs, findings=False)
        truth = tmp_path / f"truth{n}"
        build_report(inputs, truth, jobs=1, findings=False, cache=False)
        pages = _pages(out)
        assert {"run-fast.html", "run-slow.html"} <= set(pages)
        assert pages == _pages(truth)
    assert pages["run-fast.html"] != pages["run-slow.html"]
    assert len(list((out / run_cache.CACHE_DIR).glob(f"*{run_cache.ENTRY_SUFFIX}"))) == 3
