"""The verdict and its advice as the terminal and the run page read them (report/answer_text.py): the straggler
rank in the headline, expected gain beside the bound, one voice (the verdict's rule first, smaller items folded
into one line)."""

from __future__ import annotations

from ddp_profile.report import answer_text
from ddp_profile.report.answer_text import verdict_lines
from ddp_profile.report.verdicts import bound_by

MS = 1_000_000


def _verdict():
    rule = {
        "rule": "straggler_gpu",
        "what_to_change": "even out the GPU work",
        "expected_gain_ns": 5.2 * MS,
        "gain_upper_ns": 5.6 * MS,
        "spread_ns": 0.2 * MS,
        "gain_basis": "a difference between ranks",
        "evidence": "extra kernels 5.60 ms: extra_gemm ×4",
    }
    tiny = [
        {
            "rule": r,
            "what_to_change": r,
            "expected_gain_ns": g * MS,
            "gain_upper_ns": g * MS,
            "spread_ns": None,
            "gain_basis": "gpu",
            "evidence": "",
        }
        for r, g in (("grad_copy_back", 3.0), ("contention", 1.5))
    ]
    big = {
        "rule": "launch_bound",
        "what_to_change": "capture the step in a CUDA graph",
        "expected_gain_ns": 9.0 * MS,
        "gain_upper_ns": 12.0 * MS,
        "spread_ns": 1.0 * MS,
        "gain_basis": "measured under nsys",
        "evidence": "GPU idle",
    }
    return {
        "bound_by": "straggler",
        "rank": 1,
        "removable_ns": 5.6 * MS,
        "share_pct": 5.6,
        "span_ns": 100 * MS,
        "spread_ns": 0.2 * MS,
        "what_to_change": rule["what_to_change"],
        "expected_gain_ns": 5.2 * MS,
        "gain_upper_ns": 5.6 * MS,
        "advice": [rule, big, *tiny],
    }


def test_headline_names_the_straggler_and_the_change_states_expected_gain_bound_and_ledger(monkeypatch):
    monkeypatch.setattr(answer_text, "_ledger_rules", dict)
    lines = verdict_lines(_verdict())
    assert lines[0] == (
        "Bound by a straggler, rank 1: 5.60 ms per step removable (5.6 % of the 100 ms "
        "critical-path step span)."
    )
    assert lines[1] == (
        "What to change: even out the GPU work — expected gain 5.20 ms per step (up to 5.60 ms, "
        "spread over steps 0.200 ms, ledger: no entry yet)."
    )
    assert lines[2].startswith(
        "  - [straggler_gpu] even out the GPU work (expected 5.20 ms, ≤ 5.60 ms, spread "
        "0.200 ms, ledger: no entry yet); gain basis: a difference between ranks"
    )
    # the verdict's rule first, then by expected gain; those under 5 % of the step fold into one line
    assert lines[3].startswith("  - [launch_bound] capture the step in a CUDA graph (expected 9.00 ms")
    assert lines[4] == (
        "  - smaller items (expected gain under 5.0 % of the step each): [grad_copy_back] 3.00 ms, "
        "[contention] 1.50 ms"
    )
    assert len(lines) == 5


def test_run_page_verdict_states_expected_gain_and_bound():
    what, why = bound_by({}, None, _verdict())
    assert what == "a straggler, rank 1"
    assert why.endswith(
        "what to change: even out the GPU work (expected gain 5.20 ms per step, up to 5.60 ms)"
    )
    generic = dict(
        _verdict(), what_to_change="find why rank 1 arrives late", expected_gain_ns=None, advice=[]
    )
    assert bound_by({}, None, generic)[1].endswith("(up to 5.60 ms per step; no model predicts more closely)")
    assert verdict_lines(generic)[1] == (
        "What to change: find why rank 1 arrives late — up to 5.60 ms per step, "
        "no model predicts more closely (spread over steps 0.200 ms)."
    )
