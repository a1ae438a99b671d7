"""Known-answer synthetic traces: each expected number is derived by hand in the comments next to it."""

from __future__ import annotations

import types

import numpy as np
import pandas as pd
import pytest

from ddp_profile import nvtx_names as nn
from ddp_profile import schema
from ddp_profile.analysis import (
    KernelArrays,
    amdahl_serial_fraction,
    analyze,
    compare_runs,
    costmodel,
    optimal_bucket_bytes,
    predict_overhead,
)
from ddp_profile.analysis.contention import contention
from ddp_profile.analysis.overlap import overlapped_by_other_class

AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def kernels(rows):
    """rows: (rank, pid, stream, start, end, name, kind, launch_ns, launch_tid)."""
    df = pd.DataFrame(
        rows,
        columns=["rank", "pid", "stream", "start_ns", "end_ns", "name", "kind", "launch_ns", "launch_tid"],
    )
    df["device"] = df["rank"]
    df["collective"] = np.where(df["kind"] == "nccl", "AllReduce", None)
    for c in ("algorithm", "protocol", "dtype", "bytes"):
        df[c] = None
    df["correlation_id"] = np.arange(len(df))
    return schema.select(df, schema.KERNEL_COLUMNS)


def nvtx(rows):
    """rows: (rank, pid, tid, domain, name, start, end, depth, payload)."""
    df = pd.DataFrame(
        rows, columns=["rank", "pid", "tid", "domain", "name", "start_ns", "end_ns", "depth", "payload"]
    )
    df["category"] = None
    return schema.select(df, schema.NVTX_COLUMNS)


def trace(k, n=None, run=None):
    return types.SimpleNamespace(
        kernels=k,
        nvtx=n if n is not None else schema.empty_frame(schema.NVTX_COLUMNS),
        gpus=None,
        ranks=None,
        meta={},
        run=run,
    )


# One rank, one step. Host ranges on thread 1; backward kernels and all-reduces launched from thread 2
# (PyTorch's autograd thread), so projecting by thread would find no backward kernels.
#
#   host:  step 0 [0,100]  forward [0,30]  backward [30,80]  optimizer [80,100]
#   GPU:   f1 1000-1100  f2 1100-1200 | b1 1200-1400  b2 1400-1500 | ar1 1300-1450  ar2 1500-1650
#          memcpy 1660-1680  o1 1700-1750
ONE_STEP = kernels(
    [
        (0, 100, 7, 1000, 1100, "f1", "compute", 10, 1),
        (0, 100, 7, 1100, 1200, "f2", "compute", 20, 1),
        (0, 100, 7, 1200, 1400, "b1", "compute", 40, 2),
        (0, 100, 7, 1400, 1500, "b2", "compute", 50, 2),
        (0, 100, 17, 1300, 1450, AR, "nccl", 45, 2),
        (0, 100, 17, 1500, 1650, AR, "nccl", 60, 2),
        (0, 100, 7, 1660, 1680, "memcpy", "memcpy", 85, 1),
        (0, 100, 7, 1700, 1750, "o1", "compute", 90, 1),
    ]
)
ONE_STEP_NVTX = nvtx(
    [
        (0, 100, 1, nn.DOMAIN, "step 0", 0, 100, 0, 0),
        (0, 100, 1, nn.DOMAIN, "forward", 0, 30, 1, pd.NA),
        (0, 100, 1, nn.DOMAIN, "backward", 30, 80, 1, pd.NA),
        (0, 100, 1, nn.DOMAIN, "optimizer", 80, 100, 1, pd.NA),
    ]
)


def test_one_step_known_answer():
    res = analyze(trace(ONE_STEP, ONE_STEP_NVTX))
    row = res.steps.iloc[0]
    assert (row["start_ns"], row["end_ns"]) == (1000, 1750)  # first GPU start .. last GPU end of the step
    assert row["step_ns"] == 750
    assert row["compute_ns"] == 500 + 50  # [1000,1500) ∪ [1700,1750)
    assert row["comm_ns"] == 150 + 150  # ar1 + ar2
    assert row["overlap_ns"] == 150  # ar1 under b1/b2; ar2 starts as b2 ends
    assert row["exposed_comm_ns"] == 300 - 150
    assert row["copy_ns"] == 20
    assert row["idle_ns"] == 750 - (650 + 20 + 50)  # gaps 1650-1660 and 1680-1700
    assert row["forward_ns"] == 1200 - 1000  # f1, f2
    assert row["backward_ns"] == 1500 - 1200  # b1, b2: backward compute (ar1, ar2 are not)
    assert row["optimizer_ns"] == 1750 - 1660  # memcpy, o1
    assert row["backward_end_ns"] == 1500  # last backward compute kernel (b2)
    assert row["comm_tail_ns"] == 1650 - 1500  # ar2 ends 150 ns after backward compute
    assert row["comm_pct"] == pytest.approx(100 * 300 / 750)
    assert row["exposed_comm_pct"] == pytest.approx(100 * 150 / 750)
    ph = res.phases.set_index("phase")
    assert ph.loc["backward", "start_ns"] == 1200 and ph.loc["backward", "host_start_ns"] == 30


