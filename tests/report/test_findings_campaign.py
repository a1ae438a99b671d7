"""Findings sections from traces/campaign/: sharding's memory against its time, and beating stock DDP.
Runs are RunData built in code, so every expected sentence is derived from the numbers written here."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from ddp_profile.analysis.recommend import fields_of, flags_of
from ddp_profile.findings import campaign as qc
from ddp_profile.findings.data import CAMPAIGN, RunData
from ddp_profile.schema import RECOMMEND_COLUMNS

GIB = 2**30


def _run(
    name,
    strategy,
    world,
    unprof_ms,
    prof_ms,
    *,
    config=None,
    mem_gib=40.0,
    opt_gib=14.0,
    kinds=None,
    rec=None,
    overhead=1.0,
    ci=None,
):
    config = {"strategy": strategy, "bucket_mb": 25.0, **(config or {})}
    meta = {
        "strategy": strategy,
        "world_size": world,
        "config": config,
        "unprofiled_step_ms_median": unprof_ms,
        "unprofiled_repeat_medians_ms": [unprof_ms, unprof_ms],
        "profiler_overhead_pct": overhead,
        "peak_memory_allocated_bytes_per_rank": [mem_gib * GIB] * world,
        "peak_memory_reserved_bytes_per_rank": [(mem_gib + 1) * GIB] * world,
        "optimizer_state_bytes_per_rank": [opt_gib * GIB] * world,
    }
    if ci is not None:  # the un-profiled median's 95 % interval (ms), as harness.timings / repeats write it
        meta |= {"unprofiled_ci_low_ms": ci[0], "unprofiled_ci_high_ms": ci[1]}
    ck = pd.DataFrame(
        [{"rank": 0, "step": 0, "collective": k, "exposed_comm_ns": v} for k, v in (kinds or {}).items()]
    )
    analysis = SimpleNamespace(comm_kinds=ck, recommendation=rec if rec is not None else pd.DataFrame())
    row = {"step_ns": prof_ms * 1e6, "compute_ns": 300e6, "exposed_comm_ns": 4e6}
    return RunData(
        set=CAMPAIGN,
        name=name,
        folder=Path("traces/campaign/A") / name,
        meta=meta,
        trace=None,
        analysis=analysis,
        row=row,
    )


def _page(r):
    return f"run-{r.name}.html"


def test_sharding_sentence_states_memory_saved_and_time_paid():
    ref = _run(
        "torch_ddp", "torch_ddp", 2, 380.0, 381.0, mem_gib=45.0, opt_gib=14.0, kinds={"AllReduce": 4e6}
    )
    zero = _run(
        "bucketed+zero1",
        "bucketed",
        2,
        399.0,
        400.0,
        config={"shard_optimizer": "ours"},
        mem_gib=37.0,
        opt_gib=7.0,
        kinds={"AllReduce": 2e6, "Broadcast": 25e6},
    )
    s = qc.q9_sharding({"A": [ref, zero]}, _page, {"A": "2× GPU"})
    text = " ".join(s.paragraphs())
    # a campaign set is never called plain "Set A", the name of traces/<run> set A in sections 1–8
    assert text.count("Campaign set A") == 2 and "Set A" not in text.replace("Campaign set A", "")
    assert [b.caption for b in s.blocks if hasattr(b, "caption")] == [
        "Campaign set A (XL fp32, batch 4×256 per GPU)"
    ]
    # 14 - 7 = 7 GiB less state, 45 - 37 = 8 GiB lower peak, 399 - 380 = 19 ms slower = 5.0 % of 380
    assert (
        "bucketed+zero1 holds 7.00 GiB less optimizer state and peaks 8.00 GiB lower in allocated memory per "
        "GPU than torch_ddp, and its step is 19.0 ms slower (5.0 %): 25.0 ms of exposed Broadcast"
    ) in text


def test_beat_ddp_names_the_fastest_by_unprofiled_time_and_says_when_rankings_flip():
    one = _run("none", "none", 1, 350.0, 352.0)
    ref = _run("torch_ddp", "torch_ddp", 2, 380.0, 381.0)
    # fastest without nsys, but slowest under it: the ranking flips
    lever = _run(
        "torch_ddp-ch2",
        "torch_ddp",
        2,
        370.0,
        390.0,
        config={"nccl_channels": 2, "nccl_high_priority": True},
        overhead=5.4,
    )
    s = qc.q10_beat_ddp({"A": [one, ref, lever]}, _page, {"A": "2× GPU"})
    text = " ".join(s.paragraphs())
    # 370 / 380 = 0.974x; 350 / 370 = 94.6 % efficiency
    # no intervals in these run JSONs: the lowest median, not "the fastest", and the spread said to be unknown
    assert "the lowest median is torch_ddp-ch2 at 370 ms per step, 0.974× stock torch_ddp" in text
    assert (
        "Against stock torch_ddp it is faster by the medians; spread unknown (no confidence interval "
        "recorded, 2 repeats)."
    ) in text
    assert "94.6 % 2-GPU efficiency" in text
    assert "Campaign set A ran on 2× GPU." in text and "Set A" not in text
    assert (
        "the ranking under nsys differs from the un-profiled one (2 of 2 configurations change place)" in text
    )
    same = qc.q10_beat_ddp(
        {"A": [one, ref, _run("x", "torch_ddp", 2, 370.0, 371.0, config={"nccl_channels": 2})]},
        _page,
        {"A": "m"},
    )
    assert "the ranking under nsys is the same as without it" in " ".join(same.paragraphs())


def test_beat_ddp_claims_faster_only_where_intervals_separate():
    one = _run("none", "none", 1, 350.0, 352.0, ci=(349.0, 351.0))
    ref = _run("torch_ddp", "torch_ddp", 2, 380.0, 381.0, ci=(378.0, 382.0))
    lever = _run("ch2", "torch_ddp", 2, 370.0, 372.0, config={"nccl_channels": 2}, ci=(368.0, 372.0))
    s = qc.q10_beat_ddp({"A": [one, ref, lever]}, _page, {"A": "m"})
    text = " ".join(s.paragraphs())
    assert "the fastest configuration is ch2 at 370 ms" in text
    assert (
        "Against stock torch_ddp it is faster (95 % intervals 368–372 ms and 378–382 ms do not overlap)."
    ) in text
    table = next(b.frame for b in s.blocks if hasattr(b, "frame"))
    assert table["95 % interval"].tolist() == ["368–372 ms", "378–382 ms"]
    assert summary_of(s) == ("a configuration beats stock outside noise in A at 0.974× stock.")
    # the same medians with wide intervals: within noise, both intervals given, no "fastest"
    wide = _run("ch2", "torch_ddp", 2, 370.0, 372.0, config={"nccl_channels": 2}, ci=(360.0, 381.0))
    s2 = qc.q10_beat_ddp({"A": [one, ref, wide]}, _page, {"A": "m"})
    text2 = " ".join(s2.paragraphs())
    assert "the lowest median is ch2" in text2 and "fastest configuration" not in text2
    assert (
        "Against stock torch_ddp it is within noise (95 % intervals 360–381 ms and 378–382 ms overlap)."
        in text2
    )
    assert summary_of(s2) == "the lowest median is within noise of stock in A at 0.974× stock."


def summary_of(section) -> str:
    """The text of the summary's bullet on the campaign sets' lowest medians (the section's recorded facts)."""
    from ddp_profile.findings.summary import build_summary

    return next(b.text for b in build_summary([section]).bullets if b.lead.startswith("Campaign sets"))


def test_prediction_is_compared_with_the_run_of_exactly_the_recommended_flags():
    # the recommender's own configuration fields, as it writes them when it cuts NCCL to two channels
    fields = fields_of("torch_ddp", 25 * 2**20) | {"nccl_channels": 2, "nccl_high_priority": True}
    rec = pd.DataFrame(
        [
            {c: None for c in RECOMMEND_COLUMNS}
            | fields
            | {
                "lever": "recommended",
                "flags": flags_of(fields),
                "predicted_step_ns": 380e6,
                "upper_gain_ns": 8e6,
            }
        ]
    )
    assert (
        rec["flags"].iloc[0] == "--strategy torch_ddp --bucket-mb 25 --nccl-channels 2 --nccl-high-priority"
    )
    ref = _run("torch_ddp", "torch_ddp", 2, 380.0, 380.0, rec=rec)
    hit = _run(
        "torch_ddp-ch2-hiprio",
        "torch_ddp",
        2,
        369.0,
        376.0,
        config={"nccl_channels": 2, "nccl_high_priority": True},
    )
    decoy = _run("torch_ddp-ch2", "torch_ddp", 2, 360.0, 360.0, config={"nccl_channels": 2})
    text = qc._prediction_sentence("A", ref, [ref, decoy, hit])
    # measured 376 ms profiled against 380 predicted: (376 - 380) / 376 = -1.1 %, inside [372, 380]
    assert "Measured: 376 ms profiled (369 ms un-profiled)" in text
    assert "off by −1.1 % of the measured step, and the measurement falls inside the predicted range" in text
    # matched on fields: another cap, or a lever the recommender never sets, is not the recommended run
    assert not qc.config_matches(hit.config | {"bucket_mb": 100.0}, rec.iloc[0])
    assert not qc.config_matches(hit.config | {"grad_views": True}, rec.iloc[0])
    assert qc.config_matches(hit.config, rec.iloc[0]) and not qc.config_matches(decoy.config, rec.iloc[0])


def test_a_recommendation_of_the_stock_configuration_is_said_as_such():
    """When the stock trace recommends its own configuration (no lever gains), the findings say so instead of
    'not run in this set' (the stock run is that configuration)."""
    fields = fields_of("torch_ddp", 25 * 2**20)
    rec = pd.DataFrame(
        [
            {c: None for c in RECOMMEND_COLUMNS}
            | fields
            | {
                "lever": "recommended",
                "flags": flags_of(fields),
                "predicted_step_ns": 380e6,
                "upper_gain_ns": float("nan"),
            }
        ]
    )
    ref = _run("torch_ddp", "torch_ddp", 2, 380.0, 380.0, rec=rec)
    lever = _run(
        "torch_ddp-ch2-hiprio",
        "torch_ddp",
        2,
        369.0,
        376.0,
        config={"nccl_channels": 2, "nccl_high_priority": True},
    )
    text, outcome = qc._prediction("A", ref, [ref, lever])
    assert "recommends keeping the stock configuration (`--strategy torch_ddp --bucket-mb 25`)" in text
    assert "not run" not in text and outcome == "stock"


def test_a_set_of_several_world_sizes_is_ranked_per_size_against_its_own_reference():
    """Set C holds 1-, 2- and 4-GPU runs: each multi-GPU size is its own set with the 1-GPU run, so a 4-GPU
    lever is compared with the 4-GPU stock run and efficiency is 4-GPU efficiency."""
    one = _run("none-1", "none", 1, 360.0, 362.0)
    ref2, ref4 = _run("ddp-2", "torch_ddp", 2, 390.0, 391.0), _run("ddp-4", "torch_ddp", 4, 400.0, 401.0)
    lev2 = _run("ch2-2", "torch_ddp", 2, 380.0, 381.0, config={"nccl_channels": 2})
    lev4 = _run("ch2-4", "torch_ddp", 4, 440.0, 441.0, config={"nccl_channels": 2})
    sets = qc.campaign_sets([one, ref2, ref4, lev2, lev4])
    assert {k: [r.name for r in v] for k, v in sets.items()} == {
        "A, 2 GPUs": ["none-1", "ddp-2", "ch2-2"],
        "A, 4 GPUs": ["none-1", "ddp-4", "ch2-4"],
    }
    assert (
        qc.set_folder("A, 4 GPUs") == "A"
        and qc.set_title("A, 4 GPUs") == "XL fp32, batch 4×256 per GPU, 4 GPUs"
    )
    text = " ".join(qc.q10_beat_ddp(sets, _page, {"A, 2 GPUs": "m2", "A, 4 GPUs": "m4"}).paragraphs())
    # 4 GPUs: stock 400 ms is fastest (the lever is 440); 360 / 400 = 90.0 % efficiency
    assert (
        "Campaign set A, 4 GPUs: the lowest median is ddp-4 at 400 ms per step, 1.000× stock torch_ddp"
        in text
    )
    assert "90.0 % 4-GPU efficiency against the 1-GPU run's 360 ms" in text
    # 2 GPUs: 380 / 390 = 0.974x, 360 / 380 = 94.7 %
    assert (
        "Campaign set A, 2 GPUs: the lowest median is ch2-2 at 380 ms per step, 0.974× stock torch_ddp"
        in text
    )
    assert "Campaign set A, 4 GPUs ran on m4." in text


def test_a_recommendation_run_in_another_set_is_pointed_to():
    """Set C's stock trace recommends 9 channels; set C has no such run but set D ran it (same GPU count
    and GPU), so the sentence points there instead of stopping at 'no run'."""
    fields = fields_of("torch_ddp", 25 * 2**20) | {"nccl_channels": 9, "nccl_high_priority": True}
    rec = pd.DataFrame(
        [
            {c: None for c in RECOMMEND_COLUMNS}
            | fields
            | {
                "lever": "recommended",
                "flags": flags_of(fields),
                "predicted_step_ns": 397e6,
                "upper_gain_ns": 18e6,
            }
        ]
    )
    ref = _run("ddp-4", "torch_ddp", 4, 395.0, 397.0, rec=rec)
    ch9 = _run("ch9-4", "torch_ddp", 4, 392.0, 393.0, config={"nccl_channels": 9, "nccl_high_priority": True})
    ch9_2 = _run(
        "ch9-2", "torch_ddp", 2, 380.0, 381.0, config={"nccl_channels": 9, "nccl_high_priority": True}
    )
    bf16 = _run(
        "bf16-ch9-4",
        "torch_ddp",
        4,
        200.0,
        201.0,
        config={"nccl_channels": 9, "nccl_high_priority": True, "dtype": "bf16", "batch": 16},
    )
    text = qc._prediction_sentence("C", ref, [ref], {"D, 4 GPUs": [ch9], "D, 2 GPUs": [ch9_2], "B": [bf16]})
    assert text.endswith(
        "This set has no run of exactly that configuration; campaign set D, 4 GPUs ran it beside its own "
        "stock run, on the same GPU type and workload (see there)."
    )
    # the outcome the summary counts for the same facts
    assert qc._prediction("C", ref, [ref], {"D, 4 GPUs": [ch9]})[1] == "run elsewhere"
    assert qc._prediction("C", ref, [ref], {"D, 2 GPUs": [ch9_2]})[1] == "not run"
    # another GPU count, or another dtype and batch, is not the same workload
    alone = qc._prediction_sentence("C", ref, [ref], {"D, 2 GPUs": [ch9_2], "B": [bf16]})
    assert alone.endswith("This set has no run of exactly that configuration.")


def test_summary_opens_both_documents_with_the_sections_own_results():
    """The opening summary states the lowest median and the recommendation's outcome of each campaign set as q10
    decided them (the same ratio string; "beats stock" only where its own comparison established it), as
    bullets before the intro, each linking to the section's anchor, the same in Markdown and HTML."""
    from ddp_profile.findings.render import to_html, to_markdown
    from ddp_profile.findings.summary import build_summary

    fields = fields_of("torch_ddp", 25 * 2**20) | {"nccl_channels": 2, "nccl_high_priority": True}
    rec = pd.DataFrame(
        [
            {c: None for c in RECOMMEND_COLUMNS}
            | fields
            | {
                "lever": "recommended",
                "flags": flags_of(fields),
                "predicted_step_ns": 380e6,
                "upper_gain_ns": 8e6,
            }
        ]
    )
    one = _run("none", "none", 1, 350.0, 352.0)
    ref = _run("torch_ddp", "torch_ddp", 2, 380.0, 381.0, rec=rec)
    lever = _run("ch2", "torch_ddp", 2, 370.0, 376.0, config={"nccl_channels": 2, "nccl_high_priority": True})
    s = qc.q10_beat_ddp({"A": [one, ref, lever]}, _page, {"A": "m"})
    summary = build_summary([s])
    assert [(b.lead, b.anchor) for b in summary.bullets] == [
        ("Campaign sets (profiled sweeps, un-profiled medians):", "beat-ddp"),
        ("Each campaign set's stock trace recommends:", "beat-ddp"),
    ]
    # no interval recorded: a lower median (370 / 380 = 0.974x), never "beats"
    assert (
        summary.bullets[0].text
        == "a lower median than stock, with no interval to tell it from noise, in A at 0.974× stock."
    )
    # 376 profiled lies in the predicted 372-380 ms
    assert summary.bullets[1].text == (
        "change it in A — A ran it and measured a step inside the predicted range."
    )
    text = " ".join(s.paragraphs())  # the section states the same values
    assert "ch2 at 370 ms per step, 0.974× stock torch_ddp" in text and "Measured: 376 ms profiled" in text
    assert "the measurement falls inside the predicted range" in text
    md, html = to_markdown("T", ["intro"], [s], summary), to_html("T", ["intro"], [s], {}, summary)
    assert md.index("**Summary.**") < md.index("- **Campaign sets") < md.index("intro") < md.index("## ")
    assert "no interval to tell it from noise, in A at 0.974× stock. ([how to beat DDP](#beat-ddp))" in md
    assert '<a id="beat-ddp"></a>\n\n## How to beat PyTorch DDP' in md
    assert html.index("<strong>Summary.</strong>") < html.index("<p>intro</p>") < html.index("<h2")
    assert "in A at 0.974× stock. (<a href='#beat-ddp'>how to beat DDP</a>)</li>" in html
    assert "<h2 id='beat-ddp'>" in html or "<details id='beat-ddp'><summary><h2>" in html


def test_a_1gpu_run_inflated_by_nsys_is_named_and_efficiency_stays_unprofiled():
    """Campaign set B's 1-GPU run ran 54.5 % slower under nsys: q10 says so from its run JSON and keeps the
    un-profiled time for efficiency (the profiled 279 ms against 227 ms would claim 122.6 %)."""
    one = _run("none", "none", 1, 180.3, 278.6, overhead=54.5)
    ref = _run("torch_ddp", "torch_ddp", 2, 227.2, 240.0)
    text = " ".join(qc.q10_beat_ddp({"B": [one, ref]}, _page, {"B": "m"}).paragraphs())
    assert (
        "The 1-GPU run's profiled step is 279 ms against 180 ms without nsys (profiler overhead 54.5 %), so "
        "its profiled step is inflated by nsys and the efficiency uses the un-profiled time."
    ) in text
    assert "79.4 % 2-GPU efficiency against the 1-GPU run's 180 ms" in text  # 180.3 / 227.2
    silent = " ".join(
        qc.q10_beat_ddp(
            {"B": [_run("none", "none", 1, 180.3, 181.0, overhead=None), ref]}, _page, {"B": "m"}
        ).paragraphs()
    )
    assert "profiled step is" not in silent  # no overhead recorded: nothing claimed


def test_a_set_that_profiled_stock_alone_says_so_and_compares_nothing():
    """Set ZP's shape: a 1-GPU run and stock DDP, both profiled only (no un-profiled time): the gap over one GPU
    comes from the traces (381 - 352 = 29 ms), the text does not claim a lever lost, and the summary's
    'lowest median' bullet leaves the set out (one multi-GPU run is not a ranking)."""
    from ddp_profile.findings.summary import build_summary

    one = _run("none", "none", 1, None, 352.0, overhead=None)  # profiled only: no overhead record either
    ref = _run("torch_ddp", "torch_ddp", 2, None, 381.0, overhead=None)
    s = qc.q10_beat_ddp({"ZP": [one, ref]}, _page, {"ZP": "m"})
    text = " ".join(s.paragraphs())
    assert "Stock torch_ddp is the only multi-GPU configuration profiled in this set." in text
    assert "No lever beat" not in text
    assert "The trace shows where its 29.0 ms over one GPU goes" in text and "n/a" not in text
    assert [b.lead for b in build_summary([s]).bullets] == ["Each campaign set's stock trace recommends:"]
