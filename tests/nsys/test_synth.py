"""The export builder writes the real tables/columns of each layout, and synth_ddp_run's stated truth."""

from __future__ import annotations

import sqlite3

import pytest

from ddp_profile.nsys.loader import load_trace


def cols(path, table):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {r[1] for r in con.execute(f"PRAGMA table_info({table})")}
    finally:
        con.close()


@pytest.mark.parametrize(
    "layout,green,binary", [("2025.3", True, True), ("2024.x", True, False), ("2023.4", False, False)]
)
def test_layout_columns(ddp_run, sample_path, layout, green, binary):
    path = ddp_run(f"{layout}.sqlite", layout=layout)["path"]
    assert ("greenContextId" in cols(path, "CUPTI_ACTIVITY_KIND_KERNEL")) == green
    assert ("binaryData" in cols(path, "NVTX_EVENTS")) == binary
    # every column the builder writes exists in the real 2025.3 export with the same name
    for table in (
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "NVTX_EVENTS",
        "CUPTI_ACTIVITY_KIND_RUNTIME",
        "TARGET_INFO_GPU",
    ):
        assert cols(path, table) <= cols(sample_path, table), table


def test_known_overlap_construction(ddp_run):
    truth = ddp_run(n_ranks=2, n_steps=2, kernels_per_step=12, n_buckets=3, kernel_ns=10_000, nccl_ns=8_000)
    k = load_trace(truth["path"]).kernels
    k0 = k[(k["rank"] == 0)]
    nccl = k0[k0["kind"] == "nccl"].sort_values("start_ns")
    bwd = k0[k0["name"] == "bwd_gemm"]
    # per step: 3 buckets of 8 us; all but the last end before backward ends
    per_step_comm = int((nccl["end_ns"] - nccl["start_ns"]).sum()) // truth["n_steps"]
    assert per_step_comm == truth["per_step"]["comm_ns"] == 3 * 8_000
    first_step_bwd_end = int(bwd["end_ns"].iloc[3])
    assert (nccl["end_ns"].iloc[:2] <= first_step_bwd_end).all() and nccl["start_ns"].iloc[
        2
    ] == first_step_bwd_end


def test_bad_parameters():
    from ddp_profile.nsys.synth import synth_ddp_run

    with pytest.raises(ValueError):
        synth_ddp_run("/nonexistent/x.sqlite", nccl_ns=10**9)
