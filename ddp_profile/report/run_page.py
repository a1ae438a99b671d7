"""The page of one run: headline numbers, the timeline with a step selector, per-step bars, whether the step
is launch-bound, the α-β fit and the collective, contention and per-kernel overlap tables.

Plots come from :mod:`ddp_profile.plots` (imported when a page is rendered); this module only lays them out.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ddp_profile.analysis.launches import STEP_TABLE
from ddp_profile.nsys.files import export_stem
from ddp_profile.report.answer_text import per_rank_of, verdict_of
from ddp_profile.report.compare import median_step_ns
from ddp_profile.report.glossary import fmt_ms
from ddp_profile.report.html import drop_empty_columns, esc, figure_div, page, script_json, table
from ddp_profile.report.perfetto import link_html as perfetto_link
from ddp_profile.report.runs import Run, program_text


def source_of(run: Run, steps=None) -> str:
    from ddp_profile.plots import describe_source

    gpus = getattr(run.trace, "ranks", None)
    gpu = (
        None
        if gpus is None or not len(gpus)
        else str(gpus["gpu_name"].dropna().iloc[0])
        if gpus["gpu_name"].notna().any()
        else None
    )
    if steps is None:
        s = getattr(run.analysis, "steps", None)
        steps = s["step"].dropna().unique() if s is not None and len(s) else None
    return describe_source(run.meta, gpu, steps)


HEADLINE = (
    "step_ns",
    "span_ns",
    "compute_ns",
    "comm_ns",
    "overlap_ns",
    "exposed_comm_ns",
    "exposed_wait_ns",
    "exposed_transfer_ns",
    "comm_tail_ns",
    "job_comm_tail_ns",
    "param_sync_ns",
    "idle_ns",
    "comm_pct",
    "exposed_comm_pct",
    "overlap_pct",
    "wait_pct_of_comm",
)


def headline_values(run: Run) -> dict:
    """The run's headline numbers: the analysis summary (medians over (rank, step) rows of the step table:
    the GPU window of each step) plus the medians of the step-table columns newer analyses add."""
    summary = dict(run.analysis.summary())
    s = run.analysis.steps
    if s is None or not len(s):
        return summary
    for col in HEADLINE:  # columns newer analyses add (and any the summary lacks): step-table medians
        if col in s and summary.get(col) is None:
            summary[col] = float(pd.to_numeric(s[col], errors="coerce").median())
    summary.setdefault("n_steps", int(s["step"].nunique()))
    summary.setdefault("n_ranks", int(s["rank"].nunique()))
    return summary


def _headline(summary: dict, per_rank: dict | None = None, inferred: bool = False) -> str:
    """The headline table; a metric whose ranks differ more than 2× (``per_rank``, from the analysis) shows
    each rank's value instead of the pooled median."""
    from ddp_profile.report.glossary import METRICS, cell_text

    per_rank = per_rank or {}

    def value(k):
        if isinstance(per_rank.get(k), dict) and per_rank[k]:
            return "; ".join(
                f"rank {r}: {cell_text(k, v)}"
                for r, v in sorted(per_rank[k].items(), key=lambda kv: int(kv[0]))
            )
        return cell_text(k, summary[k])

    keys: tuple[str, ...] = HEADLINE
    nr = summary.get("n_ranks")
    if nr == 1 and not summary.get(
        "comm_ns"
    ):  # one GPU, no NCCL: a column of communication zeros says nothing
        keys = tuple(k for k in HEADLINE if k in ("step_ns", "span_ns", "compute_ns", "idle_ns"))

    def definition(k):  # inferred steps have no NVTX range: say what the step is instead
        d = METRICS[k][1]
        return (
            d.replace(
                "the step's NVTX range", "the step (inferred from the kernel sequence: no step NVTX ranges)"
            )
            if inferred
            else d
        )

    rows = [(METRICS[k][0], value(k), definition(k)) for k in keys if k in summary and summary[k] is not None]
    n = (
        f"{nr if nr is not None else '?'} rank{'' if nr == 1 else 's'} × {summary.get('n_steps', '?')} "
        f"step{'' if summary.get('n_steps') == 1 else 's'}"
    )
    extra = "; per-rank values where ranks differ > 2×" if any(k in per_rank for k in HEADLINE) else ""
    return table(
        pd.DataFrame(rows, columns=["metric", "value", "definition"]),
        f"Headline: medians over {n} (step = GPU window{extra})",
    )


