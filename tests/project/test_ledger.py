"""The what-if ledger (ddp_profile/ledger.py): realized gains with their interval, the tolerance, the tool's
prediction read from its own advice, a synthetic ledger folder end to end, and the committed page and summary
kept current with the committed folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddp_profile import ledger
from ddp_profile.report.answer_text import advice_numbers, ledger_text

ROOT = Path(__file__).resolve().parents[2]
ACCUM = (
    "traces/foreign/gpt-accum/gpt-accum.sqlite.xz"  # rank 0 syncs on loss.item() every step: a host straggler
)


def _write(folder: Path, **over) -> Path:
    """A ledger.json in ``folder``: five interleaved repeats per variant (baseline ~50 ms, changed ~35 ms)."""
    data = {
        "rule": "straggler-host",
        "job": "gpt-accum",
        "change": "no loss.item() on rank 0",
        "command_baseline": "torchrun ... --item rank0",
        "command_changed": "torchrun ... --item none",
        "world_size": 2,
        "gpu_name": "NVIDIA H200",
        "protocol": "5 interleaved repeats",
        "profiled": ACCUM,
        "profiled_truth_step_ms": [[50.0, 51.0], [50.0, 50.5]],
        "repeats": [
            {"order": 2 * i + j, "variant": v, "step_ms": [m + d for d in (-0.5, 0.0, 0.5)]}
            for i in range(5)
            for j, (v, m) in enumerate((("baseline", 50.0 + 0.1 * i), ("changed", 35.0 + 0.1 * i)))
        ],
    }
    data.update(over)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ledger.json").write_text(json.dumps(data))
    return folder


def test_realized_gain_is_the_difference_of_repeat_medians_with_an_interval_around_it():
    # baseline repeat medians 11 and 12 -> 12 (the harness's upper median); changed 9 and 8 -> 9: gain 3 ms.
    # Every bootstrap draw takes medians from {11, 12} and {8, 9}: the interval lies within [2, 4] and holds 3.
    gain, lo, hi = ledger.realized_ms(
        {"baseline": [[10, 11, 12], [10, 12, 14]], "changed": [[8, 9, 10], [7, 8, 9]]}
    )
    assert gain == 3.0 and 2.0 <= lo <= 3.0 <= hi <= 4.0
    same = ledger.realized_ms({"baseline": [[5.0]] * 3, "changed": [[5.0]] * 3})
    assert same == (0.0, 0.0, 0.0)


@pytest.mark.parametrize(
    ("pred_ms", "real_ms", "ok"),
    [
        (3.6, 3.0, True),  # 0.6 ms off: under 25 % of 3 ms (0.75)
        (4.0, 3.0, False),  # 1.0 ms off: over both 0.75 and 0.5 ms
        (0.6, 0.2, True),  # 0.4 ms off: under the 0.5 ms floor
        (1.0, 0.2, False),  # 0.8 ms off
        (12.0, 10.0, True),  # 2.0 ms off: under 25 % of 10 ms (2.5)
    ],
)
def test_tolerance_is_a_quarter_of_the_realized_gain_or_half_a_millisecond(pred_ms, real_ms, ok):
    assert ledger.within(pred_ms * 1e6, real_ms * 1e6) is ok


@pytest.mark.parametrize(
    ("over", "needle"),
    [
        ({"rule": "faster"}, "rule 'faster' is not one of"),
        (
            {"repeats": [{"order": 0, "variant": "baseline", "step_ms": [1.0]}]},
            "needs repeats of both variants",
        ),
        ({"repeats": [{"order": 0, "variant": "other", "step_ms": [1.0]}]}, "repeats[0] has no variant"),
        ({"profiled": "../../outside.sqlite"}, "field 'profiled'"),
        ({"profiled": "/etc/passwd"}, "field 'profiled'"),
        ({"world_size": "two"}, "field 'world_size'"),
        ({"profiled_truth_step_ms": [[float("nan")]]}, "profiled_truth_step_ms"),
    ],
)
def test_a_wrong_ledger_is_one_error_naming_the_file_and_the_field(tmp_path, over, needle):
    folder = _write(tmp_path / "straggler-host--x", **over)
    with pytest.raises(ledger.LedgerError, match="ledger.json") as e:
        ledger.read_entry(folder)
    assert needle in str(e.value)


def test_a_synthetic_pair_end_to_end(tmp_path):
    """The tool's own advice on the profiled export is the prediction; the repeats give the realized gain."""
    _write(tmp_path / "straggler-host--gpt-accum")
    (entry,) = ledger.entries(tmp_path)
    # under nsys: upper median of 50, 50, 50.5, 51 = 50.5; un-profiled: of the repeat medians 50.0 … 50.4 = 50.2
    assert ledger.overhead_pct(entry) == pytest.approx(100 * (50.5 / 50.2 - 1))
    row = ledger.evaluate(entry)
    advice = {
        a["rule"]: a for a in ledger._analysis(entry.profiled, ledger.overhead_pct(entry)).verdict["advice"]
    }
    assert row["advice"] == "straggler_host"
    assert row["predicted_ms"] == pytest.approx(advice["straggler_host"]["expected_gain_ns"] / 1e6)
    assert row["upper_ms"] == pytest.approx(advice["straggler_host"]["gain_upper_ns"] / 1e6)
    assert row["realized_ms"] == pytest.approx(15.0)  # 50.2 − 35.2: upper medians of the repeat medians
    assert row["realized_low_ms"] <= 15.0 <= row["realized_high_ms"]
    assert row["within"] is ledger.within(row["predicted_ms"] * 1e6, row["realized_ms"] * 1e6)
    # a change that gained nothing: the same prediction now misses
    _write(
        tmp_path / "straggler-host--gpt-accum",
        repeats=[
            {"order": i, "variant": v, "step_ms": [50.0, 50.2]}
            for i, v in enumerate(["baseline", "changed"] * 5)
        ],
    )
    flat = ledger.evaluate(ledger.read_entry(tmp_path / "straggler-host--gpt-accum"))
    assert flat["realized_ms"] == 0.0 and flat["within"] is (flat["predicted_ms"] <= 0.5)
    page, summary = ledger.outputs(tmp_path)
    assert "| `straggler-host--gpt-accum` | no loss.item() on rank 0 | straggler_host |" in page
    rules = json.loads(summary)["rules"]
    assert rules == {
        "straggler_host": {
            "pairs": 1,
            "within": int(flat["within"]),
            "worst_miss_ms": round(abs(flat["predicted_ms"]), 3),
            "worst_miss_pct": 0.0,
        }
    }


