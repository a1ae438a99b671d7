"""Invariants of the analyses, as properties over synthetic exports (Hypothesis): per-rank kernel speeds and
per-rank, per-step delays (a rank that launches late, or a little later every step) drawn at random, written
as a real export (``tests/synth_runs.py``), loaded and analysed as any trace is.

- the critical path's parts add up to the step span exactly (integers);
- straggler leads are >= 0 and the straggler is one of the ranks;
- no advice's expected or upper gain exceeds the step (the verdict's and each rule's against the verdict's
  span; the recommendation's predicted and upper gain against its measured step);
- every collective is reached last by at least one rank, so ``last_arrival_pct`` sums to >= 100 % over the
  ranks when every rank runs the same collectives.

Examples: ``DDP_FUZZ_EXAMPLES`` (default 6; each example writes, loads and analyses one small export)."""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from synth_runs import Rank, write_run

from ddp_profile.analysis import analyze
from ddp_profile.nsys.loader import load_trace

EXAMPLES = min(int(os.environ.get("DDP_FUZZ_EXAMPLES", "6")), 25)


@st.composite
def runs(draw):
    n_ranks = draw(st.integers(2, 4))
    n_steps = draw(st.integers(2, 5))
    kernel_ns = [draw(st.integers(20, 200)) * 1_000 for _ in range(n_ranks)]
    nccl_ns = draw(st.integers(1, 20)) * 1_000
    delays = []
    for _ in range(n_ranks):
        steps = draw(st.lists(st.integers(0, 300), min_size=n_steps, max_size=n_steps))
        delays.append([int(d) for d in np.cumsum(steps) * 1_000])
    return kernel_ns, delays, nccl_ns


def _analysed(kernel_ns, delays, nccl_ns):
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_run(
            Path(tmp),
            [Rank(k, d) for k, d in zip(kernel_ns, delays, strict=True)],
            n_steps=len(delays[0]),
            nccl_ns=nccl_ns,
        )
        trace = load_trace(paths)
        res = analyze(trace, sections=["steps", "ranks", "collectives", "critical_path", "recommendation"])
        return trace, res


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs())
def test_invariants_hold_over_random_runs(run):
    kernel_ns, delays, nccl_ns = run
    trace, res = _analysed(kernel_ns, delays, nccl_ns)
    ranks = set(trace.ranks["rank"].astype(int))
    assert len(ranks) == len(kernel_ns)

    cp = res.critical_path
    assert len(cp) and set(cp["step"].astype(int)) <= set(range(len(delays[0])))
    parts = ["compute_ns", "exposed_transfer_ns", "wait_ns", "host_ns", "idle_ns"]
    assert (cp[parts].astype("int64").sum(axis=1) == cp["span_ns"].astype("int64")).all()
    assert (cp[parts].astype("int64") >= 0).all().all()

    steps = res.steps
    leads = steps["straggler_lead_ns"].dropna()
    assert (leads >= 0).all()
    assert set(steps["straggler_rank"].dropna().astype(int)) <= ranks

    verdict = res.verdict
    span = verdict.get("span_ns")
    assert span is not None and span > 0
    gains = [verdict.get("expected_gain_ns")] + [a.get("gain_upper_ns") for a in verdict.get("advice") or []]
    for gain in gains:
        if gain is not None and not (isinstance(gain, float) and math.isnan(gain)):
            assert 0 <= gain <= span, (gain, span, verdict)
    rec = res.recommendation
    for _, row in rec.iterrows():
        for col in ("predicted_gain_ns", "upper_gain_ns"):
            if row[col] is not None and not (isinstance(row[col], float) and math.isnan(row[col])):
                assert row[col] <= row["measured_step_ns"], (col, row.to_dict())

    arrival = res.rank_overlap["last_arrival_pct"]
    assert arrival.notna().all() and arrival.sum() >= 100.0 - 1e-9
