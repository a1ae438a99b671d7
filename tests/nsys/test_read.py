"""nsys/read.py: the loader's first stage (exports to numpy arrays), without pandas."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ddp_profile.errors import MissingDataError
from ddp_profile.nsys import read, synth_scale

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "ddp_mlp_2xh200.sqlite"
ROOT = Path(__file__).resolve().parents[2]


def test_reading_imports_no_pandas():
    """The point of the module: a read can start before pandas is imported (the command imports it meanwhile)."""
    code = (
        "import sys; from pathlib import Path; from ddp_profile.nsys import read, columnar; columnar.available(); "
        f"read.read_files([Path({str(SAMPLE)!r})]); "
        "print(sorted(m for m in ('pandas', 'pyarrow.dataset') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_read_files_gives_the_loaders_per_file_arrays_in_file_order(tmp_path):
    """``read_files`` with jobs 1 and 2 (threads) reads the same arrays, one dict per export in their order."""
    for r in (0, 1):
        synth_scale.synth_scale_run(
            tmp_path / f"job_rank{r}.sqlite",
            n_kernels=2_000,
            n_ranks=2,
            kernels_per_step=60,
            n_buckets=4,
            rank_of_file=r,
        )
    paths = sorted(tmp_path.glob("*.sqlite"))
    one, two = (read.read_files(paths, jobs=j) for j in (1, 2))
    assert [f["path"] for f in one] == [f["path"] for f in two] == paths
    for a, b in zip(one, two, strict=True):
        for key in ("start", "end", "pid", "code", "launch_ns"):
            assert np.array_equal(a["kernels"][key], b["kernels"][key])
    assert len(one[0]["kernels"]["start"]) > 0


def test_an_export_without_kernels_is_refused_by_the_read(tmp_path):
    no_kernels = tmp_path / "empty.sqlite"
    with sqlite3.connect(no_kernels) as con:
        con.execute("CREATE TABLE StringIds (id INTEGER, value TEXT)")
    con.close()
    with pytest.raises(MissingDataError, match="no CUPTI_ACTIVITY_KIND_KERNEL table"):
        read.read_files([no_kernels])


def test_factorize_ids_small_and_large_ids_give_codes_into_ascending_ids():
    for ids in (
        np.array([7, 3, 7, 9, 3], dtype=np.int32),
        np.array([5 << 40, 1, 5 << 40, -2], dtype=np.int64),
    ):
        codes, uniques = read.factorize_ids(ids)
        assert list(uniques) == sorted(set(ids.tolist()))
        assert np.array_equal(uniques[codes], ids)
