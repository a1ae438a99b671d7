"""Timing-only campaign sets in the findings: the loader-side reader of the interleaved-repeats
run JSONs, and "faster" only where the 95 % intervals separate, "within noise" with both intervals otherwise.

The run JSONs are written by the real summarizer (``ddp_profile.harness.repeats.summarize``) from a journal
built here with synthetic step times (chosen to separate or overlap), not measurements; the nvidia-smi
snapshots are the parser fixture tests/data/nvidia_smi_query_fixture.csv.
"""

from __future__ import annotations

import json
from pathlib import Path

from ddp_profile.findings import timing
from ddp_profile.findings.data import TIMING, read_timing_runs
from ddp_profile.findings.text import pct
from ddp_profile.harness import gpu_state, repeats
from ddp_profile.report import measures

DATA = Path(__file__).resolve().parents[1] / "data"


def _record(name, strategy, world, steps, **cfg):
    config = {
        "strategy": strategy,
        "model": "xl",
        "batch": 4,
        "seq_len": 256,
        "dtype": "fp32",
        "bucket_mb": 25.0,
        "nccl_channels": 0,
        "nccl_high_priority": False,
        **cfg,
    }
    return {
        "run": name,
        "config": config,
        "strategy": strategy,
        "model": "xl",
        "dtype": "fp32",
        "world_size": world,
        "gpu_name": "NVIDIA H100 80GB HBM3",
        "measured_steps": len(steps),
        "warmup_steps": 3,
        "step_ms_slowest_rank": steps,
        "step_ms_per_rank": [steps] * world,
        "step_ms_median": sorted(steps)[len(steps) // 2],
    }


def _timing_set(root: Path, plans: dict, name="F") -> Path:
    """plans: {run name: (strategy, world, [per-repeat centre ms], config extras)}; writes the journal
    (interleaved order) and summarizes it into root/campaign/<name>/."""
    out = root / "campaign" / name
    out.mkdir(parents=True)
    snap = {"gpus": gpu_state.parse((DATA / "nvidia_smi_query_fixture.csv").read_text())[:2]}
    lines = []
    names = list(plans)
    rounds = len(next(iter(plans.values()))[2])
    for r in range(rounds):
        for c, run in enumerate(names):
            strategy, world, centres, extra = plans[run]
            steps = [centres[r] + d for d in (-0.2, 0.0, 0.1, 0.2, -0.1)]
            lines.append({"event": "start", "repeat": r + 1, "config_index": c})
            lines.append(
                {
                    "event": "done",
                    "repeat": r + 1,
                    "config_index": c,
                    "wall_s": 9.0,
                    "record": _record(run, strategy, world, steps, **extra),
                    "gpu_before": snap,
                    "gpu_after": snap,
                }
            )
    (out / repeats.JOURNAL).write_text("".join(json.dumps(e) + "\n" for e in lines))
    repeats.summarize(out, host="test")
    (out / "machine.txt").write_text(
        "index, name, memory.total [MiB], driver_version\n0, NVIDIA H100 80GB HBM3, 81559 MiB, 1\n"
        "1, NVIDIA H100 80GB HBM3, 81559 MiB, 1\n"
    )
    return out


PLANS = {
    "none_xl_fp32_1xh100": ("none", 1, [350.0, 351.0, 349.5, 350.5, 350.0], {}),
    "torch_ddp-25mb_xl_fp32_2xh100": ("torch_ddp", 2, [380.0, 381.0, 379.5, 380.5, 380.2], {}),
    # clearly faster than stock: intervals separate
    "torch_ddp-25mb-ch2-hiprio_xl_fp32_2xh100": (
        "torch_ddp",
        2,
        [369.0, 370.0, 368.5, 369.5, 369.2],
        {"nccl_channels": 2, "nccl_high_priority": True},
    ),
    # noisy and overlapping stock: within noise
    "bucketed-25mb_xl_fp32_2xh100": ("bucketed", 2, [360.0, 395.0, 372.0, 388.0, 379.0], {}),
}


def _section(tmp_path):
    _timing_set(tmp_path, PLANS)
    runs = read_timing_runs(tmp_path)
    return runs, timing.q11_timing(runs, {"F": "2× NVIDIA H100 (test)"})


def test_reader_finds_the_timing_runs_only(tmp_path):
    _timing_set(tmp_path, PLANS)
    traced = tmp_path / "campaign" / "F" / "other"  # a JSON without the protocol is not a timing run
    traced.mkdir()
    (traced / "other.json").write_text(json.dumps({"run": "other"}))
    runs = read_timing_runs(tmp_path)
    assert sorted(r.name for r in runs) == sorted(PLANS)
    assert {r.set for r in runs} == {TIMING} and all(r.trace is None for r in runs)
    assert runs[0].run_id.startswith("campaign/F/")
    assert read_timing_runs(tmp_path / "nowhere") == []


def test_faster_only_where_intervals_separate(tmp_path):
    runs, sec = _section(tmp_path)
    text = " ".join(sec.paragraphs())
    by = {r.name: r for r in runs}
    fast, noisy, stock = (
        by["torch_ddp-25mb-ch2-hiprio_xl_fp32_2xh100"],
        by["bucketed-25mb_xl_fp32_2xh100"],
        by["torch_ddp-25mb_xl_fp32_2xh100"],
    )
    assert measures.versus(timing.med(fast), timing.ci(fast), timing.med(stock), timing.ci(stock)) == (
        "faster",
        True,
    )
    assert (
        "torch_ddp-25mb-ch2-hiprio_xl_fp32_2xh100 is faster than torch_ddp-25mb_xl_fp32_2xh100 by " in text
    ) and "do not overlap" in text
    assert "bucketed-25mb_xl_fp32_2xh100 is within noise of torch_ddp-25mb_xl_fp32_2xh100" in text
    assert f"{timing.ci_text(noisy)} and {timing.ci_text(stock)} overlap" in text
    table = sec.blocks[2].frame
    verdicts = dict(zip(table["run"], table["vs stock"], strict=True))
    assert verdicts == {
        "none_xl_fp32_1xh100": "–",
        "torch_ddp-25mb-ch2-hiprio_xl_fp32_2xh100": "faster",
        "bucketed-25mb_xl_fp32_2xh100": "within noise",
        "torch_ddp-25mb_xl_fp32_2xh100": "reference",
    }


def test_efficiency_interval_and_target(tmp_path):
    runs, sec = _section(tmp_path)
    by = {r.name: r for r in runs}
    one, best = by["none_xl_fp32_1xh100"], by["torch_ddp-25mb-ch2-hiprio_xl_fp32_2xh100"]
    point, lo, hi = timing.efficiency(one, best)
    assert lo <= point <= hi
    text = " ".join(sec.paragraphs())
    # ~350 / 369 = 94.9 %: the whole interval lies below the 96 % fp32 target
    assert "the efficiency target of 96 % for 2 GPUs is missed" in text
    assert "Throttle reasons active" in text and "sw_power_cap in" in text


def test_wording_flips_when_the_data_flip(tmp_path):
    flipped = dict(PLANS)
    flipped["torch_ddp-25mb-ch2-hiprio_xl_fp32_2xh100"] = (
        "torch_ddp",
        2,
        [391.0, 392.0, 390.5, 391.5, 391.2],
        {"nccl_channels": 2, "nccl_high_priority": True},
    )
    _timing_set(tmp_path, flipped)
    text = " ".join(timing.q11_timing(read_timing_runs(tmp_path), {}).paragraphs())
    assert "torch_ddp-25mb-ch2-hiprio_xl_fp32_2xh100 is slower than torch_ddp-25mb_xl_fp32_2xh100 by" in text


def test_old_json_without_interval_says_spread_unknown():
    a = {"unprofiled_step_ms_median": 370.0}
    b = {"unprofiled_step_ms_median": 380.0}
    assert measures.versus(
        measures.unprofiled_ns(a), measures.ci_ns(a), measures.unprofiled_ns(b), measures.ci_ns(b)
    ) == ("faster", False)
    assert measures.ci_level_pct(a) != measures.ci_level_pct(a)  # NaN: no interval


def test_skipped_repeats_are_named_with_their_reason(tmp_path):
    out = _timing_set(tmp_path, PLANS)
    with open(out / repeats.JOURNAL, "a") as f:
        f.write(
            json.dumps(
                {
                    "event": "skip",
                    "repeat": 6,
                    "config_index": 0,
                    "run": "none_xl_fp32_1xh100",
                    "why": "failed earlier (a repeat of it started and never finished)",
                }
            )
            + "\n"
        )
        f.write(
            json.dumps(
                {
                    "event": "skip",
                    "repeat": 6,
                    "config_index": 1,
                    "run": "torch_ddp-25mb_xl_fp32_2xh100",
                    "why": "deadline: ~12 s needed, 3 s left",
                }
            )
            + "\n"
        )
    repeats.summarize(out)
    text = " ".join(timing.q11_timing(read_timing_runs(tmp_path), {}).paragraphs())
    assert (
        "skipped: 1 repeat of none_xl_fp32_1xh100 (a repeat of it started and never finished), "
        "1 repeat of torch_ddp-25mb_xl_fp32_2xh100 (deadline)"
    ) in text


def test_summary_bullet_and_row_take_the_sections_words(tmp_path):
    """The summary's fp32 bullet and table row name the lowest-median configuration with the section's own
    comparison: 'faster ... (intervals separate)' while the intervals separate; when its repeats are made
    noisy enough to overlap stock, 'within noise' and no 'faster' anywhere in the summary."""
    from ddp_profile.findings.summary import build_summary

    runs, sec = _section(tmp_path)
    by = {r.name: r for r in runs}
    fast, stock, one = (
        by["torch_ddp-25mb-ch2-hiprio_xl_fp32_2xh100"],
        by["torch_ddp-25mb_xl_fp32_2xh100"],
        by["none_xl_fp32_1xh100"],
    )
    got = build_summary([sec])
    (bullet,) = got.bullets
    eff = timing.efficiency(one, fast)
    assert got.key == f"Set codes: timing set F: {timing.workload_short(timing.workload_key(fast))}."
    assert bullet.lead == "fp32, closest to one GPU:" and bullet.anchor == sec.key == "timing"
    assert bullet.text == (
        f"{fast.name} (timing set F): {pct(eff[0])} of one GPU ({pct(eff[1])}–{pct(eff[2])}; "
        f"target 96 % missed); it is faster than stock DDP by {timing.rel_diff(fast, stock)} "
        "(intervals separate). Stock beaten outside noise in 1 of 1 fp32 timing set."
    )
    row = got.table.frame.iloc[0]
    assert (row["best configuration"], row["vs stock DDP"]) == (
        fast.name,
        f"faster by {timing.rel_diff(fast, stock)}",
    )
    assert row["median step (95 % interval)"] == f"{timing.ms(timing.med(fast))} ({timing.ci_text(fast)})"

    noisy = dict(PLANS)  # the same centre, spread over stock's interval
    noisy[fast.name] = (
        "torch_ddp",
        2,
        [355.0, 390.0, 369.0, 384.0, 369.2],
        {"nccl_channels": 2, "nccl_high_priority": True},
    )
    _timing_set(tmp_path / "noisy", noisy)
    got = build_summary([timing.q11_timing(read_timing_runs(tmp_path / "noisy"), {})])
    best = got.table.frame.iloc[0]["best configuration"]
    assert "is within noise of stock DDP. Stock beaten outside noise in 0 of 1 fp32" in got.bullets[0].text
    assert got.table.frame.iloc[0]["vs stock DDP"] == "within noise" and best in got.bullets[0].text
    assert "faster" not in got.bullets[0].text + " ".join(got.table.frame["vs stock DDP"])


def test_graphed_runs_are_compared_with_the_graphed_one_gpu_and_stock_not_with_the_eager_loop(tmp_path):
    plans = {
        "none_xl_fp32_1xh100": ("none", 1, [350.0, 351.0, 349.5, 350.5, 350.0], {}),
        "none-graph_xl_fp32_1xh100": ("none", 1, [300.0, 300.5, 299.5, 300.2, 300.1], {"cuda_graph": True}),
        "torch_ddp-25mb-graph_xl_fp32_2xh100": (
            "torch_ddp",
            2,
            [340.0, 340.5, 339.5, 340.2, 340.1],
            {"cuda_graph": True},
        ),
        "torch_ddp-25mb-ch8-graph-carve8_xl_fp32_2xh100": (
            "torch_ddp",
            2,
            [315.0, 315.5, 314.5, 315.2, 315.1],
            {"cuda_graph": True, "nccl_channels": 8, "gemm_sm_carveout": 8},
        ),
        "none-nosync_xl_fp32_1xh100": ("none", 1, [320.0, 320.5, 319.5, 320.2, 320.1], {"step_sync": False}),
    }
    _timing_set(tmp_path, plans)
    sec = timing.q11_timing(read_timing_runs(tmp_path), {})
    text = " ".join(sec.paragraphs())
    assert (
        "Timing set F: XL fp32, batch 4×256 per GPU, NVIDIA H100 80GB HBM3, every step one CUDA graph" in text
    )
    assert "host running ahead (no wait between steps)" in text
    # the carveout run is a lever against the graphed stock run, measured against the graphed 1-GPU step
    assert (
        "torch_ddp-25mb-ch8-graph-carve8_xl_fp32_2xh100 is faster than torch_ddp-25mb-graph_xl_fp32_2xh100"
        in text
    )
    eff = 100 * 300.1 / 315.1
    assert f"runs at {pct(eff)} of the 1-GPU step (none-graph_xl_fp32_1xh100" in text
    # one GPU across loops, within the set: both against the default loop's 1-GPU run
    assert (
        "Timing set F, one GPU by loop: every step one CUDA graph: none-graph_xl_fp32_1xh100 is faster than "
        "none_xl_fp32_1xh100 by"
    ) in text
    assert (
        "host running ahead (no wait between steps): none-nosync_xl_fp32_1xh100 is faster than none_xl_fp32_1xh100"
        in text
    )


def test_a_one_gpu_control_with_a_lever_is_not_the_baseline(tmp_path):
    plans = {
        "none_xl_fp32_1xh100": ("none", 1, [350.0, 351.0, 349.5, 350.5, 350.0], {}),
        "none-lt_xl_fp32_1xh100": (
            "none",
            1,
            [340.0, 340.5, 339.5, 340.2, 340.1],
            {"blas_library": "cublaslt"},
        ),
        "torch_ddp-25mb_xl_fp32_2xh100": ("torch_ddp", 2, [380.0, 381.0, 379.5, 380.5, 380.2], {}),
    }
    _timing_set(tmp_path, plans)
    text = " ".join(timing.q11_timing(read_timing_runs(tmp_path), {}).paragraphs())
    assert "of the 1-GPU step (none_xl_fp32_1xh100, " in text


def test_a_set_without_stock_names_its_best_against_the_runner_up_and_says_it_has_no_stock(tmp_path):
    from ddp_profile.findings.summary import build_summary

    plans = {
        "none_xl_fp32_1xh100": PLANS["none_xl_fp32_1xh100"],
        "overlap_xl_fp32_2xh100": ("overlap", 2, [365.0, 366.0, 364.5, 365.5, 365.2], {}),
        "torch_ddp-25mb-ch2-hiprio_xl_fp32_2xh100": PLANS["torch_ddp-25mb-ch2-hiprio_xl_fp32_2xh100"],
    }
    _timing_set(tmp_path, plans, name="W")
    sec = timing.q11_timing(read_timing_runs(tmp_path), {})
    text = " ".join(sec.paragraphs())
    assert (
        "Against the runner-up, overlap_xl_fp32_2xh100 is faster than torch_ddp-25mb-ch2-hiprio_xl_fp32_2xh100 by "
        in text
    )
    got = build_summary([sec])
    assert got.table.frame.iloc[0]["vs stock DDP"] == measures.NO_STOCK
    assert "has no stock DDP run in its set to compare with" in got.bullets[0].text
    assert got.bullets[0].text.endswith("No fp32 timing set timed stock DDP.")


def test_a_two_gpu_step_shorter_than_one_gpu_is_explained_by_less_work_per_rank(tmp_path):
    plans = dict(PLANS)
    plans["overlap-avg-shardupd-peercopy_xl_fp32_2xh100"] = (
        "overlap",
        2,
        [340.0, 341.0, 339.5, 340.5, 340.2],
        {"reduce_avg": True, "sharded_update": True, "peer_copy_allreduce": True},
    )
    _timing_set(tmp_path, plans)
    text = " ".join(timing.q11_timing(read_timing_runs(tmp_path), {}).paragraphs())
    assert "overlap-avg-shardupd-peercopy_xl_fp32_2xh100, runs at 10" in text  # ~350 / 340: above 100 %
    assert "Above 100 % means each rank does less work" in text and "with --sharded-update" in text
    # below 100 % (the standard plans) the sentence is absent
    assert "Above 100 %" not in " ".join(_section(tmp_path / "plain")[1].paragraphs())


def test_above_one_gpu_names_the_sharded_update_only_when_it_ran():
    assert "--sharded-update" in timing.above_one_gpu({"config": {"sharded_update": True}})
    assert timing.above_one_gpu({"config": {}}).endswith("not that communication is free.")
    four = timing.above_one_gpu({"config": {"sharded_update": True}, "world_size": 4})
    assert "a quarter of every parameter" in four and "sheds three quarters" in four