def beside_other(kernel_overlap: pd.DataFrame | None) -> pd.DataFrame | None:
    """The per-name overlap table with its columns named for what they are there: time beside a kernel of
    the other class (NCCL for compute, compute for NCCL), not the contention table's time under NCCL nor
    the headline's comm hidden."""
    if kernel_overlap is None:
        return None
    return kernel_overlap.rename(
        columns={"overlapped_ns": "beside_other_ns", "overlap_pct": "beside_other_pct"}
    )


def collective_summary(col: pd.DataFrame) -> pd.DataFrame:
    """Collectives grouped by (collective, dtype, bucket, bytes): count and median times (µs); no bucket column
    when no collective has one (a job without the harness's NVTX ranges)."""
    if col is None or not len(col):
        return pd.DataFrame()
    c = col.assign(
        bucket=col["bucket"].astype("object").where(col["bucket"].notna(), "–"),
        dtype=col["dtype"].astype("object").where(col["dtype"].notna(), "–"),
    )
    g = c.groupby(["collective", "dtype", "bucket", "bytes"], dropna=False)
    out = g.agg(
        count=("duration_ns", "size"),
        duration_us=("duration_ns", "median"),
        wait_us=("wait_ns", "median"),
        transfer_us=("transfer_ns", "median"),
        busbw_gb_per_s=("busbw_gb_per_s", "median"),
    ).reset_index()
    for c_ in ("duration_us", "wait_us", "transfer_us"):
        out[c_] = pd.to_numeric(out[c_], errors="coerce") / 1e3
    return out if col["bucket"].notna().any() else out.drop(columns="bucket")


def _nsys_rep_hint(trace) -> str:
    """Where the .nsys-rep sits (if it does) so the run can be opened in the nsys GUI."""
    reps = []
    for p in map(Path, getattr(trace, "paths", None) or []):
        stem = export_stem(p)
        rep = p.with_name(stem + ".nsys-rep")
        if rep.exists():
            reps.append(str(rep))
    if not reps:
        return (
            "<p class='note'>No .nsys-rep beside the export; re-profile or keep the .nsys-rep to inspect "
            "this run in the Nsight Systems GUI.</p>"
        )
    return (
        "<p>Open in the Nsight Systems GUI: "
        + ", ".join(f"<code>nsys-ui {esc(r)}</code>" for r in reps)
        + "</p>"
    )


# The run page's launch columns: a subset of the one table (analysis.launches.STEP_TABLE), in its order; the
# step there is the host NVTX range, so its step_ns is shown as host_range_ns.
PAGE_LAUNCH_COLUMNS = {
    "rank",
    "step",
    "step_ns",
    "gpu_busy_ns",
    "gpu_idle_ns",
    "idle_pct",
    "launches",
    "host_us_per_launch",
    "gpu_us_per_kernel",
    "launch_bound",
}
LAUNCH_TABLE = tuple(
    (col, "host_range_ns" if col == "step_ns" else col)
    for col, _, _ in STEP_TABLE
    if col in PAGE_LAUNCH_COLUMNS
)


def launch_bound_majority(run: Run):
    """True when most (rank, step) rows of the launch check are launch-bound; None without the check."""
    res = run.launches
    if res is None or res.steps.empty:
        return None
    return bool(2 * int(res.steps["launch_bound"].sum()) > len(res.steps))


