"""Comparison and index pages rank by the step time the run set shares: the un-profiled median
when every run of the set has one, else the trace's step time, and say which; both times, the profiler's
overhead and the memory of each run from its JSON; the index answers with the fastest configuration per set.
The findings use the same rule (report.measures), so pages and findings name the same winner."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import make_run, patch_analysis

from ddp_profile import report
from ddp_profile.findings import campaign as qc
from ddp_profile.findings.data import CAMPAIGN, RunData
from ddp_profile.fmt import fmt_ms
from ddp_profile.report import Run, measures
from ddp_profile.report.compare import assign_baselines, comparison
from ddp_profile.report.index import numbers_table, render_index
from ddp_profile.report.runs import group_runs, normalise_meta
from ddp_profile.report.verdicts import ranked, strategy_verdict

GIB = 2**30
CAMPAIGN_DIR = Path(__file__).resolve().parents[2] / "traces" / "campaign"


def _text(html_: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html_))


def _timed(name, strategy, ws, trace_us, unprof_ms=None, *, mb=25.0, mem_gib=None, folder="campaign/A"):
    """A synthetic run whose trace step is ``trace_us`` µs and whose JSON carries an un-profiled median of
    ``unprof_ms`` (None: not timed without nsys) and, with ``mem_gib``, per-rank memory."""
    t, a = make_run(name, strategy, ws, mb, step_us=trace_us)
    a.steps["step_ns"] = float(trace_us * 1000)
    meta = dict(t.run)
    if unprof_ms is not None:
        meta |= {
            "unprofiled_step_ms_median": unprof_ms,
            "unprofiled_repeat_medians_ms": [unprof_ms] * 2,
            "unprofiled_repeats": 2,
            "unprofiled_step_ms_min": unprof_ms - 0.01,
            "unprofiled_step_ms_max": unprof_ms + 0.01,
            "profiler_overhead_pct": round(100 * (trace_us / 1000 / unprof_ms - 1), 3),
        }
    if mem_gib is not None:
        meta |= {
            "peak_memory_allocated_bytes_per_rank": [int(mem_gib * GIB), int((mem_gib - 1) * GIB)][:ws],
            "peak_memory_reserved_bytes_per_rank": [int((mem_gib + 2) * GIB)] * ws,
            "optimizer_state_bytes_per_rank": [int(mem_gib / 4 * GIB)] * ws,
        }
    return Run(name, t, a, normalise_meta(meta), run_id=f"{folder}/{name}", folder=folder)


def _set(unprofiled=True, memory=True):
    """1 GPU + three 2-GPU configurations. Trace order: overlap (1.00 ms) < torch_ddp (1.05) < naive (1.10);
    un-profiled order: naive (0.90 ms) < torch_ddp (0.95) < overlap (0.99) — nsys reverses it."""
    spec = [
        ("none_xl_fp32_1xh100", "none", 1, 900, 0.85),
        ("naive_xl_fp32_2xh100", "naive", 2, 1100, 0.90),
        ("overlap_xl_fp32_2xh100", "overlap", 2, 1000, 0.99),
        ("torch_ddp-25mb_xl_fp32_2xh100", "torch_ddp", 2, 1050, 0.95),
    ]
    return [
        _timed(n, s, ws, us, u if unprofiled else None, mem_gib=(10.0 + i if memory else None))
        for i, (n, s, ws, us, u) in enumerate(spec)
    ]


def test_a_set_with_unprofiled_medians_is_ranked_by_them_and_the_verdict_says_so(monkeypatch):
    patch_analysis(monkeypatch)
    runs = _set()
    assign_baselines(runs)
    comp = comparison(runs)
    assert list(ranked(comp)["run"]) == [
        "naive_xl_fp32_2xh100",
        "torch_ddp-25mb_xl_fp32_2xh100",
        "overlap_xl_fp32_2xh100",
    ]  # trace order is reversed
    assert set(comp["rank_basis"]) == {measures.UNPROFILED}
    v = _text(strategy_verdict(comp))
    assert v.startswith(
        "Fastest: naive ×2 at 0.900 ms per step (un-profiled: median over 2 runs without nsys, CUDA "
        "events, range 0.890–0.910 ms; 1.10 ms in the profiled trace)."
    )
    assert "Ranked: 1. naive ×2 0.900 ms, 2. torch_ddp 25 MiB ×2 0.950 ms, 3. overlap ×2 0.990 ms." in v
    assert "Ranked by un-profiled step time" in v
    assert "ranked by the profiled trace time 2 of 3 runs would change place" in v  # naive and overlap swap
    # efficiency against the 1-GPU run uses the same (un-profiled) times: 0.85 / 0.90
    eff = comp.set_index("run")["efficiency_pct"]
    assert math.isclose(eff["naive_xl_fp32_2xh100"], 100 * 0.85 / 0.90)
    # both times and the overhead are columns of the numbers table
    t = numbers_table(comp, "Numbers")
    main, more = t.split("<details>", 1)
    heads = re.findall(r"data-k='([^']+)'", main)
    assert heads[:7] == [
        "run",
        "strategy",
        "bucket_mb",
        "world_size",
        "unprofiled_step_ns",
        "step_ns",
        "profiler_overhead_pct",
    ]  # no run has a lever variant: no column of blank cells
    # the rest folds away in a second table that repeats the run and leaves none of the columns out
    rest = re.findall(r"data-k='([^']+)'", more)
    assert rest[0] == "run" and "unprofiled_repeats" in rest and not set(heads[1:]) & set(rest)
    assert "variant" not in rest
    comp.loc[comp.index[0], "variant"] = "ch2-hiprio"  # one lever variant: the column is back, beside the cap
    heads = re.findall(r"data-k='([^']+)'", numbers_table(comp, "Numbers").split("<details>", 1)[0])
    assert heads[:5] == ["run", "strategy", "bucket_mb", "variant", "world_size"]
    # a column no run has a value for (here no un-profiled timing) is left out of both tables
    comp["unprofiled_step_ns"] = float("nan")
    both = re.findall(r"data-k='([^']+)'", numbers_table(comp, "Numbers"))
    assert "unprofiled_step_ns" not in both and "step_ns" in both


def test_without_an_unprofiled_range_the_verdict_does_not_claim_the_order_is_or_is_not_established(
    monkeypatch,
):
    patch_analysis(monkeypatch)
    runs = _set()
    for r in runs:
        r.meta.pop("unprofiled_step_ms_min")  # older timings: median only
    assign_baselines(runs)
    v = _text(strategy_verdict(comparison(runs)))
    assert v.startswith("Fastest: naive ×2 at 0.900 ms")
    assert "No step-time range is recorded for the top two" in v and "establish the order of" not in v


def test_a_set_where_one_run_lacks_the_unprofiled_median_is_ranked_by_trace_time_and_says_why(monkeypatch):
    patch_analysis(monkeypatch)
    runs = _set()
    runs[2] = _timed(
        "overlap_xl_fp32_2xh100", "overlap", 2, 1000, None, mem_gib=12.0
    )  # not timed without nsys
    assign_baselines(runs)
    comp = comparison(runs)
    assert set(comp["rank_basis"]) == {measures.TRACE}
    assert list(ranked(comp)["run"]) == [
        "overlap_xl_fp32_2xh100",
        "torch_ddp-25mb_xl_fp32_2xh100",
        "naive_xl_fp32_2xh100",
    ]
    v = _text(strategy_verdict(comp))
    assert v.startswith("Fastest: overlap ×2 at 1.00 ms per step (median over ranks and 3 profiled steps")
    assert (
        "Ranked by profiled step time (the trace's median over ranks and profiled steps): 1 of these 3 runs "
        "(overlap ×2) were not timed without nsys"
    ) in v
    # the 1-GPU baseline alone lacking it is named too
    runs = _set()
    runs[0] = _timed("none_xl_fp32_1xh100", "none", 1, 900, None)
    assign_baselines(runs)
    v = _text(strategy_verdict(comparison(runs)))
    assert v.startswith("Fastest: overlap ×2") and "its 1-GPU baseline included" in v


def test_memory_columns_are_the_run_json_values_in_gib_and_blank_with_a_note_when_missing(monkeypatch):
    patch_analysis(monkeypatch)
    runs = _set()
    runs[3] = _timed("torch_ddp-25mb_xl_fp32_2xh100", "torch_ddp", 2, 1050, 0.95)  # a JSON without memory
    assign_baselines(runs)
    comp = comparison(runs).set_index("run")
    for r in runs:
        for col, key in measures.MEMORY_KEYS.items():
            want = max(r.meta[key]) if key in r.meta else np.nan
            assert comp.loc[r.name, col] == want or (np.isnan(want) and np.isnan(comp.loc[r.name, col]))
    t = numbers_table(comp.reset_index(), "Numbers")
    got = {}
    for part in t.split("<details>"):  # the main table, then the folded one with the other columns
        row = next(x for x in part.split("<tr>") if ">naive_xl_fp32_2xh100<" in x)
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
        got.update(zip(re.findall(r"data-k='([^']+)'", part), cells, strict=True))
    # naive: 11 GiB on rank 0 (10 on rank 1), 13 GiB reserved, 2.75 GiB of optimizer state
    assert (got["peak_allocated_bytes"], got["peak_reserved_bytes"], got["optimizer_state_bytes"]) == (
        "11.0",
        "13.0",
        "2.75",
    )
    assert "peak allocated (GiB)" in t
    assert (
        "Memory columns blank for torch_ddp-25mb_xl_fp32_2xh100: their run JSONs record no peak GPU memory"
        in _text(t)
    )
    none = comparison(_set(memory=False))
    assert "no run JSON here records peak GPU memory" in _text(numbers_table(none, "Numbers"))


def test_findings_and_pages_name_the_same_fastest_under_either_basis(monkeypatch):
    patch_analysis(monkeypatch)
    for unprofiled in (True, False):
        runs = _set(unprofiled=unprofiled)
        assign_baselines(runs)
        comp = comparison(runs)
        page_best = ranked(comp)["run"].iloc[0]
        data = []
        for r, row in zip(runs, comp.to_dict("records"), strict=True):
            meta = dict(r.meta, config={"strategy": r.meta["strategy"], "bucket_mb": 25.0})
            data.append(
                RunData(
                    set=CAMPAIGN,
                    name=r.name,
                    folder=Path("traces/campaign/A") / r.name,
                    meta=meta,
                    trace=None,
                    analysis=None,
                    row=row,
                )
            )
        text = " ".join(qc.q10_beat_ddp({"A": data}, lambda r: r.name, {"A": "m"}).paragraphs())
        assert f"the lowest median is {page_best} at" in text  # no intervals here: no "fastest" claim
        assert page_best == ("naive_xl_fp32_2xh100" if unprofiled else "overlap_xl_fp32_2xh100")
        assert ("ranked by the profiled trace time" in text) == (not unprofiled)


def test_index_verdict_names_the_sets_and_the_fastest_run_and_links_its_comparison(monkeypatch, tmp_path):
    patch_analysis(monkeypatch)
    runs = _set() + [
        _timed(n, s, ws, us, None, folder="")
        for n, s, ws, us in (
            ("none_small_fp32_1xh100", "none", 1, 900),
            ("naive_small_fp32_2xh100", "naive", 2, 1300),
            ("overlap_small_fp32_2xh100", "overlap", 2, 1200),
        )
    ]
    assign_baselines(runs)
    groups = group_runs(runs)
    html_ = render_index(runs, groups, [])
    verdict = html_.split("<div class='verdict'>", 1)[1].split("</div>", 1)[0]
    v = _text(verdict)
    assert v.startswith("7 runs in 2 sets: campaign/A/ (4 runs, 1–2 GPUs), top level (3 runs, 1–2 GPUs).")
    assert "naive ×2, 0.900 ms per step (un-profiled), fastest of 3" in v
    assert (
        "top level · NVIDIA H100 80GB HBM3 · model xl · fp32 · 2 GPUs: overlap ×2, 1.20 ms per step (profiled, "
        "trace), fastest of 2" in v
    )
    pages = {g.page for g in groups if g.kind == "strategies"}
    assert pages and all(f"href='{p}'" in verdict for p in pages)
    assert "plotly" not in html_.lower()
    # the written index carries the same verdict and loads no chart library
    report.write_report(runs, tmp_path / "rep")
    written = (tmp_path / "rep" / "index.html").read_text()
    assert verdict in written and "plotly.min.js" not in written


@pytest.mark.parametrize("set_name", ["A", "B", "C", "D"])
def test_committed_campaign_sets_rank_by_their_json_unprofiled_medians(monkeypatch, set_name):
    """The run JSONs of traces/campaign/<set> (trace analyses replaced by stand-ins: with every run timed
    without nsys, the ranking and memory columns come from the JSONs alone); one comparison per world size,
    as the strategy pages group them."""
    if not (CAMPAIGN_DIR / set_name).is_dir():
        pytest.skip(f"campaign set {set_name} not in this checkout")
    patch_analysis(monkeypatch)
    metas = [json.loads(p.read_text()) for p in sorted((CAMPAIGN_DIR / set_name).glob("*/*.json"))]
    runs = []
    for m in metas:
        t, a = make_run(m["run"], m["strategy"], m["world_size"], 25.0)
        t.run = normalise_meta(m)
        runs.append(
            Run(
                m["run"], t, a, t.run, run_id=f"campaign/{set_name}/{m['run']}", folder=f"campaign/{set_name}"
            )
        )
    assign_baselines(runs)
    sizes = sorted({m["world_size"] for m in metas} - {1})
    assert sizes
    for n in sizes:
        comp = comparison([r for r in runs if r.meta["world_size"] in (1, n)])
        fastest = min(
            (m for m in metas if m["world_size"] == n), key=lambda m: m["unprofiled_step_ms_median"]
        )
        assert ranked(comp)["run"].iloc[0] == fastest["run"]
        v = _text(strategy_verdict(comp))
        assert f"at {fmt_ms(fastest['unprofiled_step_ms_median'] * 1e6)} per step (un-profiled" in v
        by_run = comp.set_index("run")
        for m in (m for m in metas if m["world_size"] in (1, n)):
            assert by_run.loc[m["run"], "peak_allocated_bytes"] == max(
                m["peak_memory_allocated_bytes_per_rank"]
            )
            assert by_run.loc[m["run"], "optimizer_state_bytes"] == max(m["optimizer_state_bytes_per_rank"])
            assert by_run.loc[m["run"], "profiler_overhead_pct"] == m["profiler_overhead_pct"]


def test_scaling_uses_the_ranked_time_for_efficiency_throughput_and_its_verdict(monkeypatch):
    from ddp_profile.report.index import scaling_frame, scaling_verdict

    patch_analysis(monkeypatch)
    runs = [
        _timed(n, "bucketed", ws, us, u)
        for n, ws, us, u in (
            ("bucketed-25mb_xl_fp32_1xh100", 1, 900, 0.80),
            ("bucketed-25mb_xl_fp32_2xh100", 2, 1000, 0.88),
        )
    ]
    for r in runs:
        r.meta["config"] = {"batch": 4}
    assign_baselines(runs)
    comp = scaling_frame(runs).set_index("run")
    two = comp.loc["bucketed-25mb_xl_fp32_2xh100"]
    assert math.isclose(two["efficiency_pct"], 100 * 0.80 / 0.88)  # un-profiled, not the trace's 0.9 / 1.0
    assert math.isclose(two["samples_per_s"], 2 * 4 / 0.88e-3)
    v = _text(scaling_verdict(comp.reset_index()))
    assert "efficiency 90.9 % of its own 1-GPU run (bucketed-25mb_xl_fp32_1xh100), step 0.880 ms" in v
    assert v.endswith("Efficiency, throughput and step use the un-profiled step time.")


def test_run_page_advice_names_the_comparisons_winner_with_the_same_time(monkeypatch):
    """overlap is fastest in its trace but slowest without nsys: its run page must not say 'keep this
    strategy' while its comparison ranks naive first."""
    from ddp_profile.report.run_page import measured_advice

    patch_analysis(monkeypatch)
    runs = _set()
    assign_baselines(runs)
    groups = group_runs(runs)
    context = {
        "groups": groups,
        "comps": {g.page: comparison(g.runs) for g in groups if g.kind == "strategies"},
    }
    overlap = next(r for r in runs if r.meta["strategy"] == "overlap")
    a = _text(measured_advice(overlap, context))
    # 0.99 - 0.90 = 0.09 ms = 9.1 % of 0.99
    assert a.startswith(
        "What to change: switch to naive ×2, measured 0.900 ms per step (un-profiled), 0.090 ms "
        "(9.1 %) less than this run"
    )
    naive = next(r for r in runs if r.meta["strategy"] == "naive")
    assert _text(measured_advice(naive, context)).startswith("Keep this strategy")