def test_per_kernel_and_rank_overlap():
    res = analyze(trace(ONE_STEP, ONE_STEP_NVTX))
    ko = res.kernel_overlap.set_index("name")
    # AllReduce: ar1 150 of 150 under compute, ar2 0 of 150 -> 150 / 300 = 50 %, duration-weighted.
    assert ko.loc[AR, ["count", "total_ns", "overlapped_ns"]].tolist() == [2, 300, 150]
    assert ko.loc[AR, "overlap_pct"] == pytest.approx(50.0)
    # b1 [1200,1400) under ar1 from 1300: 100 of 200; b2 [1400,1500) under ar1 until 1450: 50 of 100.
    assert ko.loc["b1", "overlapped_ns"] == 100 and ko.loc["b2", "overlapped_ns"] == 50
    assert ko.loc["f1", "overlapped_ns"] == 0
    ro = res.rank_overlap.iloc[0]
    assert (ro["comm_ns"], ro["overlap_ns"], ro["exposed_comm_ns"]) == (300, 150, 150)
    assert ro["overlap_pct"] == pytest.approx(50.0)  # HTA: |C ∩ N| / |N|
    js = res.to_json_dict()
    nccl_row = [r for r in js["kernels"] if r["name"] == AR][0]
    assert nccl_row["compute_overlap_pct"] == pytest.approx(50.0)
    assert js["steps"][0]["comm_tail_ns"] == 150


def test_without_step_ranges_whole_trace_still_works():
    res = analyze(trace(ONE_STEP))
    assert res.steps.empty and list(res.steps.columns) == schema.STEP_SECTION_COLUMNS
    assert res.rank_overlap.iloc[0]["overlap_ns"] == 150
    assert any("nvtx" in n.lower() for n in res.notes)
    assert res.summary()["overlap_pct"] == pytest.approx(50.0) and res.summary()["step_ns"] is None


def test_step_pattern_and_phase_override():
    # Generic names: ProfilerStep#7 with 'bwd' instead of 'backward'; default domain (None).
    n = nvtx(
        [
            (0, 100, 1, None, "ProfilerStep#7", 0, 100, 0, pd.NA),
            (0, 100, 1, None, "fwd", 0, 30, 1, pd.NA),
            (0, 100, 1, None, "grads", 30, 80, 1, pd.NA),
        ]
    )
    res = analyze(trace(ONE_STEP, n))
    assert res.steps["step"].tolist() == [7]  # index from the name
    assert np.isnan(res.steps.iloc[0]["backward_ns"])  # 'grads' is no default backward name
    res = analyze(trace(ONE_STEP, n), phase_patterns={"backward": "^grads$"})
    assert res.steps.iloc[0]["backward_ns"] == 300 and res.steps.iloc[0]["comm_tail_ns"] == 150  # b1, b2
    res = analyze(trace(ONE_STEP, n), step_pattern=r"^fwd$")
    assert res.steps.iloc[0]["step_ns"] == 200  # the 'fwd' range taken as the step


# Two ranks, one all-reduce each, wrapped in the harness's NVTX launch range (bucket 3, 1000 bytes).
#   rank 0 starts at 100, rank 1 (late) at 130; both end at 150.
TWO = kernels(
    [
        (0, 10, 17, 100, 150, AR, "nccl", 5, 1),
        (1, 11, 17, 130, 150, AR, "nccl", 6, 1),
    ]
)
TWO_NVTX = nvtx(
    [
        (0, 10, 1, nn.DOMAIN, f"{nn.ALLREDUCE_PREFIX} b3 1000B", 4, 7, 0, 1000),
        (1, 11, 1, nn.DOMAIN, f"{nn.ALLREDUCE_PREFIX} b3 1000B", 5, 8, 0, 1000),
    ]
)


def test_collective_wait_transfer_and_busbw():
    c = analyze(trace(TWO, TWO_NVTX)).collectives.set_index("rank")
    # rank 0 waits for rank 1: min(50, 130 − 100) = 30, transfer 50 − 30 = 20; rank 1 waits 0.
    assert c.loc[0, ["wait_ns", "transfer_ns"]].tolist() == [30, 20]
    assert c.loc[1, ["wait_ns", "transfer_ns"]].tolist() == [0, 20]
    assert c["bucket"].tolist() == [3, 3] and c["bytes"].tolist() == [1000, 1000]
    # busbw = bytes · 2(n−1)/n / transfer = 1000 · 1 / 20 = 50 bytes/ns = 50 GB/s
    assert c["busbw_gb_per_s"].tolist() == pytest.approx([50.0, 50.0])