def launch_block(run: Run) -> str:
    """ "Is the step launch-bound?": the per-rank verdicts and the per-step table of ``run.launches``
    (computed where the run was loaded, :func:`ddp_profile.report.launch_diagnosis`), or why it is missing."""
    from ddp_profile.analysis.launches import IDLE_THRESHOLD_PCT

    head = "<h2>Is the step launch-bound?</h2>"
    res = run.launches
    if res is None or not res.made:
        why = (
            "; ".join(res.notes) if res is not None else "the launch diagnosis was not computed for this run"
        )
        return f"{head}<p class='note'>No launch-bound check for this run: {esc(why)}</p>"
    if res.steps.empty:
        why = "; ".join(res.notes) or "no step ranges were found"
        return (
            f"{head}<p class='note'>No launch-bound check for this run: no steps to diagnose ({esc(why)})</p>"
        )
    s = res.steps
    df = pd.DataFrame({h: s[c] for c, h in LAUNCH_TABLE})
    window = run.analysis.steps["step_ns"].median() if len(run.analysis.steps) else float("nan")
    lines = "".join(f"<li>{esc(v)}</li>" for v in res.verdicts())
    shown = set(getattr(run.analysis, "notes", None) or [])  # the page lists the analysis' notes once already
    notes = "".join(f"<li class='note'>{esc(n)}</li>" for n in res.notes if n not in shown)
    inferred = any("steps inferred from the GPU trace" in str(n) for n in res.notes)
    host = (
        "host range, inferred from the kernel launches (no step NVTX ranges)"
        if inferred
        else "<b>host</b> NVTX range"
    )
    host_ns = s["step_ns"].median()
    if window > host_ns:  # the GPU window's median can be the longer one (the host runs ahead of the GPU)
        versus = (
            f"it is shorter than the GPU window used everywhere else on this page (median {fmt_ms(window)}): the "
            "host range and the GPU window start and end at different moments, as the host runs ahead of "
            "the GPU; the GPU idle here is measured over the host range."
        )
    else:
        versus = (
            f"it is longer than the GPU window used everywhere else on this page (median {fmt_ms(window)}) "
            "by the time between the host entering the step and its first kernel starting, and the GPU "
            "idle here counts that time too."
        )
    return (
        f"{head}<p>A step is launch-bound when the GPU idles more than {IDLE_THRESHOLD_PCT:g} % of the step's "
        "host range and the host needs longer per kernel launch (step time minus synchronize wait, ÷ "
        "launches) than the GPU needs per kernel: then fewer, larger kernels help, a faster GPU does not. "
        f"Same numbers as <code>ddp-profile launches</code>. These columns measure the step's {host} "
        f"(median {fmt_ms(host_ns)}): {versus}</p>"
        f"<ul class='verdicts'>{lines}{notes}</ul>"
        + table(df, "Launch diagnosis per rank and step", max_rows=64)
    )


def model_advice(run: Run) -> str:
    """The trace's own prediction (analysis.recommend, first row), when it has one and predicts a gain."""
    rec = getattr(run.analysis, "recommendation", None)
    if rec is None or not len(rec):
        return ""
    r = rec.iloc[0]
    gain = r.get("predicted_gain_ns")
    if gain is None or pd.isna(gain) or not gain > 0:
        upper = r.get("upper_gain_ns")
        if upper is not None and not pd.isna(upper) and upper > 0:
            return (
                " The model replay of this trace's buckets predicts no gain from a larger cap; compute loses an "
                f"estimated {fmt_ms(upper)} per step beside NCCL, so the analysis suggests trying "
                f"<code>{esc(r.get('flags'))}</code> (that loss bounds the gain; it is not a prediction)."
            )
        return " The model replay of this trace's buckets predicts no gain from a larger cap."
    return (
        f" The model replay of this trace's buckets predicts <code>{esc(r.get('flags'))}</code> at "
        f"{fmt_ms(r.get('predicted_step_ns'))} per step ({fmt_ms(gain)} less; a prediction, not a "
        "measurement)."
    )


def advice_for(run: Run, context: dict | None) -> str:
    """:func:`measured_advice` plus the trace's own model prediction (:func:`model_advice`)."""
    return measured_advice(run, context) + model_advice(run)


