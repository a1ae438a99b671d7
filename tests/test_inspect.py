"""`inspect`: the summary dict and the CLI in both formats."""

from __future__ import annotations

import json
import sqlite3

from ddp_profile.cli import main
from ddp_profile.nsys.loader import load_trace
from ddp_profile.nsys.summary import summarize


def test_summary_of_sample(sample_path):
    s = summarize(load_trace(sample_path))
    con = sqlite3.connect(f"file:{sample_path}?mode=ro", uri=True)
    n_kernel = con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    con.close()
    assert s["kernels_by_kind"]["compute"] + s["kernels_by_kind"]["nccl"] == n_kernel
    assert sum(s["nccl_by_collective"].values()) == s["kernels_by_kind"]["nccl"]
    assert [r["rank"] for r in s["ranks"]] == [0, 1]
    names = {(r["domain"], r["name"]) for r in s["nvtx_ranges"]}
    assert ("", "forward") in names and ("NCCL", "ncclAllReduce") in names
    json.dumps(s)  # serialisable


def test_cli_table_and_json(sample_path, capsys):
    assert main(["inspect", str(sample_path)]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA H200" in out and "AllReduce" in out
    assert main(["inspect", str(sample_path), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["schema_version"] == "3.20.3"


def test_cli_error_is_one_line(tmp_path, capsys):
    assert main(["inspect", str(tmp_path / "missing.sqlite")]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing.sqlite" in err[0]
