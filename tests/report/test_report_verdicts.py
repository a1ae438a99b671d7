"""Pages that answer: the verdict sentences flip with the data, one formatter and one unit
convention, sortable tables with a CSV download, one 1-GPU baseline per run on every page, definitions
matching docs/metrics.md, no chart library on pages without charts."""

import re
import urllib.parse
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import make_run, patch_analysis, run_set, write_site

from ddp_profile.report.compare import comparison
from ddp_profile.report.glossary import METRICS, README_METRICS, cell_text, fmt_mib, fmt_ms
from ddp_profile.report.html import table
from ddp_profile.report.verdicts import run_verdict, strategy_verdict, sweep_verdict

METRICS_DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def _comp(times, spreads=0.0, strategies=("naive", "overlap", "torch_ddp")):
    rows = []
    for s, t in zip(strategies, times, strict=True):
        rows.append(
            {
                "run": s,
                "strategy": s,
                "bucket_mb": 25.0 if s == "torch_ddp" else None,
                "world_size": 2,
                "n_steps": 4,
                "step_ns": t * 1e6,
                "step_min_ns": (t - spreads) * 1e6,
                "step_max_ns": (t + spreads) * 1e6,
                "page": f"run-{s}.html",
            }
        )
    return pd.DataFrame(rows)


def _text(html_):
    return re.sub(r"<[^>]+>", "", html_)


def test_strategy_verdict_names_the_fastest_and_flips_with_the_data():
    a = _text(strategy_verdict(_comp([395.0, 354.0, 380.0])))
    assert a.startswith("Fastest: overlap ×2 at 354 ms per step")
    assert "26.0 ms (6.8 %) faster than the next, torch_ddp 25 MiB ×2" in a
    assert "41.0 ms (10.4 %) faster than the slowest, naive ×2" in a
    assert "Against PyTorch DDP (torch_ddp 25 MiB ×2, 380 ms): 26.0 ms (6.8 %) faster" in a
    assert "these steps establish the order" in a
    assert "Ranked: 1. overlap ×2 354 ms, 2. torch_ddp 25 MiB ×2 380 ms, 3. naive ×2 395 ms." in a
    b = _text(strategy_verdict(_comp([350.0, 354.0, 380.0], spreads=5.0)))
    assert b.startswith("Fastest: naive ×2") and "do not establish the order" in b
    c = _text(strategy_verdict(_comp([395.0, 354.0, 340.0])))
    assert (
        c.startswith("Fastest: torch_ddp")
        and "PyTorch DDP is fastest; the fastest of ddp-profile's own strategies, overlap ×2, is 14.0 ms" in c
    )


def _with_ci(comp, intervals):
    """The comparison with un-profiled confidence intervals (ms) per row, as add_run_facts sets them."""
    return comp.assign(
        rank_ci_low_ns=[lo * 1e6 for lo, _ in intervals], rank_ci_high_ns=[hi * 1e6 for _, hi in intervals]
    )


def test_strategy_verdict_claims_an_order_only_where_intervals_separate():
    # separated: overlap's interval lies below torch_ddp's
    a = _text(strategy_verdict(_with_ci(_comp([395.0, 354.0, 380.0]), [(390, 400), (352, 356), (378, 382)])))
    assert a.startswith("Fastest: overlap ×2")
    assert (
        "95 % confidence intervals (overlap ×2 352–356 ms, torch_ddp 25 MiB ×2 378–382 ms) do not "
        "overlap, so the order of the top two is established" in a
    )
    assert "Against PyTorch DDP (torch_ddp 25 MiB ×2, 380 ms): 26.0 ms (6.8 %) faster." in a
    # overlapping intervals: within noise, both intervals given, no "fastest"/"faster" claim
    b = _text(strategy_verdict(_with_ci(_comp([395.0, 354.0, 380.0]), [(390, 400), (340, 385), (370, 390)])))
    assert b.startswith("Lowest median (within noise of the next): overlap ×2")
    assert "Its median is 26.0 ms (6.8 %) below the next" in b
    assert "overlap: the top two are within noise of each other" in b
    assert (
        "26.0 ms (6.8 %) faster by the medians but within noise (95 % confidence intervals "
        "340–385 ms and 370–390 ms overlap)"
    ) in b
    assert "Fastest:" not in b
    # no intervals (older run JSONs): medians compared, the spread said to be unknown
    c = _text(strategy_verdict(_comp([395.0, 354.0, 380.0])))
    assert "26.0 ms (6.8 %) faster (spread unknown: no confidence interval recorded)" in c


