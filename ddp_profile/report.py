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
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ddp_profile.errors import OutputError, TraceError

MARKER = ".ddp-profile-report"  # only folders holding this (or empty ones) are ever replaced
PLOTLY_JS = "plotly.min.js"
TRACE_SUFFIXES = (".sqlite", ".sqlite.xz")
OVERLAP_STRATEGIES = ("naive", "overlap", "bucketed")


@dataclass
class Run:
    """One loaded, analysed run and the page it gets."""

    name: str
    trace: object
    analysis: object
    meta: dict = field(default_factory=dict)  # run.json (empty for a bare export)

    @property
    def page(self) -> str:
        return f"run-{slug(self.name)}.html"


@dataclass
class Group:
    """Runs compared on one page. kind: "strategies" | "scaling" | "sweep"."""

    kind: str
    title: str
    runs: list

    @property
    def page(self) -> str:
        return f"{self.kind}-{slug(self.title)}.html"


def slug(text: str) -> str:
    """File-name-safe form of a run or group name."""
    s = "".join(c if c.isalnum() or c in "-_." else "-" for c in str(text)).strip("-.")
    return s[:120] or "run"


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

def _is_trace(p: Path) -> bool:
    return p.is_file() and p.name.endswith(TRACE_SUFFIXES)


def discover(paths: list) -> list[Path]:
    """Run locations from CLI paths: a trace file, a run folder (holds exports), or a folder of run
    folders (e.g. ``traces/``)."""
    found = []
    for p in map(Path, paths):
        if not p.exists():
            raise TraceError(f"{p}: no such file or folder; pass a run folder, an nsys SQLite export or traces/")
        if p.is_file():
            if not _is_trace(p):
                raise TraceError(f"{p}: not an nsys SQLite export (*.sqlite or *.sqlite.xz); "
                                 f"convert .nsys-rep with `nsys export --type sqlite -o {p.stem}.sqlite {p}`")
            found.append(p)
        elif any(_is_trace(c) for c in p.iterdir()):
            found.append(p)
        else:
            found.extend(sorted(c for c in p.iterdir() if c.is_dir() and any(_is_trace(f) for f in c.iterdir())))
    return list(dict.fromkeys(found))


def _say(message: str) -> None:
    print(f"report:   {message}", file=sys.stderr, flush=True)


def load_one(path: Path):
    """Load and analyse one run (runs in a worker process under --jobs; progress lines go to stderr)."""
    from ddp_profile.analysis import analyze
    from ddp_profile.nsys.loader import load_trace

    t0 = time.perf_counter()
    trace = load_trace(path, progress=_say)
    _say(f"loaded {path} in {time.perf_counter() - t0:.1f} s; analysing")
    return trace, analyze(trace)


def load_runs(paths: list[Path], jobs: int = 1, progress=None) -> tuple[list[Run], list[str]]:
    """Load and analyse every run, reporting progress on ``progress`` (stderr by default). Returns the runs
    and one message per run that failed (the report lists them; the CLI exits non-zero)."""
    from ddp_profile.errors import DdpProfileError

    out = progress or sys.stderr
    runs, failures, t0 = [], [], time.perf_counter()

    def done(i, path, result):
        if isinstance(result, DdpProfileError):
            failures.append(f"{path}: {result}")
            print(f"report: [{i}/{len(paths)}] FAILED {path}: {result}", file=out, flush=True)
            return
        trace, analysis = result
        meta = dict(getattr(trace, "run", None) or {})
        name = meta.get("run_name") or (path.name if path.is_dir() else path.name.split(".sqlite")[0])
        runs.append(Run(str(name), trace, analysis, meta))
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
    names = [r.name for r in runs]
    for r in runs:  # two folders with one run_name: keep both pages apart
        if names.count(r.name) > 1:
            r.name = f"{r.name}-{len([n for n in names if n == r.name])}-{id(r) % 10000}"
    return runs, failures


# ---- grouping -------------------------------------------------------------------------------------------

def _hw(run: Run) -> tuple:
    m = run.meta
    return (m.get("model"), m.get("dtype"), m.get("gpu_name"))


