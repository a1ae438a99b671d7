"""Findings from timing-only campaign sets: interleaved, un-profiled repeats of a few
configurations per workload (``python -m ddp_profile.harness.repeats``), each with the median step and its
95 % bootstrap interval, and nvidia-smi before and after every repeat.

Comparisons follow :func:`ddp_profile.report.measures.versus`: a configuration is faster or slower than stock
torch_ddp only when the two intervals do not overlap; otherwise it is within noise and both intervals are
given. Efficiency against the 1-GPU run carries an interval too, from the two intervals' ends (the 1-GPU
interval's low end over the configuration's high end, and the reverse): conservative, as the ends are not
reached together. The runs are :func:`ddp_profile.findings.data.read_timing_runs`.
"""

from __future__ import annotations

import math

import pandas as pd

from ddp_profile.findings.text import TOPIC_TIMING, Section, ms, pct
from ddp_profile.report import measures

TARGET_EFFICIENCY_PCT = {("fp32", 2): 96.0, ("bf16", 2): 95.0, ("fp32", 4): 97.0, ("bf16", 4): 97.0}
"""The targets for the multi-GPU step against one GPU, by (dtype, GPUs) (requirements, not measurements)."""


def loop_mode(config: dict) -> str:
    """How the training loop drives the GPU, a setting of the whole job (1 GPU included): "graph" (each step
    one replayed CUDA graph, ``--cuda-graph``), "nosync" (the host runs ahead, ``--no-step-sync``) or ""
    (the harness's default: a wait for the GPU after every step)."""
    if config.get("cuda_graph"):
        return "graph"
    return "nosync" if config.get("step_sync") is False else ""


def workload_key(r) -> tuple:
    """Runs compared with each other: same set, model, dtype, batch, GPU, garbage-collector mode and loop mode
    (settings of the whole job, 1 GPU included, like the dtype: not levers against stock)."""
    c = r.config
    return (
        r.folder.parent.name,
        r.model,
        r.dtype,
        c.get("batch"),
        c.get("seq_len"),
        r.meta.get("gpu_name"),
        c.get("gc_mode") or "",
        loop_mode(c),
    )


GC_TEXT = {"": "", "freeze": "Python GC frozen", "off": "Python GC off during the steps"}
LOOP_TEXT = {
    "": "",
    "nosync": "host running ahead (no wait between steps)",
    "graph": "every step one CUDA graph",
}


def workload_title(key: tuple) -> str:
    folder, model, dtype, batch, seq, gpu, gc_mode, loop = key
    dt = "bf16 autocast (fp32 gradients)" if dtype == "bf16" else dtype
    extra = ", ".join(x for x in (GC_TEXT.get(gc_mode, ""), LOOP_TEXT.get(loop, "")) if x)
    return (
        f"timing set {folder}: {'XL' if model == 'xl' else model} {dt}, batch {batch}×{seq} per GPU, {gpu}"
        + (f", {extra}" if extra else "")
    )


def workload_short(key: tuple) -> str:
    """ "XL fp32, 4×256, NVIDIA H200, Python GC frozen": the workload of :func:`workload_title` in a table cell;
    what the run JSON does not record (None, '?') is left out."""
    _, model, dtype, batch, seq, gpu, gc_mode, loop = key

    def known(*vs) -> bool:
        return all(v is not None and str(v) not in ("", "?", "None") for v in vs)

    return ", ".join(
        x
        for x in (
            " ".join(str(v) for v in ("XL" if model == "xl" else model, dtype) if known(v)),
            f"{batch}×{seq}" if known(batch, seq) else "",
            str(gpu) if known(gpu) else "",
            GC_TEXT.get(gc_mode, ""),
            LOOP_TEXT.get(loop, ""),
        )
        if x
    )


def med(r) -> float:
    return measures.unprofiled_ns(r.meta)


def ci(r) -> tuple[float, float]:
    return measures.ci_ns(r.meta)


def ci_text(r) -> str:
    lo, hi = ci(r)
    return f"{ms(lo)[:-3]}–{ms(hi)}" if math.isfinite(lo) and math.isfinite(hi) else "not recorded"


def own_gemm_lever(r) -> bool:
    """Whether the run changes the GEMMs' BLAS library or SMs (a control such as ``none-lt``, or a carveout)."""
    return bool(r.config.get("blas_library") or r.config.get("gemm_sm_carveout"))


