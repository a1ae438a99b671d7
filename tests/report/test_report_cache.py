"""The report's per-run cache (report/cache.py): a second report of unchanged runs analyses nothing and
writes the same pages; a changed file, or a changed tool, recomputes; entries are written atomically and
only the ones in use are kept; --jobs with the cache gives the same report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import ddp_profile.report.build as build
from ddp_profile.nsys.synth import synth_ddp_run
from ddp_profile.report import build_report
from ddp_profile.report import cache as run_cache


@pytest.fixture
def runs(tmp_path):
    root = tmp_path / "traces"
    for name, ranks in (("a_run", 2), ("b_run", 2)):
        folder = root / name
        folder.mkdir(parents=True)
        synth_ddp_run(folder / f"{name}.sqlite", n_ranks=ranks, n_steps=3)
        (folder / "run.json").write_text(json.dumps({"run_name": name, "strategy": "bucketed"}))
    return root


@pytest.fixture
def loads(monkeypatch):
    """The runs load_one really loaded and analysed (cache misses), in order."""
    seen: list[str] = []
    real = build.load_one

    def counting(path, steps="all", cache_entry=None):
        seen.append(Path(path).name)
        return real(path, steps, cache_entry)

    monkeypatch.setattr(build, "load_one", counting)
    return seen


def _pages(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in out.iterdir() if p.suffix == ".html"}


def test_second_report_of_unchanged_runs_analyses_nothing_and_writes_the_same_pages(runs, tmp_path, loads):
    out = tmp_path / "report"
    build_report([runs], out)
    first = _pages(out)
    assert sorted(loads) == ["a_run", "b_run"]
    assert len(list((out / run_cache.CACHE_DIR).glob(f"*{run_cache.ENTRY_SUFFIX}"))) == 2
    loads.clear()
    build_report([runs], out)
    assert loads == []  # both taken from the cache
    assert _pages(out) == first
    assert not list(tmp_path.glob(".report.*"))  # no staging or temporary folder left beside the report


def test_a_changed_file_recomputes_that_run_only(runs, tmp_path, loads):
    out = tmp_path / "report"
    build_report([runs], out)
    loads.clear()
    (runs / "b_run" / "run.json").write_text(json.dumps({"run_name": "b_run", "strategy": "flat"}))
    build_report([runs], out)
    assert loads == ["b_run"]
    assert "flat" in (out / "index.html").read_text()  # the new run JSON, not the cached one
    assert (
        len(list((out / run_cache.CACHE_DIR).glob(f"*{run_cache.ENTRY_SUFFIX}"))) == 2
    )  # the stale entry was dropped


def test_a_changed_export_recomputes(runs, tmp_path, loads):
    out = tmp_path / "report"
    build_report([runs], out)
    loads.clear()
    export = runs / "a_run" / "a_run.sqlite"
    synth_ddp_run(export.with_name("new.sqlite"), n_ranks=2, n_steps=4)
    shutil.move(export.with_name("new.sqlite"), export)  # same name and size class, other content
    build_report([runs], out)
    assert loads == ["a_run"]


def test_another_tool_version_recomputes_everything(runs, tmp_path, loads, monkeypatch):
    out = tmp_path / "report"
    build_report([runs], out)
    loads.clear()
    monkeypatch.setattr(run_cache, "tool_digest", lambda: b"another version")
    build_report([runs], out)
    assert sorted(loads) == ["a_run", "b_run"]


def test_the_tool_digest_covers_the_package_source():
    """A changed module changes the key even without a version bump (the digest reads every .py file)."""
    files = sorted(run_cache.PACKAGE.rglob("*.py"))
    assert Path(run_cache.__file__).resolve() in files and Path(build.__file__).resolve() in files


def test_damaged_entry_is_recomputed(runs, tmp_path, loads):
    out = tmp_path / "report"
    build_report([runs], out)
    for entry in (out / run_cache.CACHE_DIR).glob(f"*{run_cache.ENTRY_SUFFIX}"):
        entry.unlink()  # a hard link: replacing it leaves the staging copy alone
        entry.write_bytes(b"not an entry")
    (runs / "b_run" / "run.json").write_text(json.dumps({"run_name": "b_run", "strategy": "flat"}))
    loads.clear()
    build_report([runs], out)
    assert sorted(loads) == ["a_run", "b_run"]


def test_a_report_edited_by_hand_is_built_again(runs, tmp_path, loads):
    """The whole-report shortcut (nothing changed: the folder is kept) checks the folder's own files too."""
    out = tmp_path / "report"
    build_report([runs], out)
    first = _pages(out)
    (out / "index.html").write_text("edited")
    loads.clear()
    build_report([runs], out)
    assert loads == [] and _pages(out) == first  # rebuilt from the per-run cache


def test_no_cache_keeps_none(runs, tmp_path):
    out = tmp_path / "report"
    build_report([runs], out, cache=False)
    assert not (out / run_cache.CACHE_DIR).exists()


def test_jobs_with_the_cache_give_the_same_report(runs, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    build_report([runs], one)
    build_report([runs], two, jobs=2)
    assert _pages(one) == _pages(two)
    assert sorted(p.name for p in (one / ".cache").glob(f"*{run_cache.ENTRY_SUFFIX}")) == sorted(
        p.name for p in (two / ".cache").glob(f"*{run_cache.ENTRY_SUFFIX}")
    )
    build_report([runs], two, jobs=2)  # from the cache, in the parent
    assert _pages(one) == _pages(two)