def test_cost_model_fit_and_predictions():
    # t = 5000 ns + bytes / (100 bytes/ns) at three sizes: o = 5 µs, w = 100 GB/s, perfect fit.
    sizes = np.array([1e5, 2e5, 4e5, 4e5])
    df = pd.DataFrame({"collective": "AllReduce", "bytes": sizes, "transfer_ns": 5000 + sizes / 100})
    notes = []
    cm = costmodel.cost_model(df, notes).iloc[0]
    assert cm["o_us"] == pytest.approx(5.0) and cm["w_gb_per_s"] == pytest.approx(100.0)
    assert cm["r2"] == pytest.approx(1.0) and cm["n_points"] == 4 and notes == []
    notes = []
    assert costmodel.cost_model(df.iloc[:2], notes).empty and "distinct" in notes[0]
    # overhead(n_b=2) = 2·10 + 400/(2·2) = 120
    assert predict_overhead(10, 2, 400, 2) == pytest.approx(120)
    b = optimal_bucket_bytes(10, 2, 400)  # √(400·2·10) = √8000
    assert b == pytest.approx(np.sqrt(8000))
    grid = np.linspace(0.5, 20, 400)
    best = grid[np.argmin([predict_overhead(10, 2, 400, n) for n in grid])]
    assert 400 / best == pytest.approx(b, rel=0.02)  # the minimum of the curve sits at b*


def test_contention():
    # Kernel g runs 3 times alone (100 ns) and 3 times entirely under an NCCL kernel (150 ns).
    rows = [(0, 1, 7, 1000 * i, 1000 * i + 100, "g", "compute", i, 1) for i in range(3)]
    rows += [(0, 1, 7, 5000 + 1000 * i, 5150 + 1000 * i, "g", "compute", 10 + i, 1) for i in range(3)]
    rows += [(0, 1, 17, 4900, 8000, AR, "nccl", 9, 1)]
    # analyze would infer two steps here, giving g's instances keys of too few each (test_contention.py);
    # without step windows the key is the name.
    karr = KernelArrays(kernels(rows))
    ct = contention(karr, overlapped_by_other_class(karr)).iloc[0]
    assert ct[["n_alone", "n_overlapped"]].tolist() == [3, 3]
    assert ct["slowdown_pct"] == pytest.approx(50.0)  # 150 / 100 − 1
    assert ct["lost_ns"] == pytest.approx(3 * 50)


def test_compare_runs_scaling():
    def fake(step_ns, ws):
        steps = pd.DataFrame({c: [0] * len(step_ns) for c in schema.STEP_METRIC_COLUMNS})
        steps["step_ns"] = step_ns
        steps["step"] = range(len(step_ns))
        res = types.SimpleNamespace(
            steps=steps,
            rank_overlap=schema.empty_frame(schema.RANK_OVERLAP_COLUMNS),
            cost_model=schema.empty_frame(schema.COST_MODEL_COLUMNS),
            collectives=schema.empty_frame(schema.COLLECTIVE_COLUMNS),
        )
        t = trace(
            schema.empty_frame(schema.KERNEL_COLUMNS),
            run={
                "run_name": f"r{ws}",
                "strategy": "bucketed",
                "world_size": ws,
                "model": "tiny",
                "dtype": "fp32",
            },
        )
        return t, res

    df = compare_runs([fake([1000, 1000], 1), fake([1250], 2)]).set_index("run")
    # speedup = n · t1 / tn = 2 · 1000 / 1250 = 1.6; efficiency = 1.6 / 2 = 80 %
    assert df.loc["r2", "speedup_vs_1gpu"] == pytest.approx(1.6)
    assert df.loc["r2", "efficiency_pct"] == pytest.approx(80.0)
    # Karp–Flatt: (1/1.6 − 1/2) / (1 − 1/2) = 0.25
    assert df.loc["r2", "serial_fraction"] == pytest.approx(0.25)
    assert df.loc["r1", "efficiency_pct"] == pytest.approx(100.0)
    assert amdahl_serial_fraction(4.0, 4) == pytest.approx(0.0) and np.isnan(amdahl_serial_fraction(1.0, 1))
    assert list(df.reset_index().columns) == schema.COMPARISON_COLUMNS


def test_inputs_not_mutated():
    k0, n0 = ONE_STEP.copy(), ONE_STEP_NVTX.copy()
    analyze(trace(ONE_STEP, ONE_STEP_NVTX))
    pd.testing.assert_frame_equal(ONE_STEP, k0)
    pd.testing.assert_frame_equal(ONE_STEP_NVTX, n0)