def is_stock(r) -> bool:
    c = r.config
    return (
        r.strategy == "torch_ddp"
        and r.world_size > 1
        and float(c.get("bucket_mb") or 0) == 25.0
        and not any(
            c.get(k)
            for k in (
                "nccl_channels",
                "nccl_high_priority",
                "grad_views",
                "shard_optimizer",
                "ddp_comm_hook",
                "nccl_min_ctas",
                "gemm_sm_carveout",
                "blas_library",
            )
        )
    )


def one_gpu_baseline(rs):
    """The 1-GPU run efficiencies are measured against: the lowest-median 1-GPU run without a lever of its own
    (a BLAS-library or carveout control such as none-lt is not the baseline), else the lowest-median 1-GPU run;
    ``rs`` sorted by median. None without a 1-GPU run."""
    ones = [r for r in rs if r.world_size == 1]
    plain = [r for r in ones if not own_gemm_lever(r)]
    return (plain or ones or [None])[0]


def efficiency(one, r) -> tuple[float, float, float]:
    """(point, low, high) of 100 · t(1 GPU) / t(run), percent; the interval from the intervals' ends."""
    t1, t = med(one), med(r)
    (o_lo, o_hi), (lo, hi) = ci(one), ci(r)
    point = 100.0 * t1 / t if t > 0 else math.nan
    return point, 100.0 * o_lo / hi if hi > 0 else math.nan, 100.0 * o_hi / lo if lo > 0 else math.nan


def rel_diff(r, ref) -> str:
    """|median(r) / median(ref) − 1| as a percentage."""
    return pct(100.0 * abs(med(r) / med(ref) - 1.0))


def against(r, ref) -> str:
    """The comparison of ``r`` with ``ref`` in words, by :func:`measures.versus`."""
    word, established = measures.versus(med(r), ci(r), med(ref), ci(ref))
    diff = f"{ms(abs(med(r) - med(ref)))} ({rel_diff(r, ref)})"
    both = f"95 % intervals {ci_text(r)} and {ci_text(ref)}"
    if established:
        return f"{word} than {ref.name} by {diff} ({both} do not overlap)"
    if word == measures.WITHIN_NOISE:
        return f"within noise of {ref.name} (medians {diff} apart; {both} overlap)"
    return f"{word} than {ref.name} by the medians ({diff}); spread unknown (no interval recorded)"


def gpu_state(r) -> dict:
    """nvidia-smi over every repeat's before and after snapshots: SM and memory clock ranges (MHz), the
    hottest temperature (°C), the highest power (W), and how many snapshots showed each throttle reason."""
    rows = [
        g
        for rep in r.meta.get("repeats") or []
        for snap in (rep.get("gpu_before"), rep.get("gpu_after"))
        if isinstance(snap, dict)
        for g in snap.get("gpus") or []
    ]

    def vals(key):
        return [float(g[key]) for g in rows if isinstance(g.get(key), (int, float))]

    reasons: dict[str, int] = {}
    for g in rows:
        for name in g.get("throttle_reasons") or []:
            reasons[name] = reasons.get(name, 0) + 1
    sm, mem, temp, power = vals("sm_clock_mhz"), vals("mem_clock_mhz"), vals("temperature_c"), vals("power_w")
    return {
        "snapshots": len(rows),
        "sm": (min(sm), max(sm)) if sm else None,
        "mem": (min(mem), max(mem)) if mem else None,
        "temp": max(temp) if temp else None,
        "power": max(power) if power else None,
        "reasons": reasons,
    }


def _state_cell(r) -> str:
    g = gpu_state(r)
    if not g["snapshots"]:
        return "not recorded"
    parts = []
    if g["sm"]:
        parts.append(f"SM {g['sm'][0]:.0f}–{g['sm'][1]:.0f} MHz")
    if g["temp"] is not None:
        parts.append(f"≤ {g['temp']:.0f} °C")
    if g["power"] is not None:
        parts.append(f"≤ {g['power']:.0f} W")
    return ", ".join(parts) or "no values"


def _reasons_sentence(rs) -> str:
    seen: dict[str, int] = {}
    total = 0
    for r in rs:
        g = gpu_state(r)
        total += g["snapshots"]
        for k, n in g["reasons"].items():
            seen[k] = seen.get(k, 0) + n
    if not total:
        return "No nvidia-smi snapshot was recorded (no GPU, or nvidia-smi missing), so the noise cannot be explained from clocks."
    if not seen:
        return f"No throttle reason was active in any of the {total} nvidia-smi snapshots (per GPU, before and after each repeat)."
    listed = ", ".join(f"{k} in {n}" for k, n in sorted(seen.items(), key=lambda kv: -kv[1]))
    return (
        f"Throttle reasons active in the {total} nvidia-smi snapshots (per GPU, before and after each repeat): "
        f"{listed} (gpu_idle is expected in the snapshots taken between repeats)."
    )


