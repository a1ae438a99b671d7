"""analysis.recommend: the configuration the tool recommends from one trace, with its predicted step time."""

from __future__ import annotations

import argparse
import shlex
from functools import cache

import numpy as np
import pandas as pd
import pytest

from ddp_profile.analysis import analyze
from ddp_profile.analysis.contention import estimated_loss_ns
from ddp_profile.analysis.recommend import (
    channel_room,
    channels_to_keep,
    fields_of,
    flags_of,
    merge_buckets,
    recommend,
)
from ddp_profile.harness.bench import add_arguments, config_from_args
from ddp_profile.nsys.loader import load_trace

RUN = "traces/torch_ddp-25mb_xl_fp32_2xh200"


def _coll(bytes_, steps, streams=None):
    n = len(bytes_)
    return pd.DataFrame(
        {
            "rank": 0,
            "pid": 1,
            "device": 0,
            "stream": streams or [7] * n,
            "seq": range(n),
            "step": steps,
            "start_ns": np.arange(n) * 100,
            "bytes": bytes_,
        }
    )


def test_merge_buckets_known_answer():
    # one step, four 10-byte buckets ready at 1, 2, 3, 4: a 20-byte cap gives [10+10 ready 2, 10+10 ready 4]
    merged, ready = merge_buckets(_coll([10, 10, 10, 10], [0, 0, 0, 0]), np.array([1.0, 2, 3, 4]), 20)
    assert merged["bytes"].tolist() == [20, 20] and ready.tolist() == [2.0, 4.0]
    assert merged["seq"].tolist() == [0, 2]  # a merged bucket keeps its first member's place in the queue


def test_merge_buckets_never_crosses_a_step_and_keeps_unknown_ready_times_unknown():
    # steps 0 and 1 with 3 buckets each; a cap larger than a step's bytes gives one bucket per step
    merged, ready = merge_buckets(
        _coll([5, 5, 5, 5, 5, 5], [0, 0, 0, 1, 1, 1]), np.array([1.0, 2, 3, np.nan, 5, 6]), 1_000
    )
    assert merged["bytes"].tolist() == [15, 15] and merged["step"].tolist() == [0, 1]
    assert ready[0] == 3.0 and np.isnan(ready[1])  # one member of step 1 had no ready time


@cache
def _real():
    trace = load_trace(RUN)
    return trace, analyze(trace)


def test_recommendation_on_a_real_ddp_trace():
    trace, res = _real()
    rec = res.recommendation
    assert rec["lever"].iloc[0] == "recommended" and rec["lever"].iloc[1] == "current"
    measured = float(res.steps["step_ns"].median())
    assert rec["measured_step_ns"].eq(measured).all()
    current = rec.iloc[1]
    assert (
        current["predicted_step_ns"] == measured and current["flags"] == "--strategy torch_ddp --bucket-mb 25"
    )
    caps = rec.loc[rec["lever"] == "bucket cap", "cap_bytes"]
    assert (caps > 25 * 2**20).all() and caps.is_monotonic_increasing
    # predicted step = measured + (predicted tail at the cap - predicted tail now): the fit's bias cancels
    others = rec.loc[rec["lever"] == "bucket cap"]
    np.testing.assert_allclose(
        others["predicted_step_ns"], measured + others["predicted_tail_ns"] - current["predicted_tail_ns"]
    )


def test_recommended_flags_are_harness_options():
    _, res = _real()
    p = argparse.ArgumentParser()
    add_arguments(p)
    for flags in res.recommendation["flags"]:
        cfg = config_from_args(p.parse_args([*shlex.split(flags), "--model", "xl"]))
        assert cfg.strategy in ("torch_ddp", "bucketed")


def test_recommended_fields_are_the_config_the_flags_set():
    """Each row's configuration fields equal the harness config its flags parse to, so a run can be matched
    to a recommendation on its config fields (the findings do)."""
    _, res = _real()
    p = argparse.ArgumentParser()
    add_arguments(p)
    for row in res.recommendation.to_dict("records"):
        cfg = config_from_args(p.parse_args([*shlex.split(row["flags"]), "--model", "xl"]))
        assert (cfg.strategy, cfg.bucket_mb, cfg.nccl_channels, cfg.nccl_high_priority) == (
            row["strategy"],
            row["bucket_mb"],
            row["nccl_channels"],
            row["nccl_high_priority"],
        )
        assert flags_of(row) == row["flags"]
    assert (
        flags_of(fields_of("torch_ddp", 100 * 2**20) | {"nccl_channels": 2, "nccl_high_priority": True})
        == "--strategy torch_ddp --bucket-mb 100 --nccl-channels 2 --nccl-high-priority"
    )
    assert flags_of(fields_of("overlap")) == "--strategy overlap"


