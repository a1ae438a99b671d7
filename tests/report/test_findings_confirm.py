"""Recommend → confirm in the findings: the prediction from the stock trace's recommendation table against each
configuration's measured step, error per configuration and the ±5 % target. The first tests build RunData
here, every expected number derived from the values written in the test; the last ones compute every judged
configuration's error on the committed sets (traces/ and traces/campaign/), from their traces and run JSONs."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from ddp_profile.analysis.recommend import fields_of, flags_of
from ddp_profile.findings import confirm
from ddp_profile.findings.data import CAMPAIGN, RunData
from ddp_profile.schema import RECOMMEND_COLUMNS

MIB = 2**20


def _rec(measured_ms):
    """A stock torch_ddp 25 MiB trace's table: itself, 100 MiB predicted +1 ms, and a channel recommendation."""
    rows = []
    for lever, cap, pred, extra, upper in (
        ("current", 25, measured_ms, {}, None),
        ("bucket cap", 100, measured_ms + 1.0, {}, None),
        ("recommended", 25, measured_ms, {"nccl_channels": 2, "nccl_high_priority": True}, 8.0),
    ):
        f = fields_of("torch_ddp", cap * MIB) | extra
        rows.append(
            {c: None for c in RECOMMEND_COLUMNS}
            | f
            | {
                "lever": lever,
                "flags": flags_of(f),
                "cap_bytes": float(cap * MIB),
                "predicted_step_ns": pred * 1e6,
                "upper_gain_ns": None if upper is None else upper * 1e6,
            }
        )
    return pd.DataFrame(rows)


def _run(name, strategy, prof_ms, unprof_ms=None, world=2, rec=None, **config):
    meta = {
        "strategy": strategy,
        "world_size": world,
        "config": {"strategy": strategy, "bucket_mb": 25.0, **config},
    }
    if unprof_ms is not None:
        meta["unprofiled_step_ms_median"] = unprof_ms
    analysis = SimpleNamespace(recommendation=rec if rec is not None else pd.DataFrame())
    return RunData(
        set=CAMPAIGN,
        name=name,
        folder=Path("traces/campaign/X") / name,
        meta=meta,
        trace=None,
        analysis=analysis,
        row={"step_ns": prof_ms * 1e6},
    )


def test_errors_per_configuration_against_profiled_steps():
    ref = _run("ddp", "torch_ddp", 380.0, rec=_rec(380.0))
    b100 = _run("b100", "bucketed", 370.0, bucket_mb=100.0)  # predicted 381: +3.0 %
    b1 = _run("b1", "bucketed", 390.0, bucket_mb=1.0)  # below the stock cap: no prediction
    ch2 = _run("ch2", "torch_ddp", 400.0, nccl_channels=2, nccl_high_priority=True)  # predicted 380: -5.0 %
    ch4 = _run("ch4", "torch_ddp", 360.0, nccl_channels=4, nccl_high_priority=True)  # no row for 4 channels
    zero = _run("zero", "torch_ddp", 390.0, shard_optimizer="ours")
    one = _run("none", "none", 350.0, world=1)
    rows = {x["run"].name: x for x in confirm.confirm_rows(ref, [ref, b100, b1, ch2, ch4, zero, one])}
    assert "none" not in rows  # 1-GPU runs are not configurations of the comparison
    assert abs(rows["b100"]["error_pct"] - 100.0 * (381.0 - 370.0) / 370.0) < 1e-9
    assert abs(rows["ch2"]["error_pct"] - 100.0 * (380.0 - 400.0) / 400.0) < 1e-9
    assert abs(rows["ch2"]["low_ns"] - 372e6) < 1  # 380 - 8 ms bound
    assert "merged, not split" in rows["b1"]["why"]
    assert rows["ch4"]["why"] == "the stock run's trace is not loaded"  # the channel model needs its trace
    assert "shard_optimizer" in rows["zero"]["why"]
    assert rows["ddp"]["why"].startswith("the stock run itself")
    sec = confirm.q12_confirm([("Set X", ref, [ref, b100, b1, ch2, ch4, zero, one])], lambda r: r.name)
    table = next(b.frame for b in sec.blocks if hasattr(b, "frame")).set_index("run")
    assert table.loc["b100", "within ±5 %"] == "yes" and table.loc["b100", "error"] == "+3.0 %"
    assert (
        table.loc["ch2", "within ±5 %"] == "yes" and table.loc["ch2", "error"] == "−5.0 %"
    )  # a true minus, as every signed change
    assert "zero" not in table.index
    text = " ".join(sec.paragraphs())
    assert "Set X: 2 of 2 predicted configurations within ±5 % (largest error −5.0 %, ch2)" in text
    assert "Not predicted (other strategies or levers): zero." in text