def _skipped_clause(rs) -> str:
    """' (skipped: 2 repeats of none_xl_bf16_1xh200, a repeat of it never finished; ...)' from the run JSONs'
    ``skipped`` lists (reason up to its first ':' or '('), '' when nothing was skipped."""
    parts = []
    for r in rs:
        why: dict[str, int] = {}
        for sk in r.meta.get("skipped") or []:
            text = str(sk.get("why") or "?")
            key = (
                "a repeat of it started and never finished"
                if text.startswith("failed earlier")
                else text.split(":")[0].split(" (")[0]
            )
            why[key] = why.get(key, 0) + 1
        parts += [f"{n} repeat{'s' if n > 1 else ''} of {r.name} ({k})" for k, n in why.items()]
    return f"; skipped: {', '.join(parts)}" if parts else ""


def q11_timing(runs, machines: dict[str, str]) -> Section:
    s = Section("timing", "Timing with intervals: interleaved un-profiled repeats")
    if not runs:
        s.p(
            "No timing set (interleaved repeats, scripts/timing_repeats.sh) is committed under traces/campaign/ yet."
        )
        return s
    s.p(
        "Each timing set ran its configurations round by round (A B C A B C …) in one machine call, without "
        "nsys: every repeat rebuilt model, wrapper, optimizer and data in the same job and measured its steps "
        "with CUDA events (slowest rank per step). The median pools every measured step of every repeat; the "
        "95 % interval is a seeded two-level bootstrap (repeats resampled, then steps within each). A configuration "
        "is called faster or slower than another only when the two intervals do not overlap."
    )
    groups: dict[tuple, list] = {}
    for r in runs:
        groups.setdefault(workload_key(r), []).append(r)
    for key, rs in groups.items():
        title = workload_title(key)
        rs = sorted(rs, key=med)
        ref = next((r for r in rs if is_stock(r)), None)
        one = one_gpu_baseline(rs)
        order = (rs[0].meta.get("timing_protocol") or {}).get("order") or []
        counts = sorted({int(measures.unprofiled_repeats(r.meta)) for r in rs})
        s.p(
            f"{title[0].upper() + title[1:]}, on {machines.get(key[0], 'an unrecorded machine')}: "
            f"{len(rs)} configurations with {'–'.join(str(c) for c in (counts[0], counts[-1]) if c) if len(counts) > 1 else counts[0]} "
            f"repeats each, {rs[0].meta.get('warmup_steps')} warm-up + {rs[0].meta.get('measured_steps')} measured "
            f"steps per repeat; the set's call ran {len(order)} repeats in all, interleaved"
            + _skipped_clause(rs)
            + "."
        )
        rows = []
        for r in rs:
            eff = efficiency(one, r) if one is not None and r.world_size > 1 else (math.nan,) * 3
            reps = r.meta.get("unprofiled_repeat_medians_ms") or []
            rows.append(
                {
                    "run": r.name,
                    "median step": ms(med(r)),
                    "95 % interval": ci_text(r),
                    "repeats × steps": f"{int(measures.unprofiled_repeats(r.meta))} × "
                    f"{r.meta.get('measured_steps')}",
                    "repeat medians (ms)": " / ".join(f"{x:.1f}" for x in reps),
                    "÷ stock torch_ddp": f"{med(r) / med(ref):.3f}"
                    if ref is not None and r.world_size > 1
                    else "–",
                    "vs stock": (
                        "reference"
                        if r is ref
                        else measures.versus(med(r), ci(r), med(ref), ci(ref))[0]
                        if ref is not None and r.world_size > 1
                        else "–"
                    ),
                    "efficiency vs 1 GPU": (
                        f"{pct(eff[0])} ({pct(eff[1])}–{pct(eff[2])})" if math.isfinite(eff[0]) else "–"
                    ),
                    "GPU state (nvidia-smi)": _state_cell(r),
                }
            )
        s.table(pd.DataFrame(rows), f"{title[0].upper() + title[1:]}: lowest median first")
        multi = [r for r in rs if r.world_size > 1]
        if ref is not None:
            for r in multi:
                if r is not ref:
                    s.p(f"{r.name} is {against(r, ref)}.")
        best = multi[0] if multi else None
        if (
            best is not None and len(multi) > 1 and ref not in multi[:2]
        ):  # with stock among the first two, the sentence above says it
            s.p(f"Against the runner-up, {best.name} is {against(best, multi[1])}.")
        if best is not None and one is not None:
            eff = efficiency(one, best)
            target = TARGET_EFFICIENCY_PCT.get((key[2], best.world_size))
            verdict, outcome = "", ""
            if target is not None and all(math.isfinite(v) for v in eff):
                outcome = "met" if eff[1] >= target else "missed" if eff[2] < target else "not decided"
                verdict = (
                    f"; the efficiency target of {pct(target, 0)} for {best.world_size} GPUs is "
                    + outcome
                    + ": "
                    + {
                        "met": "the whole interval lies above it",
                        "missed": "the whole interval lies below it",
                        "not decided": "the interval straddles it",
                    }[outcome]
                )
            s.p(
                f"The lowest-median {best.world_size}-GPU configuration, {best.name}, runs at {pct(eff[0])} of the 1-GPU step "
                f"({one.name}, {ms(med(one))}; interval {pct(eff[1])}–{pct(eff[2])}){verdict}."
            )
            if eff[0] > 100:
                s.p(above_one_gpu(best.meta))
            word, established = (
                measures.versus(med(best), ci(best), med(ref), ci(ref))
                if ref is not None
                else (measures.NO_STOCK, False)
            )
            s.add_summary(
                TOPIC_TIMING,
                set=key[0],
                dtype=key[2],
                workload=workload_short(key),
                run=best.name,
                median=ms(med(best)),
                interval=ci_text(best),
                stock=best is ref,
                word=word,
                established=established,
                diff=rel_diff(best, ref) if ref is not None else "",
                eff_pct=eff[0],
                eff_lo_pct=eff[1],
                eff_hi_pct=eff[2],
                eff=pct(eff[0]),
                eff_interval=f"{pct(eff[1])}–{pct(eff[2])}",
                target=pct(target, 0) if outcome else "",
                outcome=outcome,
            )
        s.p(_reasons_sentence(rs))
    for line in loop_comparisons(runs):
        s.p(line)
    return s


