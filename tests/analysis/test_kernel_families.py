"""Kernel families of a step's GPU time (analysis.kernel_families): a synthetic kernel table whose every
kernel is placed by hand, and the committed campaign set B traces (real data), where the families of each
(rank, step) must add up to the step's kernel time counted independently here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ddp_profile import schema
from ddp_profile.analysis import answers
from ddp_profile.analysis.kernel_families import family_on_critical_rank, family_per_rank, family_steps
from ddp_profile.analysis.kernel_groups import (
    ATTENTION,
    COPY,
    ELEMENTWISE,
    GEMM,
    GROUPS,
    MEMORY_BOUND_GROUPS,
    NCCL_GROUP,
    OPTIMIZER,
    OTHER,
    REDUCE,
)

US = 1_000
B = Path(__file__).resolve().parents[2] / "traces" / "campaign" / "B"

# Step GPU windows (µs). Spans (steps.spans): a rank's first selected step starts at its own window,
# the next at the end of the previous window: rank 0 [100, 200) and [200, 400); rank 1 [110, 210), [210, 420).
STEPS = pd.DataFrame(
    {
        "rank": [0, 0, 1, 1],
        "step": [5, 6, 5, 6],
        "start_ns": [100 * US, 250 * US, 110 * US, 260 * US],
        "end_ns": [200 * US, 400 * US, 210 * US, 420 * US],
    }
)
# (rank, name, kind, start µs, duration µs) -> where it lands
KERNELS = [
    (0, "vectorized_elementwise_kernel", "compute", 50, 10),  # before rank 0's first span: in no step
    (0, "nvjet_sm90_tst_128x256", "compute", 100, 30),  # step 5 GEMM
    (0, "vectorized_elementwise_kernel", "compute", 130, 5),  # step 5 elementwise
    (0, "elementwise_kernel", "compute", 140, 7),  # step 5 elementwise
    (0, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "nccl", 150, 40),  # step 5 NCCL (by kind)
    (0, "[CUDA memcpy DtoD]", "memcpy", 195, 10),  # step 5 copy, counted in full though it ends at 205
    (0, "multi_tensor_apply_kernel", "compute", 220, 20),  # between the windows: step 6's span
    (0, "nvjet_sm90_tst_144x128", "compute", 250, 50),  # step 6 GEMM
    (0, "cunn_SoftMaxForwardSmem", "compute", 300, 4),  # step 6 other (no pattern)
    (0, "cudnn_generated_fort_native_sdpa_sm90_flash_fprop", "compute", 310, 6),  # step 6 attention
    (0, "reduce_kernel", "compute", 320, 3),  # step 6 reduce
    (0, "vectorized_elementwise_kernel", "compute", 400, 1),  # at the span's end (exclusive): no step
    (1, "nvjet_sm90_tst_128x256", "compute", 110, 40),  # rank 1 step 5 GEMM
    (1, "nvjet_sm90_tst_144x128", "compute", 260, 60),  # rank 1 step 6 GEMM
    (1, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "nccl", 300, 10),  # rank 1 step 6 NCCL
]
# Expected (kernels, µs) per (rank, step, family); every other family 0.
EXPECT = {
    (0, 5): {GEMM: (1, 30), ELEMENTWISE: (2, 5 + 7), NCCL_GROUP: (1, 40), COPY: (1, 10)},
    (0, 6): {OPTIMIZER: (1, 20), GEMM: (1, 50), OTHER: (1, 4), ATTENTION: (1, 6), REDUCE: (1, 3)},
    (1, 5): {GEMM: (1, 40)},
    (1, 6): {GEMM: (1, 60), NCCL_GROUP: (1, 10)},
}


def _kernels(rows=KERNELS) -> pd.DataFrame:
    r = list(zip(*rows, strict=True))
    n = len(rows)
    start = [s * US for s in r[3]]
    return pd.DataFrame(
        {
            "rank": r[0],
            "pid": [100 + x for x in r[0]],
            "device": r[0],
            "stream": 7,
            "start_ns": start,
            "end_ns": [s + d * US for s, d in zip(start, r[4], strict=True)],
            "name": r[1],
            "kind": r[2],
            "launch_ns": [s - 5 * US for s in start],
            "correlation_id": np.arange(n),
        }
    )


def test_each_kernel_lands_in_its_step_and_family():
    per = family_steps(_kernels(), STEPS)
    assert list(per.columns) == schema.FAMILY_STEP_COLUMNS
    assert len(per) == 4 * len(GROUPS)  # every family for every (rank, step), zeros included
    got = {(int(r.rank), int(r.step), r.family): (int(r.kernels), int(r.gpu_ns)) for r in per.itertuples()}
    for (rank, step), fams in EXPECT.items():
        for fam in GROUPS:
            k, us = fams.get(fam, (0, 0))
            assert got[(rank, step, fam)] == (k, us * US), (rank, step, fam)
    # rows by rank, step, then family in GROUPS order
    assert list(per["family"].iloc[: len(GROUPS)]) == list(GROUPS)


def test_row_order_of_the_kernel_table_does_not_matter():
    k = _kernels()
    shuffled = k.sample(frac=1.0, random_state=3).reset_index(drop=True)  # not rank-sorted: no slices
    pd.testing.assert_frame_equal(family_steps(shuffled, STEPS), family_steps(k, STEPS))


def test_per_rank_and_critical_rank_summaries_are_sums_over_steps_divided_by_steps():
    per = family_steps(_kernels(), STEPS)
    pr = family_per_rank(per).set_index(["rank", "family"])
    assert list(family_per_rank(per).columns) == schema.FAMILY_COLUMNS
    # rank 0 GEMM: 30 + 50 µs over 2 steps, one kernel each
    assert pr.loc[(0, GEMM), "gpu_ns_per_step"] == (30 + 50) * US / 2
    assert pr.loc[(0, GEMM), "kernels_per_step"] == 1.0
    assert pr.loc[(0, GEMM), "mean_ns"] == (30 + 50) * US / 2
    # rank 0 elementwise: 2 kernels (12 µs) in step 5, none in step 6
    assert pr.loc[(0, ELEMENTWISE), "kernels_per_step"] == 1.0
    assert pr.loc[(0, ELEMENTWISE), "gpu_ns_per_step"] == 12 * US / 2
    assert pr.loc[(0, ELEMENTWISE), "mean_ns"] == 6 * US
    assert np.isnan(pr.loc[(1, ELEMENTWISE), "mean_ns"])  # no kernels: no mean
    assert (pr["steps"] == 2).all()
    # critical rank: rank 1 ends step 5, rank 0 ends step 6 -> GEMM (40 + 50) / 2, optimizer 20 / 2, NCCL 0 / 2
    cp = pd.DataFrame({"step": [5, 6], "critical_rank": [1, 0]})
    cr = family_on_critical_rank(per, cp)
    assert list(cr.columns) == schema.CRITICAL_FAMILY_COLUMNS
    cr = cr.set_index("family")
    assert cr.loc[GEMM, "gpu_ns_per_step"] == (40 + 50) * US / 2
    assert cr.loc[OPTIMIZER, "gpu_ns_per_step"] == 20 * US / 2
    assert cr.loc[NCCL_GROUP, "gpu_ns_per_step"] == 0
    assert cr.loc[COPY, "kernels_per_step"] == 0
    # the other choice of critical ranks gives other numbers (the rows really are picked per step)
    cr0 = family_on_critical_rank(per, cp.assign(critical_rank=[0, 1])).set_index("family")
    assert cr0.loc[GEMM, "gpu_ns_per_step"] == (30 + 60) * US / 2
    assert cr0.loc[NCCL_GROUP, "gpu_ns_per_step"] == (40 + 10) * US / 2


def test_empty_inputs_give_the_contract_columns():
    assert list(family_steps(_kernels().iloc[:0], STEPS).columns) == schema.FAMILY_STEP_COLUMNS
    assert family_steps(_kernels(), STEPS.iloc[:0]).empty
    empty = family_steps(_kernels(), STEPS.iloc[:0])
    assert list(family_per_rank(empty).columns) == schema.FAMILY_COLUMNS
    per = family_steps(_kernels(), STEPS)
    assert family_on_critical_rank(per, pd.DataFrame({"step": [99], "critical_rank": [0]})).empty


def test_memory_bound_families_are_families():
    assert set(MEMORY_BOUND_GROUPS) <= set(GROUPS) and GEMM not in MEMORY_BOUND_GROUPS


@pytest.fixture(scope="module")
def b_stock():
    from ddp_profile.analysis import analyze
    from ddp_profile.nsys.loader import load_trace

    got: dict = {}
    attach = answers.attach

    def spy(res, rank_paths, *args, **kw):  # the rank paths before the GEMMs slowed beside a wait move to it
        got["paths"] = rank_paths
        return attach(res, rank_paths, *args, **kw)

    trace = load_trace(B / "torch_ddp-25mb_xl_bf16_2xh200")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(answers, "attach", spy)
        res = analyze(trace)
    return trace, res, got["paths"]


def test_real_trace_families_add_up_to_the_non_nccl_kernel_time_of_each_step(b_stock):
    """Campaign set B stock DDP (2 x H200): per (rank, step), the families but NCCL sum to the durations of the
    non-NCCL activities starting in the step's span, counted here with pandas (merge_asof on the span starts)."""
    from ddp_profile.analysis.steps import spans

    trace, res, raw = b_stock
    per = family_steps(trace.kernels, res.steps)
    fam = per.loc[per["family"] != NCCL_GROUP].groupby(["rank", "step"])["gpu_ns"].sum()
    sp = spans(res.steps).sort_values("start_ns")
    k = trace.kernels.assign(
        rank=trace.kernels["rank"].astype("int64"), dur=trace.kernels["end_ns"] - trace.kernels["start_ns"]
    ).sort_values("start_ns")
    k = pd.merge_asof(
        k,
        sp.rename(columns={"start_ns": "span_start", "end_ns": "span_end"}),
        left_on="start_ns",
        right_on="span_start",
        by="rank",
    )
    k = k.loc[k["step"].notna() & (k["start_ns"] < k["span_end"])]
    own = k.loc[k["kind"].astype("object") != "nccl"].groupby(["rank", "step"])["dur"].sum()
    own.index = own.index.set_levels(own.index.levels[1].astype("int64"), level=1)
    assert len(fam) == len(res.steps) == 12  # 2 ranks x 6 profiled steps
    diff = (fam - own.reindex(fam.index)).abs()
    assert diff.max() <= len(GROUPS)  # each family's sum rounded to whole ns once
    # and on each step's critical rank, they match the critical path's compute part (a union of the same
    # activities clipped to the span: equal here, where compute kernels do not run at once), within 0.1 %,
    # once the GEMM time slowed beside a waiting NCCL kernel, which the critical path counts as wait, is
    # given back to compute (the rank paths before that move)
    cp = res.critical_path
    before = raw.set_index(["rank", "step"])
    for row in cp.itertuples():
        moved = row.wait_ns - before.loc[(row.critical_rank, row.step), "wait_ns"]
        assert (
            moved >= 0 and before.loc[(row.critical_rank, row.step), "compute_ns"] == row.compute_ns + moved
        )
        assert fam.loc[(row.critical_rank, row.step)] == pytest.approx(row.compute_ns + moved, rel=1e-3)