def test_target_flips_with_the_data():
    ref = _run("ddp", "torch_ddp", 380.0, rec=_rec(380.0))
    far = _run("ch2", "torch_ddp", 300.0, nccl_channels=2, nccl_high_priority=True)  # 380 vs 300: +26.7 %
    sec = confirm.q12_confirm([("Set X", ref, [ref, far])], lambda r: r.name)
    table = next(b.frame for b in sec.blocks if hasattr(b, "frame")).set_index("run")
    assert table.loc["ch2", "within ±5 %"] == "no" and table.loc["ch2", "error"] == "+26.7 %"
    assert "0 of 1 predicted configurations" in " ".join(sec.paragraphs())


def test_unprofiled_medians_move_the_prediction_by_the_stock_run_overhead():
    # stock: 380 profiled, 370 un-profiled -> a prediction of 381 (profiled) becomes 371 un-profiled
    ref = _run("ddp", "torch_ddp", 380.0, unprof_ms=370.0, rec=_rec(380.0))
    b100 = _run("b100", "bucketed", 379.0, unprof_ms=365.0, bucket_mb=100.0)
    (row,) = [x for x in confirm.confirm_rows(ref, [ref, b100]) if x["run"] is b100]
    assert row["measure"] == "un-profiled median"
    assert abs(row["predicted_ns"] - 371e6) < 1 and abs(row["measured_ns"] - 365e6) < 1


def test_channel_rate_is_calibrated_leave_one_out():
    a, b, c = (_run(n, "torch_ddp", 380.0, nccl_channels=2) for n in ("a", "b", "c"))
    for r in (a, b):
        r.meta["gpu_name"] = "H200"
    c.meta["gpu_name"] = "H100"
    rates = {id(a): ("H200", 2, 10.0), id(b): ("H200", 2, 20.0), id(c): ("H100", 2, 30.0)}
    assert confirm.rate_for(a, rates) == 20.0 and confirm.rate_for(b, rates) == 10.0  # never its own
    assert confirm.rate_for(c, rates) is None  # no other run on its GPU model: the worst case is used


def test_channel_rate_prefers_runs_on_as_many_gpus_then_any_count():
    runs = {
        n: _run(n, "torch_ddp", 380.0, world=w, nccl_channels=2)
        for n, w in (("two", 2), ("four", 4), ("four_b", 4))
    }
    rates = {
        id(runs["two"]): ("H100", 2, 17.0),
        id(runs["four"]): ("H100", 4, 21.0),
        id(runs["four_b"]): ("H100", 4, 19.0),
    }
    for r in runs.values():
        r.meta["gpu_name"] = "H100"
    assert confirm.rate_for(runs["four"], rates) == 19.0  # the other 4-GPU run, not the 2-GPU one
    assert confirm.rate_for(runs["two"], rates) == 20.0  # no other 2-GPU run: every other H100 run


# ---- the committed sets: every judged configuration's error, computed from traces/ ----------------------------

