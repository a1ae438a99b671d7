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


def test_names_differing_only_in_numbers_are_grouped():
    from ddp_profile.nsys.summary import group_names

    counts = [(("ddp_profile", f"allreduce b{b} {size}B"), 2) for b, size in ((0, 100), (1, 200), (10, 300))]
    counts += [
        (("ddp_profile", "step 10"), 2),
        (("ddp_profile", "step 2"), 2),
        (("ddp_profile", "forward"), 4),
        (("", "cast bf16"), 1),
        (("NCCL", "step 1"), 5),
    ]
    groups = {(g["domain"], g["name"]): g for g in group_names(counts)}
    assert set(groups) == {
        ("ddp_profile", "allreduce b<N> <N>B"),
        ("ddp_profile", "step <N>"),
        ("ddp_profile", "forward"),
        ("", "cast bf16"),
        ("NCCL", "step 1"),
    }
    ar = groups[("ddp_profile", "allreduce b<N> <N>B")]
    assert (ar["count"], ar["distinct"], ar["grouped"]) == (6, 3, True)
    assert ar["examples"] == ["allreduce b0 100B", "allreduce b1 200B", "allreduce b10 300B"]
    assert groups[("ddp_profile", "step <N>")]["examples"] == ["step 2", "step 10"]  # numeric, not text order
    lone = groups[("", "cast bf16")]  # one name: kept as is, numbers and all; other domains never merged
    assert (lone["grouped"], lone["count"], lone["distinct"]) == (False, 1, 1)
    assert groups[("NCCL", "step 1")]["count"] == 5


def test_harness_ranges_of_a_real_xl_run_are_one_line_each(capsys):
    """A committed XL run: hundreds of per-bucket range names become one line (count and distinct names
    checked against the loaded NVTX frame), in the table and in JSON."""
    from pathlib import Path

    run = Path(__file__).resolve().parents[2] / "traces" / "naive_xl_fp32_2xh200"
    nvtx = load_trace(run).nvtx
    names = nvtx.loc[nvtx["domain"].astype(str) == "ddp_profile", "name"].astype(str)
    buckets = names[names.str.fullmatch(r"allreduce b\d+ \d+B")]
    assert buckets.nunique() > 100
    assert main(["inspect", str(run), "--format", "json"]) == 0
    entries = json.loads(capsys.readouterr().out)["nvtx_ranges"]
    ar = [e for e in entries if e["domain"] == "ddp_profile" and e["name"] == "allreduce b<N> <N>B"]
    assert len(ar) == 1 and ar[0]["count"] == len(buckets) and ar[0]["distinct"] == buckets.nunique()
    steps = names[names.str.fullmatch(r"step \d+")]
    st = [e for e in entries if e["name"] == "step <N>"]
    assert len(st) == 1 and st[0]["count"] == len(steps) and st[0]["distinct"] == steps.nunique()
    assert len(entries) < 20
    assert main(["inspect", str(run)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert (
        f"  ddp_profile / allreduce b<N> <N>B: {len(buckets)} ranges ({buckets.nunique()} distinct)" in table
    )
    assert not [line for line in table if "allreduce b0 " in line]