def above_one_gpu(meta: dict) -> str:
    """Why an N-GPU step can be shorter than the 1-GPU step of the same per-GPU batch: less work per rank."""
    sharded = bool((meta.get("config") or {}).get("sharded_update"))
    n = meta.get("world_size")
    n = n if isinstance(n, int) and n > 1 else None
    share = {2: "half", 3: "a third", 4: "a quarter"}.get(n, f"1/{n}") if n else "1/N"
    shed = {2: "half", 3: "two thirds", 4: "three quarters"}.get(n, f"{n - 1}/{n}") if n else "(N − 1)/N"
    return (
        "Above 100 % means each rank does less work a step than one GPU does, not that communication is free"
        + (
            f": with --sharded-update each rank runs the optimizer over {share} of every parameter only, so the "
            f"step sheds {shed} of the 1-GPU step's optimizer time, while the reduce-scatter and "
            "all-gather hide behind the backward."
            if sharded
            else "."
        )
    )


def loop_comparisons(runs) -> list[str]:
    """Per timing set whose plain 1-GPU runs use several loop modes (:func:`loop_mode`): one sentence comparing
    them, each against the harness's default loop when the set has it, else against the first mode; the
    interleaved repeats of one set make it a like-for-like comparison of how the loop drives one GPU."""
    out = []
    by_set: dict[str, list] = {}
    for r in runs:
        by_set.setdefault(r.folder.parent.name, []).append(r)
    for name, rs in sorted(by_set.items()):
        ones: dict = {}
        for r in sorted(rs, key=med):
            if r.world_size == 1 and not own_gemm_lever(r):
                ones.setdefault(loop_mode(r.config), r)
        if len(ones) < 2:
            continue
        ref_mode = "" if "" in ones else next(iter(ones))
        ref = ones[ref_mode]
        said = [
            f"{LOOP_TEXT[m] or 'waiting after every step'}: {r.name} is {against(r, ref)}"
            for m, r in ones.items()
            if m != ref_mode
        ]
        out.append(
            f"Timing set {name}, one GPU by loop: " + "; ".join(said) + ". The loop is a setting of the "
            "whole job, so the 2-GPU runs above are compared only with the 1-GPU run of their own loop."
        )
    return out
