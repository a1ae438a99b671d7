"""The one module that writes HTML: an index page, one page per run, one per comparison (strategy set,
scaling) and one per bucket sweep, all in one folder with plotly.js written once beside them.

Safety: every string from a trace or run.json reaches a page either through :func:`html.escape` (markup) or
:func:`script_json` (data inside ``<script>``, with ``<``, ``>``, ``&`` and U+2028/2029 escaped), so a kernel
called ``</script><script>…`` stays text. Pages reference nothing remote. The folder is built beside the
destination and swapped in at the end (:func:`write_report_dir`), so an interrupted or failed run never
replaces a good report.
"""

from __future__ import annotations

import html
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from ddp_profile.errors import OutputError, TraceError
from ddp_profile.report_runs import (  # noqa: F401  (re-exported: the page-naming API)
    TRACE_SUFFIXES,
    Group,
    Run,
    discover,
    discover_runs,
    group_page_name,
    group_runs,
    normalise_meta,
    run_page_name,
    slug,
    strategy_key,
)
from ddp_profile.report_sweep import pooled_fit, render_sweep_page, sweep_model  # noqa: F401  (re-exported)

MARKER = ".ddp-profile-report"  # only folders holding this (or empty ones) are ever replaced
PLOTLY_JS = "plotly.min.js"
# The "does it overlap?" picture: one run per strategy, in this order (bucketed: the size nearest 25 MB).
OVERLAP_STRATEGIES = ("naive", "overlap", "bucketed", "torch_ddp")