def test_run_verdict_says_what_bounds_the_step_and_uses_new_columns_when_present():
    summary = {
        "step_ns": 400e6,
        "n_steps": 4,
        "comm_ns": 40e6,
        "overlap_ns": 30e6,
        "exposed_comm_ns": 10e6,
        "exposed_comm_pct": 2.5,
        "comm_tail_ns": 1e6,
        "compute_ns": 380e6,
        "idle_ns": 10e6,
    }
    steps = pd.DataFrame(
        {
            "rank": [0, 1],
            "exposed_wait_ns": [0.0, 6e6],
            "exposed_transfer_ns": [4e6, 4e6],
            "job_comm_tail_ns": [2e6, 2e6],
        }
    )
    a = _text(run_verdict(summary, steps, False, "ADVICE", 2))
    assert "Communication takes 40.0 ms per step; 30.0 ms of it (75 %) is hidden" in a
    # per rank, not pooled: the waiting rank is named beside the others' median
    assert (
        "10.0 ms (2.5 % of the step) is exposed — rank 1 waits 6.00 ms per step for a later rank (other "
        "ranks 0.000 ms), 4.00 ms transferring"
    ) in a
    assert "(2.00 ms after the last rank's backward)" in a
    # the answer first: what bounds the step and what to change, then the measurements
    assert a.startswith("The step is bound by compute (") and "idle gaps 2.5 %). ADVICE" in a
    assert a.index("ADVICE") < a.index("Median step 400 ms")
    b = _text(run_verdict(dict(summary, compute_ns=100e6, exposed_comm_ns=250e6), None, False, "", 2))
    assert "bound by exposed communication" in b and "waiting" not in b
    assert "bound by kernel launches" in _text(run_verdict(summary, None, True, "", 2))
    assert "One GPU: no communication" in _text(run_verdict(summary, None, False, "", 1))
    # no backward phase in the steps (a CUDA graph's NVTX ranges exist at capture only): the tail is unknown, not "–"
    c = _text(
        run_verdict(
            dict(summary, comm_tail_ns=float("nan")),
            steps.assign(job_comm_tail_ns=float("nan")),
            False,
            "",
            2,
        )
    )
    assert (
        "The comm tail after the last backward kernel is unknown: no backward phase was found in the steps."
        in c
    )
    assert "after the last rank's backward" not in c


def test_sweep_verdict_recommends_the_measured_best_and_places_the_model_optimum():
    caps, steps, tails = [1.0, 25.0, 100.0, 1000.0], [380e6, 370e6, 360e6, 354e6], [5e6, 3e6, 1e6, 0.5e6]
    a = _text(sweep_verdict(caps, steps, tails, 243.0))
    assert a.startswith("Use a bucket cap of 1000 MiB: it measured the shortest step, 354 ms")
    assert "It is 16.0 ms (4.3 %) per step faster than the default 25 MiB." in a
    assert "b* = 243 MiB lies between the measured caps 100 MiB and 1000 MiB and was not measured" in a
    b = _text(sweep_verdict(caps, [380e6, 350e6, 360e6, 370e6], tails, 30.0))
    assert b.startswith("Use a bucket cap of 25 MiB") and "model and measurement agree" in b


def test_one_formatter_ms_three_significant_digits_mib_binary():
    assert fmt_ms(384_306_123) == "384 ms" and fmt_ms(4_509_000) == "4.51 ms" and fmt_ms(float("nan")) == "–"
    assert (
        fmt_ms(36_257_000) == "36.3 ms" and fmt_ms(1_234_567_890) == "1,235 ms" and fmt_ms(7e3) == "0.007 ms"
    )
    assert fmt_mib(64_000_000) == "61.0 MiB" and fmt_mib(2**31) == "2.00 GiB"
    assert cell_text("step_ns", 612_190_124) == "612"
    assert cell_text("bytes", 64_000_000) == "61.0" and cell_text("bucket_mb", 25.0) == "25"
    assert cell_text("exposed_comm_pct", 0.9551) == "1.0" and cell_text("launches", 6824) == "6,824"


def test_definitions_match_the_metrics_page():
    section = METRICS_DOC.read_text()
    assert section.startswith("# Metrics (definitions)")
    for key in README_METRICS:
        assert f"`{key}`" in section, key
        assert METRICS[key][1], key