def measured_advice(run: Run, context: dict | None) -> str:
    """What to change, with the expected gain and the evidence: the bucket sweep of the run's group (the
    measured best cap and the model's b*), else the fastest run of its strategy comparison (measured)."""
    from ddp_profile.report.measures import UNPROFILED
    from ddp_profile.report.verdicts import label, rank_time, ranked

    ctx = context or {}
    # a trace without the harness's JSON: its ranks say how many GPUs took part
    ws = int(run.meta.get("world_size") or len(getattr(run.trace, "ranks", ())) or 1)
    mine = [g for g in ctx.get("groups", ()) if run in g.runs]
    t = median_step_ns(run)  # the same population as the comparison's step_ns
    if ws <= 1:
        used = [g for g in mine if g.kind in ("strategies", "scaling")]
        where = ", ".join(f"<a href='{esc(g.page)}'>{esc(g.kind)}</a>" for g in used)
        return (
            "<b>Nothing to change for communication</b>: one GPU; this run is the baseline the "
            f"multi-GPU runs' efficiency is measured against{' (' + where + ')' if where else ''}."
        )
    for g in mine:
        f = ctx.get("sweeps", {}).get(g.page)
        if g.kind != "sweep" or not f or f.get("best_cap") is None:
            continue
        cap, best = f["best_cap"], f["best_step_ns"]
        bstar = f.get("b_star_mib")
        model = (
            f" The cost model's optimum b* = {bstar:,.0f} MiB"
            + (
                " is that cap."
                if bstar is not None and abs(bstar - cap) / cap < 0.5
                else " was not measured."
            )
            if bstar is not None
            else ""
        )
        link = f"<a href='{esc(g.page)}'>bucket sweep</a>"
        mine_cap = run.meta.get("bucket_mb")
        if run.meta.get("strategy") == "bucketed" and mine_cap is not None and float(mine_cap) == cap:
            return (
                f"<b>Keep the bucket cap at {cap:g} MiB</b>: it is the fastest cap of the measured {link}."
                + model
            )
        gain = t - best
        if gain > 0:
            return (
                f"<b>What to change: bucketed with a {cap:g} MiB cap</b> measured {fmt_ms(best)} per step "
                f"(trace), {fmt_ms(gain)} ({100 * gain / t:.1f} %) less than this run's {fmt_ms(t)} (trace; "
                f"evidence: the {link}).{model}"
            )
    for g in mine:
        comp = ctx.get("comps", {}).get(g.page)
        if g.kind != "strategies" or comp is None:
            continue
        r = ranked(comp)
        if not len(r):
            continue
        best = r.iloc[0]
        link = f"<a href='{esc(g.page)}'>strategy comparison</a>"
        # the comparison's ranked time (un-profiled where the set has it), so this advice and the
        # comparison name the same winner with the same numbers
        own = comp[comp["page"] == run.page]
        t_run = rank_time(own.iloc[0]) if len(own) else t
        gain = t_run - rank_time(best)
        how = "un-profiled" if best.get("rank_basis") == UNPROFILED else "trace"
        if best["page"] == run.page or not gain > 0:
            return (
                f"<b>Keep this strategy</b>: no run of the measured {link} has a shorter median step "
                f"({how}; this run {fmt_ms(t_run)})."
            )
        return (
            f"<b>What to change: switch to {esc(label(best))}</b>, measured {fmt_ms(rank_time(best))} per "
            f"step ({how}), {fmt_ms(gain)} ({100 * gain / t_run:.1f} %) less than this run's "
            f"{fmt_ms(t_run)} ({how}; evidence: the {link}).{memory_trade(best, own)}"
        )
    return NO_COMPARISON


NO_COMPARISON = "No comparison holds this run, so no measured alternative to recommend."


TWO_NODE_FOLDER = "two-node"
"""The campaign's folder of runs launched as two torchrun agents (scripts/campaign.sh, set two-node)."""


