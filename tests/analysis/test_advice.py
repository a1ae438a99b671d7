"""Advice you can act on (analysis/straggler.py, verdict.py, gains.py): one rank's extra work named as the cause
even when its peers' contention hides it in total compute, a consistent straggler removable also when it ends
the step itself, no straggler where no rank is late, the verdict's advice of its own kind, and expected gains
carried from the profiled trace to the job without the profiler."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from test_kernel_diff import kernels

from ddp_profile.analysis import critical_path as cp
from ddp_profile.analysis import gains
from ddp_profile.analysis import kernel_diff as kd
from ddp_profile.analysis import straggler as st
from ddp_profile.analysis import verdict as vd
from ddp_profile.analysis.kernel_arrays import KernelArrays
from ddp_profile.analysis.steps import spans

MS = 1_000_000


def _kernels(rows):
    """KERNEL_COLUMNS from (rank, name, start_ms, end_ms), launched 1 µs before they start (no host gap)."""
    return kernels(rows)


def _coll(k: pd.DataFrame) -> pd.DataFrame:
    """The collective table of the NCCL rows: one all-reduce per rank, step 0, waits up to the last start."""
    n = k.loc[k["kind"] == "nccl"].sort_values(["rank", "start_ns"]).copy()
    n["seq"] = n.groupby("rank").cumcount()
    last = n.groupby("seq")["start_ns"].transform("max")
    n["duration_ns"] = n["end_ns"] - n["start_ns"]
    n["wait_ns"] = np.minimum(n["duration_ns"], last - n["start_ns"])
    n["step"] = 0
    return n[
        [
            "rank",
            "pid",
            "device",
            "stream",
            "seq",
            "step",
            "collective",
            "start_ns",
            "end_ns",
            "duration_ns",
            "wait_ns",
        ]
    ].reset_index(drop=True)


# Three ranks, one step [0, 14) ms. Rank 1 runs four 1.4 ms 'extra_gemm' kernels its peers do not (5.6 ms) before
# the two 3 ms 'gemm' every rank runs, so it reaches the all-reduce 5.6 ms after its peers. The peers' 'gemm_bwd'
# runs beside their all-reduce, spinning while it waits for rank 1, and takes 6 ms there against rank 1's 2 ms.
# Total compute: peers 3 + 3 + 6 = 12 ms, rank 1 5.6 + 6 + 2 = 13.6 ms: +1.6 ms, under half the 5.6 ms lead.
EXTRA = [(1, "extra_gemm", 1.4 * i, 1.4 * (i + 1)) for i in range(4)]
ROWS = (
    [
        row
        for r in (0, 2)
        for row in ((r, "gemm", 0, 3), (r, "gemm", 3, 6), (r, "nccl_ar", 6, 13), (r, "gemm_bwd", 6, 12))
    ]
    + EXTRA
    + [(1, "gemm", 5.6, 8.6), (1, "gemm", 8.6, 11.6), (1, "nccl_ar", 11.6, 13), (1, "gemm_bwd", 11.6, 13.6)]
)
STEPS = pd.DataFrame({"rank": [0, 1, 2], "step": [0, 0, 0], "start_ns": [0, 0, 0], "end_ns": [14 * MS] * 3})


def _straggler(with_kernels: bool) -> pd.Series:
    k = _kernels(ROWS)
    coll = _coll(k)
    karr = KernelArrays(k)
    paths = cp.rank_paths(STEPS, karr, coll)
    sums = kd.step_kernel_sums(spans(STEPS), karr) if with_kernels else None
    return st.stragglers(st.step_leads(st.arrivals(coll)), paths, None, np.array([0]), sums).loc[0]


def test_extra_kernels_on_one_rank_are_its_cause_though_its_peers_contention_hides_them_in_total_compute():
    old = _straggler(with_kernels=False)
    assert old["straggler_rank"] == 1 and old["straggler_lead_ns"] == pytest.approx(5.6 * MS)
    assert old["straggler_cause"] == "unknown"  # total compute: +1.6 ms, under half the lead
    got = _straggler(with_kernels=True)
    assert got["straggler_rank"] == 1 and got["straggler_cause"] == "gpu"
    assert got["straggler_evidence"].startswith(
        "extra kernels 5.60 ms: extra_gemm ×4 more (other ranks' median ×0) 5.60 ms"
    )
    # the shared kernels: gemm alike, gemm_bwd 2 ms against the peers' 6: rank 1 is faster like for like
    assert "like-for-like kernels −4.00 ms" in got["straggler_evidence"]


def test_ranks_arriving_at_once_name_no_straggler():
    rows = [(r, name, a, b) for r in (0, 1) for name, a, b in (("gemm", 0, 3), ("nccl_ar", 3, 5))]
    k = _kernels(rows)
    coll = _coll(k)
    steps = STEPS.iloc[:2]
    paths = cp.rank_paths(steps, KernelArrays(k), coll)
    out = st.stragglers(st.step_leads(st.arrivals(coll)), paths, None, np.array([0]))
    assert out["straggler_rank"].isna().all() and out["straggler_cause"].isna().all()
    assert np.isnan(out.loc[0, "straggler_lead_ns"])


def _per_step(rank=1, lead=5.6 * MS, cause="gpu", n=8):
    return pd.DataFrame(
        {
            "straggler_rank": pd.array([rank] * n, dtype="Int64"),
            "straggler_lead_ns": [lead] * n,
            "straggler_cause": [cause] * n,
            "straggler_evidence": ["extra kernels 5.60 ms: x"] * n,
        },
        index=pd.Index(range(n), name="step"),
    )


def _crit(n=8, critical=1, wait=0, host=0):
    """The straggler ends the step itself: no wait, no host gap, all compute."""
    return pd.DataFrame(
        {
            "step": range(n),
            "span_ns": [100 * MS] * n,
            "critical_rank": [critical] * n,
            "compute_ns": [(98 - wait - host) * MS] * n,
            "exposed_transfer_ns": [2 * MS] * n,
            "wait_ns": [wait * MS] * n,
            "host_ns": [host * MS] * n,
            "idle_ns": [0] * n,
        }
    )


def test_a_consistent_straggler_is_removable_when_it_is_the_critical_rank():
    crit, per_step = _crit(), _per_step()
    rules = vd.advice(crit, pd.DataFrame(), per_step, pd.Series(0.0, index=range(8)), 0.0, None)
    v = vd.verdict(crit, per_step, rules)
    # its lead (5.6 ms) comes out of its own compute: 5.6 % of the step, above the 5 % bound
    assert v["bound_by"] == "straggler" and v["rank"] == 1 and v["removable_ns"] == pytest.approx(5.6 * MS)
    head = v["advice"][0]
    assert head["rule"] == "straggler_gpu" and "rank 1 runs kernels its peers do not" in v["what_to_change"]
    # expected: its lead, as measured (a difference between ranks)
    assert v["expected_gain_ns"] == head["expected_gain_ns"] == pytest.approx(5.6 * MS)
    assert v["gain_upper_ns"] == head["gain_upper_ns"] == pytest.approx(5.6 * MS)
    assert "cancels" in head["gain_basis"]


def test_a_straggler_verdict_takes_no_advice_of_another_kind():
    # causes unknown: no straggler_host/gpu rule; the host's launch_bound rule must not speak for the straggler
    crit, per_step = _crit(wait=3, host=8), _per_step(cause="unknown")
    rules = vd.advice(crit, pd.DataFrame(), per_step, pd.Series(0.0, index=range(8)), 0.0, None)
    assert {r["rule"] for r in rules} >= {"launch_bound", "straggler"}
    v = vd.verdict(crit, per_step, rules)
    assert v["bound_by"] == "straggler" and v["advice"][0]["rule"] == "straggler"
    assert v["what_to_change"] == "find why rank 1 arrives late at the collectives and even it out"
    assert [r["expected_gain_ns"] for r in v["advice"][1:]] == sorted(
        (r["expected_gain_ns"] for r in v["advice"][1:]), reverse=True
    )


def test_launch_bound_advice_names_cuda_graphs_not_plain_compile():
    crit = _crit(critical=0, host=20)
    rule = {
        r["rule"]: r for r in vd.advice(crit, pd.DataFrame(), None, pd.Series(0.0, index=range(8)), 0.0, None)
    }["launch_bound"]
    assert 'torch.compile(mode="reduce-overhead")' in rule["what_to_change"]
    assert "plain torch.compile (default mode) still launches kernel by kernel" in rule["what_to_change"]
    assert "measured under nsys, 20.0 % of the profiled step" in rule["gain_basis"]


def test_host_gains_are_carried_to_the_job_without_the_profiler():
    # profiled step 100 ms, 25 % over the un-profiled one (80 ms): the 20 ms excess comes off the 30 ms host part
    prof = gains.Profile(step_ns=100 * MS, host_ns=30 * MS, overhead_pct=25.0)
    got, basis = gains.carry(15 * MS, gains.HOST, prof)
    assert got == pytest.approx(15 * MS * (30 - 20) / 30) and "25.0 %" in basis
    assert gains.carry(15 * MS, gains.GPU, prof)[0] == 15 * MS  # kernels keep their times under nsys
    assert gains.carry(15 * MS, gains.LEAD, prof)[0] == 15 * MS  # alike on every rank: cancels
    unknown = gains.Profile(step_ns=100 * MS, host_ns=30 * MS)
    assert gains.carry(15 * MS, gains.HOST, unknown) == (
        15 * MS,
        "measured under nsys, 15.0 % of the profiled step: host time includes the profiler's launch "
        "overhead (no un-profiled timing to remove it)",
    )
    # the excess beyond the whole host part leaves no host gain
    assert gains.carry(15 * MS, gains.HOST, gains.Profile(100 * MS, 10 * MS, 25.0))[0] == 0.0
    assert gains.overhead_pct({"profiler_overhead_pct": "NaN"}) != gains.overhead_pct(
        {"profiler_overhead_pct": 3}
    )
    assert np.isnan(gains.overhead_pct(None)) and gains.overhead_pct({"profiler_overhead_pct": 3}) == 3.0


def test_every_rule_states_an_expected_gain_no_larger_than_its_bound():
    crit = _crit(critical=0, wait=3, host=20)
    steps = pd.DataFrame(
        {"rank": [0] * 8, "step": range(8), "comm_tail_ns": [2 * MS] * 8, "job_comm_tail_ns": [2 * MS] * 8}
    )
    rules = vd.advice(
        crit,
        steps,
        _per_step(),
        pd.Series(5 * MS, index=range(8)),
        3 * MS,
        None,
        overhead_pct=10.0,
        last_grad_ns=pd.Series(0.5 * MS, index=range(8)),
    )
    assert {r["rule"] for r in rules} >= {
        "comm_tail",
        "host_sync",
        "launch_bound",
        "straggler_gpu",
        "contention",
    }
    for r in rules:
        assert 0 <= r["expected_gain_ns"] <= r["gain_upper_ns"] and r["gain_basis"], r
    by = {r["rule"]: r for r in rules}
    assert by["comm_tail"]["expected_gain_ns"] == pytest.approx(1.5 * MS)  # the last bucket still runs after
    # host: excess = 100 · 10 / 110 ms comes off the 20 ms host part
    scale = (20 - 100 * 10 / 110) / 20
    assert by["host_sync"]["expected_gain_ns"] == pytest.approx(5 * MS * scale)


def _extra_gemm_export(build_export, extra: bool = True):
    """Three ranks (one process and GPU each) of six 20 ms steps laid out as ROWS, every kernel launched 0.5 ms
    before it starts, one 'step i' NVTX range per rank and step; with ``extra`` False rank 1 runs no
    extra_gemm and every rank's kernels are rank 0's."""
    cols: dict[str, list] = {
        k: [] for k in ("pid", "device", "stream", "start", "end", "name", "launch_start")
    }
    nvtx: dict[str, list] = {k: [] for k in ("pid", "tid", "start", "end", "text")}
    base = [row for row in ROWS if row[0] == 0]
    for step in range(6):
        t0 = 20 * MS * step + 10 * MS
        for rank in (0, 1, 2):
            mine = [row for row in ROWS if row[0] == rank] if extra else [(rank, *row[1:]) for row in base]
            for _, name, a, b in mine:
                nccl = name.startswith("nccl")
                cols["pid"].append(100 + rank)
                cols["device"].append(rank)
                cols["stream"].append(20 if nccl else 7)
                cols["start"].append(t0 + round(a * MS))
                cols["end"].append(t0 + round(b * MS))
                cols["name"].append("ncclDevKernel_AllReduce_Sum_f32_RING_LL" if nccl else name)
                cols["launch_start"].append(t0 + round(a * MS) - MS // 2)
            nvtx["pid"].append(100 + rank)
            nvtx["tid"].append(100 + rank)
            nvtx["start"].append(t0 - MS)
            nvtx["end"].append(t0 + 14 * MS)
            nvtx["text"].append(f"step {step}")
    cols["correlation_id"] = list(range(1, len(cols["pid"]) + 1))
    return build_export(
        "extra.sqlite" if extra else "alike.sqlite",
        processes=[{"pid": 100 + r, "device": r} for r in (0, 1, 2)],
        kernels=cols,
        nvtx=nvtx,
    )


def test_a_job_whose_rank_runs_extra_gemms_gets_cause_gpu_and_a_straggler_verdict(build_export):
    from ddp_profile.analysis import analyze
    from ddp_profile.nsys.loader import load_trace

    res = analyze(load_trace(_extra_gemm_export(build_export)))
    per_step = res.steps.groupby("step")[
        ["straggler_rank", "straggler_lead_ns", "straggler_cause", "straggler_evidence"]
    ].first()
    assert len(per_step) == 6 and (per_step["straggler_rank"] == 1).all()
    assert per_step["straggler_lead_ns"].to_numpy() == pytest.approx(5.6 * MS)
    assert (per_step["straggler_cause"] == "gpu").all()
    assert per_step["straggler_evidence"].str.startswith("extra kernels 5.60 ms: extra_gemm ×4 more").all()
    v = res.verdict
    assert v["bound_by"] == "straggler" and v["rank"] == 1 and v["advice"][0]["rule"] == "straggler_gpu"
    assert v["expected_gain_ns"] == pytest.approx(5.6 * MS)


def test_a_job_of_alike_ranks_gets_no_straggler_verdict(build_export):
    from ddp_profile.analysis import analyze
    from ddp_profile.nsys.loader import load_trace

    res = analyze(load_trace(_extra_gemm_export(build_export, extra=False)))
    assert res.steps["straggler_rank"].isna().all()
    assert res.verdict["bound_by"] != "straggler" and res.verdict["rank"] is None
    assert not [a for a in res.verdict["advice"] if a["rule"].startswith("straggler")]


def test_extra_work_on_a_rank_the_trace_does_not_name_straggler_is_its_own_rule():
    """Under the profiler another rank's host may arrive last (the what-if ledger's slow-GPU job: rank 3's host
    under nsys, while rank 1 runs four extra GEMMs): the extra work still gets advice, with its GPU time as
    the expected gain, and the verdict's remedy stays the one for the rank it names."""
    crit, per_step = _crit(wait=3, host=8), _per_step(rank=3, cause="host")
    per_step["straggler_evidence"] = "GPU idle awaiting launches"
    extra = pd.DataFrame(
        {
            "step": list(range(8)) * 2,
            "rank": [1] * 8 + [0] * 8,
            "extra_ns": [4.6 * MS] * 8 + [0.0] * 8,
            "like_ns": [0.0] * 16,
            "extra_kernels": [[("sm90_gemm", 4, 0.0, 4.6 * MS)]] * 8 + [[]] * 8,
        }
    )
    rules = vd.advice(
        crit, pd.DataFrame(), per_step, pd.Series(0.0, index=range(8)), 0.0, None, extra_work=extra
    )
    by = {r["rule"]: r for r in rules}
    assert (
        by["extra_work"]["expected_gain_ns"] == by["extra_work"]["gain_upper_ns"] == pytest.approx(4.6 * MS)
    )
    assert "rank 1" in by["extra_work"]["what_to_change"]
    assert "sm90_gemm ×4 more (other ranks' median ×0) 4.60 ms" in by["extra_work"]["evidence"]
    v = vd.verdict(crit, per_step, rules)
    assert v["bound_by"] == "straggler" and v["rank"] == 3 and v["advice"][0]["rule"] == "straggler_host"
    # the straggler rule already naming that work: no second rule for it
    gpu = _per_step(rank=1, cause="gpu")
    assert "extra_work" not in {
        r["rule"]
        for r in vd.advice(
            crit, pd.DataFrame(), gpu, pd.Series(0.0, index=range(8)), 0.0, None, extra_work=extra
        )
    }
