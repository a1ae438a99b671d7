"""Scaling 1 → 2 → 4 GPUs from the timing sets (interleaved, un-profiled repeats with intervals): per
workload, stock DDP and the fastest configuration at each GPU count, each against the 1-GPU run of its own
timing set (the runs :func:`ddp_profile.findings.data.read_timing_runs` finds).

Which set speaks for a GPU count: the newest timing set of the workload with runs at that count. Sets are
lettered in the order they were made (A … Z, then AA, AB, …), so newest means the longest, then the last
name. A GPU count of :data:`GPU_COUNTS` that no set of the workload ran is said to be missing, not filled in.
Shown are the workloads on the GPU model and loop mode of the newest timing set (the current setup); the
timing section above has every set's full table.
"""

from __future__ import annotations

import math

import pandas as pd

from ddp_profile.findings import timing
from ddp_profile.findings.text import Section, ms, pct
from ddp_profile.report import measures

GPU_COUNTS = (1, 2, 4)
"""GPU counts the section always speaks of: a count without a run is named as not run."""


def set_order(name: str) -> tuple[int, str]:
    """Sort key of a timing set's folder name, oldest first (A … Z, AA, AB, …)."""
    return len(name), name


def workload(r) -> tuple:
    """:func:`timing.workload_key` without the set: the same workload across timing sets."""
    return timing.workload_key(r)[1:]


def _title(key: tuple) -> str:
    return timing.workload_short(("",) + key)


def _newest(runs, pick):
    """The runs of the newest set holding a run ``pick`` accepts, sorted by median; [] when none does."""
    sets = sorted({r.folder.parent.name for r in runs if pick(r)}, key=set_order)
    if not sets:
        return []
    return sorted((r for r in runs if r.folder.parent.name == sets[-1]), key=timing.med)


def _row(label: str, r, one, stock) -> dict:
    eff = timing.efficiency(one, r) if one is not None and r.world_size > 1 else (math.nan,) * 3
    return {
        "GPUs": r.world_size,
        "configuration": label,
        "run": r.name,
        "timing set": r.folder.parent.name,
        "median step": ms(timing.med(r)),
        "95 % interval": timing.ci_text(r),
        "efficiency vs 1 GPU (interval)": f"{pct(eff[0])} ({pct(eff[1])}–{pct(eff[2])})"
        if math.isfinite(eff[0])
        else "–",
        "÷ stock torch_ddp": f"{timing.med(r) / timing.med(stock):.3f}"
        if stock is not None and r.world_size > 1
        else "–",
        "vs stock": (
            "reference"
            if r is stock
            else measures.versus(timing.med(r), timing.ci(r), timing.med(stock), timing.ci(stock))[0]
            if stock is not None and r.world_size > 1
            else "–"
        ),
        "_eff": eff[0],
        "_r": r,
    }


def scaling_rows(runs) -> dict[tuple, tuple[pd.DataFrame, list[int]]]:
    """{workload: (rows, GPU counts of :data:`GPU_COUNTS` with no run)}. Rows: per GPU count, the 1-GPU run
    (count 1), or stock torch_ddp and the lowest-median configuration of the newest set with runs at that
    count, each efficiency against the 1-GPU run of its own set (columns starting with ``_`` are for code)."""
    by: dict[tuple, list] = {}
    for r in runs:
        by.setdefault(workload(r), []).append(r)
    out = {}
    for key, rs in by.items():
        counts = sorted({r.world_size for r in rs} | set(GPU_COUNTS))
        rows, missing_counts = [], []
        for n in counts:
            newest = _newest(rs, lambda r, n=n: r.world_size == n)
            if not newest:
                missing_counts.append(n)
                continue
            one = timing.one_gpu_baseline(newest)
            if n == 1:
                rows.append(_row("1 GPU", one, None, None))
                continue
            at_n = [r for r in newest if r.world_size == n]
            stock = next((r for r in at_n if timing.is_stock(r)), None)
            if stock is None:  # the newest set at n lacks stock: the newest set that timed it
                with_stock = _newest(rs, lambda r, n=n: r.world_size == n and timing.is_stock(r))
                stock = next((r for r in with_stock if r.world_size == n and timing.is_stock(r)), None)
                stock_one = timing.one_gpu_baseline(with_stock) if with_stock else None
                if stock is not None:
                    rows.append(_row("stock DDP", stock, stock_one, stock))
            else:
                rows.append(_row("stock DDP", stock, one, stock))
            best = at_n[0]
            if best is not stock:
                same_set = stock is not None and stock.folder.parent == best.folder.parent
                rows.append(_row("fastest", best, one, stock if same_set else None))
            elif rows:
                rows[-1]["configuration"] = "stock DDP (also the fastest)"
        out[key] = (pd.DataFrame(rows), missing_counts)
    return out


def _current(runs) -> list:
    """The runs on the newest timing set's GPU model and loop mode."""
    if not runs:
        return []
    newest = max(runs, key=lambda r: set_order(r.folder.parent.name))
    here = (newest.meta.get("gpu_name"), timing.loop_mode(newest.config))
    return [r for r in runs if (r.meta.get("gpu_name"), timing.loop_mode(r.config)) == here]


def _trend(df: pd.DataFrame, label: str) -> str:
    sub = df[df["configuration"].str.contains(label, regex=False) & df["_eff"].notna()]
    return " → ".join(
        f"{pct(e)} on {int(g)} GPUs ({name})"
        for g, e, name in zip(sub["GPUs"], sub["_eff"], sub["run"], strict=True)
    )


def timing_scaling(runs) -> Section | None:
    """The section (None without timing sets)."""
    current = _current(runs)
    if not current:
        return None
    s = Section(
        "timing-scaling", "Scaling 1 → 2 → 4 GPUs in the timing sets: stock DDP and the fastest configuration"
    )
    s.p(
        "Per workload and GPU count, the newest timing set with runs at that count (sets are lettered in the "
        "order they were made); within it stock torch_ddp and the lowest-median configuration. Efficiency is the "
        "1-GPU step of the same set over the step (a fixed batch per GPU: 100 % is perfect weak scaling), with "
        "the interval from the two 95 % intervals' ends; 'vs stock' is faster or slower only where the intervals "
        "do not overlap. Workloads on the GPU model and loop mode of the newest timing set are shown."
    )
    for key, (df, missing_counts) in sorted(scaling_rows(current).items(), key=lambda kv: str(kv[0])):
        title = _title(key)
        if not len(df) or (df["GPUs"] > 1).sum() == 0:
            continue
        s.table(df[[c for c in df.columns if not c.startswith("_")]], f"{title}: 1 → 2 → 4 GPUs")
        said = [
            f"{who} runs at {trend} of the 1-GPU step"
            for who, label in (("stock DDP", "stock DDP"), ("the fastest configuration", "fastest"))
            if (trend := _trend(df, label))
        ]
        if said:
            s.p(f"{title}: " + "; ".join(said) + ".")
        if missing_counts:
            counts = " and ".join(str(n) for n in missing_counts)
            s.p(
                f"{title}: no timing set ran {counts} GPU{'s' if missing_counts != [1] else ''}; "
                f"{'those rows are' if len(missing_counts) > 1 else 'that row is'} missing, not measured."
            )
    return s


__all__ = ["GPU_COUNTS", "scaling_rows", "set_order", "timing_scaling"]
