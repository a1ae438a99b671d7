"""The page of one run: headline numbers, the timeline with a step selector, per-step bars, whether the step
is launch-bound, the α-β fit and the collective, contention and per-kernel overlap tables.

Plots come from :mod:`ddp_profile.plots` (imported when a page is rendered); this module only lays them out.
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

from ddp_profile.nsys.files import export_stem
from ddp_profile.report.html import esc, figure_div, fmt_cell, ns_to_ms, page, script_json, table
from ddp_profile.report.runs import Run


def source_of(run: Run, steps=None) -> str:
    from ddp_profile.plots import describe_source

    gpus = getattr(run.trace, "ranks", None)
    gpu = None if gpus is None or not len(gpus) else str(gpus["gpu_name"].dropna().iloc[0]) \
        if gpus["gpu_name"].notna().any() else None
    if steps is None:
        s = getattr(run.analysis, "steps", None)
        steps = s["step"].dropna().unique() if s is not None and len(s) else None
    return describe_source(run.meta, gpu, steps)


def _headline(summary: dict) -> str:
    items = "".join(f"<tr><td>{esc(k[:-3] + '_ms' if k.endswith('_ns') else k)}</td>"
                    f"<td>{esc(fmt_cell(ns_to_ms(k, v)))}</td></tr>" for k, v in summary.items()
                    if not isinstance(v, (dict, list)))
    return f"<table class='headline'><tbody>{items}</tbody></table>"


def collective_summary(col: pd.DataFrame) -> pd.DataFrame:
    """Collectives grouped by (collective, dtype, bucket, bytes): count and median times (µs)."""
    if col is None or not len(col):
        return pd.DataFrame()
    c = col.assign(bucket=col["bucket"].astype("object").where(col["bucket"].notna(), "–"),
                   dtype=col["dtype"].astype("object").where(col["dtype"].notna(), "–"))
    g = c.groupby(["collective", "dtype", "bucket", "bytes"], dropna=False)
    out = g.agg(count=("duration_ns", "size"), duration_us=("duration_ns", "median"),
                wait_us=("wait_ns", "median"), transfer_us=("transfer_ns", "median"),
                busbw_gb_per_s=("busbw_gb_per_s", "median")).reset_index()
    for c_ in ("duration_us", "wait_us", "transfer_us"):
        out[c_] = pd.to_numeric(out[c_], errors="coerce") / 1e3
    return out


def _nsys_rep_hint(trace) -> str:
    """Where the .nsys-rep sits (if it does) so the run can be opened in the nsys GUI."""
    reps = []
    for p in map(Path, getattr(trace, "paths", None) or []):
        stem = export_stem(p)
        rep = p.with_name(stem + ".nsys-rep")
        if rep.exists():
            reps.append(str(rep))
    if not reps:
        return ("<p class='note'>No .nsys-rep beside the export; re-profile or keep the .nsys-rep to inspect "
                "this run in the Nsight Systems GUI.</p>")
    return "<p>Open in the Nsight Systems GUI: " + ", ".join(f"<code>nsys-ui {esc(r)}</code>" for r in reps) + "</p>"


LAUNCH_TABLE = (  # (LAUNCH_STEP column, header as `ddp-profile launches` prints it, divisor): times in ms
    ("rank", "rank", None), ("step", "step", None), ("step_ns", "step_ms", 1e6), ("gpu_busy_ns", "busy_ms", 1e6),
    ("gpu_idle_ns", "idle_ms", 1e6), ("idle_pct", "idle_%", None), ("launches", "launches", None),
    ("host_us_per_launch", "host_us/launch", None), ("gpu_us_per_kernel", "gpu_us/kernel", None),
    ("launch_bound", "launch_bound", None),
)


def launch_block(run: Run) -> str:
    """"Is the step launch-bound?": the per-rank verdicts and the per-step table of ``run.launches``
    (computed where the run was loaded, :func:`ddp_profile.report.launch_diagnosis`), or why it is missing."""
    from ddp_profile.analysis.launches import IDLE_THRESHOLD_PCT

    head = "<h2>Is the step launch-bound?</h2>"
    res = run.launches
    if res is None or isinstance(res, str):
        why = res or "the launch diagnosis was not computed for this run"
        return f"{head}<p class='note'>No launch-bound check for this run: {esc(why)}</p>"
    if res.steps.empty:
        why = "; ".join(res.notes) or "no step ranges were found"
        return f"{head}<p class='note'>No launch-bound check for this run: no steps to diagnose ({esc(why)})</p>"
    s = res.steps
    df = pd.DataFrame({h: s[c] / d if d else s[c] for c, h, d in LAUNCH_TABLE})
    lines = "".join(f"<li>{esc(v)}</li>" for v in res.verdicts())
    notes = "".join(f"<li class='note'>{esc(n)}</li>" for n in res.notes)
    return (f"{head}<p>A step is launch-bound when the GPU idles more than {IDLE_THRESHOLD_PCT:g}% of the step's "
            "host range and the host needs longer per kernel launch (step time minus synchronize wait, ÷ "
            "launches) than the GPU needs per kernel: then fewer, larger kernels help, a faster GPU does not. "
            "Same numbers as <code>ddp-profile launches</code>.</p>"
            f"<ul class='verdicts'>{lines}{notes}</ul>" + table(df, "Launch diagnosis per rank and step", max_rows=64))


def render_run_page(run: Run) -> str:
    """Headline, timeline with a step selector, per-step bars, launch-bound check, α-β fit,
    collective/contention tables."""
    from ddp_profile.plots import alpha_beta_figure, step_breakdown
    from ddp_profile.plots.timeline import STEP_SWITCH_JS, figure_for_step, timeline_steps

    a, t = run.analysis, run.trace
    src = source_of(run)
    data = timeline_steps(t.kernels, a.phases, a.steps, a.collectives)
    idx = len(data["steps"]) // 2
    options = "".join(f'<option value="{i}"{" selected" if i == idx else ""}>{esc(s["label"])}</option>'
                      for i, s in enumerate(data["steps"]))
    switch = ("var tl=JSON.parse(document.getElementById('tl-data').textContent);"
              "document.getElementById('step-select').addEventListener('change',function(e){"
              "ddpShowStep(document.getElementById('timeline'),tl,+e.target.value);});")
    notes = "".join(f"<li>{esc(n)}</li>" for n in (getattr(a, "notes", None) or []))
    body = "\n".join([
        "<h2>Headline</h2>", _headline(a.summary()),
        f"<ul class='notes'>{notes}</ul>" if notes else "",
        _nsys_rep_hint(t),
        "<h2>Timeline</h2><p>One row per rank × stream; bars are kernels coloured by class, NVTX phases are "
        "bands in each rank's NVTX row, the black strip is the comm tail (end of backward to end of the last "
        "collective). Sub-pixel kernels on a row are merged (hover says how many). Drag to zoom, "
        "double-click to reset.</p>",
        f"<label>Step: <select id='step-select'>{options}</select></label>",
        f"<script type='application/json' id='tl-data'>{script_json(data)}</script>",
        f"<script>{STEP_SWITCH_JS}</script>",
        figure_div(figure_for_step(data, idx, src), "timeline", switch),
        "<h2>Per-step breakdown</h2>", figure_div(step_breakdown(a.steps, source=src), "steps"),
        launch_block(run),
        "<h2>Collectives</h2>",
        figure_div(alpha_beta_figure(a.collectives, a.cost_model, source=src), "alphabeta")
        if a.collectives["bytes"].notna().any() else
        "<p class='note'>No collective sizes in this trace (the ddp-profile harness records them as NVTX "
        "ranges), so no α-β plot.</p>",
        table(a.cost_model, "α-β fit per collective (t = o + bytes / w)"),
        table(collective_summary(a.collectives), "Collectives by bucket (medians)"),
        table(a.contention, "Contention: compute kernels slowed while NCCL runs"),
        table(getattr(a, "kernel_overlap", None), "Overlap per kernel name", max_rows=40),
    ])
    return page(f"Run {run.name}", body, src)


def benchmark_run_page(run: Run) -> dict:
    """Time rendering one run page and report its size (for the perf notes; not a test)."""
    t0 = time.perf_counter()
    text = render_run_page(run)
    return {"render_s": round(time.perf_counter() - t0, 3), "page_bytes": len(text.encode()),
            "kernels": len(run.trace.kernels)}
