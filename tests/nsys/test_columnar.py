"""Columnar reads (Arrow ADBC, nsys/columnar.py) and the sqlite3 fallback give the same trace: on the real
sample export, on a synthetic run with copies and memsets, without the driver, and on damaged exports
(where the columnar read gives up and the sqlite3 read names the problem)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from ddp_profile.errors import TraceError
from ddp_profile.nsys import columnar
from ddp_profile.nsys.loader import load_trace
from ddp_profile.nsys.synth import synth_ddp_run

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "ddp_mlp_2xh200.sqlite"
pytest.importorskip("adbc_driver_sqlite")


def _both(path, monkeypatch):
    monkeypatch.delenv("DDP_PROFILE_READER", raising=False)
    assert columnar.available()
    arrow = load_trace(path)
    monkeypatch.setenv("DDP_PROFILE_READER", "sqlite3")
    assert not columnar.available()
    plain = load_trace(path)
    return arrow, plain


def _same(a, b) -> None:
    for name in ("kernels", "nvtx", "ranks", "gpus"):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name))
    assert a.meta == b.meta


def test_sample_export_reads_the_same_through_arrow_and_sqlite3(monkeypatch):
    _same(*_both(SAMPLE, monkeypatch))


def test_columnar_read_is_used_on_plain_files(monkeypatch):
    """The Arrow path really runs (a reader that refused every query would also give equal traces)."""
    calls = []
    real = columnar.Reader.int_columns

    def spy(self, query, dtypes, cap):
        got = real(self, query, dtypes, cap)
        calls.append(got is not None)
        return got

    monkeypatch.setattr(columnar.Reader, "int_columns", spy)
    load_trace(SAMPLE)
    assert calls and all(calls)  # kernels, launches, NVTX (and memcpy/memset where present)


def test_synthetic_run_with_copies_reads_the_same(tmp_path, monkeypatch):
    path = synth_ddp_run(tmp_path / "run.sqlite", n_ranks=2, n_steps=3)["path"]
    _same(*_both(path, monkeypatch))


def test_without_the_driver_the_loader_reads_through_sqlite3(monkeypatch):
    monkeypatch.setattr(columnar, "_driver", False)  # as after a failed import (wheel missing)
    assert not columnar.available()
    trace = load_trace(SAMPLE)
    monkeypatch.setattr(columnar, "_driver", None)
    _same(trace, load_trace(SAMPLE))


@pytest.mark.parametrize(
    "update",
    [
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'x' WHERE rowid = 7",  # text where nsys writes ints
        'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = 1.5 WHERE rowid = 3',  # a real
        "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = NULL WHERE rowid = 2",  # NULL in a launch row
    ],
)
def test_damaged_exports_fail_or_load_alike(tmp_path, monkeypatch, update):
    path = tmp_path / "damaged.sqlite"
    shutil.copyfile(SAMPLE, path)
    con = sqlite3.connect(path)
    for table in (
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_RUNTIME",
    ):  # drop NOT NULL / STRICT typing
        sql = con.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
        con.execute(f"ALTER TABLE {table} RENAME TO old")
        con.execute(sql.replace("NOT NULL", ""))
        con.execute(f"INSERT INTO {table} SELECT * FROM old")
        con.execute("DROP TABLE old")
    con.execute(update)
    con.commit()
    con.close()
    outcomes = []
    for reader in ("", "sqlite3"):
        monkeypatch.setenv("DDP_PROFILE_READER", reader)
        try:
            outcomes.append(load_trace(path))
        except TraceError as exc:
            outcomes.append(str(exc))
    if isinstance(outcomes[0], str) or isinstance(outcomes[1], str):
        assert outcomes[0] == outcomes[1]
    else:
        _same(*outcomes)
