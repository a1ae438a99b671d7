"""The report cache's key is the run: two exports of one folder are two runs with two entries, whatever the
order of reports, the folders they share and the number of worker processes; every page of a cached report
is the page a report without the cache writes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ddp_profile.nsys.synth import synth_ddp_run
from ddp_profile.report import build_report
from ddp_profile.report import cache as run_cache


def _pages(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.suffix == ".html"}


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """Two runs' exports side by side in one folder (steps of different lengths), and a third run elsewhere
    (shared by the tests of this module: they only read them)."""
    tmp_path = tmp_path_factory.mktemp("inputs")
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


TRUTH: dict[int, dict[str, bytes]] = {}
"""Pages of a --no-cache report of each pass's inputs, made once for both --jobs values."""


@pytest.mark.parametrize("jobs", [1, 2])
def test_runs_sharing_a_folder_get_their_own_numbers_in_one_and_in_two_passes(shared, tmp_path, jobs):
    fast, slow, third = shared
    out = tmp_path / "rep"
    for n, inputs in enumerate(([fast, slow], [fast, slow, third])):
        build_report(inputs, out, jobs=jobs)
        if n not in TRUTH:
            build_report(inputs, tmp_path / f"truth{n}", jobs=1, cache=False)
            TRUTH[n] = _pages(tmp_path / f"truth{n}")
        pages = _pages(out)
        assert {"run-fast.html", "run-slow.html"} <= set(pages)
        assert pages == TRUTH[n]
    assert pages["run-fast.html"] != pages["run-slow.html"]
    assert len(list((out / run_cache.CACHE_DIR).glob(f"*{run_cache.ENTRY_SUFFIX}"))) == 3


class _Payload:
    """Pickled, it creates ``path`` when loaded: what a planted pickle entry would do."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


def _hostile_entries(marker: Path) -> list[bytes]:
    """Entries an attacker could place under the right name: a pickle that runs code, entries that name
    classes or tags the cache does not build, a zip whose members are not ours, a class with a field of the
    wrong type, and a value that is not a run's result."""
    import io
    import json
    import pickle
    import zipfile

    def archive(doc, members=()):
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            z.writestr("entry.json", json.dumps(doc))
            for name, data in members:
                z.writestr(name, data)
        return buf.getvalue()

    def doc(key, value, frames=0):
        return {"format": run_cache.cache_entry.FORMAT, "key": key, "frames": frames, "value": value}

    return [
        pickle.dumps(_Payload(marker)),
        lambda key: archive(doc(key, {"$obj": ["posix.system", {"command": f"touch {marker}"}]})),
        lambda key: archive(doc(key, {"$obj": ["Trace", {"__class__": "x", "kernels": None}]})),
        lambda key: archive(doc(key, {"$pickle": pickle.dumps(_Payload(marker)).hex()})),
        lambda key: archive(doc(key, {"$frame": 0}, 1), [("frame-0.arrow", pickle.dumps(_Payload(marker)))]),
        lambda key: archive(doc(key, {"$frame": 0}, 1), [("../frame-0.arrow", b"x")]),
        lambda key: archive(
            doc(key, {"$obj": ["Trace", {"kernels": "x", "nvtx": "x", "gpus": "x", "ranks": "x"}]})
        ),
        lambda key: archive(doc(key, ["a list", "not a run"])),
    ]


def test_a_planted_entry_under_the_right_name_runs_nothing_and_is_recomputed(shared, tmp_path, capfd):
    fast, slow, _ = shared
    out = tmp_path / "rep"
    build_report([fast, slow], out)
    first = _pages(out)
    entries = sorted((out / run_cache.CACHE_DIR).glob(f"*{run_cache.ENTRY_SUFFIX}"))
    assert len(entries) == 2
    marker = tmp_path / "ran"
    hostile = _hostile_entries(marker)
    for pair in zip(hostile[::2], hostile[1::2], strict=True):  # two runs: two planted entries a report
        for entry, planted in zip(entries, pair, strict=True):
            key = entry.name[: -len(run_cache.ENTRY_SUFFIX)]
            entry.unlink()  # a hard link into the previous folder: replaced, not written through
            entry.write_bytes(planted(key) if callable(planted) else planted)
        (out / "index.html").write_text("edited")  # so the whole-report shortcut does not keep the folder
        capfd.readouterr()
        build_report([fast, slow], out)
        err = capfd.readouterr().err
        assert not marker.exists()
        assert err.count("not used (") == 2 and "Traceback" not in err
        assert _pages(out) == first
        entries = sorted((out / run_cache.CACHE_DIR).glob(f"*{run_cache.ENTRY_SUFFIX}"))
        assert len(entries) == 2  # recomputed and stored again


def test_the_cache_keeps_the_newest_entries_within_its_bound(tmp_path, monkeypatch):
    cache = run_cache.RunCache(tmp_path / "rep", ".marker")
    entries = []
    for i, key in enumerate(("old", "mid", "new")):
        entry = cache.entry_path(key)
        entry.write_bytes(bytes(1000))
        stamp = 1_700_000_000 + i * 60
        os.utime(entry, (stamp, stamp))
        cache.record(key, entry)
        entries.append(entry)
    monkeypatch.setattr(run_cache, "LIMIT_BYTES", 2500)
    folder = tmp_path / "new-report"
    folder.mkdir()
    cache.carry_into(folder)
    kept = sorted(p.name for p in (folder / run_cache.CACHE_DIR).iterdir())
    assert kept == sorted(f"{k}{run_cache.ENTRY_SUFFIX}" for k in ("mid", "new"))
    cache.close()
