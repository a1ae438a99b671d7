"""What several pages (and the findings) compare runs with: one comparison frame per group of runs, the
source line under a group's figures, and one step's kernels of a run for the "does it overlap?" picture.

Every page that compares runs goes through :func:`comparison`, so numbers agree across pages.
"""

from __future__ import annotations

import pandas as pd

from ddp_profile.report.runs import Group, Run, baseline_for


def compare_runs(pairs):
    """:func:`ddp_profile.analysis.compare_runs`, imported when first needed (tests replace this name)."""
    from ddp_profile.analysis import compare_runs as compare

    return compare(pairs)


def _set_key(run: Run) -> tuple:
    m = run.meta
    return (run.folder, m.get("model"), m.get("dtype"), m.get("gpu_name"))


def basis_for(run: Run, pool: list[Run]) -> str:
    """The step time ``run`` is ranked by (:func:`ddp_profile.report.measures.ranking_basis`) over its run
    set: the runs of ``pool`` with its folder, model, dtype and GPU (the runs any page may compare it with,
    its 1-GPU baseline included). One basis per set, so every page states one step time for a run."""
    from ddp_profile.report.measures import ranking_basis

    return ranking_basis(r.meta for r in pool if _set_key(r) == _set_key(run))


def assign_baselines(runs: list[Run]) -> None:
    """Fix every run's baseline and ranking basis once, against all loaded runs (build.write_report does
    this), so the index, strategy and scaling pages state the same step time and efficiency for a run."""
    for r in runs:
        r.baseline = baseline_for(r, runs)
        r.rank_basis = basis_for(r, runs)
        r.baseline_set = True


def median_step_ns(run: Run) -> float:
    s = run.analysis.steps
    return float(s["step_ns"].median()) if s is not None and len(s) else float("nan")


def comparison(runs: list[Run]) -> pd.DataFrame:
    """compare_runs over the runs, plus the columns the pages link and label with, the step-time spread
    over ranks and steps (step_min_ns, step_max_ns), and speedup / efficiency / serial fraction against
    each run's own baseline (:func:`baseline_for`; ``baseline`` names it and ``baseline_page`` is its page,
    both None for a run that is its own baseline). ``compare_runs`` is looked up
    on this module at call time: it is the one seam tests replace with a synthetic comparison."""
    from ddp_profile.analysis.compare import amdahl_serial_fraction
    from ddp_profile.report import measures

    if not all(getattr(r, "baseline_set", False) for r in runs):
        for r in runs:
            if not getattr(r, "baseline_set", False):
                r.baseline = baseline_for(r, runs)
                r.rank_basis = basis_for(r, runs + [r.baseline] if r.baseline is not None else runs)
    comp = compare_runs([(r.trace, r.analysis) for r in runs]).copy()
    comp["page"] = [r.page for r in runs]
    comp["run"] = [r.name for r in runs]  # the run id, unique in the report
    comp["variant"] = [r.meta.get("variant") or "" for r in runs]  # levers / sharding beyond strategy and cap
    # bucket size only where the strategy has buckets (the harness records its default for all)
    comp["bucket_mb"] = [
        r.meta.get("bucket_mb") if r.meta else b for r, b in zip(runs, comp["bucket_mb"], strict=False)
    ]
    steps = [r.analysis.steps for r in runs]
    comp["step_min_ns"] = [
        float(s["step_ns"].min()) if s is not None and len(s) else float("nan") for s in steps
    ]
    comp["step_max_ns"] = [
        float(s["step_ns"].max()) if s is not None and len(s) else float("nan") for s in steps
    ]
    # hidden-comm share over the same population as the run pages' headline (the selected steps) when the
    # analysis states one; compare_runs pools the whole trace
    pops = [r.analysis.summary() if callable(getattr(r.analysis, "summary", None)) else {} for r in runs]
    comp["overlap_pct"] = [
        p.get("overlap_pct") if p.get("population") == "steps" else v
        for p, v in zip(pops, comp["overlap_pct"], strict=False)
    ]
    comp["overlap_pct"] = pd.to_numeric(comp["overlap_pct"], errors="coerce")
    comp["host"] = [getattr(r, "host", None) for r in runs]
    # a 1-GPU run measured against itself names no baseline; the others name theirs and link its page
    # (every loaded run has one)
    own = [r.baseline if r.baseline is not None and r.baseline is not r else None for r in runs]
    comp["baseline"] = [b.name if b is not None else None for b in own]
    comp["baseline_page"] = [b.page if b is not None else None for b in own]
    add_run_facts(comp, runs)
    speed, eff, serial = [], [], []
    for r, t, n in zip(runs, comp["rank_step_ns"], comp["world_size"], strict=False):
        b = r.baseline
        t1 = measures.rank_ns(b.meta, median_step_ns(b), r.rank_basis) if b is not None else float("nan")
        n = float(n) if n is not None and not pd.isna(n) else float("nan")
        sp = n * t1 / t if t and t == t else float("nan")
        speed.append(sp)
        eff.append(100.0 * sp / n if n == n and n else float("nan"))
        serial.append(amdahl_serial_fraction(sp, int(n)) if sp == sp and n == n else float("nan"))
    comp["speedup_vs_1gpu"], comp["efficiency_pct"], comp["serial_fraction"] = speed, eff, serial
    return comp