def test_tables_are_sortable_with_csv_titles_and_a_scroll_container():
    df = pd.DataFrame({"run": ["b", "a"], "step_ns": [2e6, 1e6], "bytes": [2**20, 2**21]})
    h = table(df, "Numbers")
    assert "class='sortable'" in h and "<div class='scroll'>" in h
    assert f"title='{METRICS['step_ns'][1]}'" in h.replace("&#x27;", "'")
    assert ">step time (ms)</th>" in h and "data-v='2.0'" in h and ">2.00</td>" in h
    href = re.search(r"href='(data:text/csv[^']*)'", h).group(1)
    csv = urllib.parse.unquote(href.split(",", 1)[1])
    assert csv.splitlines() == ["run,step time (ms),message (MiB)", "b,2.0,1.0", "a,1.0,2.0"]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    runs = run_set()
    runs[1].analysis.steps["step_ns"] += 100_000  # naive: 0.1 ms slower than the rest
    return write_site(tmp_path_factory, runs), runs


def test_pages_start_with_a_verdict_link_back_and_index_has_no_plotly(site):
    out, _ = site
    for p in out.glob("*.html"):
        text = p.read_text()
        assert "aria-label='breadcrumb'" in text, p.name
        # every page links "All runs" to the index; the index names itself there instead of linking to itself
        here = "<span aria-current='page'>All runs</span>"
        assert (
            (here in text and "href='index.html'" not in text)
            if p.name == "index.html"
            else ("<a href='index.html'>All runs</a>" in text)
        ), p.name
        assert ("plotly.min.js" in text) == ("Plotly.newPlot(" in text), p.name
        for div in re.findall(r'<div id="[^"]+" class="figure"[^>]*>', text):
            # a chart is an image to assistive technology; the timeline, which holds controls, a figure
            role = 'role="figure"' if 'id="timeline"' in div else 'role="img"'
            assert role in div and 'aria-label="' in div, p.name
    assert "plotly.min.js" not in (out / "index.html").read_text()
    strat = next(out.glob("strategies-*.html")).read_text()
    assert _text(strat.split("<div class='verdict'>", 1)[1]).lstrip().startswith("Fastest: ")
    sweep = next(out.glob("sweep-*.html")).read_text()
    assert _text(sweep.split("<div class='verdict'>", 1)[1]).lstrip().startswith("Use a bucket cap of ")
    run = (out / "run-naive_xl_fp32_2xh100.html").read_text()
    v = _text(run.split("<div class='verdict'>", 1)[1].split("</div>", 1)[0])
    assert v.startswith("The step is bound by ") and "Median step 1.00 ms" in v
    assert (
        "What to change: switch to overlap ×2" in v.split("Median step", 1)[0]
    )  # the answer before the numbers
    assert "0.100 ms (10.0 %) less than this run" in v and "#step=" in run
    keep = (out / "run-bucketed-25mb_xl_fp32_2xh100.html").read_text()
    assert "What to change" not in _text(keep.split("<div class='verdict'>", 1)[1].split("</div>", 1)[0])


def test_efficiency_has_one_baseline_across_pages(monkeypatch):
    """A 2-GPU run's efficiency is the same whichever set of runs a page compares (the cause of 91.228 vs
    91.851: the index took the first 1-GPU run of the model over all folders, the scaling page the run's
    own strategy at 1 GPU)."""
    from ddp_profile.report import Run
    from ddp_profile.report.compare import assign_baselines

    patch_analysis(monkeypatch)
    runs = []
    for name, strat, ws, us in (
        ("none_1x", "none", 1, 900),
        ("bucketed_1x", "bucketed", 1, 1000),
        ("bucketed_2x", "bucketed", 2, 1100),
    ):
        t, a = make_run(name, strat, ws, 25.0, step_us=us)
        a.steps["step_ns"] = float(us * 1000)
        runs.append(Run(name, t, a, dict(t.run)))
    assign_baselines(runs)
    everywhere = comparison(runs).set_index("run")["efficiency_pct"]
    alone = comparison([runs[1], runs[2]]).set_index("run")["efficiency_pct"]
    assert runs[2].baseline is runs[1]
    assert np.isclose(everywhere["bucketed_2x"], alone["bucketed_2x"]) and np.isclose(
        alone["bucketed_2x"], 100 * 1000 / 1100
    )


