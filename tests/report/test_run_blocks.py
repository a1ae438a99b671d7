"""The run page's answer-first blocks, the timeline's CPU rows and phase labels, the Perfetto export's
labels and the one number formatter, on frames whose contents are known (conftest.make_run)."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from conftest import US, make_run

from ddp_profile import fmt
from ddp_profile.analysis.host_calls import HOST_CALL_COLUMNS, main_thread_calls
from ddp_profile.nsys.api import call_kinds
from ddp_profile.plots.timeline import HOST_K, timeline_steps, trace_names
from ddp_profile.report import perfetto
from ddp_profile.report.answer_text import verdict_lines, verdict_of
from ddp_profile.report.run_blocks import answer_block, comm_kinds_block, comm_kinds_table, memory_table
from ddp_profile.report.runs import Run

T0 = 10_000 * US  # step 0's start in make_run


def _api(rows):
    """API_CALL_COLUMNS rows; each call's kind as the nsys layer gives it (nsys.api.call_kinds)."""
    api = pd.DataFrame(rows, columns=["rank", "pid", "tid", "name", "start_ns", "end_ns"])
    return api.assign(kind=call_kinds(api["name"]))


def test_main_thread_is_the_one_launching_most_and_only_launches_and_syncs_stay():
    api = _api(
        [
            (0, 100, 1, "cudaLaunchKernel", T0 + 10, T0 + 20),
            (0, 100, 1, "cudaLaunchKernel", T0 + 30, T0 + 40),
            (0, 100, 1, "cudaStreamSynchronize", T0 + 50, T0 + 900),
            (0, 100, 1, "cudaMalloc", T0 + 60, T0 + 70),
            (0, 100, 2, "cudaLaunchKernel", T0 + 80, T0 + 90),  # autograd thread: one launch
            (1, 101, 5, "cuLaunchKernelEx", T0 + 10, T0 + 15),
            (1, 101, 5, "cudaEventSynchronize", T0, T0 + 5),
        ]
    )
    got = main_thread_calls(api)
    assert list(got.columns) == HOST_CALL_COLUMNS
    assert got[got["rank"] == 0]["tid"].unique().tolist() == [1]  # tid 2 launched less
    assert got[got["rank"] == 0]["kind"].tolist() == ["launch", "launch", "sync"]  # cudaMalloc dropped
    assert got[got["rank"] == 1]["kind"].tolist() == ["sync", "launch"]  # sorted by start
    _, a = make_run(n_steps=1)
    outside = _api([(0, 100, 1, "cudaLaunchKernel", T0 + 10**9, T0 + 10**9 + 5)])
    assert main_thread_calls(outside, a.phases[a.phases["phase"] == "step"]).empty  # outside every step
    assert main_thread_calls(None).empty and main_thread_calls(_api([])).empty


def test_timeline_cpu_rows_inferred_labels_and_user_nvtx_names():
    t, a = make_run(n_steps=2)
    calls = main_thread_calls(
        _api(
            [
                (0, 100, 1, "cudaLaunchKernel", T0 + 10 * US, T0 + 12 * US),
                (0, 100, 1, "cudaDeviceSynchronize", T0 + 20 * US, T0 + 300 * US),
            ]
        )
    )
    data = timeline_steps(t.kernels, a.phases, a.steps, a.collectives, host_calls=calls)
    assert data["rows"][:2] == ["rank 0 · NVTX", "rank 0 · CPU main thread"]
    assert not any("CPU" in r for r in data["rows"] if r.startswith("rank 1"))  # rank 1 has no calls
    cpu = [tr for tr in data["steps"][0]["tracks"] if tr["k"] >= HOST_K]
    assert sorted(tr["k"] for tr in cpu) == [HOST_K, HOST_K + 1] and all(tr["r"] == 1 for tr in cpu)
    assert "cudaDeviceSynchronize" in data["names"]
    inferred = timeline_steps(t.kernels, a.phases, a.steps, a.collectives, inferred=True)
    assert inferred["rows"][0] == "rank 0 · phases (inferred)" and inferred["phase_source"] == "inferred"
    assert "forward (inferred)" in trace_names(inferred) and "NVTX forward" not in trace_names(inferred)
    assert "forward (inferred)" in inferred["names"]
    fwd = a.phases[(a.phases["phase"] == "forward") & (a.phases["rank"] == 0)].iloc[0]
    nvtx = pd.DataFrame(
        {
            "rank": [0],
            "start_ns": [fwd["host_start_ns"]],
            "end_ns": [fwd["host_end_ns"]],
            "name": ["model.forward"],
        }
    )
    named = timeline_steps(t.kernels, a.phases, a.steps, a.collectives, nvtx=nvtx)
    assert "model.forward (forward)" in named["names"] and "NVTX forward" in named["names"]  # rank 1: no name
    assert [s["t0_ns"] for s in named["steps"]] == [0, 2000 * US]  # steps laid end to end by their start


