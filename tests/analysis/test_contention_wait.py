"""Compute slowed beside a waiting NCCL kernel counts as waiting (critical_path.with_contention_wait): exact on
a hand-built timeline, and on the committed what-if traces (a GPU straggler's peers; a balanced job)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_answers import MS, coll_of, kernels  # tests/analysis/ is on sys.path (no __init__.py)

from ddp_profile.analysis import answers
from ddp_profile.analysis import critical_path as cp
from ddp_profile.analysis.kernel_arrays import KernelArrays

WHATIF = Path(__file__).resolve().parents[2] / "traces" / "whatif"

# One step, two ranks (ms). Rank 0 arrives at the all-reduce at 16; rank 1 at 10, so its NCCL kernel waits
# [10, 16) while its compute stream runs a GEMM [8, 14) and an elementwise kernel [14, 15) beside it.
ROWS = [
    (0, "compute", 0, 16 * MS, 0),
    (0, "nccl", 16 * MS, 20 * MS, 1 * MS),
    (1, "compute", 0, 8 * MS, 0),
    (1, "compute", 8 * MS, 14 * MS, 0),
    (1, "compute", 14 * MS, 15 * MS, 0),
    (1, "nccl", 10 * MS, 20 * MS, 1 * MS),
]


def _paths(ratio: float) -> pd.DataFrame:
    k = kernels(ROWS)
    k.loc[(k["rank"] == 1) & (k["start_ns"] == 14 * MS), "name"] = "vectorized_elementwise_kernel"
    steps = pd.DataFrame({"rank": [0, 1], "step": [0, 0], "start_ns": [0, 0], "end_ns": [20 * MS, 20 * MS]})
    return cp.rank_paths(steps, KernelArrays(k), coll_of(k, lambda t: 0), gemm_ratio=ratio).set_index("rank")


def test_only_the_gemm_time_beside_the_wait_moves_by_the_slowdown_ratio():
    raw = _paths(float("nan"))
    # rank 1 as before: compute [0, 15); its NCCL alone [15, 20), waiting alone [15, 16)
    assert raw.loc[1, ["compute_ns", "exposed_transfer_ns", "wait_ns", "host_ns", "idle_ns"]].tolist() == [
        15 * MS,
        4 * MS,
        1 * MS,
        0,
        0,
    ]
    # the GEMM [8, 14) beside the wait [10, 16): 4 ms; the elementwise kernel [14, 15) is not a GEMM
    assert raw.loc[1, "beside_wait_ns"] == 4 * MS and raw.loc[0, "beside_wait_ns"] == 0
    two = _paths(2.0)  # GEMMs twice as long beside NCCL: half of the 4 ms is the wait's
    assert two.loc[1, ["compute_ns", "wait_ns"]].tolist() == [13 * MS, 3 * MS]
    third = _paths(1.5)  # a third of it, in whole ns
    assert third.loc[1, "wait_ns"] - raw.loc[1, "wait_ns"] == 4 * MS // 3
    for p in (raw, two, third):
        assert (p[cp.PARTS].sum(axis=1) == p["span_ns"]).all()
        assert p.loc[0, cp.PARTS].tolist() == raw.loc[0, cp.PARTS].tolist()  # rank 0 never waits
    for unknown in (float("nan"), 1.0, 0.8):  # no ratio, or no slowdown: nothing moves
        assert _paths(unknown)[cp.PARTS].equals(raw[cp.PARTS])


def _analysed(monkeypatch, name: str):
    """(the analysis, its rank paths before the move, the GEMM ratio it moved with) of a committed trace."""
    from ddp_profile.analysis import analyze
    from ddp_profile.nsys.loader import load_trace

    got = {}
    attach = answers.attach

    def spy(res, rank_paths, waits, contention_ns, gemm_ratio=float("nan"), *args, **kw):
        got["paths"], got["ratio"] = rank_paths, gemm_ratio
        return attach(res, rank_paths, waits, contention_ns, gemm_ratio, *args, **kw)

    monkeypatch.setattr(answers, "attach", spy)
    res = analyze(load_trace(WHATIF / name / "profiled.sqlite.xz"))
    return res, got["paths"], got["ratio"]


def test_a_gpu_stragglers_peers_wait_for_it_instead_of_computing(monkeypatch):
    # Rank 1 runs ~5 ms of extra GEMMs before each step; its peers' backward GEMMs run beside NCCL kernels
    # spinning while they wait for it.
    res, raw, ratio = _analysed(monkeypatch, "straggler-gpu--gpt2-ddp-b32-slowgpu")
    assert np.isfinite(ratio) and ratio > 1.0
    after = cp.with_contention_wait(raw, ratio)
    moved = after["wait_ns"] - raw["wait_ns"]
    assert (raw["compute_ns"] - after["compute_ns"]).equals(moved)
    assert (moved == np.floor(raw["beside_wait_ns"] * (1.0 - 1.0 / ratio)).astype("int64")).all()
    assert (after[cp.PARTS].sum(axis=1) == after["span_ns"]).all() and (after[cp.PARTS] >= 0).all().all()
    peers = (after["rank"] != 1).to_numpy()
    assert (moved[peers] > 0).all()  # every peer, every step
    late = ~peers & (raw["beside_wait_ns"] == 0).to_numpy()
    assert late.sum() >= 2 and after.loc[late, cp.PARTS].equals(raw.loc[late, cp.PARTS])
    # the peers' wait now tells the straggler's lead: before, the GEMMs beside the wait hid it in compute
    lead = float(res.steps.groupby("step")["straggler_lead_ns"].first().median())
    before_wait, after_wait = (
        float(raw.loc[peers, "wait_ns"].median()),
        float(after.loc[peers, "wait_ns"].median()),
    )
    assert before_wait < 0.2 * lead and 0.5 * lead < after_wait < 2.0 * lead
    # the analysis' critical path is drawn from the moved paths
    crit = res.critical_path.set_index("step")
    mine = after.set_index(["rank", "step"]).loc[list(zip(crit["critical_rank"], crit.index, strict=True))]
    assert mine[cp.PARTS].to_numpy().tolist() == crit[cp.PARTS].to_numpy().tolist()


def test_a_balanced_job_keeps_its_critical_path_and_moves_little(monkeypatch):
    # Ranks alike: the rank that ends a step last is the one the others waited for, so it never waits itself
    # and the critical path is unchanged; a rank that waited (the profiler's host jitter) moves at most 7 %
    # of its step.
    res, raw, ratio = _analysed(monkeypatch, "balanced--gpt2-ddp")
    assert np.isfinite(ratio)
    assert res.critical_path[cp.PARTS].equals(cp.critical_path(raw)[cp.PARTS])
    moved = cp.with_contention_wait(raw, ratio)["wait_ns"] - raw["wait_ns"]
    assert (moved >= 0).all() and (moved <= 0.07 * raw["span_ns"]).all()


@pytest.mark.parametrize("bad", [float("nan"), 1.0])
def test_empty_paths_stay_empty(bad):
    empty = cp.rank_paths(pd.DataFrame(columns=["rank", "step", "start_ns", "end_ns"]), None, None)
    assert cp.with_contention_wait(empty, 2.0).empty and cp.with_contention_wait(empty, bad).empty