def test_baseline_cells_link_to_the_baseline_page_and_a_1gpu_run_names_none(monkeypatch):
    """The 1-GPU baseline column: a dash for the 1-GPU run measured against itself, and each other run's
    baseline as a link to that run's page, on the index and in a comparison's numbers table."""
    patch_analysis(monkeypatch)
    runs = _set()
    assign_baselines(runs)
    one = runs[0]
    assert one.meta["world_size"] == 1 and all(r.baseline is one for r in runs)
    cell = f"<a href='{one.page}'>{one.name}</a></td>"
    index_table = (
        render_index(runs, group_runs(runs), []).split("<h2>Runs</h2>", 1)[1].split("</table>", 1)[0]
    )
    # the index clips a baseline name (whole in its title and link text); the numbers table lets it wrap
    for html_, link in (
        (index_table, f"<td class='clip' title='{one.name}'>{cell}"),
        (numbers_table(comparison(runs), "Numbers"), f"<td class='tok link'>{cell}"),
    ):
        rows: dict[str, str] = {}  # run page: its rows' cells (the numbers table's two tables joined)
        for tr in re.findall(r"<tr><td.*?</tr>", html_, re.S):
            page = re.search(r"href='([^']+)'", tr).group(1)
            rows[page] = rows.get(page, "") + tr
        assert set(rows) == {r.page for r in runs}
        # its name only in its own run cells (one per table), no self-baseline
        assert rows[one.page].count(f">{one.name}<") == rows[one.page].count(f"href='{one.page}'")
        assert all(link in rows[r.page] for r in runs[1:])
        assert all(h.endswith(".html") for h in re.findall(r"<a href='([^']+)'", html_))  # no link on a dash


def test_index_repeats_the_findings_timing_bullets_escaped_and_linked(monkeypatch):
    from ddp_profile.findings.pages import index_block
    from ddp_profile.findings.summary import Bullet

    patch_analysis(monkeypatch)
    runs = _set()
    assign_baselines(runs)
    bullet = Bullet(
        "bf16, closest to one GPU:",
        "x <script>alert(1)</script> (set AB): 100.6 % of one GPU",
        "timing",
        "timing sets",
    )
    page_ = render_index(runs, group_runs(runs), [], front=[index_block([bullet])])
    findings = page_.split("<h2>Findings</h2>", 1)[1].split("<h2>", 1)[0]
    assert "<strong>bf16, closest to one GPU:</strong>" in findings and "<script>" not in findings
    assert "&lt;script&gt;" in findings and "href='findings.html#timing'>timing sets</a>" in findings
    # without findings, or without timing sets, nothing of it
    assert "Closest to one GPU" not in render_index(runs, group_runs(runs), [])
    without_timing = render_index(runs, group_runs(runs), [], front=[index_block([])])
    assert "<h2>Findings</h2>" in without_timing and "Closest to one GPU" not in without_timing