def add_run_facts(comp: pd.DataFrame, runs: list[Run]) -> None:
    """The columns from the run JSONs (:mod:`ddp_profile.report.measures`): the step time each run is
    ranked by (rank_step_ns, with its min–max: the un-profiled repeats or the profiled steps, and the
    un-profiled median's confidence interval rank_ci_low_ns / rank_ci_high_ns where recorded) under its
    set's basis (rank_basis), the un-profiled median and its repeat count, the profiler overhead, and the
    peak memory and optimizer state per GPU (the largest rank). ``step_ns`` stays the trace's time."""
    from ddp_profile.report import measures

    bases = [getattr(r, "rank_basis", None) or measures.ranking_basis([r.meta]) for r in runs]
    comp["rank_basis"] = bases
    comp["rank_step_ns"] = [
        measures.rank_ns(r.meta, t, b) for r, t, b in zip(runs, comp["step_ns"], bases, strict=True)
    ]
    spans = [
        measures.unprofiled_range_ns(r.meta) if b == measures.UNPROFILED else (lo, hi)
        for r, b, lo, hi in zip(runs, bases, comp["step_min_ns"], comp["step_max_ns"], strict=True)
    ]
    comp["rank_min_ns"] = [s[0] for s in spans]
    comp["rank_max_ns"] = [s[1] for s in spans]
    # the un-profiled median's confidence interval, where the run JSON has one and the set ranks by it
    nan = (float("nan"), float("nan"))
    cis = [
        measures.ci_ns(r.meta) if b == measures.UNPROFILED else nan for r, b in zip(runs, bases, strict=True)
    ]
    comp["rank_ci_low_ns"] = [c[0] for c in cis]
    comp["rank_ci_high_ns"] = [c[1] for c in cis]
    comp["unprofiled_step_ns"] = [measures.unprofiled_ns(r.meta) for r in runs]
    comp["unprofiled_repeats"] = [measures.unprofiled_repeats(r.meta) for r in runs]
    comp["profiler_overhead_pct"] = [measures.profiler_overhead_pct(r.meta) for r in runs]
    for col in measures.MEMORY_KEYS:
        comp[col] = [measures.peak_bytes(r.meta, col) for r in runs]


def group_source(group: Group) -> str:
    from ddp_profile.plots import describe_source

    steps = set()
    for r in group.runs:
        s = r.analysis.steps
        steps |= set(s["step"].dropna().astype(int)) if s is not None and len(s) else set()
    meta = dict(group.runs[0].meta)
    ws = {r.meta.get("world_size") for r in group.runs}
    meta["world_size"] = (
        "/".join(str(w) for w in sorted(ws, key=str)) if len(ws) > 1 else meta.get("world_size")
    )
    return describe_source(meta, None, steps or None)


def one_step_kernels(run: Run, label: str) -> pd.DataFrame:
    """Rank 0's kernels in its middle profiled step, times relative to that step's start."""
    s = run.analysis.steps
    k = run.trace.kernels
    k = k[k["rank"] == k["rank"].min()] if len(k) else k
    if s is not None and len(s):
        s0 = s[s["rank"] == s["rank"].min()].sort_values("step")
        row = s0.iloc[len(s0) // 2]
        w0, w1 = int(row["start_ns"]), int(row["end_ns"])
    elif len(k):
        w0, w1 = int(k["start_ns"].min()), int(k["end_ns"].max())
    else:
        w0 = w1 = 0
    k = k[(k["end_ns"] > w0) & (k["start_ns"] < w1)]
    return pd.DataFrame(
        {
            "run": label,
            "kind": k["kind"],
            "name": k["name"],
            "start_ns": k["start_ns"].astype("int64") - w0,
            "end_ns": k["end_ns"].astype("int64") - w0,
        }
    )


def overlap_runs(runs: list[Run], comp: pd.DataFrame | None = None) -> list[Run]:
    """The runs of the "does it overlap?" picture, deterministically: the stock reference (torch_ddp with
    no lever variant, the bucket cap nearest 25 MiB; else the slowest ranked run) first, then the set's
    fastest by the set's ranking basis (:func:`ddp_profile.report.verdicts.ranked` over ``comp``, the
    group's :func:`comparison`); when the reference is the fastest, the runner-up instead."""
    from ddp_profile.report.verdicts import ranked

    multi = [r for r in runs if int(r.meta.get("world_size") or 1) > 1]
    if not multi:
        return []
    order = list(ranked(comp if comp is not None else comparison(runs))["page"])
    by_page = {r.page: r for r in multi}
    rank = [by_page[p] for p in order if p in by_page]
    if not rank:
        return multi[:2]
    stock = sorted(
        (r for r in multi if r.meta.get("strategy") == "torch_ddp" and not r.meta.get("variant")),
        key=lambda r: (abs(float(r.meta.get("bucket_mb") or 25.0) - 25.0), r.page),
    )
    ref = stock[0] if stock else rank[-1]
    other = next((r for r in rank if r is not ref), None)
    return [ref] + ([other] if other is not None else [])


def overlap_caption(picked: list[Run], comp: pd.DataFrame) -> str:
    """Which runs the picture shows and why (plain text), ``comp`` being the group's comparison."""
    from ddp_profile.plots.compare import run_label
    from ddp_profile.report.verdicts import ranked

    if not picked:
        return "No multi-GPU run here, so no picture."
    order = list(ranked(comp)["page"])
    ref = picked[0]
    stock = ref.meta.get("strategy") == "torch_ddp" and not ref.meta.get("variant")
    text = f"Shown: {run_label(ref.meta)}, " + (
        "the stock reference (PyTorch DDP without levers)"
        if stock
        else "the slowest configuration (no stock torch_ddp run here)"
    )
    if len(picked) > 1:
        fastest = bool(order) and picked[1].page == order[0]
        text += f", and {run_label(picked[1].meta)}, " + (
            "the fastest of the set by its ranking"
            if fastest
            else "the runner-up (the reference is the fastest of the set by its ranking)"
        )
    return text + "."
