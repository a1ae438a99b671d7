"""analysis.recommend: the configuration the tool recommends from one trace, with its predicted step time."""

from __future__ import annotations

import argparse
import shlex
from functools import cache

import numpy as np
import pandas as pd

from ddp_profile.analysis import analyze
from ddp_profile.analysis.recommend import CHANNELS_FLAGS, merge_buckets, recommend
from ddp_profile.harness.bench import add_arguments, config_from_args
from ddp_profile.nsys.loader import load_trace

RUN = "traces/torch_ddp-25mb_xl_fp32_2xh200"


def _coll(bytes_, steps, streams=None):
    n = len(bytes_)
    return pd.DataFrame({"rank": 0, "pid": 1, "device": 0, "stream": streams or [7] * n, "seq": range(n),
                         "step": steps, "start_ns": np.arange(n) * 100, "bytes": bytes_})


def test_merge_buckets_known_answer():
    # one step, four 10-byte buckets ready at 1, 2, 3, 4: a 20-byte cap gives [10+10 ready 2, 10+10 ready 4]
    merged, ready = merge_buckets(_coll([10, 10, 10, 10], [0, 0, 0, 0]), np.array([1.0, 2, 3, 4]), 20)
    assert merged["bytes"].tolist() == [20, 20] and ready.tolist() == [2.0, 4.0]
    assert merged["seq"].tolist() == [0, 2]  # a merged bucket keeps its first member's place in the queue


def test_merge_buckets_never_crosses_a_step_and_keeps_unknown_ready_times_unknown():
    # steps 0 and 1 with 3 buckets each; a cap larger than a step's bytes gives one bucket per step
    merged, ready = merge_buckets(_coll([5, 5, 5, 5, 5, 5], [0, 0, 0, 1, 1, 1]),
                                  np.array([1.0, 2, 3, np.nan, 5, 6]), 1_000)
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
    assert current["predicted_step_ns"] == measured and current["flags"] == "--strategy torch_ddp --bucket-mb 25"
    caps = rec.loc[rec["lever"] == "bucket cap", "cap_bytes"]
    assert (caps > 25 * 2**20).all() and caps.is_monotonic_increasing
    # predicted step = measured + (predicted tail at the cap - predicted tail now): the fit's bias cancels
    others = rec.loc[rec["lever"] == "bucket cap"]
    np.testing.assert_allclose(others["predicted_step_ns"],
                               measured + others["predicted_tail_ns"] - current["predicted_tail_ns"])


def test_recommended_flags_are_harness_options():
    _, res = _real()
    p = argparse.ArgumentParser()
    add_arguments(p)
    for flags in res.recommendation["flags"]:
        cfg = config_from_args(p.parse_args([*shlex.split(flags), "--model", "xl"]))
        assert cfg.strategy in ("torch_ddp", "bucketed")


def test_channels_are_cut_only_when_contention_outweighs_exposed_communication():
    trace, res = _real()
    lost = res.contention["lost_ns"].sum() / len(res.steps)
    exposed = res.steps["exposed_comm_ns"].median()
    with_contention = recommend(res, trace.kernels, trace.run)
    assert (CHANNELS_FLAGS in with_contention["flags"].iloc[0]) == (lost > exposed)
    res_quiet = type(res)(**{**res.__dict__, "contention": res.contention.iloc[0:0]})
    quiet = recommend(res_quiet, trace.kernels, trace.run)
    assert CHANNELS_FLAGS not in quiet["flags"].iloc[0] and np.isnan(quiet["upper_gain_ns"].iloc[0])


def test_no_recommendation_where_the_trace_cannot_support_one():
    trace, res = _real()
    naive = {**trace.run, "config": {**trace.run["config"], "strategy": "naive"}}
    assert recommend(res, trace.kernels, naive).empty