def test_run_verdict_takes_bound_by_from_the_analysis_verdict():
    summary = {
        "step_ns": 400e6,
        "n_steps": 4,
        "comm_ns": 40e6,
        "overlap_ns": 5e6,
        "exposed_comm_ns": 35e6,
        "exposed_comm_pct": 8.75,
        "comm_tail_ns": 34e6,
        "compute_ns": 350e6,
        "idle_ns": 10e6,
    }
    v = {
        "bound_by": "communication",
        "removable_ns": 34e6,
        "share_pct": 8.5,
        "spread_ns": 0.3e6,
        "what_to_change": "overlap the gradient collectives with backward",
        "expected_gain_ns": 33e6,
        "rank": None,
        "span_ns": 400e6,
    }
    a = _text(run_verdict(summary, None, False, "", 2, verdict=v))
    # the step-table medians alone would say compute (350 of 400 ms); the verdict says communication
    assert (
        "bound by exposed communication (removable 34.0 ms per step, 8.5 % of the 400 ms critical-path "
        "step span, spread 0.300 ms over steps" in a
    )
    assert "what to change: overlap the gradient collectives with backward (expected gain up to 33.0 ms)" in a
    c = _text(
        run_verdict(
            summary,
            None,
            False,
            "",
            2,
            verdict=dict(v, bound_by="compute", share_pct=90.0, what_to_change="faster kernels"),
        )
    )
    assert (
        "bound by compute (compute is 90.0 % of the 400 ms critical-path step span" in c
        and "expected gain" not in c
    )
    steps = pd.DataFrame(
        {
            "rank": [0, 1, 0, 1],
            "step": [0, 0, 1, 1],
            "exposed_wait_ns": [0, 40e6, 0, 30e6],
            "exposed_transfer_ns": [1e6] * 4,
            "straggler_rank": [0] * 4,
            "straggler_lead_ns": [40e6, 40e6, 30e6, 30e6],
            "straggler_cause": ["host"] * 4,
            "straggler_evidence": ["cudaStreamSynchronize 41.2 ms on the main thread (peers 0.1 ms)"] * 4,
        }
    )
    s = _text(run_verdict(summary, steps, False, "", 2, verdict=dict(v, bound_by="straggler", rank=0)))
    assert (
        "Rank 0 arrives last at the step's collectives in 2 of 2 steps, median 35.0 ms after the first rank; "
        "cause host in 2 (e.g. step 1: cudaStreamSynchronize 41.2 ms on the main thread (peers 0.1 ms))." in s
    )
    assert "bound by a straggler, rank 0" in s


def test_run_verdict_gives_each_rank_where_ranks_differ_more_than_2x():
    # gpt-accum: rank 0 communicates 0.302 ms per step, rank 1 21.8 ms (waiting for rank 0); the pooled
    # median, 2.51 ms, is no rank's value
    summary = {
        "step_ns": 43.644e6,
        "n_steps": 10,
        "comm_ns": 2.511e6,
        "overlap_ns": 0.022e6,
        "exposed_comm_ns": 1.986e6,
        "exposed_comm_pct": 1.8,
        "overlap_pct": 12.9,
        "comm_tail_ns": 1.662e6,
        "compute_ns": 17.119e6,
        "idle_ns": 20e6,
    }
    per_rank = {"comm_ns": {0: 0.302e6, 1: 21.816e6}, "exposed_comm_ns": {0: 0.291e6, 1: 18.529e6}}
    a = _text(run_verdict(summary, None, False, "", 2, per_rank=per_rank))
    assert (
        "Communication takes rank 0 0.302 ms, rank 1 21.8 ms per step (ranks differ > 2×); 0.022 ms of it "
        "(12.9 % of all communication, pooled over ranks and steps) is hidden under compute and rank 0 "
        "0.291 ms, rank 1 18.5 ms is exposed"
    ) in a
    assert "2.511" not in a and "1.986" not in a
    pooled = _text(run_verdict(summary, None, False, "", 2))
    assert "1.99 ms (median share of the step 1.8 %) is exposed" in pooled  # 1.986 / 43.644 is 4.6 %


def test_straggler_example_is_the_median_lead_step_of_the_cause_and_names_it():
    """The verdict's rule and the run page quote one example step (they once quoted different ones)."""
    from ddp_profile.analysis.verdict import straggler_example

    steps = pd.DataFrame(
        {
            "straggler_lead_ns": [9e6, 1e6, 5e6, 7e6, 3e6],
            "straggler_cause": ["host", "host", "gpu", "host", "host"],
            "straggler_evidence": ["a", "b", "c", None, "e"],
        },
        index=[4, 5, 6, 7, 8],
    )
    # host steps with evidence: 5 (1 ms), 8 (3 ms), 4 (9 ms): the median lead is step 8's
    assert straggler_example(steps, "host") == "step 8: e"
    assert straggler_example(steps, "gpu") == "step 6: c"
    assert straggler_example(steps, "unknown") is None
    # an even count takes the lower middle
    assert straggler_example(steps.drop(index=4), "host") == "step 5: b"