def test_contention_by_family_sums_the_names_of_each_family():
    from ddp_profile.analysis.kernel_families import contention_by_family
    from ddp_profile.analysis.kernel_groups import name_group

    rows = pd.DataFrame(
        [
            # name, n_alone, n_overlapped, alone_median, overlapped_median, slowdown, baseline, lost, overlapped_ns
            ("nvjet_sm90_tst_128x256", 10, 4, 100.0, 200.0, 100.0, 400.0, 400.0, 800.0),
            ("sm90_xmma_gemm_bf16", 10, 2, 50.0, 60.0, 20.0, 100.0, 20.0, 120.0),
            ("vectorized_elementwise_kernel", 10, 6, 10.0, 11.0, 10.0, 60.0, 6.0, 66.0),
        ],
        columns=schema.CONTENTION_COLUMNS,
    )
    fam = contention_by_family(rows)
    assert list(fam.columns) == schema.FAMILY_CONTENTION_COLUMNS
    assert list(fam["family"]) == [GEMM, ELEMENTWISE]  # GROUPS order, families with names only
    gemm = fam.iloc[0]
    assert (gemm["names"], gemm["n_overlapped"], gemm["baseline_ns"], gemm["lost_ns"]) == (2, 6, 500.0, 420.0)
    assert gemm["slowdown_pct"] == pytest.approx(84.0) and gemm["median_ratio"] == pytest.approx(
        (2.0 + 1.2) / 2
    )
    assert name_group("ncclDevKernel_AllReduce") == OTHER and name_group(None) == OTHER
    assert contention_by_family(rows.iloc[:0]).empty


def test_stock_bf16_gemms_beside_nccl_take_about_twice_their_time_alone(b_stock):
    """Campaign set B stock DDP (2 x H200, XL bf16): the measured signature of second waves (median like-for-like
    ratio of the GEMM names near 2), the finding `--gemm-sm-carveout` answers."""
    from ddp_profile.analysis.kernel_families import contention_by_family

    _, res, _ = b_stock
    fam = contention_by_family(res.contention)
    gemm = fam.loc[fam["family"] == GEMM].iloc[0]
    assert 1.6 < gemm["median_ratio"] < 2.2 and gemm["slowdown_pct"] > 50
