"""Pages that put several runs side by side: the index, the strategy comparison and the scaling page.

Which runs share a page is decided in :mod:`ddp_profile.report_runs`; the bucket-sweep page lives in
:mod:`ddp_profile.report_sweep`. The numbers on all of them come from one comparison,
:func:`ddp_profile.analysis.compare_runs`, reached through ``ddp_profile.report._compare_runs`` (see
:func:`_compare`).
"""

from __future__ import annotations

import pandas as pd

from ddp_profile.report_html import _fmt, _links, _ms, _ms_frame, esc, figure_div, page, table
from ddp_profile.report_runs import Group, Run, strategy_key

# The "does it overlap?" picture: one run per strategy, in this order (bucketed: the size nearest 25 MB).
OVERLAP_STRATEGIES = ("naive", "overlap", "bucketed", "torch_ddp")
INDEX_COLUMNS = ["strategy", "bucket_size_mb", "model", "dtype", "world_size", "gpu_name", "n_steps", "step_ns",
                 "exposed_comm_ns", "comm_tail_ns", "overlap_pct", "efficiency_pct"]


def _compare(runs: list[Run]) -> pd.DataFrame:
    # Looked up on ddp_profile.report at call time: that is the one seam tests replace with a synthetic
    # comparison (tests/report_synth.py), so every page that compares runs goes through it.
    from ddp_profile import report

    comp = report._compare_runs([(r.trace, r.analysis) for r in runs]).copy()
    comp["page"] = [r.page for r in runs]
    comp["run"] = [r.name for r in runs]  # the run id, unique in the report
    # bucket size only where the strategy has buckets (the harness records its default for all)
    comp["bucket_size_mb"] = [r.meta.get("bucket_size_mb") if r.meta else b
                              for r, b in zip(runs, comp["bucket_size_mb"], strict=False)]
    return comp


def _group_source(group: Group) -> str:
    from ddp_profile.plots import describe_source

    steps = set()
    for r in group.runs:
        s = r.analysis.steps
        steps |= set(s["step"].dropna().astype(int)) if s is not None and len(s) else set()
    meta = dict(group.runs[0].meta)
    ws = {r.meta.get("world_size") for r in group.runs}
    meta["world_size"] = "/".join(str(w) for w in sorted(ws, key=str)) if len(ws) > 1 else meta.get("world_size")
    return describe_source(meta, None, steps or None)


def _one_step(run: Run, label: str) -> pd.DataFrame:
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
    return pd.DataFrame({"run": label, "kind": k["kind"], "name": k["name"],
                         "start_ns": k["start_ns"].astype("int64") - w0, "end_ns": k["end_ns"].astype("int64") - w0})


def overlap_runs(runs: list[Run]) -> list[Run]:
    """One multi-GPU run per strategy of OVERLAP_STRATEGIES (bucketed: the bucket size nearest 25 MB), in
    that order; every multi-GPU run when none of those strategies is present."""
    multi = [r for r in runs if int(r.meta.get("world_size") or 1) > 1]
    picked = []
    for strategy in OVERLAP_STRATEGIES:
        mine = [r for r in multi if r.meta.get("strategy") == strategy]
        if mine:
            picked.append(min(mine, key=lambda r: abs(float(r.meta.get("bucket_size_mb") or 25.0) - 25.0)))
    return picked or multi


def render_group_page(group: Group) -> str:
    """Strategy comparison: side-by-side bars, the overlap picture, the numbers."""
    from ddp_profile.plots import overlap_picture, strategy_bars
    from ddp_profile.plots.compare import run_label

    comp = _compare(group.runs)
    src = _group_source(group)
    picked = overlap_runs(group.runs)
    picture = pd.concat([_one_step(r, run_label(r.meta)) for r in picked], ignore_index=True) \
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
        table(_ms_frame(comp.drop(columns=["page", "predicted_overhead_ns"], errors="ignore")), "Numbers (times in ms)"), _links(group.runs),
    ])
    return page(f"Strategies: {group.title}", body, src)


def scaling_frame(runs: list[Run]) -> pd.DataFrame:
    """compare_runs per strategy (each against its own 1-GPU run), plus samples_per_s = world_size · batch
    / step time (batch: the run JSON's per-GPU batch; NaN when unknown)."""
    parts = []
    for key in dict.fromkeys((r.meta.get("strategy"), r.meta.get("bucket_size_mb")) for r in runs):
        mine = sorted((r for r in runs if (r.meta.get("strategy"), r.meta.get("bucket_size_mb")) == key),
                      key=strategy_key)
        comp = _compare(mine)
        batch = [((r.meta.get("config") or {}).get("batch") or r.meta.get("batch")) for r in mine]
        comp["samples_per_s"] = [float(b) * float(w) / (t / 1e9) if b and t and t == t else float("nan")
                                 for b, w, t in zip(batch, comp["world_size"], comp["step_ns"], strict=False)]
        parts.append(comp)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def render_scaling_page(group: Group) -> str:
    """Throughput vs GPUs with the ideal line, efficiency, comm share and Amdahl serial fraction."""
    from ddp_profile.plots.scaling import scaling_figure

    comp = scaling_frame(group.runs)
    src = _group_source(group)
    body = "\n".join([
        "<p>Weak scaling with a fixed per-GPU batch, every run from the same host. Ideal = n × the 1-GPU "
        "throughput of the same strategy; efficiency = step time(1 GPU) / step time(n GPUs); serial fraction "
        "f solves Amdahl's law S = 1 / (f + (1 − f)/n) for the measured speedup S (Karp–Flatt); comm share = "
        "NCCL kernel time / step time (median over ranks and steps).</p>",
        figure_div(scaling_figure(comp, source=src), "scaling"),
        table(_ms_frame(comp.drop(columns=["page", "predicted_overhead_ns"], errors="ignore")), "Numbers (times in ms)"), _links(group.runs),
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
    comp = _compare(runs) if runs else pd.DataFrame()
    rows = []
    for r, rec in zip(runs, comp.to_dict("records") if len(comp) else [{}] * len(runs), strict=False):
        cells = "".join(f"<td>{esc(_fmt(_ms(c, rec.get(c))))}</td>" for c in INDEX_COLUMNS)
        rows.append(f"<tr><td><a href='{esc(r.page)}'>{esc(r.name)}</a></td>{cells}</tr>")
    head = "".join(f"<th>{esc(c.replace('_ns', '_ms'))}</th>" for c in INDEX_COLUMNS)
    parts.insert(0, f"<h2>Runs</h2><table><thead><tr><th>run</th>{head}</tr></thead><tbody>{''.join(rows)}"
                    "</tbody></table><p class='note'>Times are medians over profiled steps and ranks, in ms; "
                    "efficiency is against the 1-GPU run of the same model, dtype and GPU where one exists.</p>")
    if findings:
        parts.insert(0, "<h2>Findings</h2><p><a href='findings.html'>The CS336 DDP questions answered from these "
                        "traces</a> (also as <a href='FINDINGS.md'>FINDINGS.md</a>).</p>")
    return page("ddp-profile report", "\n".join(parts), f"{len(runs)} run(s), {len(groups)} comparison(s)")
