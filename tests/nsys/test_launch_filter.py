"""The loader reads only the API calls that launch GPU work (selected by name id in SQL),
and the kernels frame is the same as when every API row with a correlation id is read."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from ddp_profile.nsys import sql
from ddp_profile.nsys.loader import load_trace
from ddp_profile.nsys.synth import synth_ddp_run

TRACES = Path(__file__).resolve().parents[2] / "traces"
RUNS = [
    TRACES / "torch_ddp-25mb_xl_fp32_2xh200",
    TRACES / "bucketed-25mb_small_fp32_2xh200",
    TRACES / "per-rank" / "bucketed-25mb_small_fp32_2xh200",
    TRACES / "none_small_fp32_1xh200",
]


@pytest.mark.parametrize("run", [r for r in RUNS if r.exists()], ids=lambda p: p.name)
def test_same_kernels_as_reading_every_api_row(run, monkeypatch):
    filtered = load_trace(run).kernels
    assert (filtered["launch_ns"] >= 0).all()  # every kernel, copy and memset of a real run has its launch
    monkeypatch.setattr(sql, "launch_name_ids", lambda con, have: None)  # the old read: all rows
    everything = load_trace(run).kernels
    pd.testing.assert_frame_equal(filtered, everything)


def test_non_launch_calls_are_not_read(tmp_path):
    """A synthetic export whose API table also holds event and capture queries: only launches come back."""
    import sqlite3

    path = synth_ddp_run(tmp_path / "x.sqlite")["path"]
    con = sqlite3.connect(path)
    have = sql.tables(con)
    n_all = con.execute(f"SELECT COUNT(*) FROM {sql.RUNTIME} WHERE correlationId IS NOT NULL").fetchone()[0]
    con.execute("INSERT INTO StringIds (id, value) VALUES (999999, 'cudaEventRecord_v3020')")
    con.execute(
        f"INSERT INTO {sql.RUNTIME} (start, end, eventClass, globalTid, correlationId, nameId, returnValue) "
        f"SELECT start + 1, end + 1, eventClass, globalTid, correlationId + 1000000, 999999, 0 FROM {sql.RUNTIME}"
    )
    con.commit()
    got = sql.launches(con, have)
    assert len(got[0]) == n_all
    ids = sql.launch_name_ids(con, have)
    assert 999999 not in ids and ids