def two_node_note(run: Run) -> str:
    """For a run of ``two-node/``: its two "nodes" are two torchrun agents on one host, so NCCL between
    them never leaves that machine. '' for any other run."""
    if run.folder.rsplit("/", 1)[-1] != TWO_NODE_FOLDER:
        return ""
    ws = run.meta.get("world_size")
    per = f" of {int(ws) // 2} GPU{'s' if int(ws) // 2 != 1 else ''} each" if ws and int(ws) % 2 == 0 else ""
    host = f" ({esc(run.host)}, hosts.txt)" if run.host else ""
    return (
        f"<p class='note'>Two-node layout on one machine: the two \"nodes\" of this run are two torchrun "
        f"agents{per} on one host{host}, joined by one rendezvous (folder {TWO_NODE_FOLDER}/). Their NCCL "
        "traffic never leaves that host, so these times do not measure a network between machines.</p>"
    )


def memory_trade(best, own) -> str:
    """' It peaks at 60.00 GiB per GPU against this run's 40.00 GiB (run JSONs).' when the faster run's
    peak allocated memory (largest rank) is over 10 % above this run's; '' otherwise or when unknown."""
    from ddp_profile.report.glossary import fmt_gib, missing

    if not len(own):
        return ""
    theirs, mine = best.get("peak_allocated_bytes"), own.iloc[0].get("peak_allocated_bytes")
    if missing(theirs) or missing(mine) or not float(theirs) > 1.1 * float(mine):
        return ""
    return (
        f" It trades memory: it peaks at {fmt_gib(theirs)} allocated per GPU against this run's "
        f"{fmt_gib(mine)} (run JSONs)."
    )


# Deep link: the selected rank and step are kept in location.hash as #rank=R&step=N (#step=N with every rank
# shown; an old #step=N link still opens its step) and restored from it on load and on hashchange. A step the
# trace lacks: a one-line notice says which step is shown instead, and the address is rewritten to it.
HASH_JS = """function ddpHash(div){var ss=document.getElementById('step-select'),rs=document.getElementById('rank-select');
function num(o){return o.value==='all'?'all':o.text.replace(/\\D+/g,'');}
function val(){return ss.value==='all'?'all':+ss.value;}
function read(){var s=/(?:^#|&)step=(\\d+|all)/.exec(location.hash),r=/(?:^#|&)rank=(\\d+)/.exec(location.hash),changed=false,
found=false,note=document.getElementById('step-notice');
if(s)for(var i=0;i<ss.options.length;i++)if(num(ss.options[i])===(s[1]==='all'?'all':String(+s[1]))){found=true;if(ss.selectedIndex!==i){ss.selectedIndex=i;changed=true;}}
var rv=r?r[1]:'';if(location.hash&&rs.value!==rv&&Array.prototype.some.call(rs.options,function(o){return o.value===rv;})){
rs.value=rv;changed=true;}
if(note){note.hidden=!(s&&!found);note.textContent=s&&!found?'step '+(+s[1])+' is not in this trace; showing step '+
num(ss.options[ss.selectedIndex])+'.':'';}
if(s&&!found)write();return changed;}
function write(){var h=(rs.value===''?'#':'#rank='+rs.value+'&')+'step='+num(ss.options[ss.selectedIndex]);
if(location.hash!==h)history.replaceState(null,'',h);}
function rank(){return rs.value===''?null:+rs.value;}
function quiet(){var n=document.getElementById('step-notice');if(n){n.hidden=true;n.textContent='';}}
ss.addEventListener('change',function(){ddpShowStep(div,val());write();quiet();});
rs.addEventListener('change',function(){ddpShowRank(div,rank());write();});
window.addEventListener('hashchange',function(){if(read())ddpShowRank(div,rank(),val());});
read();return {step:val(),rank:rank()};}"""


