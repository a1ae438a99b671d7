"""Pages that put several runs side by side: the index, the strategy comparison and the scaling page.

Which runs share a page is decided in :mod:`ddp_profile.report.runs`; the bucket-sweep page lives in
:mod:`ddp_profile.report.sweep`. The numbers on all of them come from one comparison,
:func:`ddp_profile.report.compare.comparison`.
"""

from __future__ import annotations

import pandas as pd

from ddp_profile.report.compare import (
    comparison,
    group_source,
    one_step_kernels,
    overlap_runs,
)
from ddp_profile.report.html import esc, figure_div, fmt_cell, ms_frame, ns_to_ms, page, run_links, table
from ddp_profile.report.runs import Group, Run, strategy_key

INDEX_COLUMNS = ["strategy", "bucket_size_mb", "model", "dtype", "world_size", "gpu_name", "n_steps", "step_ns",
                 "exposed_comm_ns", "comm_tail_ns", "overlap_pct", "efficiency_pct"]

def render_group_page(group: Group) -> str:
    """Strategy comparison: side-by-side bars, the overlap picture, the numbers."""
    from ddp_profile.plots import overlap_picture, strategy_bars
    from ddp_profile.plots.compare import run_label

    comp = comparison(group.runs)
    src = group_source(group)
    picked = overlap_runs(group.runs)
    picture = pd.concat([one_step_kernels(r, run_label(r.meta)) for r in picked], ignore_index=True) \
        if picked else pd.DataFrame(columns=["run", "kind", "name", "start_ns", "end_ns"])
    base = [r for r in group.runs if int(r.meta.get("world_size") or 1) == 1]
    body = "\n".join([
        "<p>Every run here was recorded on the same host. Times are medians over profiled steps and ranks. "
        + (f"Efficiency vs 1 GPU = step time of <a href='{esc(base[0].page)}'>{esc(base[0].name)}</a> / step "
           "time of the run (fixed per-GPU batch: 100 % is perfect scaling)." if base else
           "No 1-GPU run of this model and dtype here, so no efficiency.") + "</p>",
        figure_div(strategy_bars(comp, source=src), "bars"),
        "<h2>Does it overlap?</h2><p>Rank 0, the middle profiled step of each run, aligned at step start: "
        "NCCL kernels under compute kernels are hidden communication; NCCL after the last compute is exposed.</p>",
        figure_div(overlap_picture(picture, source=src), "overlap"),
        table(ms_frame(comp.drop(columns=["page", "predicted_overhead_ns"], errors="ignore")), "Numbers (times in ms)"), run_links(group.runs),
    ])
    return page(f"Strategies: {group.title}", body, src)


def scaling_frame(runs: list[Run]) -> pd.DataFrame:
    """compare_runs per strategy (each against its own 1-GPU run), plus samples_per_s = world_size · batch
    / step time (batch: the run JSON's per-GPU batch; NaN when unknown)."""
    parts = []
    for key in dict.fromkeys((r.meta.get("strategy"), r.meta.get("bucket_size_mb")) for r in runs):
        mine = sorted((r for r in runs if (r.meta.get("strategy"), r.meta.get("bucket_size_mb")) == key),
                      key=strategy_key)
        comp = comparison(mine)
        batch = [((r.meta.get("config") or {}).get("batch") or r.meta.get("batch")) for r in mine]
        comp["samples_per_s"] = [float(b) * float(w) / (t / 1e9) if b and t and t == t else float("nan")
                                 for b, w, t in zip(batch, comp["world_size"], comp["step_ns"], strict=False)]
        parts.append(comp)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def render_scaling_page(group: Group) -> str:
    """Throughput vs GPUs with the ideal line, efficiency, comm share and Amdahl serial fraction."""
    from ddp_profile.plots.scaling import scaling_figure

    comp = scaling_frame(group.runs)
    src = group_source(group)
    body = "\n".join([
        "<p>Weak scaling with a fixed per-GPU batch, every run from the same host. Ideal = n × the 1-GPU "
        "throughput of the same strategy; efficiency = step time(1 GPU) / step time(n GPUs); serial fraction "
        "f solves Amdahl's law S = 1 / (f + (1 − f)/n) for the measured speedup S (Karp–Flatt); comm share = "
        "NCCL kernel time / step time (median over ranks and steps).</p>",
        figure_div(scaling_figure(comp, source=src), "scaling"),
        table(ms_frame(comp.drop(columns=["page", "predicted_overhead_ns"], errors="ignore")), "Numbers (times in ms)"), run_links(group.runs),
    ])
    return page(f"Scaling: {group.title}", body, src)


def render_index(runs: list[Run], groups: list[Group], failures: list[str], findings: bool = False) -> str:
    """Every run with its headline numbers, then the comparisons, then what failed to load."""
    parts = []
    if failures:
        parts.append("<h2 class='fail'>Runs that failed to load</h2><ul>"
                     + "".join(f"<li class='fail'>{esc(f)}</li>" for f in failures) + "</ul>")
    for kind, title in (("strategies", "Strategy comparisons"), ("sweep", "Bucket sweeps"),
                        ("scaling", "Scaling")):
        mine = [g for g in groups if g.kind == kind]
        if mine:
            parts.append(f"<h2>{title}</h2><ul>" + "".join(
                f"<li><a href='{esc(g.page)}'>{esc(g.title)}</a> ({len(g.runs)} runs: "
                f"{esc(', '.join(r.name for r in g.runs))})</li>" for g in mine) + "</ul>")
    comp = comparison(runs) if runs else pd.DataFrame()
    rows = []
    for r, rec in zip(runs, comp.to_dict("records") if len(comp) else [{}] * len(runs), strict=False):
        cells = "".join(f"<td>{esc(fmt_cell(ns_to_ms(c, rec.get(c))))}</td>" for c in INDEX_COLUMNS)
        rows.append(f"<tr><td><a href='{esc(r.page)}'>{esc(r.name)}</a></td>{cells}</tr>")
    head = "".join(f"<th>{esc(c.replace('_ns', '_ms'))}</th>" for c in INDEX_COLUMNS)
    parts.insert(0, f"<h2>Runs</h2><table><thead><tr><th>run</th>{head}</tr></thead><tbody>{''.join(rows)}"
                    "</tbody></table><p class='note'>Times are medians over profiled steps and ranks, in ms; "
                    "efficiency is against the 1-GPU run of the same model, dtype and GPU where one exists.</p>")
    if findings:
        parts.insert(0, "<h2>Findings</h2><p><a href='findings.html'>The CS336 DDP questions answered from these "
                        "traces</a> (also as <a href='FINDINGS.md'>FINDINGS.md</a>).</p>")
    return page("ddp-profile report", "\n".join(parts), f"{len(runs)} run(s), {len(groups)} comparison(s)")