def script_json(obj) -> str:
    """JSON safe to place inside <script>: no '</script>', no '<!--', no JS line separators."""
    text = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"), allow_nan=False)
    for ch, rep in (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e"),
                    ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(ch, rep)
    return text


def esc(value) -> str:
    return html.escape("–" if value is None or (not isinstance(value, str) and pd.isna(value)) else str(value))


# ---- finding and loading runs ---------------------------------------------------------------------------

def _say(message: str) -> None:
    print(f"report:   {message}", file=sys.stderr, flush=True)


def load_one(path: Path):
    """Load and analyse one run (runs in a worker process under --jobs; progress lines go to stderr).
    The run's JSON (``run.json``, ``<run>.json``) is found by the loader (``trace.run``)."""
    from ddp_profile.analysis import analyze
    from ddp_profile.nsys.loader import load_trace

    t0 = time.perf_counter()
    trace = load_trace(path, progress=_say)
    _say(f"loaded {path} in {time.perf_counter() - t0:.1f} s; analysing")
    return trace, analyze(trace)


def load_runs(paths: list, jobs: int = 1, progress=None) -> tuple[list[Run], list[str]]:
    """Load and analyse every run, reporting progress on ``progress`` (stderr by default). ``paths``: run
    locations or (location, run id) pairs from :func:`discover_runs`. Returns the runs and one message per
    run that failed (the report lists them; the CLI exits non-zero)."""
    from ddp_profile.errors import DdpProfileError

    out = progress or sys.stderr
    pairs = [p if isinstance(p, tuple) else (Path(p), None) for p in paths]
    ids = {str(p): rid for p, rid in pairs}
    paths = [p for p, _ in pairs]
    runs, failures, t0 = [], [], time.perf_counter()

    def done(i, path, result):
        if isinstance(result, DdpProfileError):
            failures.append(f"{path}: {result}")
            print(f"report: [{i}/{len(paths)}] FAILED {path}: {result}", file=out, flush=True)
            return
        trace, analysis = result
        meta = normalise_meta(getattr(trace, "run", None) or {})
        rid = ids.get(str(path)) or meta.get("run_name") or \
            (path.name if path.is_dir() else path.name.split(".sqlite")[0])
        folder = str(rid).rsplit("/", 1)[0] if "/" in str(rid) else ""
        given = meta.get("run_name")  # shown beside the id when the JSON names the run differently
        name = str(rid) if given in (None, "", str(rid).rsplit("/", 1)[-1]) else f"{rid} ({given})"
        runs.append(Run(name, trace, analysis, meta, run_id=str(rid), folder=folder))
        print(f"report: [{i}/{len(paths)}] analysed {name} ({len(trace.kernels):,} kernels, "
              f"{time.perf_counter() - t0:.1f} s elapsed)", file=out, flush=True)

    print(f"report: loading {len(paths)} run(s) with {jobs} job(s)", file=out, flush=True)
    if jobs <= 1 or len(paths) <= 1:
        for i, p in enumerate(paths, 1):
            try:
                result = load_one(p)
            except DdpProfileError as exc:
                result = exc
            done(i, p, result)
    else:
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = [(p, pool.submit(load_one, p)) for p in paths]
            for i, (p, fut) in enumerate(futures, 1):
                try:
                    result = fut.result()
                except DdpProfileError as exc:
                    result = exc
                done(i, p, result)
    names = [r.run_id for r in runs]
    for i, r in enumerate(runs):  # bare locations with one run_name: keep both pages apart
        if names.count(r.run_id) > 1 and names.index(r.run_id) != i:
            r.run_id = r.name = f"{r.run_id}~{i + 1}"
    return runs, failures


# ---- page pieces ----------------------------------------------------------------------------------------

def source_of(run: Run, steps=None) -> str:
    from ddp_profile.plots import describe_source

    gpus = getattr(run.trace, "ranks", None)
    gpu = None if gpus is None or not len(gpus) else str(gpus["gpu_name"].dropna().iloc[0]) \
        if gpus["gpu_name"].notna().any() else None
    if steps is None:
        s = getattr(run.analysis, "steps", None)
        steps = s["step"].dropna().unique() if s is not None and len(s) else None
    return describe_source(run.meta, gpu, steps)


def figure_div(fig, div_id: str, extra_js: str = "") -> str:
    """A figure as a div plus a script calling Plotly.newPlot with escaped JSON."""
    spec = json.loads(fig.to_json())
    config = {"responsive": True, "displaylogo": False, "scrollZoom": True}
    return (f'<div id="{div_id}" class="figure"></div>\n<script>Plotly.newPlot("{div_id}",'
            f'{script_json(spec.get("data", []))},{script_json(spec.get("layout", {}))},'
            f'{script_json(config)});{extra_js}</script>')


def table(df: pd.DataFrame, caption: str, max_rows: int = 200) -> str:
    """An escaped HTML table (first ``max_rows`` rows; says so when cut)."""
    if df is None or not len(df):
        return f"<h3>{esc(caption)}</h3><p class='empty'>none in this trace</p>"
    cut = len(df) > max_rows
    head = "".join(f"<th>{esc(c)}</th>" for c in df.columns)
    body = "".join("<tr>" + "".join(f"<td>{esc(_fmt(v))}</td>" for v in row) + "</tr>"
                   for row in df.head(max_rows).itertuples(index=False))
    note = f"<p class='note'>first {max_rows} of {len(df)} rows</p>" if cut else ""
    grid = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{note}"
    if len(df) > 25:  # long tables fold away so the figures stay on the first screens
        return f"<details><summary><h3>{esc(caption)} ({len(df)} rows)</h3></summary>{grid}</details>"
    return f"<h3>{esc(caption)}</h3>{grid}"


def _fmt(v):
    if isinstance(v, float):
        return "–" if pd.isna(v) else f"{v:,.3f}".rstrip("0").rstrip(".")
    return v


def page(title: str, body: str, subtitle: str = "") -> str:
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(title)} · ddp-profile</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{{font:14px/1.45 system-ui,sans-serif;margin:1.2em 2em;color:#222}}
table{{border-collapse:collapse;margin:.5em 0 1.5em;font-size:12px}}td,th{{border:1px solid #ddd;padding:2px 6px;
text-align:right}}th{{background:#f4f4f4}}td:first-child,th:first-child{{text-align:left}}
.figure{{width:100%;min-height:260px;margin-bottom:1em}}.note,.empty{{color:#777}}.fail{{color:#b00}}
code{{background:#f4f4f4;padding:1px 3px}}
summary h3{{display:inline;cursor:pointer}}</style>
<script src="{PLOTLY_JS}"></script></head><body>
<p><a href="index.html">← all runs</a></p><h1>{esc(title)}</h1><p class="note">{esc(subtitle)}</p>
{body}
<p class="note">Generated by ddp-profile from Nsight Systems exports; all numbers are measured from the traces.</p>
</body></html>
"""


def _headline(summary: dict) -> str:
    items = "".join(f"<tr><td>{esc(k[:-3] + '_ms' if k.endswith('_ns') else k)}</td>"
                    f"<td>{esc(_fmt(_ms(k, v)))}</td></tr>" for k, v in summary.items()
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
        stem = p.name.split(".sqlite")[0]
        rep = p.with_name(stem + ".nsys-rep")
        if rep.exists():
            reps.append(str(rep))
    if not reps:
        return ("<p class='note'>No .nsys-rep beside the export; re-profile or keep the .nsys-rep to inspect "
                "this run in the Nsight Systems GUI.</p>")
    return "<p>Open in the Nsight Systems GUI: " + ", ".join(f"<code>nsys-ui {esc(r)}</code>" for r in reps) + "</p>"


def render_run_page(run: Run) -> str:
    """Headline, timeline with a step selector, per-step bars, α-β fit, collective/contention tables."""
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


def _compare_runs(pairs):
    from ddp_profile.analysis import compare_runs

    return compare_runs(pairs)


def _compare(runs: list[Run]) -> pd.DataFrame:
    comp = _compare_runs([(r.trace, r.analysis) for r in runs]).copy()
    comp["page"] = [r.page for r in runs]
    comp["run"] = [r.name for r in runs]  # the run id, unique in the report
    # bucket size only where the strategy has buckets (the harness records its default for all)
    comp["bucket_size_mb"] = [r.meta.get("bucket_size_mb") if r.meta else b
                              for r, b in zip(runs, comp["bucket_size_mb"], strict=False)]
    return comp


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


def _links(runs: list[Run]) -> str:
    return "<h2>Runs</h2><ul>" + "".join(f"<li><a href='{esc(r.page)}'>{esc(r.name)}</a></li>"
                                         for r in runs) + "</ul>"


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


def _ms_frame(df: pd.DataFrame) -> pd.DataFrame:
    """ns columns shown as ms (renamed *_ms)."""
    out = df.copy()
    for c in [c for c in out.columns if c.endswith("_ns")]:
        out[c] = pd.to_numeric(out[c], errors="coerce") / 1e6
    return out.rename(columns={c: c[:-3] + "_ms" for c in out.columns if c.endswith("_ns")})


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


# ---- index, folder writing, entry points ----------------------------------------------------------------

INDEX_COLUMNS = ["strategy", "bucket_size_mb", "model", "dtype", "world_size", "gpu_name", "n_steps", "step_ns",
                 "exposed_comm_ns", "comm_tail_ns", "overlap_pct", "efficiency_pct"]


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


def _ms(col, v):
    return v / 1e6 if col.endswith("_ns") and v is not None and not pd.isna(v) else v


def write_report_dir(out_dir: Path, fill) -> Path:
    """Build the report in a temporary sibling folder via ``fill(tmp_path)`` and swap it in.

    The old report is moved aside only after the new one is complete, and deleted only after the new one
    is in place; any failure (or Ctrl-C) before the swap removes the temporary folder and leaves the old
    report untouched. A non-empty destination without our marker file is refused, never deleted."""
    out_dir = Path(out_dir).resolve()
    if out_dir.exists() and (not out_dir.is_dir() or (any(out_dir.iterdir()) and not (out_dir / MARKER).exists())):
        raise OutputError(f"{out_dir}: exists and is not a ddp-profile report folder; choose another -o")
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    except OSError as exc:
        raise OutputError(f"{out_dir.parent}: cannot create the report folder ({exc.strerror})") from exc
    old = None
    try:
        fill(tmp)
        (tmp / MARKER).write_text("written by ddp-profile report; this folder is replaced on each run\n")
        os.chmod(tmp, 0o755)
        if out_dir.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
            os.replace(out_dir, old / "r")
        os.replace(tmp, out_dir)
    except OSError as exc:
        if old is not None and not out_dir.exists():
            os.replace(old / "r", out_dir)
        raise OutputError(f"{out_dir}: cannot write the report ({exc.strerror or exc}); the previous report "
                          "is unchanged") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return out_dir


def _write(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def write_report(runs: list[Run], out_dir: Path, failures: list[str] = (), progress=None,
                 findings_root: Path | None = None) -> dict:
    """Render every page into ``out_dir`` atomically; returns {page name: bytes}. With ``findings_root`` (a
    campaign folder: runs in ``<root>/<run>/`` and ``<root>/scaling/<run>/``), FINDINGS.md and findings.html
    are built from the same already-analysed runs and land in the same atomic swap."""
    from plotly.offline import get_plotlyjs

    out = progress or sys.stderr
    groups = group_runs(runs)
    sizes = {}

    def fill(tmp: Path):
        _write(tmp / PLOTLY_JS, get_plotlyjs())
        for i, r in enumerate(runs, 1):
            t0 = time.perf_counter()
            _write(tmp / r.page, render_run_page(r))
            sizes[r.page] = (tmp / r.page).stat().st_size
            print(f"report: [{i}/{len(runs)}] page {r.page} ({sizes[r.page] / 1e6:.1f} MB, "
                  f"{time.perf_counter() - t0:.1f} s)", file=out, flush=True)
        for g in groups:
            if g.kind == "sweep":
                text = render_sweep_page(g, runs)
            else:
                text = {"scaling": render_scaling_page}.get(g.kind, render_group_page)(g)
            _write(tmp / g.page, text)
            sizes[g.page] = (tmp / g.page).stat().st_size
        if findings_root is not None:
            sizes.update(_write_findings(findings_root, runs, tmp, out))
        _write(tmp / "index.html", render_index(runs, groups, list(failures), findings="findings.html" in sizes))
        sizes["index.html"] = (tmp / "index.html").stat().st_size

    write_report_dir(out_dir, fill)
    return sizes


def findings_root_of(paths: list) -> Path | None:
    """The campaign folder the findings can answer from: the single folder passed, when the findings
    builder finds run folders in it (``<root>/<run>/``, ``<root>/scaling/<run>/``); else None."""
    from ddp_profile.errors import DdpProfileError
    from ddp_profile.findings.data import find_runs

    if len(paths) != 1 or not Path(paths[0]).is_dir():
        return None
    try:
        find_runs(Path(paths[0]))
    except DdpProfileError:
        return None
    return Path(paths[0])


def _write_findings(root: Path, runs: list[Run], tmp: Path, out) -> dict:
    from ddp_profile.findings import build_findings
    from ddp_profile.findings.data import from_report_runs

    t0 = time.perf_counter()
    data = from_report_runs(root, runs)
    if not data:
        print(f"report: no findings: none of the loaded runs is a run folder of {root}", file=out, flush=True)
        return {}
    written = build_findings(root, tmp, runs=data)
    print(f"report: findings ({len(data)} runs) written in {time.perf_counter() - t0:.1f} s", file=out, flush=True)
    return written


def build_report(paths: list, out_dir: Path, jobs: int = 1, progress=None,
                 findings: bool = True) -> tuple[dict, list[str]]:
    """Find, load, analyse and render; the library behind `ddp-profile report`. With ``findings`` (default),
    FINDINGS.md and findings.html are written too when the input is one campaign folder (see
    :func:`findings_root_of`); otherwise a note on stderr says why they were skipped."""
    found = discover_runs(paths)
    if not found:
        raise TraceError(f"no nsys exports (*.sqlite, *.sqlite.xz) under {', '.join(map(str, paths))}; "
                         "record runs with scripts/profile_*.sh or pass export paths")
    root = findings_root_of(paths) if findings else None
    if findings and root is None:
        print("report: no findings: they need one campaign folder (run folders in <folder>/ and "
              "<folder>/scaling/), e.g. `ddp-profile report traces`", file=progress or sys.stderr, flush=True)
    runs, failures = load_runs(found, jobs, progress)
    if not runs:
        raise TraceError("no run could be loaded: " + "; ".join(failures))
    return write_report(runs, out_dir, failures, progress, findings_root=root), failures


def benchmark_run_page(run: Run) -> dict:
    """Time rendering one run page and report its size (for the perf notes; not a test)."""
    t0 = time.perf_counter()
    text = render_run_page(run)
    return {"render_s": round(time.perf_counter() - t0, 3), "page_bytes": len(text.encode()),
            "kernels": len(run.trace.kernels)}