def render_run_page(run: Run, context: dict | None = None) -> str:
    """Verdict, headline, timeline with a step selector (deep-linked), per-step bars, launch-bound check,
    α-β fit, collective/contention tables. ``context``: {"groups": the report's groups, "comps": {group
    page: comparison}, "sweeps": {sweep page: facts}} for the advice and the breadcrumbs."""
    from ddp_profile.plots import alpha_beta_figure, exposed_comm_figure, step_breakdown
    from ddp_profile.plots.timeline import encode_for_page, page_config, timeline_steps
    from ddp_profile.plots.timeline_js import TIMELINE_JS
    from ddp_profile.report.run_blocks import (
        answer_block,
        comm_kinds_block,
        critical_path_block,
        memory_block,
        own_job,
        phases_inferred,
    )
    from ddp_profile.report.verdicts import run_verdict

    a, t = run.analysis, run.trace
    src = source_of(run)
    inferred = phases_inferred(a)
    data = timeline_steps(
        t.kernels,
        a.phases,
        a.steps,
        a.collectives,
        host_calls=run.host_calls,
        nvtx=getattr(t, "nvtx", None),
        inferred=inferred,
    )
    idx = len(data["steps"]) // 2
    options = "".join(
        f'<option value="{i}"{" selected" if i == idx else ""}>{esc(s["label"])}</option>'
        for i, s in enumerate(data["steps"])
    )
    if len(data["steps"]) > 1:
        options += "<option value='all'>all steps</option>"
    bands = (
        'bands inferred from the launching threads (no phase NVTX ranges; labelled "inferred")'
        if inferred
        else "the step's NVTX ranges, under your own range names"
    )
    cpu = (
        (
            "; below it, the rank's CPU main thread: its kernel launches (grey) and synchronisation calls, "
            "where the host waits for the GPU (vermilion)"
        )
        if data["rows"] and any("CPU" in r for r in data["rows"])
        else ""
    )
    ranks = sorted(set(data["row_rank"]))
    rank_options = "<option value='' selected>every rank</option>" + "".join(
        f"<option value='{r}'>rank {r}</option>" for r in ranks
    )
    # read the address first, so the timeline is drawn once, at the linked step and rank
    start = (
        "(function(){var div=document.getElementById('timeline'),h=ddpHash(div);"
        "ddpTimeline(div,JSON.parse(document.getElementById('tl-data').textContent),h.step,"
        f"{script_json(page_config(data, src))},h.rank);}})();"
    )
    notes = "".join(f"<li>{esc(n)}</li>" for n in (getattr(a, "notes", None) or []))
    summary = headline_values(run)
    own = own_job(run)

    def shown(df, caption, **kw):
        """A table; on an own job's page without the columns only the harness fills, and nothing when empty."""
        if own:
            if df is None or not len(df):
                return ""
            df = drop_empty_columns(df)
        return table(df, caption, **kw)

    advice = advice_for(run, context)
    # no comparison to speak of on an own job, nor where the analysis already says what to change
    has_rule = bool((verdict_of(a) or {}).get("what_to_change"))
    if (own or has_rule) and advice.startswith(NO_COMPARISON):
        advice = advice.removeprefix(NO_COMPARISON).lstrip()
    verdict = run_verdict(
        summary,
        a.steps,
        launch_bound_majority(run),
        advice,
        run.meta.get("world_size") or summary.get("n_ranks"),
        run.meta,
        verdict=getattr(a, "verdict", None),
        per_rank=per_rank_of(a),
    )
    groups = [g for g in (context or {}).get("groups", ()) if run in g.runs]
    prog = program_text(run.meta)
    body = "\n".join(
        [
            f"<p>Program (program.json beside the trace): {esc(prog)}</p>" if prog else "",
            two_node_note(run),
            answer_block(run),
            _headline(
                summary,
                per_rank_of(a),
                inferred=any(
                    "steps inferred from the GPU trace" in str(n) for n in (getattr(a, "notes", None) or [])
                ),
            ),
            f"<ul class='notes'>{notes}</ul>" if notes else "",
            _nsys_rep_hint(t),
            perfetto_link(run, esc),
            "<h2>Timeline</h2><p>One row per rank × stream; bars are kernels coloured by class. Each rank's first "
            f"row holds its phases ({esc(bands)}) and the black strip of the comm tail (end of backward to end of "
            f"the last collective){cpu}. Each kind has its own lane in a row; bars narrower than a pixel merge with "
            "neighbours of the same kind only (hover says how many) and separate as you zoom. Drag to zoom, "
            "double-click to reset (keyboard: + / − zoom, arrows pan, 0 resets); click a legend entry to hide or "
            "show its bars; <i>Find kernel</i> outlines every kernel whose name holds the text and steps through "
            "them. Choose <i>all steps</i> to see the steps end to end. The selected rank and step are in "
            "the address (#rank=R&amp;step=N, #step=all, or #step=N with every rank), so a link opens them.</p>",
            f"<label>Step: <select id='step-select'>{options}</select></label> "
            f"<label>Rank: <select id='rank-select'>{rank_options}</select></label>"
            "<p id='step-notice' class='note' role='status' hidden></p>",
            f"<script type='application/json' id='tl-data'>{script_json(encode_for_page(data))}</script>",
            f"<script>{TIMELINE_JS}\n{HASH_JS}</script>",
            # role=figure, not img: the chart holds controls (legend toggles, a focusable canvas)
            f'<div id="timeline" class="figure" role="figure" aria-label="Timeline · {esc(data["steps"][idx]["label"])}">'
            f"</div><script>{start}</script>",
            figure_div(exposed_comm_figure(a.steps, source=src), "exposed", lazy=True),
            "<h2>Per-step breakdown</h2>",
            figure_div(step_breakdown(a.steps, source=src), "steps", lazy=True),
            critical_path_block(run),
            launch_block(run),
            comm_kinds_block(run),
            memory_block(run),
            "<h2>Collectives</h2>",
            figure_div(alpha_beta_figure(a.collectives, a.cost_model, source=src), "alphabeta", lazy=True)
            if a.collectives["bytes"].notna().any()
            else "<p class='note'>No collective sizes in this trace (the ddp-profile harness records them as NVTX "
            "ranges), so no α-β plot.</p>",
            shown(a.cost_model, "α-β fit per collective (t = o + bytes / w)"),
            shown(
                collective_summary(a.collectives),
                "Collectives by bucket (medians)"
                if a.collectives["bucket"].notna().any()
                else "Collectives by kind and size (medians)",
            ),
            shown(
                a.contention,
                "Contention: compute kernels slowed while NCCL runs (counted: kernels seen both "
                "alone and under NCCL; the last column sums every instance under NCCL)",
            ),
            shown(beside_other(getattr(a, "kernel_overlap", None)), "Overlap per kernel name", max_rows=40),
            (
                "<h2>Compared on</h2><ul>"
                + "".join(
                    f"<li><a href='{esc(g.page)}'>{esc(g.kind)}: {esc(g.title)}</a></li>" for g in groups
                )
                + "</ul>"
            )
            if groups
            else "",
        ]
    )
    crumbs = [(f"{g.kind}: {g.title}", g.page) for g in groups[:1]] + [(f"Run {run.name}", None)]
    keys = (
        list(HEADLINE)
        + [c for c, _ in LAUNCH_TABLE]
        + [
            "host_range_ns",
            "gpu_busy_ns",
            "gpu_idle_ns",
            "beside_other_ns",
            "beside_other_pct",
            "o_us",
            "w_gb_per_s",
            "wait_us",
            "transfer_us",
            "busbw_gb_per_s",
            "slowdown_pct",
            "lost_ns",
            "critical_rank",
            "host_ns",
            "rest_ns",
            "straggler_steps",
            "last_arrival_pct",
            "kernels_per_step",
            "after_backward_ns",
            "memory_bytes",
            "peak_allocated_bytes",
            "peak_reserved_bytes",
            "optimizer_state_bytes",
        ]
    )
    if own:  # no run JSON: no definitions of what only the harness's run JSON records
        keys = [
            k
            for k in keys
            if k not in ("peak_allocated_bytes", "peak_reserved_bytes", "optimizer_state_bytes")
        ]
    return page(f"Run {run.name}", body, src, crumbs=crumbs, verdict=verdict, glossary=keys)