def test_perfetto_names_inferred_phases_and_keeps_user_names():
    t, a = make_run(n_steps=1)
    events = perfetto.trace_events(t, a)["traceEvents"]
    host = [e for e in events if e.get("cat") in ("nvtx", "inferred")]
    assert {e["name"] for e in host} == {"step 0", "forward", "backward", "optimizer"}
    assert {e["cat"] for e in host} == {"nvtx"}
    a.notes = ["no phase NVTX ranges: forward / backward / optimizer inferred from the launching thread"]
    events = perfetto.trace_events(t, a)["traceEvents"]
    host = [e for e in events if e.get("cat") in ("nvtx", "inferred")]
    assert {e["name"] for e in host} == {
        "step 0 (inferred)",
        "forward (inferred)",
        "backward (inferred)",
        "optimizer (inferred)",
    }
    assert {e["cat"] for e in host} == {"inferred"}
    assert not [e for e in events if e.get("name") == "thread_name" and "NVTX" in e["args"]["name"]]


def _run(meta=None):
    t, a = make_run(n_steps=2)
    return Run("r", t, a, meta or {})


def test_answer_block_lists_the_advice_and_per_rank_values():
    run = _run()
    assert answer_block(run).startswith(
        "<h3>Per rank"
    )  # no verdict in this analysis: the per-rank table only
    run.analysis.verdict = {
        "bound_by": "host",
        "rank": 1,
        "removable_ns": 2_500_000,
        "share_pct": 20.0,
        "what_to_change": "log every 50 steps",
        "expected_gain_ns": 2_000_000,
        "spread_ns": 100_000,
        "advice": [
            {
                "rule": "host-sync",
                "what_to_change": "no .item()",
                "gain_upper_ns": 2_000_000,
                "spread_ns": 100_000,
                "evidence": "sync 2 ms per step",
            }
        ],
    }
    run.analysis.per_rank = {"exposed_wait_ns": {0: 1_000_000, 1: 3_000_000}}
    html = answer_block(run)
    assert html.index("What to change") < html.index("Per rank")  # the verdict box above states the bound
    assert "[host-sync] no .item() (gain ≤ 2.00 ms, spread 0.100 ms); evidence: sync 2 ms per step" in html
    text = "\n".join(verdict_lines(verdict_of(run.analysis)))  # the terminal's lines: the bound first
    assert text.startswith(  # the straggler rank the verdict names is in the headline, whatever the bound
        "Bound by the host (GPU idle awaiting launches), with rank 1 the straggler: 2.50 ms per step removable "
        "(20.0 % of the step)."
    )
    run.analysis.verdict = {
        "bound_by": "compute",
        "share_pct": 94.1,
        "span_ns": 119_241_000,
        "removable_ns": 0,
        "what_to_change": "faster kernels",
        "expected_gain_ns": 0,
        "advice": [],
    }
    assert verdict_lines(verdict_of(run.analysis)) == [
        "Bound by compute: compute is 94.1 % of the 119 ms critical-path step span; nothing removable reaches "
        "the threshold.",
        "What to change: faster kernels.",
    ]
    assert "up to 2.00 ms per step (spread over steps 0.100 ms)" in text
    assert "Ranks differ by more than 2× in exposed wait (ms)" in html  # the column label, not the key
    # advice from a rule: its gain and that gain's spread, as the rule's own line states them (not the spread
    # of the removable part, a different series: plain-cuda said 0.722 ms beside the rule's 0.310 ms)
    run.analysis.verdict = {
        "bound_by": "host",
        "removable_ns": 650_000,
        "share_pct": 6.3,
        "spread_ns": 722_000,
        "what_to_change": "drop the per-step host sync",
        "expected_gain_ns": 526_000,
        "advice": [
            {
                "rule": "host_sync",
                "what_to_change": "drop the per-step host sync",
                "gain_upper_ns": 526_000,
                "spread_ns": 310_000,
                "evidence": "waits",
            }
        ],
    }
    lines = verdict_lines(verdict_of(run.analysis))
    assert lines[1] == (
        "What to change: drop the per-step host sync — expected gain up to 0.526 ms per step "
        "(spread over steps 0.310 ms)."
    )
    assert "(gain ≤ 0.526 ms, spread 0.310 ms)" in lines[2]


