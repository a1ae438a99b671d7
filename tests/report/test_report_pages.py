"""Report pages follow what the runs are (user review of the pages): lever variants of one strategy are
compared, PyTorch's strategies are not called ours, every step time says its basis, the overlap picture
shows the stock reference and the fastest, unknown values stay blank."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import make_run, patch_analysis

from ddp_profile.report import Run
from ddp_profile.report.compare import assign_baselines, comparison
from ddp_profile.report.index import index_verdict
from ddp_profile.report.run_page import measured_advice
from ddp_profile.report.runs import group_runs, normalise_meta

SET_D = Path(__file__).resolve().parents[2] / "traces" / "campaign" / "D"


def _text(html_: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html_))


def _campaign_runs(folder: Path, name: str) -> list[Run]:
    """The run JSONs of a committed campaign set on stand-in analyses (the grouping and ranking use the
    JSONs: every run has an un-profiled median)."""
    runs = []
    for p in sorted(folder.glob("*/*.json")):
        m = json.loads(p.read_text())
        t, a = make_run(m["run"], m["strategy"], m["world_size"], 25.0)
        t.run = normalise_meta(m)
        runs.append(
            Run(m["run"], t, a, t.run, run_id=f"campaign/{name}/{m['run']}", folder=f"campaign/{name}")
        )
    assign_baselines(runs)
    return runs


def test_lever_variants_of_one_strategy_form_a_strategy_comparison_per_gpu_count(monkeypatch):
    if not SET_D.is_dir():
        pytest.skip("campaign set D not in this checkout")
    patch_analysis(monkeypatch)
    runs = _campaign_runs(SET_D, "D")
    groups = group_runs(runs)
    strat = {g.page: g for g in groups if g.kind == "strategies"}
    assert sorted(strat) == [
        "strategies-campaign--D--xl-fp32-NVIDIA-H100-80GB-HBM3-x2.html",
        "strategies-campaign--D--xl-fp32-NVIDIA-H100-80GB-HBM3-x4.html",
    ]
    x4 = strat["strategies-campaign--D--xl-fp32-NVIDIA-H100-80GB-HBM3-x4.html"]
    assert sorted(r.name for r in x4.runs) == [
        "none_xl_fp32_1xh100",
        "torch_ddp-25mb-ch9-hiprio_xl_fp32_4xh100",
        "torch_ddp-25mb_xl_fp32_4xh100",
    ]
    comps = {p: comparison(g.runs) for p, g in strat.items()}
    context = {"groups": groups, "comps": comps}
    stock4 = next(r for r in runs if r.name == "torch_ddp-25mb_xl_fp32_4xh100")
    a = _text(measured_advice(stock4, context))
    # un-profiled medians from the JSONs: 395.075 (stock) vs 392.177 (ch9, hiprio)
    assert a.startswith("What to change: switch to torch_ddp 25 MiB (ch9, hiprio) ×4, measured 392 ms")
    assert "No comparison holds this run" not in a
    ch9 = next(r for r in runs if r.name == "torch_ddp-25mb-ch9-hiprio_xl_fp32_4xh100")
    assert _text(measured_advice(ch9, context)).startswith("Keep this strategy")
    v = _text(index_verdict(runs, groups, {"comps": comps}))
    assert (
        "campaign/D/ · NVIDIA H100 80GB HBM3 · model xl · fp32 · 4 GPUs: torch_ddp 25 MiB (ch9, hiprio) ×4, "
        "392 ms per step (un-profiled), fastest of 2" in v
    )
    assert (
        "campaign/D/ · NVIDIA H100 80GB HBM3 · model xl · fp32 · 2 GPUs: torch_ddp 25 MiB (ch5, hiprio) ×2, "
        "390 ms per step (un-profiled), fastest of 2" in v
    )


def test_runs_of_one_configuration_only_make_no_strategy_comparison(monkeypatch):
    patch_analysis(monkeypatch)
    runs = []
    for name, ws in (("torch_ddp-25mb_xl_fp32_2xh100", 2), ("torch_ddp-25mb_xl_fp32_1xh100", 1)):
        t, a = make_run(name, "torch_ddp", ws, 25.0)
        runs.append(Run(name, t, a, normalise_meta(t.run)))
    assert not [g for g in group_runs(runs) if g.kind == "strategies"]


def _row(strategy, t_ms, variant="", mb=25.0):
    return {
        "run": f"{strategy}{variant}",
        "strategy": strategy,
        "variant": variant,
        "world_size": 4,
        "bucket_mb": mb if strategy in ("bucketed", "torch_ddp") else None,
        "n_steps": 4,
        "step_ns": t_ms * 1e6,
        "step_min_ns": t_ms * 1e6,
        "step_max_ns": t_ms * 1e6,
        "page": f"{strategy}.html",
    }


def test_strategy_verdict_never_calls_pytorch_strategies_ours():
    import pandas as pd

    from ddp_profile.report.verdicts import strategy_verdict

    # campaign C: torch_ddp fastest, then FSDP2; no ddp-profile strategy in the set
    c = _text(strategy_verdict(pd.DataFrame([_row("torch_ddp", 390.0), _row("fsdp", 399.0)])))
    assert "9.00 ms (2.3 %) faster than the next, fsdp ×4 (PyTorch FSDP2) (399 ms" in c
    assert "ours" not in c and "ddp-profile's own" not in c
    # FSDP fastest, PyTorch's ZeRO-1 next: no sentence about 'ours' at all
    d = _text(
        strategy_verdict(
            pd.DataFrame(
                [_row("fsdp", 380.0), _row("torch_ddp", 390.0, "+zero1torch"), _row("torch_ddp", 395.0)]
            )
        )
    )
    assert "Against PyTorch DDP (torch_ddp 25 MiB ×4, 395 ms)" in d and "ddp-profile's own" not in d
    assert (
        "faster than the next, torch_ddp 25 MiB (+zero1torch) ×4 (PyTorch DDP with ZeroRedundancyOptimizer)"
        in d
    )
    assert "ours" not in d
    # torch_ddp fastest, next is PyTorch's ZeRO, ddp-profile's bucketed after it: both named as what they are
    e = _text(
        strategy_verdict(
            pd.DataFrame(
                [_row("torch_ddp", 380.0), _row("torch_ddp", 390.0, "+zero1torch"), _row("bucketed", 400.0)]
            )
        )
    )
    assert (
        "PyTorch DDP is fastest; the fastest of ddp-profile's own strategies, bucketed 25 MiB ×4, is "
        "20.0 ms (5.0 %) slower (spread unknown: no confidence interval recorded)."
    ) in e
    assert "ours" not in e


GIB = 2**30


def _timed(name, strategy, ws, trace_us, unprof_ms, mem_gib, folder="campaign/A"):
    t, a = make_run(name, strategy, ws, 25.0, step_us=trace_us)
    a.steps["step_ns"] = float(trace_us * 1000)
    meta = dict(t.run) | {
        "unprofiled_step_ms_median": unprof_ms,
        "unprofiled_repeats": 3,
        "unprofiled_step_ms_min": unprof_ms - 0.01,
        "unprofiled_step_ms_max": unprof_ms + 0.01,
        "profiler_overhead_pct": round(100 * (trace_us / 1000 / unprof_ms - 1), 3),
        "peak_memory_allocated_bytes_per_rank": [int(mem_gib * GIB)] * ws,
    }
    return Run(name, t, a, normalise_meta(meta), run_id=f"{folder}/{name}", folder=folder)


def test_run_page_shows_both_step_times_and_its_advice_says_which_it_uses_and_the_memory_it_trades(
    monkeypatch,
):
    from ddp_profile.report.run_page import render_run_page

    patch_analysis(monkeypatch)
    runs = [
        _timed("none_xl_fp32_1xh100", "none", 1, 800, 0.70, 20.0),
        _timed("fsdp_xl_fp32_2xh100", "fsdp", 2, 1100, 0.95, 30.0),
        _timed("torch_ddp-25mb_xl_fp32_2xh100", "torch_ddp", 2, 1000, 0.90, 40.0),
    ]
    assign_baselines(runs)
    groups = group_runs(runs)
    context = {
        "groups": groups,
        "comps": {g.page: comparison(g.runs) for g in groups if g.kind == "strategies"},
    }
    html_ = render_run_page(runs[1], context)
    v = _text(html_.split("<div class='verdict'>", 1)[1].split("</div>", 1)[0])
    overhead = round(100 * (1.1 / 0.95 - 1), 3)
    assert v.startswith("The step is bound by ")
    assert v.split("). ", 1)[1].split("Median step", 1)[0].startswith("What to change: switch to")
    assert (
        "Median step 1.10 ms in the trace (over 3 profiled steps and every rank); 0.950 ms "
        f"un-profiled (median of 3 runs without nsys, CUDA events; profiler overhead "
        f"{overhead:.1f} %)."
    ) in v
    assert (
        "switch to torch_ddp 25 MiB ×2, measured 0.900 ms per step (un-profiled), 0.050 ms (5.3 %) less than "
        "this run's 0.950 ms (un-profiled; evidence: the strategy comparison). It trades memory: it peaks at "
        "40.0 GiB allocated per GPU against this run's 30.0 GiB (run JSONs)."
    ) in v
    keep = _text(measured_advice(runs[2], context))
    assert keep.startswith(
        "Keep this strategy: no run of the measured strategy comparison has a shorter median "
        "step (un-profiled; this run 0.900 ms)."
    )


def test_overlap_picture_shows_the_stock_reference_and_the_fastest_by_the_sets_ranking(monkeypatch):
    from ddp_profile.report.compare import overlap_caption, overlap_runs

    patch_analysis(monkeypatch)
    # campaign C's shape: stock torch_ddp, a slower lever variant listed first, FSDP fastest un-profiled
    # (slowest in the trace)
    runs = [
        _timed("none_xl_fp32_1xh100", "none", 1, 800, 0.70, 20.0, folder="campaign/C"),
        _timed(
            "torch_ddp-25mb-ch2-hiprio_xl_fp32_4xh100", "torch_ddp", 4, 1000, 0.99, 30.0, folder="campaign/C"
        ),
        _timed("fsdp_xl_fp32_4xh100", "fsdp", 4, 1200, 0.90, 20.0, folder="campaign/C"),
        _timed("torch_ddp-25mb_xl_fp32_4xh100", "torch_ddp", 4, 1100, 0.95, 30.0, folder="campaign/C"),
    ]
    assign_baselines(runs)
    comp = comparison(runs)
    picked = overlap_runs(list(reversed(runs)), comp)
    assert [r.name for r in picked] == ["torch_ddp-25mb_xl_fp32_4xh100", "fsdp_xl_fp32_4xh100"]
    assert [r.name for r in overlap_runs(runs, comp)] == [
        r.name for r in picked
    ]  # order of runs does not matter
    assert overlap_caption(picked, comp) == (
        "Shown: torch_ddp 25 MiB ×4, the stock reference (PyTorch DDP "
        "without levers), and fsdp ×4, the fastest of the set by its ranking."
    )
    # the stock run fastest: the runner-up joins it
    runs[3].meta["unprofiled_step_ms_median"] = 0.80
    assign_baselines(runs)
    comp = comparison(runs)
    picked = overlap_runs(runs, comp)
    assert [r.name for r in picked] == ["torch_ddp-25mb_xl_fp32_4xh100", "fsdp_xl_fp32_4xh100"]
    assert overlap_caption(picked, comp).endswith(
        "fsdp ×4, the runner-up (the reference is the fastest of the set by its ranking)."
    )


def _unknown_sizes_run():
    """An FSDP-like run: its collectives carry no bucket and no message size (NCCL's own NVTX only)."""
    import pandas as pd

    t, a = make_run("fsdp_xl_fp32_2xh100", "fsdp", 2, 25.0)
    a.collectives["bucket"] = pd.array([pd.NA] * len(a.collectives), dtype="Int64")
    a.collectives["bytes"] = pd.array([pd.NA] * len(a.collectives), dtype="Int64")
    a.collectives["dtype"] = None
    return t, a


def test_unknown_bucket_and_size_are_blank_in_tables_and_left_out_of_timeline_tooltips():
    from ddp_profile.plots.timeline import bars_for_window, timeline_steps
    from ddp_profile.report.html import table
    from ddp_profile.report.run_page import collective_summary

    t, a = _unknown_sizes_run()
    html_ = table(collective_summary(a.collectives), "Collectives by bucket (medians)")
    assert "NA" not in html_ and "nan" not in html_.lower()
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", html_)
    assert cells[:3] == ["AllReduce", "–", "–"]  # collective, dtype, message: unknown
    assert "data-k='bucket'" not in html_  # no collective has a bucket: no bucket column
    data = timeline_steps(t.kernels, a.phases, a.steps, a.collectives)
    hover = bars_for_window(data, 0, -1e18, 1e18, 0)[1]["hovertext"]
    assert hover and all("bucket" not in h and "–" not in h.split("duration")[1] for h in hover), hover[0]
    assert all("wait 10.0 µs · transfer 90.0 µs" in h for h in hover)
    assert not any(h.endswith((" · ", "<br>")) or "· <br>" in h or "<br> ·" in h for h in hover)
    # a known bucket with an unknown size keeps the bucket alone
    t2, a2 = make_run()
    a2.collectives["bytes"] = pd_na_bytes(len(a2.collectives))
    data2 = timeline_steps(t2.kernels, a2.phases, a2.steps, a2.collectives)
    hover2 = bars_for_window(data2, 0, -1e18, 1e18, 0)[1]["hovertext"]
    assert {h.split("<br>bucket ")[1].split("<br>")[0] for h in hover2} == {"0", "1"}


def pd_na_bytes(n):
    import pandas as pd

    return pd.array([pd.NA] * n, dtype="Int64")


def test_run_verdict_names_each_share_by_what_it_is_with_one_value_per_fact():
    from ddp_profile.report.verdicts import run_verdict

    # campaign A's FSDP run: exposed 50.5 ms of a 531 ms median step, but the median of the per-step
    # exposed shares is 10.2 % (the headline's exposed comm (%)); comm 43.5 % of the step in the table
    summary = {
        "step_ns": 530.608e6,
        "n_steps": 6,
        "comm_ns": 223.872e6,
        "overlap_ns": 174.611e6,
        "exposed_comm_ns": 50.467e6,
        "exposed_comm_pct": 10.2,
        "comm_pct": 43.5,
        "comm_tail_ns": 0.632e6,
        "compute_ns": 386.470e6,
        "idle_ns": 76.471e6,
    }
    v = _text(run_verdict(summary, None, False, "", 2))
    # 50.467 / 530.608 is 9.5 %: the median of the per-step shares says how it was taken, not "of the step"
    assert "50.5 ms (median share of the step 10.2 %) is exposed" in v
    assert "175 ms of it (78 %) is hidden" in v  # no pooled hidden share in this summary: the ratio
    pooled = _text(run_verdict(dict(summary, overlap_pct=75.5), None, False, "", 2))
    # the headline's comm hidden (%), not a second value, named as pooled since it is not 174.611 / 223.872
    assert "175 ms of it (75.5 % of all communication, pooled over ranks and steps) is hidden" in pooled
    assert (
        "The step is bound by compute (share of the step: compute 72.8 %, exposed communication 10.2 %, "
        "idle gaps 14.4 %)."
    ) in v
    assert "9.5 %" not in v and "communication 10.2" in v and ", communication" not in v
    bound = _text(
        run_verdict(
            dict(summary, compute_ns=100e6, exposed_comm_ns=300e6, exposed_comm_pct=56.5), None, False, "", 2
        )
    )
    assert (
        "bound by exposed communication (share of the step: compute 18.8 %, exposed communication 56.5 %"
        in bound
    )


def test_a_foreign_run_takes_gpus_from_its_trace_and_its_program_json_and_never_shows_question_marks(
    tmp_path,
):
    from ddp_profile.report.build import read_program
    from ddp_profile.report.index import run_sets
    from ddp_profile.report.run_page import source_of
    from ddp_profile.report.runs import fill_from_trace, program_text

    t, a = make_run("fsdp2", "fsdp", 2, 25.0, gpu="NVIDIA H200")
    bare = Run("foreign/fsdp2", t, a, normalise_meta({}), run_id="foreign/fsdp2", folder="foreign")
    assert run_sets([bare]) == "1 run in 1 set: foreign/ (1 run, 2 GPUs)."  # from the trace's ranks
    (tmp_path / "program.json").write_text(
        json.dumps(
            {
                "program": "fsdp2_loop.py",
                "made_by": "foreign (not the ddp-profile harness)",
                "parallelism": "FSDP2 fully_shard per layer, fp32, AdamW",
                "world_size": 2,
                "model": {"d_model": 1024},
                "gpu_name": "NVIDIA H200",
            }
        )
    )
    meta = fill_from_trace(normalise_meta({}), t, read_program(tmp_path))
    assert meta["world_size"] == 2 and meta["gpu_name"] == "NVIDIA H200" and meta.get("model") is None
    run = Run("foreign/fsdp2", t, a, meta, run_id="foreign/fsdp2", folder="foreign")
    assert run_sets([run]) == "1 run in 1 set: foreign/ (1 run, 2 GPUs)."
    assert source_of(run) == "NVIDIA H200 ×2 · steps 0–2 (3)"
    assert program_text(meta) == (
        "fsdp2_loop.py: FSDP2 fully_shard per layer, fp32, AdamW — foreign (not the ddp-profile harness)"
    )
    # a run JSON's own values win over the trace
    t4, a4 = make_run("x", "bucketed", 2, 25.0)
    assert fill_from_trace(normalise_meta({"world_size": 4, "gpu_name": "H100"}), t4)["world_size"] == 4
    assert read_program(tmp_path / "nothing-here") is None


def test_campaign_d_scaling_page_holds_its_1gpu_baseline_and_says_which_it_is(monkeypatch):
    if not SET_D.is_dir():
        pytest.skip("campaign set D not in this checkout")
    from ddp_profile.report.index import render_scaling_page

    patch_analysis(monkeypatch)
    runs = _campaign_runs(SET_D, "D")
    for r in runs:
        r.host, r.hosts_file = "campaign-h100-host", True
    scaling = [g for g in group_runs(runs) if g.kind == "scaling"]
    assert len(scaling) == 1
    names = [r.name for r in scaling[0].runs]
    assert "none_xl_fp32_1xh100" in names and len(names) == 5
    html_ = render_scaling_page(scaling[0])
    text = _text(html_)
    assert "against the 1-GPU run of the same strategy" not in text
    assert (
        "torch_ddp 25 MiB, torch_ddp 25 MiB (ch5, hiprio), torch_ddp 25 MiB (ch9, hiprio) have no 1-GPU run "
        "of their own, so they are measured against none_xl_fp32_1xh100 (its own point at 1 GPU) and no "
        "dashed ideal line is drawn for them."
    ) in text
    assert (
        "At 4 GPUs, torch_ddp 25 MiB (ch9, hiprio) ×4 scales best: efficiency 92.7 % of its 1-GPU baseline, "
        "the run without communication (none_xl_fp32_1xh100)"
    ) in text
    # the 1-GPU point is a row of the numbers table
    assert (
        "<td class='tok link'><a href='run-campaign--D--none_xl_fp32_1xh100.html'>none_xl_fp32_1xh100</a></td>"
        "<td>none</td>"
    ) in html_


def test_scaling_host_sentence_tells_an_unlisted_run_from_a_missing_hosts_file(monkeypatch):
    from ddp_profile.report.index import host_text

    t, a = make_run()
    r = Run("scaling/x", t, a, normalise_meta(t.run))
    assert "no hosts.txt beside the traces" in host_text([r])
    r.hosts_file = True
    assert host_text([r]) == (
        "Which host recorded these runs is not known: hosts.txt beside the traces does not list them. "
    )


def test_values_that_round_to_zero_have_no_minus_sign():
    import pandas as pd

    from ddp_profile.report.glossary import cell_text, fmt_ms, fmt_pct
    from ddp_profile.report.html import table

    assert fmt_ms(-1.0) == "0.000 ms" and fmt_ms(-2e6) == "-2.00 ms"
    assert fmt_pct(-0.01) == "0.0 %" and fmt_pct(-1.5) == "-1.5 %"
    assert cell_text("lost_ns", -200.0) == "0.000" and cell_text("slowdown_pct", -0.04) == "0.0"
    html_ = table(pd.DataFrame({"name": ["k"], "lost_ns": [-3.0], "slowdown_pct": [-0.01]}), "Contention")
    assert re.findall(r"<td[^>]*>([^<]*)</td>", html_) == ["k", "0.000", "0.0"]  # the shown cells


def test_two_node_run_pages_say_the_nodes_are_two_torchrun_agents_on_one_host(monkeypatch):
    from ddp_profile.report.run_page import render_run_page, two_node_note

    patch_analysis(monkeypatch)
    t, a = make_run("bucketed-25mb_small_fp32_4xh100", "bucketed", 4, 25.0)
    run = Run(
        "two-node/bucketed-25mb_small_fp32_4xh100",
        t,
        a,
        normalise_meta(t.run),
        run_id="two-node/bucketed-25mb_small_fp32_4xh100",
        folder="two-node",
        host="campaign-h100-host",
    )
    note = _text(two_node_note(run))
    assert note == (
        'Two-node layout on one machine: the two "nodes" of this run are two torchrun agents of 2 GPUs '
        "each on one host (campaign-h100-host, hosts.txt), joined by one rendezvous (folder "
        "two-node/). Their NCCL traffic never leaves that host, so these times do not measure a "
        "network between machines."
    )
    assert two_node_note(run) in render_run_page(run)
    other = Run("x", t, a, normalise_meta(t.run), run_id="scaling/x", folder="scaling")
    assert two_node_note(other) == ""


def test_run_page_channel_advice_quotes_the_recommendations_estimated_loss():
    """Set C's stock 4-GPU trace: the run page's advice names the same contention figure as the
    recommendation's basis (the estimate, one number per fact), and calls it an estimate, not a ceiling."""
    from ddp_profile.analysis import analyze
    from ddp_profile.nsys.loader import load_trace
    from ddp_profile.report.glossary import fmt_ms
    from ddp_profile.report.run_page import model_advice
    from ddp_profile.report.runs import Run

    trace = load_trace("traces/campaign/C/torch_ddp-25mb_xl_fp32_4xh100")
    res = analyze(trace)
    head = res.recommendation.iloc[0]
    text = model_advice(Run("c-stock", trace, res))
    assert f"compute loses an estimated {fmt_ms(head['upper_gain_ns'])} per step beside NCCL" in text
    assert f"contention ({fmt_ms(head['upper_gain_ns'])}/step" in head["basis"]
    assert "--nccl-channels 9" in text


def test_sweep_model_table_numbers_sit_right_with_separators():
    """The bucket-sweep page's model table writes counts with thousands separators ('7,623', as the fit table's
    '6,160 kernels') and marks every number cell with data-v, so it sits right like every other table's."""
    import pandas as pd

    from ddp_profile.report.sweep import model_text

    curve = pd.DataFrame(
        {
            "bucket_mb": [1.0, 1000.0],
            "bucket_count": [338.0, 8.0],
            "ideal_count": [7623, 8],
            "predicted_ns": [0.267e6, 2.008e6],
            "overhead_ns": [9.571e6, float("nan")],
            "comm_tail_ns": [0.332e6, 2.689e6],
        }
    )
    curve.attrs.update(total_mb=7622.7)
    fit = pd.DataFrame(
        {
            "o_us": [7.0],
            "w_gb_per_s": [202.5],
            "min_bytes": [6.0 * 2**10],
            "max_bytes": [9.8 * 2**20],
            "median_rel_err_pct": [8.2],
            "p90_rel_err_pct": [14.3],
            "n_points": [6160],
        }
    )
    html_ = model_text(curve, 243.3, fit, [])
    body = html_[html_.index("<tbody>") :]
    assert "<tr><td>1</td><td data-v='338.0'>338</td><td data-v='7623'>7,623</td>" in body
    assert (
        "<td data-v='9571000.0'>9.57</td>" in body and "<td>–</td>" in body
    )  # a missing value: a dash, left


def test_a_missing_number_sits_right_in_its_numeric_column():
    """A '–' in a number column (an un-profiled step a run lacks, a 1-GPU run's comm hidden) is right-aligned
    under its header like the numbers above and below it; a '–' in a text column stays left."""
    import pandas as pd

    from ddp_profile.report.html import page, table

    html_ = table(
        pd.DataFrame({"run": ["a", "b"], "dtype": ["f32", None], "step_ns": [1e6, float("nan")]}), "T"
    )
    cells = re.findall(r"<td([^>]*)>([^<]*)</td>", html_)
    assert cells == [
        ("", "a"),
        ("", "f32"),
        (" data-v='1.0'", "1.00"),
        ("", "b"),
        ("", "–"),
        (" class='na'", "–"),
    ]
    css = page("t", "", "")
    assert css.index("td:not([data-v]),th.txt{text-align:left}") < css.index("td.na{text-align:right}")


def test_a_number_and_its_unit_never_wrap_apart_in_a_table_cell():
    """Findings tables hold numbers as text ('369 ms', '+4.9 %'); in a narrow column the unit wrapped to a
    line of its own. Such a cell joins number and unit with a no-break space; other text is left as is."""
    import pandas as pd

    from ddp_profile.report.html import table

    df = pd.DataFrame({"run": ["a b"], "measured": ["369 ms"], "error": ["−20.6 %"], "range": ["1.0–2.0 ms"]})
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", table(df, "T"))
    assert cells == ["a b", "369\u00a0ms", "−20.6\u00a0%", "1.0–2.0 ms"]