@pytest.mark.slow  # analyses every committed what-if export once (~1-2 min on two cores)
def test_the_committed_ledger_page_and_summary_are_what_the_committed_folders_give():
    page, summary = ledger.outputs()
    assert (ROOT / "docs" / "whatif-ledger.md").read_text() == page, "run python -m ddp_profile.ledger"
    assert ledger.SUMMARY.read_text() == summary, "run python -m ddp_profile.ledger"


KNOWN_WRONG = {  # ledger pair (or rule id) -> why its prediction misses; docs/metrics.md#advice-gains says so too
    "launch-bound--gpt2-ddp-b2": "the graph of forward and backward saved more than the share of launches it "
    "takes (the prediction lies inside the realized interval, over 25 % under its median)",
}
PAIRS = [
    pytest.param(
        e.folder.name,
        marks=pytest.mark.xfail(reason=KNOWN_WRONG.get(e.folder.name) or KNOWN_WRONG[e.rule], strict=True),
    )
    if e.folder.name in KNOWN_WRONG or e.rule in KNOWN_WRONG
    else e.folder.name
    for e in ledger.entries()
]


@pytest.mark.slow  # the analyses are shared with the test above (one per export per process)
@pytest.mark.parametrize("pair", PAIRS)
def test_every_ledger_prediction_is_within_tolerance_of_its_realized_gain(pair):
    row = ledger.evaluate(ledger.read_entry(ledger.FOLDER / pair))
    if row["withdrawn"]:  # the lever hurt on this pair: the tool must no longer advise it
        assert row["advice"] is None and row["realized_ms"] < 0, row
    else:
        assert row["within"], row