def test_channels_are_cut_only_when_contention_outweighs_exposed_communication():
    trace, res = _real()
    lost = res.contention["lost_ns"].sum() / len(res.steps)
    exposed = res.steps["exposed_comm_ns"].median()
    assert trace.meta["nccl_channels"] == 24  # gridX of the stock run's NCCL kernels
    with_contention = recommend(res, trace.kernels, trace.run, nccl_channels=24)
    assert ("--nccl-channels" in with_contention["flags"].iloc[0]) == (lost > exposed)
    res_quiet = type(res)(**{**res.__dict__, "contention": res.contention.iloc[0:0]})
    quiet = recommend(res_quiet, trace.kernels, trace.run, nccl_channels=24)
    assert "--nccl-channels" not in quiet["flags"].iloc[0] and np.isnan(quiet["upper_gain_ns"].iloc[0])
    # Like for like, this run loses less than its exposed communication; a loud stand-in exercises the cut.
    loud = res.contention.assign(
        lost_ns=res.contention["lost_ns"] + 2 * exposed * len(res.steps) / len(res.contention)
    )
    res = type(res)(**{**res.__dict__, "contention": loud})
    assert "--nccl-channels" in recommend(res, trace.kernels, trace.run, nccl_channels=24)["flags"].iloc[0]
    unknown = recommend(res, trace.kernels, trace.run)  # no channel count: nothing to cut from
    assert "--nccl-channels" not in unknown["flags"].iloc[0]
    assert "channel count is not in the trace" in unknown["basis"].iloc[0]


def test_channels_kept_are_the_fewest_whose_worst_case_slowdown_fits_under_backward():
    assert channels_to_keep(24, 6.24) == 4  # 24/4 = 6.0x fits in 6.24x; 24/3 = 8x does not
    assert channels_to_keep(24, 2.19) == 11  # 24/11 = 2.18x
    assert channels_to_keep(24, 2.70) == 9
    assert channels_to_keep(24, 0.9) is None  # the collectives already overrun backward
    assert channels_to_keep(2, 1.5) is None  # ceil(2 / 1.5) = 2: no channel can go
    assert channels_to_keep(None, 5.0) is None and channels_to_keep(24, float("nan")) is None


def test_channel_room_known_answer():
    # rank 0: step 0 has two 10 ns collectives, first ready at 100, backward ends at 160 -> (160-100)/20 = 3
    #         step 1 has one 20 ns collective ready at 300, backward ends at 400 -> 100/20 = 5; median 4
    grad = pd.DataFrame({"rank": [0, 0, 0], "step": [0, 0, 1], "duration_ns": [10, 10, 20]})
    steps = pd.DataFrame({"rank": [0, 0], "step": [0, 1], "backward_end_ns": [160, 400]})
    assert channel_room(grad, np.array([100.0, 120.0, 300.0]), steps) == 4.0
    assert np.isnan(channel_room(grad, np.full(3, np.nan), steps))


def test_recommendation_on_the_committed_4_gpu_stock_run_is_the_one_set_d_confirmed():
    """traces/campaign/C's stock 4-GPU run gives 9 channels and traces/campaign/D ran exactly that. The loss
    compared with exposed communication is the estimate (each name's like-for-like slowdown over all its time
    under NCCL), several times the like-for-like lower bound: most kernels run beside NCCL in every step."""
    trace = load_trace("traces/campaign/C/torch_ddp-25mb_xl_fp32_4xh100")
    res = analyze(trace)
    head = res.recommendation.iloc[0]
    assert head["flags"] == "--strategy torch_ddp --bucket-mb 25 --nccl-channels 9 --nccl-high-priority"
    assert "9 of NCCL's 24 channels is the fewest" in head["basis"]
    bound = res.contention["lost_ns"].sum()
    assert 2 * bound < estimated_loss_ns(res.contention) < res.contention["overlapped_ns"].sum()
    confirmed = load_trace("traces/campaign/D/torch_ddp-25mb-ch9-hiprio_xl_fp32_4xh100")
    assert confirmed.run["config"]["nccl_channels"] == 9 and confirmed.meta["nccl_channels"] == 9


def test_estimated_loss_applies_each_names_slowdown_to_all_its_time_under_nccl():
    # a: 100 ns measured like for like (+25 ns lost on a 100 ns baseline = 20 % of the measured time) over
    # 1,000 ns under NCCL -> 200; b: 10 lost on 90 (10 %) over 500 -> 50; c: no measured time -> 0
    table = pd.DataFrame(
        {"baseline_ns": [100.0, 90.0, 0.0], "lost_ns": [25.0, 10.0, 0.0], "overlapped_ns": [1000, 500, 300]}
    )
    assert estimated_loss_ns(table) == pytest.approx(1000 * 25 / 125 + 500 * 10 / 100)
    assert estimated_loss_ns(table.iloc[0:0]) == 0.0 and estimated_loss_ns(None) == 0.0


def test_no_recommendation_where_the_trace_cannot_support_one():
    trace, res = _real()
    naive = {**trace.run, "config": {**trace.run["config"], "strategy": "naive"}}
    assert recommend(res, trace.kernels, naive).empty
