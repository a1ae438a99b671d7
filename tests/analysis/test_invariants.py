"""Invariants of the analyses, as properties over synthetic exports (Hypothesis): per-rank kernel speeds and
per-rank, per-step delays (a rank that launches late, or a little later every step) drawn at random, written
as a real export (``nsys.synth.build_export``), loaded and analysed as any trace is.

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

from ddp_profile import nvtx_names
from ddp_profile.analysis import analyze
from ddp_profile.nsys.loader import load_trace
from ddp_profile.nsys.synth import EVENT_TYPES, build_export

EXAMPLES = min(int(os.environ.get("DDP_FUZZ_EXAMPLES", "6")), 25)
PER_STEP = 6  # kernels per step: 2 forward, 2 backward, 2 optimizer
BUCKETS = 2
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def write_run(path: Path, kernel_ns: list[int], delays: list[list[int]], nccl_ns: int) -> None:
    """One export of len(kernel_ns) ranks and len(delays[0]) steps. Rank r runs its kernels in kernel_ns[r]
    each; its step s starts delays[r][s] (non-decreasing in s) after the common start; bucket b's all-reduce
    starts when backward kernel b ends (the last one when backward ends)."""
    n_ranks, n_steps = len(kernel_ns), len(delays[0])
    period = PER_STEP * max(kernel_ns) + nccl_ns + 100_000
    k: dict[str, list] = {c: [] for c in ("pid", "device", "stream", "start", "end", "name", "correlation_id",
                                           "launch_start", "launch_tid", "launch_api")}
    n: dict[str, list] = {c: [] for c in ("pid", "tid", "start", "end", "text", "domain", "payload", "category",
                                           "registered", "event_type")}
    for r, kns in enumerate(kernel_ns):
        pid = 1000 + r
        for s in range(n_steps):
            t0 = 1_000_000 + s * period + delays[r][s]
            starts = t0 + np.arange(PER_STEP) * kns
            starts[4:] += nccl_ns  # the optimizer waits for the last all-reduce
            buckets = t0 + np.array([3, 4]) * kns
            names = ["fwd_gemm"] * 2 + ["bwd_gemm"] * 2 + ["sgd_update"] * 2 + [NCCL] * BUCKETS
            all_starts = [*starts, *buckets]
            corr = s * (PER_STEP + BUCKETS) + 1
            for col, vals in (("pid", [pid] * 8), ("device", [r] * 8), ("stream", [7] * 6 + [17] * 2),
                              ("start", all_starts), ("end", [*(starts + kns), *(buckets + nccl_ns)]),
                              ("name", names), ("correlation_id", list(range(corr, corr + 8))),
                              ("launch_start", [int(x) - 5_000 for x in all_starts]), ("launch_tid", [pid] * 8),
                              ("launch_api", ["cudaLaunchKernel_v7000"] * 8)):
                k[col].extend(vals)
            end = int(starts[-1] + kns)
            for text, a, b, payload, cat in ((f"{nvtx_names.STEP} {s}", t0 - 10_000, end + 1_000, s,
                                              nvtx_names.CATEGORY_STEP),
                                             (nvtx_names.FORWARD, t0 - 8_000, t0 + 2 * kns - 5_000, -1,
                                              nvtx_names.CATEGORY_PHASE),
                                             (nvtx_names.BACKWARD, t0 + 2 * kns - 5_000, t0 + 4 * kns - 5_000, -1,
                                              nvtx_names.CATEGORY_PHASE),
                                             (nvtx_names.OPTIMIZER, t0 + 4 * kns, end, -1, nvtx_names.CATEGORY_PHASE)):
                for col, v in (("pid", pid), ("tid", pid), ("start", a), ("end", b), ("text", text),
                               ("domain", nvtx_names.DOMAIN), ("payload", payload), ("category", cat),
                               ("registered", 1), ("event_type", EVENT_TYPES["NvtxPushPopRange"])):
                    n[col].append(v)
        for col, v in (("pid", pid), ("tid", pid), ("start", 500_000), ("end", -1),
                       ("text", f"{nvtx_names.RANK_MARKER} {r}/{n_ranks}"), ("domain", nvtx_names.DOMAIN),
                       ("payload", r), ("category", nvtx_names.CATEGORY_META), ("registered", 0),
                       ("event_type", EVENT_TYPES["NvtxMark"])):
            n[col].append(v)
    build_export(path, processes=[{"pid": 1000 + r, "name": "python", "device": r} for r in range(n_ranks)],
                 kernels={c: np.asarray(v) for c, v in k.items()}, nvtx={c: np.asarray(v) for c, v in n.items()})


@st.composite
def runs(draw):
    n_ranks = draw(st.integers(2, 4))
    n_steps = draw(st.integers(2, 5))
    kernel_ns = [draw(st.integers(20, 200)) * 1_000 for _ in range(n_ranks)]
    nccl_ns = draw(st.integers(1, 20)) * 1_000
    delays = []
    for _ in range(n_ranks):
        steps = draw(st.lists(st.integers(0, 300), min_size=n_steps, max_size=n_steps))
        delays.append(list(np.cumsum(steps) * 1_000))
    return kernel_ns, delays, nccl_ns


def _analysed(kernel_ns, delays, nccl_ns):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.sqlite"
        write_run(path, kernel_ns, delays, nccl_ns)
        trace = load_trace(path)
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
    assert len(cp) == len(delays[0])
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