def test_comm_kinds_table_medians_per_kind():
    ck = pd.DataFrame(
        {
            "rank": [0, 0, 1, 1],
            "step": [0, 1, 0, 1],
            "collective": ["AllGather"] * 2 + ["AllGather"] * 2,
            "count": [4, 4, 4, 6],
            "comm_ns": [1e6, 3e6, 2e6, 4e6],
            "exposed_comm_ns": [0, 1e6, 0, 1e6],
            "wait_ns": [0.0] * 4,
            "exposed_wait_ns": [0.0] * 4,
            "forward_ns": [1e6, 3e6, 2e6, 4e6],
            "backward_ns": [0.0] * 4,
            "optimizer_ns": [0.0] * 4,
            "after_backward_ns": [0.0] * 4,
        }
    )
    df = comm_kinds_table(ck)
    assert df.iloc[0]["collective"] == "AllGather" and df.iloc[0]["comm_ns"] == 2.5e6
    assert df.iloc[0]["kernels_per_step"] == 4 and df.iloc[0]["forward_ns"] == 2.5e6


def test_comm_kinds_block_says_its_phase_medians_need_not_add_up():
    # per row forward + after backward = comm, yet the medians 2 + 3 ms are not the comm median 5.5 ms:
    # the page must not present the phase columns as a breakdown of the comm column
    ck = pd.DataFrame(
        {
            "rank": [0, 0, 1, 1],
            "step": [0, 1, 0, 1],
            "collective": ["AllReduce"] * 4,
            "count": [2] * 4,
            "comm_ns": [1e6, 9e6, 6e6, 5e6],
            "forward_ns": [0.0, 4e6, 5e6, 0.0],
            "after_backward_ns": [1e6, 5e6, 1e6, 5e6],
        }
    )
    df = comm_kinds_table(ck)
    assert df.iloc[0]["forward_ns"] + df.iloc[0]["after_backward_ns"] != df.iloc[0]["comm_ns"]
    run = _run()
    run.analysis.comm_kinds = ck
    html = comm_kinds_block(run)
    assert "need not add up to the comm column" in html and "not a breakdown" in html


def test_memory_per_gpu_from_the_trace_and_the_run_json():
    assert list(memory_table(_run())) == ["rank", "gpu", "memory_bytes"]  # an own job: the GPU's size only
    df = memory_table(_run({"strategy": "x", "peak_memory_allocated_bytes_per_rank": [2**30, 3 * 2**30]}))
    assert df["peak_allocated_bytes"].tolist() == [2**30, 3 * 2**30]
    assert fmt.cell_text("peak_allocated_bytes", df["peak_allocated_bytes"][1]) == "3.00"


@pytest.mark.parametrize(
    "col,value,text",
    [
        ("step_ns", 123_456_789, "123"),
        ("step_ns", 4_509_000, "4.51"),
        ("step_ns", 123_456, "0.123"),
        ("step_ns", 99_960_000, "100"),
        ("step_ns", 1_234_567_890, "1,235"),
        ("step_ns", -1, "0.000"),
        ("x", 0.012345, "0.012"),
        ("idle_pct", 12.345, "12.3"),
        ("bytes", 25 * 2**20, "25.0"),
        ("launches", 1234, "1,234"),
        ("launch_bound", True, "yes"),
        ("step_ns", None, "–"),
        ("x", 1.5e17, "150,000,000,000,000,000"),
    ],
)
def test_cell_text_table(col, value, text):
    assert fmt.cell_text(col, value) == text


def test_no_e_notation_anywhere():
    for v in (1.234e8, 4.39e5, 1e-7, 3.0):
        assert not re.search(r"\d[eE][+-]?\d", fmt.fmt_number(v) + fmt.fmt_ms(v) + fmt.fmt_pct(v))
    assert (
        fmt.unit_label("exposed_wait_ns") == "exposed wait (ms)" and fmt.unit_label("idle_pct") == "idle (%)"
    )


def test_own_job_report_says_nothing_empty(tmp_path):
    """A trace without the harness's run JSON: no "no findings" notice, no comparison wording without a
    comparison, no empty table, no column that no run fills."""
    import io
    from pathlib import Path

    from ddp_profile.report.build import build_report

    trace = Path(__file__).resolve().parents[2] / "traces" / "foreign" / "plain-autograd"
    if not trace.exists():
        pytest.skip("committed foreign trace not present")
    log = io.StringIO()
    build_report([trace], tmp_path / "out", progress=log)
    assert "no findings" not in log.getvalue()
    index = (tmp_path / "out" / "index.html").read_text()
    assert (
        "comparison(s)" not in index and "No comparison here" not in index and "Each comparison" not in index
    )
    assert "Efficiency is against" not in index
    assert "data-k='bucket_mb'" not in index and "data-k='efficiency_pct'" not in index  # nobody fills them
    page = next((tmp_path / "out").glob("run-*.html")).read_text()
    assert "No comparison holds this run" not in page and "none in this trace" not in page
    assert "Communication by collective kind" in page and "Memory per GPU" in page
    assert "CPU main thread" in page and "phases (inferred)" in page  # row labels (JSON-escaped dots)
