"""nsys/read.py: the loader's first stage without pandas, and Prefetch (the reads started on a background
thread while a command imports pandas and the analysis)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ddp_profile.errors import MissingDataError, TraceError
from ddp_profile.nsys import read, synth_scale
from ddp_profile.nsys.loader import load_trace
from ddp_profile.nsys.synth import synth_ddp_run

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "ddp_mlp_2xh200.sqlite"
ROOT = Path(__file__).resolve().parents[2]


def _same(a, b) -> None:
    for name in ("kernels", "nvtx", "ranks", "gpus", "host_waits"):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name))
    assert a.meta == b.meta and a.run == b.run


def test_reading_imports_no_pandas():
    """The point of the module: a read can start before pandas is imported (the command imports it meanwhile)."""
    code = ("import sys; from ddp_profile.nsys import read, columnar; columnar.available(); "
            f"read.read_files(read.find_exports([{str(SAMPLE)!r}])); "
            "print(sorted(m for m in ('pandas', 'pyarrow.dataset') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


@pytest.mark.parametrize("jobs", [1, 2])
def test_prefetched_per_rank_files_equal_a_direct_load(tmp_path, jobs):
    for r in (0, 1):
        synth_scale.synth_scale_run(tmp_path / f"job_rank{r}.sqlite", n_kernels=2_000, n_ranks=2, kernels_per_step=60,
                                    n_buckets=4, rank_of_file=r)
    paths = sorted(tmp_path.glob("*.sqlite"))
    pending = read.Prefetch(paths, jobs=jobs)
    _same(load_trace(paths, prefetched=pending), load_trace(paths, jobs=jobs))


def test_prefetched_synthetic_run_with_copies_equals_a_direct_load(tmp_path):
    path = synth_ddp_run(tmp_path / "run.sqlite", n_ranks=2, n_steps=3)["path"]
    _same(load_trace([path], prefetched=read.Prefetch([path])), load_trace([path]))


def test_prefetch_reads_on_another_thread_and_hands_its_files_over_once():
    seen = []
    pending = read.Prefetch([SAMPLE], progress=lambda msg: seen.append(threading.current_thread().name))
    _same(load_trace([SAMPLE], prefetched=pending), load_trace([SAMPLE]))
    assert seen == ["ddp-profile-read"]  # read on the background thread, not the caller's
    with pytest.raises(RuntimeError, match="taken already"):
        pending.files()


def test_prefetch_raises_the_reads_error_in_the_callers_thread(tmp_path):
    no_kernels = tmp_path / "empty.sqlite"
    with sqlite3.connect(no_kernels) as con:
        con.execute("CREATE TABLE StringIds (id INTEGER, value TEXT)")
    con.close()
    pending = read.Prefetch([no_kernels])
    with pytest.raises(MissingDataError, match="no CUPTI_ACTIVITY_KIND_KERNEL table"):
        load_trace([no_kernels], prefetched=pending)


def test_prefetch_of_a_missing_file_fails_as_a_direct_load_does(tmp_path):
    missing = tmp_path / "missing.sqlite"
    with pytest.raises(TraceError) as direct:
        load_trace([missing])
    with pytest.raises(TraceError) as prefetched:
        load_trace([missing], prefetched=read.Prefetch([missing]))
    assert str(prefetched.value) == str(direct.value)


def test_factorize_ids_small_and_large_ids_give_codes_into_ascending_ids():
    for ids in (np.array([7, 3, 7, 9, 3], dtype=np.int32), np.array([5 << 40, 1, 5 << 40, -2], dtype=np.int64)):
        codes, uniques = read.factorize_ids(ids)
        assert list(uniques) == sorted(set(ids.tolist()))
        assert np.array_equal(uniques[codes], ids)
