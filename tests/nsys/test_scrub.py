"""Scrub completeness (planted secrets never survive in the output bytes) and analysis identity."""

from __future__ import annotations

import lzma
import sqlite3
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from conftest import sha256

from ddp_profile.errors import OutputError, TraceError
from ddp_profile.nsys import scrub
from ddp_profile.nsys.loader import load_trace

SECRETS = [
    "hf_secretTOKEN1234567890",
    "alice",
    "gpu-node-42.corp.example",
    "TOP-SECRET-STDOUT-LINE",
    "/home/alice",
]


@pytest.fixture
def dirty_export(build_export):
    n = 4
    kernels = {
        "pid": np.array([7] * n),
        "device": np.zeros(n, int),
        "stream": np.full(n, 7),
        "start": np.arange(n) * 100,
        "end": np.arange(n) * 100 + 60,
        "name": np.array(["gemm"] * n),
        "correlation_id": np.arange(1, n + 1),
        "launch_start": np.arange(n) * 100 - 10,
    }
    nvtx = {
        "pid": np.array([7]),
        "tid": np.array([7]),
        "start": np.array([0]),
        "end": np.array([500]),
        "text": np.array(["step 0"]),
    }
    path = build_export(
        "dirty.sqlite",
        processes=[{"pid": 7, "name": "/home/alice/venv/bin/python"}, {"pid": 99, "name": "kworker/0:1"}],
        kernels=kernels,
        nvtx=nvtx,
        host="gpu-node-42.corp.example",
        environment={"HF_TOKEN": "hf_secretTOKEN1234567890", "HOME": "/home/alice"},
        stdout="TOP-SECRET-STDOUT-LINE loss=1.0",
        meta_extra={
            "EXPORT_USER": "alice",
            "EXPORT_PARAM_INPUT_PATH_ABS": "/home/alice/runs/report.nsys-rep",
        },
    )
    con = sqlite3.connect(path)  # a diagnostic message with a path and the host name, as nsys writes
    con.execute("CREATE TABLE DIAGNOSTIC_EVENT (timestamp INTEGER, text TEXT, globalPid INTEGER)")
    con.execute("INSERT INTO DIAGNOSTIC_EVENT VALUES (0, 'see /home/alice/runs/out.log on gpu-node-42', 0)")
    # nsys 2023.4 keeps process environment blocks (NUL-separated) in StringIds
    con.execute("INSERT INTO StringIds VALUES (9999, ?)", ("LANG=C.UTF-8\x00WANDB_KEY=zzSECRETzz\x00X=1",))
    con.commit()
    con.close()
    return path


def test_planted_secrets_are_gone_from_every_byte(dirty_export, tmp_path):
    raw = dirty_export.read_bytes()
    assert all(s.encode() in raw for s in SECRETS)  # the fixture really plants them
    before = sha256(dirty_export)
    out = tmp_path / "clean.sqlite"
    counts = scrub.scrub_file(dirty_export, out)
    assert sha256(dirty_export) == before  # input untouched
    data = out.read_bytes()
    for secret in SECRETS + ["gpu-node-42", "zzSECRETzz", "WANDB_KEY"]:
        assert secret.encode() not in data, secret
    assert counts["env_rows"] >= 2 and counts["processes"] == 1 and counts["output_strings"] == 1
    con = sqlite3.connect(f"file:{out}?mode=ro", uri=True)
    assert con.execute("SELECT COUNT(*) FROM PROCESSES").fetchone()[0] == 1
    assert con.execute("SELECT name FROM PROCESSES").fetchone()[0] == "python"
    assert con.execute("SELECT COUNT(*) FROM DDP_PROFILE_SCRUB").fetchone()[0] > 0
    con.close()
    tr = load_trace(out)
    assert tr.meta["scrubbed"] and tr.ranks["host"].iloc[0] == scrub.pseudonym("gpu-node-42.corp.example")


def test_scrubbed_sample_analyses_identically(sample_export, tmp_path):
    before = sha256(sample_export)
    out = tmp_path / "scrubbed.sqlite"
    scrub.scrub_file(sample_export, out)
    assert sha256(sample_export) == before
    a, b = load_trace(sample_export), load_trace(out)
    pd.testing.assert_frame_equal(a.kernels, b.kernels)
    pd.testing.assert_frame_equal(a.nvtx, b.nvtx)
    pd.testing.assert_frame_equal(a.gpus.drop(columns="file"), b.gpus.drop(columns="file"))
    assert not a.meta["scrubbed"] and b.meta["scrubbed"]
    assert b"\x00vm\x00" not in out.read_bytes() and "vm" not in set(b.ranks["host"])


def test_slim_compressed_and_in_place(sample_export, tmp_path):
    plain = load_trace(sample_export)
    code = scrub.main([str(sample_export), "-o", str(tmp_path / "slim.sqlite"), "--slim", "--compress", "xz"])
    assert code == 0
    packed = tmp_path / "slim.sqlite.xz"
    slim = load_trace(packed)
    pd.testing.assert_frame_equal(plain.kernels, slim.kernels)
    pd.testing.assert_frame_equal(plain.nvtx, slim.nvtx)
    assert len(lzma.decompress(packed.read_bytes())) < sample_export.stat().st_size
    assert scrub.main([str(sample_export), "--in-place"]) == 0
    assert load_trace(sample_export).meta["scrubbed"]
    assert not list(tmp_path.glob(".*.tmp"))  # no temp files left behind


def test_module_runs_with_stdlib_only(sample_export, tmp_path):
    """The GPU machine runs ``python -m ddp_profile.nsys.scrub``: it must not import pandas/numpy."""
    code = (
        "import sys; sys.modules['pandas'] = None; sys.modules['numpy'] = None; "
        "sys.modules['sqlite_utils'] = None; from ddp_profile.nsys.scrub import main; "
        f"raise SystemExit(main([{str(sample_export)!r}, '-o', {str(tmp_path / 'o.sqlite')!r}]))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "o.sqlite").is_file()


def test_bad_inputs(tmp_path):
    junk = tmp_path / "junk.sqlite"
    junk.write_text("not sqlite")
    with pytest.raises(TraceError, match="junk.sqlite"):
        scrub.scrub_file(junk, tmp_path / "out.sqlite")
    assert not (tmp_path / "out.sqlite").exists() and not list(tmp_path.glob(".*.tmp"))
    rep = tmp_path / "r.nsys-rep"
    rep.write_bytes(b"x")
    with pytest.raises(TraceError, match="nsys export --type sqlite"):
        scrub.scrub_file(rep, tmp_path / "out.sqlite")


def test_full_disk_during_vacuum_is_an_output_error(sample_export, tmp_path, monkeypatch):
    """VACUUM on a full disk raises sqlite3.OperationalError (no strerror): an OutputError, nothing left behind."""
    real_connect = sqlite3.connect

    class FullDisk:
        def __init__(self, con):
            self._con = con

        def execute(self, sql, *args):
            if sql == "VACUUM":
                raise sqlite3.OperationalError("database or disk is full")
            return self._con.execute(sql, *args)

        def __getattr__(self, name):
            return getattr(self._con, name)

    monkeypatch.setattr(scrub.sqlite3, "connect", lambda *a, **k: FullDisk(real_connect(*a, **k)))
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(OutputError, match="database or disk is full"):
        scrub.scrub_file(sample_export, out / "o.sqlite")
    assert not list(out.iterdir())