def group_runs(runs: list[Run]) -> list[Group]:
    """Comparisons that make sense: same model, dtype and GPU; strategies at one world size (plus 1-GPU
    baselines for efficiency); bucket sweeps; scaling of one strategy over world sizes."""
    groups = []
    with_meta = [r for r in runs if r.meta.get("strategy") and r.meta.get("world_size")]
    for hw in dict.fromkeys(_hw(r) for r in with_meta):
        same = [r for r in with_meta if _hw(r) == hw]
        base = [r for r in same if int(r.meta["world_size"]) == 1]
        hw_text = " ".join(str(v) for v in hw if v)
        for ws in sorted({int(r.meta["world_size"]) for r in same} - {1}):
            at = [r for r in same if int(r.meta["world_size"]) == ws]
            if len({r.meta["strategy"] for r in at}) >= 2:
                groups.append(Group("strategies", f"{hw_text} x{ws}", base + at))
            sweep = [r for r in at if r.meta.get("bucket_size_mb") is not None and r.meta["strategy"] == "bucketed"]
            if len({float(r.meta["bucket_size_mb"]) for r in sweep}) >= 2:
                groups.append(Group("sweep", f"{hw_text} x{ws}", sweep))
        for strategy in dict.fromkeys(r.meta["strategy"] for r in same if int(r.meta["world_size"]) > 1):
            runs_s = base + [r for r in same if r.meta["strategy"] == strategy and int(r.meta["world_size"]) > 1]
            if len({int(r.meta["world_size"]) for r in runs_s}) >= 2:
                groups.append(Group("scaling", f"{hw_text} {strategy}", runs_s))
    return groups


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
    return f"<h3>{esc(caption)}</h3><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{note}"


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
code{{background:#f4f4f4;padding:1px 3px}}</style>
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


def _costmodel():
    from ddp_profile.analysis.costmodel import optimal_bucket_bytes, predict_overhead

    return predict_overhead, optimal_bucket_bytes


def _compare(runs: list[Run]) -> pd.DataFrame:
    comp = _compare_runs([(r.trace, r.analysis) for r in runs]).copy()
    comp["page"] = [r.page for r in runs]
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


def render_group_page(group: Group) -> str:
    """Strategy or scaling comparison: side-by-side bars, the overlap picture, the numbers."""
    from ddp_profile.plots import overlap_picture, strategy_bars
    from ddp_profile.plots.compare import run_label

    comp = _compare(group.runs)
    src = _group_source(group)
    multi = [r for r in group.runs if int(r.meta.get("world_size") or 1) > 1]
    picked = [r for r in multi if r.meta.get("strategy") in OVERLAP_STRATEGIES] or multi
    picture = pd.concat([_one_step(r, run_label(r.meta)) for r in picked], ignore_index=True) \
        if picked else pd.DataFrame(columns=["run", "kind", "name", "start_ns", "end_ns"])
    links = "".join(f"<li><a href='{esc(r.page)}'>{esc(r.name)}</a></li>" for r in group.runs)
    body = "\n".join([
        figure_div(strategy_bars(comp, source=src), "bars"),
        "<h2>Does it overlap?</h2><p>Rank 0, the middle profiled step of each run, aligned at step start: "
        "NCCL kernels under compute kernels are hidden communication; NCCL after the last compute is exposed.</p>",
        figure_div(overlap_picture(picture, source=src), "overlap"),
        table(comp.drop(columns=["page"]), "Numbers"), f"<h2>Runs</h2><ul>{links}</ul>",
    ])
    return page(f"{group.kind.capitalize()}: {group.title}", body, src)


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


def sweep_model(group: Group, comp: pd.DataFrame):
    """(curve frame [bucket_size_mb, predicted_ns], optimum_mb) from the fitted α-β model of the run with the
    most collectives, or (None, None) when no fit exists. total bytes / buckets per step come from rank 0's
    collectives in one step."""
    import numpy as np

    predict_overhead, optimal_bucket_bytes = _costmodel()
    best = max(group.runs, key=lambda r: len(r.analysis.collectives))
    cm = best.analysis.cost_model
    col = best.analysis.collectives
    if cm is None or not len(cm) or not len(col):
        return None, None
    fit = cm.sort_values("n_points").iloc[-1]
    o_ns, w = float(fit["o_us"]) * 1e3, float(fit["w_gb_per_s"])  # 1 GB/s = 1 byte/ns
    c0 = col[(col["rank"] == col["rank"].min()) & col["step"].notna()]
    if not len(c0) or not np.isfinite([o_ns, w]).all() or w <= 0:
        return None, None
    total = float(c0.groupby("step")["bytes"].sum().median())
    measured = comp["bucket_size_mb"].dropna().astype(float) * 2**20
    lo = min([total / 1000, *measured]) if len(measured) else total / 1000
    hi = max([total, *measured]) if len(measured) else total
    sizes = np.geomspace(max(lo, 1 << 16), max(hi, 1 << 17), 60)
    pred = [float(predict_overhead(o_ns, w, total, max(1, int(np.ceil(total / b))))) for b in sizes]
    curve = pd.DataFrame({"bucket_size_mb": sizes / 2**20, "predicted_ns": pred})
    return curve, float(optimal_bucket_bytes(o_ns, w, total)) / 2**20


def render_sweep_page(group: Group) -> str:
    from ddp_profile.plots import alpha_beta_figure, bucket_sweep_figure

    comp = _compare(group.runs)
    src = _group_source(group)
    curve, opt = sweep_model(group, comp)
    pooled = pd.concat([r.analysis.collectives for r in group.runs], ignore_index=True)
    best = max(group.runs, key=lambda r: len(r.analysis.collectives))
    body = "\n".join([
        figure_div(bucket_sweep_figure(comp, curve, opt, source=src), "sweep"),
        "<p>Model: predicted communication overhead for the measured gradient size split into buckets, using "
        f"the α-β fit of run <a href='{esc(best.page)}'>{esc(best.name)}</a>.</p>",
        figure_div(alpha_beta_figure(pooled, best.analysis.cost_model, source=src), "alphabeta"),
        table(comp.drop(columns=["page"]), "Numbers"),
    ])
    return page(f"Bucket sweep: {group.title}", body, src)


# ---- index, folder writing, entry points ----------------------------------------------------------------

INDEX_COLUMNS = ["strategy", "bucket_size_mb", "model", "dtype", "world_size", "gpu_name", "n_steps", "step_ns",
                 "exposed_comm_ns", "comm_tail_ns", "overlap_pct", "efficiency_pct"]


def render_index(runs: list[Run], groups: list[Group], failures: list[str]) -> str:
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


def write_report(runs: list[Run], out_dir: Path, failures: list[str] = (), progress=None) -> dict:
    """Render every page into ``out_dir`` atomically; returns {page name: bytes}."""
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
            _write(tmp / g.page, render_sweep_page(g) if g.kind == "sweep" else render_group_page(g))
            sizes[g.page] = (tmp / g.page).stat().st_size
        _write(tmp / "index.html", render_index(runs, groups, list(failures)))
        sizes["index.html"] = (tmp / "index.html").stat().st_size

    write_report_dir(out_dir, fill)
    return sizes


def build_report(paths: list, out_dir: Path, jobs: int = 1, progress=None) -> tuple[dict, list[str]]:
    """Find, load, analyse and render; the library behind `ddp-profile report`."""
    found = discover(paths)
    if not found:
        raise TraceError(f"no nsys exports (*.sqlite, *.sqlite.xz) under {', '.join(map(str, paths))}; "
                         "record runs with scripts/profile_*.sh or pass export paths")
    runs, failures = load_runs(found, jobs, progress)
    if not runs:
        raise TraceError("no run could be loaded: " + "; ".join(failures))
    return write_report(runs, out_dir, failures, progress), failures


def benchmark_run_page(run: Run) -> dict:
    """Time rendering one run page and report its size (for the perf notes; not a test)."""
    t0 = time.perf_counter()
    text = render_run_page(run)
    return {"render_s": round(time.perf_counter() - t0, 3), "page_bytes": len(text.encode()),
            "kernels": len(run.trace.kernels)}
