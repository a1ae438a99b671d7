"""Work after backward (analysis/after_backward.py): gradient copies and optimizer kernels, and the verdict's
``grad_copy_back`` and ``optimizer_shard`` rules."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ddp_profile import schema
from ddp_profile.activity_names import DEVICE_COPY, memcpy_name
from ddp_profile.analysis import verdict as vd
from ddp_profile.analysis.after_backward import after_backward

TRACES = Path(__file__).resolve().parents[2] / "traces"


def _kernels(rows) -> pd.DataFrame:
    rows = [r if len(r) == 6 else (*r, None) for r in rows]
    frame = pd.DataFrame(rows, columns=["rank", "name", "kind", "start_ns", "end_ns", "collective"])
    return frame.reindex(columns=schema.KERNEL_COLUMNS)


def test_counts_device_copies_between_backward_end_and_step_end_per_rank():
    steps = pd.DataFrame(
        {
            "rank": [0, 0, 1, 1],
            "step": [5, 6, 5, 6],
            "start_ns": [0, 250, 0, 250],
            "backward_end_ns": [100.0, 300.0, 100.0, np.nan],
            "end_ns": [200, 400, 200, 400],
        }
    )
    kernels = _kernels(
        [
            (0, DEVICE_COPY, "memcpy", 100, 110),  # starts at backward's end: counted
            (0, DEVICE_COPY, "memcpy", 150, 160),
            (0, DEVICE_COPY, "memcpy", 195, 205),  # ends after the step: not counted
            (0, DEVICE_COPY, "memcpy", 90, 99),  # during backward: not counted
            (0, memcpy_name("HtoD"), "memcpy", 120, 130),  # not device to device
            (0, "elementwise_kernel", "compute", 130, 140),
            (0, "gemm_kernel", "compute", 10, 20),  # in the forward: a graph of the model would replay it
            (0, DEVICE_COPY, "memcpy", 310, 340),
            (1, DEVICE_COPY, "memcpy", 120, 125),
            (1, DEVICE_COPY, "memcpy", 320, 330),  # rank 1 step 6 has no backward end: no row
        ]
    )
    got = after_backward(kernels, steps)
    assert list(got.columns) == schema.AFTER_BACKWARD_COLUMNS
    assert got[["rank", "step", "copies", "copy_ns"]].values.tolist() == [
        [0, 5, 2, 20.0],
        [0, 6, 1, 30.0],
        [1, 5, 1, 5.0],
    ]
    assert after_backward(kernels.iloc[:0], steps).empty and after_backward(kernels, steps.iloc[:0]).empty


def _crit(n_steps: int = 4) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "step": range(n_steps),
            "span_ns": [100e6] * n_steps,
            "critical_rank": [1] * n_steps,
            "compute_ns": [90e6] * n_steps,
            "exposed_transfer_ns": [0.0] * n_steps,
            "wait_ns": [0.0] * n_steps,
            "host_ns": [5e6] * n_steps,
            "idle_ns": [5e6] * n_steps,
        }
    )


def _advice(
    copies: int,
    copy_ns: float,
    optimizer_ns: float = 0.0,
    scatter_ns: float = 0.0,
    gather_ns: float = 0.0,
    world: int = 2,
) -> list[dict]:
    crit = _crit()
    back = pd.DataFrame(
        {
            "rank": [0] * 4 + [1] * 4,
            "step": list(range(4)) * 2,
            "copies": [0] * 4 + [copies] * 4,
            "copy_ns": [0.0] * 4 + [copy_ns] * 4,
            "optimizer_kernels": [0] * 4 + [100 if optimizer_ns else 0] * 4,
            "optimizer_ns": [0.0] * 4 + [optimizer_ns] * 4,
            "allreduce_kernel_ns": [10e6] * 8,
            "reduce_scatter_kernel_ns": [scatter_ns] * 8,
            "gather_broadcast_kernel_ns": [gather_ns] * 8,
        }
    )
    steps = pd.DataFrame(
        {"rank": [r for r in range(world) for _ in range(4)], "step": list(range(4)) * world}
    )
    return vd.advice(crit, steps, None, pd.Series(dtype=float), 0.0, None, after_backward=back)


def test_many_copies_on_the_critical_rank_advise_bucket_views_with_their_time_as_the_bound():
    (rule,) = [r for r in _advice(435, 4.5e6) if r["rule"] == "grad_copy_back"]
    assert rule["gain_upper_ns"] == pytest.approx(4.5e6)
    assert "gradient_as_bucket_view=True" in rule["what_to_change"]
    assert rule["evidence"].startswith(
        "435 device-to-device copies (4.50 ms) run after the last backward kernel"
    )
    assert vd.CATEGORY["grad_copy_back"] == "compute"


@pytest.mark.parametrize("copies,copy_ns", [(vd.COPY_BACK_MIN - 1, 4.5e6), (435, 0.5e6)])
def test_few_copies_or_a_small_share_of_the_step_give_no_rule(copies, copy_ns):
    assert "grad_copy_back" not in [r["rule"] for r in _advice(copies, copy_ns)]


def test_stock_ddp_trace_gets_the_rules_and_one_gpu_and_a_sharded_job_do_not():
    from ddp_profile.analysis import analyze
    from ddp_profile.nsys.loader import load_trace

    run = TRACES / "campaign" / "B" / "torch_ddp-25mb_xl_bf16_2xh200"
    if not run.is_dir():
        pytest.skip("committed traces not present")
    rules = {r["rule"]: r for r in analyze(load_trace(run)).verdict["advice"]}
    # DDP without bucket views: one copy back per gradient tensor (435 in the XL model), ~4.5 ms a step on H200
    assert rules["grad_copy_back"]["evidence"].startswith("435 device-to-device copies")
    assert 3e6 < rules["grad_copy_back"]["gain_upper_ns"] < 6e6
    # and the whole fused AdamW update after backward on each of the 2 ranks (101 kernels, ~16 ms): half is the bound
    assert rules["optimizer_shard"]["evidence"].startswith("101 optimizer kernels")
    assert 6e6 < rules["optimizer_shard"]["gain_upper_ns"] < 10e6
    # two ranks: the advice names the copy-engine exchange too (timing set AB measured it)
    assert "on 2 GPUs its --peer-copy-allreduce" in rules["optimizer_shard"]["what_to_change"]
    one = analyze(load_trace(TRACES / "campaign" / "B" / "none_xl_bf16_1xh200")).verdict["advice"]
    assert not {"grad_copy_back", "optimizer_shard"} & {r["rule"] for r in one}
    # jobs of one's own (no harness run JSON) are not told to shard since the what-if ledger's pair
    # (vd.WITHDRAWN), also Lightning DDP, which does not shard (the sharding test: the test below)
    for job in ("zero", "pl-fsdp", "pl-ddp"):
        advice = analyze(load_trace(TRACES / "foreign" / job)).verdict["advice"]
        assert "optimizer_shard" not in [r["rule"] for r in advice], job


def test_counts_optimizer_kernels_after_backward_and_the_steps_sharding_collectives():
    steps = pd.DataFrame(
        {
            "rank": [0, 0],
            "step": [5, 6],
            "start_ns": [0, 250],
            "backward_end_ns": [100.0, 300.0],
            "end_ns": [200, 400],
        }
    )
    adam = "multi_tensor_apply_kernel"
    kernels = _kernels(
        [
            (0, adam, "compute", 120, 150),  # after backward: counted
            (0, adam, "compute", 150, 160),
            (0, adam, "compute", 50, 60),  # inside backward (an update overlapped with it): not counted
            (0, "elementwise_kernel", "compute", 160, 170),
            (0, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "nccl", 20, 90, "AllReduce"),
            (
                0,
                "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL",
                "nccl",
                260,
                280,
                "ReduceScatter",
            ),  # step 6 shards
            (0, adam, "compute", 310, 330),
        ]
    )
    got = after_backward(kernels, steps)
    assert got[["step", "optimizer_kernels", "optimizer_ns"]].values.tolist() == [[5, 2, 40.0], [6, 1, 20.0]]
    # NCCL time of the whole step [start_ns, end_ns], by kind
    assert got[
        ["allreduce_kernel_ns", "reduce_scatter_kernel_ns", "gather_broadcast_kernel_ns"]
    ].values.tolist() == [[70.0, 0.0, 0.0], [0.0, 20.0, 0.0]]


def test_optimizer_time_after_backward_advises_sharding_it_with_the_unsharded_part_as_the_bound():
    (rule,) = [r for r in _advice(0, 0.0, optimizer_ns=16e6) if r["rule"] == "optimizer_shard"]
    assert rule["gain_upper_ns"] == pytest.approx(8e6)  # two ranks: each would run half the update
    assert "--sharded-update" in rule["what_to_change"] and "over the 2 ranks" in rule["what_to_change"]
    assert rule["evidence"].startswith("100 optimizer kernels (16.0 ms) run after the last backward kernel")
    (four,) = [r for r in _advice(0, 0.0, optimizer_ns=16e6, world=4) if r["rule"] == "optimizer_shard"]
    assert four["gain_upper_ns"] == pytest.approx(12e6)
    assert vd.CATEGORY["optimizer_shard"] == "compute"


@pytest.mark.parametrize("scatter_ns,gather_ns,world", [(1e6, 0.0, 2), (0.0, 5e6, 2), (0.0, 0.0, 1)])
def test_a_job_that_already_shards_or_runs_on_one_rank_gets_no_optimizer_rule(scatter_ns, gather_ns, world):
    """Sharded: any ReduceScatter, or gathers + broadcasts at SHARDED_SYNC_RATIO (0.5) of the all-reduce time."""
    assert "optimizer_shard" not in [r["rule"] for r in _advice(0, 0.0, 16e6, scatter_ns, gather_ns, world)]


def test_a_ddp_jobs_own_small_gathers_do_not_count_as_sharding():
    """Frameworks gather metrics and broadcast flags every step (0.12-0.38 of the all-reduce time on the
    committed Lightning and Hugging Face DDP jobs): the job still runs the whole update on every rank."""
    assert "optimizer_shard" in [r["rule"] for r in _advice(0, 0.0, 16e6, gather_ns=4e6)]
