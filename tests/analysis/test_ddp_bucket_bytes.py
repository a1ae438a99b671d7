"""Stock DDP's all-reduce sizes from its logged bucket sizes (run JSON), checked against a real trace of
DDP with the project's NVTX comm hook, where every all-reduce's bucket and bytes are recorded by NVTX.

tests/data/ddp_hook/ holds that trace (XL fp32, 2 x H200, 194 buckets, 4 steps), scrubbed: it is the
evidence for "the k-th all-reduce of a step is bucket k" on which the fallback rests."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ddp_profile import nvtx_names as nn
from ddp_profile.analysis import analyze
from ddp_profile.nsys.loader import load_trace

HOOKED = Path(__file__).resolve().parents[1] / "data" / "ddp_hook"
TRACES = Path(__file__).resolve().parents[2] / "traces"


def _without_bucket_ranges(trace):
    names = trace.nvtx["name"].astype("object").fillna("").astype(str)
    trace.nvtx = trace.nvtx.loc[~names.str.startswith(nn.ALLREDUCE_PREFIX)].reset_index(drop=True)
    return trace


def test_fallback_reproduces_the_hooks_nvtx_bytes_on_a_real_trace():
    trace = load_trace(HOOKED)
    assert trace.run["layout"]["nvtx_hook"] is True
    from_nvtx = analyze(trace).collectives
    assert from_nvtx["bytes"].notna().all()
    fallback = analyze(_without_bucket_ranges(load_trace(HOOKED)))
    assert any("DDP's logged bucket sizes" in n for n in fallback.notes)
    cols = ["rank", "step", "start_ns", "bucket", "bytes"]
    pd.testing.assert_frame_equal(fallback.collectives[cols], from_nvtx[cols])


def test_no_fallback_when_counts_differ_or_strategy_is_not_torch_ddp():
    trace = _without_bucket_ranges(load_trace(HOOKED))
    trace.run = dict(
        trace.run,
        layout=dict(trace.run["layout"], ddp_bucket_bytes=trace.run["layout"]["ddp_bucket_bytes"][:-1]),
    )
    res = analyze(trace)
    assert res.collectives["bytes"].isna().all()
    assert any("left without bytes" in n for n in res.notes)
    trace.run = dict(trace.run, strategy="bucketed")
    assert analyze(trace).collectives["bytes"].isna().all()


def test_committed_stock_torch_ddp_runs_get_every_gradient_byte_once_per_step():
    for folder in sorted(TRACES.glob("torch_ddp-*")):
        trace = load_trace(folder)
        assert trace.run["layout"].get("nvtx_hook") is False, folder.name  # the reference is stock DDP
        coll = analyze(trace).collectives
        per_step = coll.groupby(["rank", "step"])["bytes"].sum()
        assert (per_step == trace.run["param_bytes"]).all(), folder.name