def test_advice_lines_say_how_the_rule_fared_in_the_ledger(monkeypatch):
    from ddp_profile.report import answer_text

    monkeypatch.setattr(
        answer_text,
        "_ledger_rules",
        lambda: {
            "host_sync": {"pairs": 2, "within": 2, "worst_miss_pct": 12.0, "worst_miss_ms": 0.3},
            "launch_bound": {"pairs": 3, "within": 1, "worst_miss_pct": 80.0, "worst_miss_ms": 4.0},
        },
    )
    assert ledger_text("host_sync") == "ledger: confirmed within 12.0 % on 2 jobs"
    assert ledger_text("launch_bound") == "ledger: within tolerance on 1 of 3 jobs (largest miss 4.00 ms)"
    assert ledger_text("comm_tail") == "ledger: no entry yet"
    monkeypatch.setattr(
        answer_text, "_ledger_rules", lambda: {"contention": {"pairs": 0, "withdrawn": "it hurt"}}
    )
    assert ledger_text("contention") == "ledger: withdrawn for jobs of one's own (it hurt)"
    monkeypatch.setattr(
        answer_text,
        "_ledger_rules",
        lambda: {"host_sync": {"pairs": 2, "within": 2, "worst_miss_pct": 12.0, "worst_miss_ms": 0.3}},
    )
    rule = {"rule": "host_sync", "expected_gain_ns": 1.5e6, "gain_upper_ns": 2e6, "spread_ns": 1e5}
    assert advice_numbers(rule) == (
        "expected 1.50 ms, ≤ 2.00 ms, spread 0.100 ms, ledger: confirmed within 12.0 % on 2 jobs"
    )


def test_the_summary_counts_each_pair_under_the_rule_it_tests():
    rows = [
        {
            "rule": "straggler-host",
            "advice": "straggler_host",
            "predicted_ms": 5.0,
            "realized_ms": 4.5,
            "within": True,
        },
        {"rule": "balanced", "advice": None, "predicted_ms": 0.0, "realized_ms": 0.1, "within": True},
        {"rule": "launch-bound", "advice": None, "predicted_ms": 0.0, "realized_ms": 6.0, "within": False},
    ]
    got = ledger.summary(rows)
    # balanced pairs never count as a straggler rule's record; a rule the tool did not advise keeps its name
    assert got == {
        "balanced": {"pairs": 1, "within": 1, "worst_miss_ms": 0.1, "worst_miss_pct": 100.0},
        "launch_bound": {"pairs": 1, "within": 0, "worst_miss_ms": 6.0, "worst_miss_pct": 100.0},
        "straggler_host": {"pairs": 1, "within": 1, "worst_miss_ms": 0.5, "worst_miss_pct": 11.1},
    }


def test_a_withdrawn_rule_is_shown_as_such_and_not_counted():
    rows = [
        {
            "pair": "contention--j",
            "rule": "contention",
            "change": "cap",
            "advice": None,
            "predicted_ms": 0.0,
            "upper_ms": 0.0,
            "realized_ms": -2.0,
            "realized_low_ms": -2.1,
            "realized_high_ms": -1.9,
            "repeats": [5, 5],
            "within": False,
            "withdrawn": ledger.withdrawn("contention"),
        },
        {
            "pair": "comm-tail--j",
            "rule": "comm-tail",
            "change": "b",
            "advice": "comm_tail",
            "predicted_ms": 0.4,
            "upper_ms": 0.7,
            "realized_ms": 0.4,
            "realized_low_ms": 0.3,
            "realized_high_ms": 0.5,
            "repeats": [5, 5],
            "within": True,
            "withdrawn": None,
        },
    ]
    assert ledger.withdrawn("contention") and ledger.withdrawn("comm-tail") is None
    page = ledger.table(rows)
    assert "| advice withdrawn: " in page
    assert "1 of 1 pairs within tolerance; 1 rule (contention) withdrawn" in page
    summ = ledger.summary(rows)
    assert (
        summ["contention"]["withdrawn"]
        and summ["contention"]["pairs"] == 0
        and summ["comm_tail"]["pairs"] == 1
    )