# The configurations the findings judge (a prediction from the set's stock trace and a measured step), by
# (set, run); a configuration that gains or loses its prediction fails test_judged_configurations.
JUDGED = [
    ("A", "bucketed-25mb_xl_fp32_2xh200"),
    ("A", "bucketed-100mb_xl_fp32_2xh200"),
    ("A", "bucketed-1000mb_xl_fp32_2xh200"),
    ("B", "bucketed-25mb_xl_bf16_2xh200"),
    ("B", "bucketed-100mb_xl_bf16_2xh200"),
    ("campaign A", "torch_ddp-25mb-ch2-hiprio_xl_fp32_2xh200"),
    ("campaign B", "torch_ddp-25mb-ch2-hiprio_xl_bf16_2xh200"),
    ("campaign B", "torch_ddp-25mb-ch4-hiprio_xl_bf16_2xh200"),
    ("campaign C", "torch_ddp-25mb-ch2-hiprio_xl_fp32_4xh100"),
    ("campaign D, 2 GPUs", "torch_ddp-25mb-ch5-hiprio_xl_fp32_2xh100"),
    ("campaign D, 4 GPUs", "torch_ddp-25mb-ch9-hiprio_xl_fp32_4xh100"),
]
# Outside ±5 % on branch predict (from main 2c8e31e), with the error measured when marked: a fix that brings
# one within shows up as XPASS (a failure) and its mark must go.
XFAIL = {
    (
        "campaign B",
        "torch_ddp-25mb-ch4-hiprio_xl_bf16_2xh200",
    ): "-20.6 %: predicted 222.7 ms, measured 280.3 ms; the run's host was slower, not its GPU: its forward, "
    "which runs no NCCL kernel, took 96.0 ms on the host against the stock run's 70.8 ms (same 50 ms of GPU "
    "compute), and backward's kernels were launched 22.2 µs apart against 19.6 µs",
}


@cache
def _committed() -> dict:
    """{(set, run name): confirm row} for the committed sets, built as the findings build them (run_sets for
    traces/, campaign_sets and stock_reference for traces/campaign/), loading only the runs a prediction can
    concern: bucketed and torch_ddp runs of the XL sets, torch_ddp runs of campaign sets A-D without levers."""
    from ddp_profile.findings import campaign as qc
    from ddp_profile.findings import run_sets
    from ddp_profile.findings.data import MAIN, find_runs, load_run

    def wanted(set_name, folder):
        n = folder.name
        if set_name == MAIN:
            return "_xl_" in n and n.startswith(("bucketed-", "torch_ddp-"))
        return folder.parent.name in "ABCD" and n.startswith("torch_ddp-") and "+" not in n

    runs = [load_run(s, f) for s, f in find_runs(Path("traces")) if s in (MAIN, CAMPAIGN) and wanted(s, f)]
    sets = run_sets(runs)
    groups = [(k, sets[k]["torch_ddp"], list(sets[k].values())) for k in ("A", "B")]
    groups += [
        (f"campaign {n}", ref, rs)
        for n, rs in sorted(qc.campaign_sets(runs).items())
        if (ref := qc.stock_reference(rs)) is not None
    ]
    rates = confirm.channel_rates([r for _, _, rs in groups for r in rs])
    return {(key, x["run"].name): x for key, ref, rs in groups for x in confirm.confirm_rows(ref, rs, rates)}


def test_judged_configurations():
    got = sorted(k for k, x in _committed().items() if np.isfinite(x["error_pct"]))
    assert got == sorted(JUDGED)


@pytest.mark.parametrize(
    ("set_name", "run"),
    [
        pytest.param(
            s,
            n,
            id=f"{s}-{n}",
            marks=[pytest.mark.xfail(strict=True, reason=XFAIL[s, n])] if (s, n) in XFAIL else [],
        )
        for s, n in JUDGED
    ],
)
def test_prediction_from_the_stock_trace_within_target(set_name, run):
    x = _committed()[set_name, run]
    assert x["measure"] == (
        "un-profiled median" if set_name.startswith("campaign") else "profiled step (trace)"
    )
    assert abs(x["error_pct"]) <= confirm.TARGET_PCT, (
        f"{x['error_pct']:+.1f} %: predicted {x['predicted_ns'] / 1e6:.1f} ms, measured {x['measured_ns'] / 1e6:.1f} ms "  # noqa: E501
        f"({x['model']})"
    )


def test_signed_percentages_use_a_true_minus():
    """Signed percentages in the findings read as the signed ms changes beside them: "−20.6 %" (U+2212), not
    "-20.6 %"; a change that rounds to zero is "+0.0 %"; a missing one "n/a"."""
    from ddp_profile.findings.losses import signed_pct
    from ddp_profile.findings.text import signed_pct_value

    assert signed_pct_value(-20.6) == "−20.6 %" and signed_pct_value(3.04) == "+3.0 %"
    assert signed_pct_value(-0.04) == "+0.0 %" and signed_pct_value(float("nan")) == "n/a"
    assert signed_pct(-5.0, 100.0) == "−5.0 %" and signed_pct(1.0, 0.0) == "n/a"
