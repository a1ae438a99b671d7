"""Pages that put several runs side by side: the index, the strategy comparison and the scaling page.

Which runs share a page is decided in :mod:`ddp_profile.report.runs`; the bucket-sweep page lives in
:mod:`ddp_profile.report.sweep`. The numbers on all of them come from one comparison,
:func:`ddp_profile.report.compare.comparison`.
"""

from __future__ import annotations

import pandas as pd

from ddp_profile.fmt import missing
from ddp_profile.report.answer_text import verdict_of
from ddp_profile.report.compare import (
    comparison,
    group_source,
    one_step_kernels,
    overlap_caption,
    overlap_runs,
)
from ddp_profile.report.glossary import fmt_cap, fmt_ms, fmt_pct, header
from ddp_profile.report.html import drop_empty_columns, esc, figure_div, page, run_links, table
from ddp_profile.report.runs import Group, Run, strategy_key
from ddp_profile.report.verdicts import bound_cell, ranked, strategy_verdict

INDEX_COLUMNS = [
    "strategy",
    "bucket_mb",
    "model",
    "dtype",
    "world_size",
    "gpu_name",
    "n_steps",
    "step_ns",
    "unprofiled_step_ns",
    "profiler_overhead_pct",
    "exposed_comm_ns",
    "comm_tail_ns",
    "overlap_pct",
    "efficiency_pct",
    "baseline",
]
TABLE_DROP = [
    "page",
    "baseline_page",
    "predicted_overhead_ns",
    "run",
    "model",
    "dtype",
    "gpu_name",
    # the ranked time repeats step_ns or unprofiled_step_ns; its basis is stated above the table
    "rank_step_ns",
    "rank_min_ns",
    "rank_max_ns",
    "rank_basis",
]
TABLE_FIRST = [
    "run",
    "strategy",
    "bucket_mb",
    "variant",
    "world_size",
    "unprofiled_step_ns",
    "unprofiled_repeats",
    "step_ns",
    "profiler_overhead_pct",
    "peak_allocated_bytes",
    "peak_reserved_bytes",
    "optimizer_state_bytes",
]
"""Numbers tables start with what the verdict compares: both step times, the profiler's cost, memory."""
NUMBERS_MAIN = [
    "run",
    "strategy",
    "bucket_mb",
    "variant",
    "world_size",
    "unprofiled_step_ns",
    "step_ns",
    "profiler_overhead_pct",
    "peak_allocated_bytes",
    "compute_ns",
    "exposed_comm_ns",
    "comm_tail_ns",
    "overlap_pct",
    "efficiency_pct",
]
SCALING_MAIN = [
    "run",
    "strategy",
    "bucket_mb",
    "world_size",
    "unprofiled_step_ns",
    "step_ns",
    "compute_ns",
    "comm_ns",
    "exposed_comm_ns",
    "comm_pct",
    "speedup_vs_1gpu",
    "efficiency_pct",
    "serial_fraction",
    "samples_per_s",
]
"""The columns a comparison's first table shows (they fit a 1280-pixel screen); the run name and every other
column follow in a second, folded table, so no table scrolls sideways to reach its numbers."""


def host_text(runs: list[Run]) -> str:
    """Which host recorded the runs (``hosts.txt`` beside the traces), in one sentence."""
    known: dict[str | None, list[Run]] = {}
    for r in runs:
        known.setdefault(getattr(r, "host", None), []).append(r)
    if set(known) == {None}:
        if any(getattr(r, "hosts_file", False) for r in runs):
            return (
                "Which host recorded these runs is not known: hosts.txt beside the traces does not list "
                "them. "
            )
        return "Which host recorded each run is not recorded (no hosts.txt beside the traces). "
    if len(known) == 1:
        return f"Every run here was recorded on {esc(next(iter(known)))} (hosts.txt). "
    parts = "; ".join(
        f"{esc(h or 'not listed in hosts.txt')}: "
        + ", ".join(f"<a href='{esc(r.page)}'>{esc(r.name)}</a>" for r in rs)
        for h, rs in sorted(known.items(), key=lambda kv: -len(kv[1]))
    )
    return (
        f"These runs come from {len(known)} hosts (hosts.txt), so differences between hosts mix the host "
        f"with the strategy: {parts}. "
    )


def numbers_table(comp: pd.DataFrame, caption: str, sort: str = "rank_step_ns", main=NUMBERS_MAIN) -> str:
    """The comparison as two tables: the ``main`` columns, then (folded) the run and every other column;
    run and baseline names link to their pages; both ranked by ``sort`` (default: the time the set is ranked by,
    :mod:`ddp_profile.report.measures`); a note when memory is missing from run JSONs."""
    sort = sort if sort in comp else "step_ns"
    c = comp.sort_values(sort, na_position="last", kind="stable") if sort in comp else comp
    shown = c.drop(columns=[x for x in TABLE_DROP if x != "run"], errors="ignore")
    # a column no run of the set has a value for (no lever variant, no un-profiled timing, no run JSON's
    # memory) is dropped: a column of blank cells or dashes says nothing
    shown = drop_empty_columns(shown)
    first = [x for x in TABLE_FIRST if x in shown]
    shown = shown[first + [x for x in shown.columns if x not in first]]
    links = {"run": list(c["page"]), "baseline": list(c["baseline_page"])}
    head = [x for x in main if x in shown]
    rest = ["run"] * ("run" in shown) + [x for x in shown.columns if x not in head]
    more = ""
    if len(rest) > 1:
        cols = ", ".join(esc(header(x)[0]) for x in rest[1:])
        more = (
            f"<details><summary>More columns: {cols}</summary>"
            + table(shown[rest], f"{caption}: more columns", links=links)
            + "</details>"
        )
    return table(shown[head], caption, links=links) + more + memory_note(c)


def memory_note(comp: pd.DataFrame) -> str:
    """Says which runs' JSONs carry no memory figures (their memory cells are blank)."""
    from ddp_profile.report.measures import MEMORY_KEYS

    cols = [c for c in MEMORY_KEYS if c in comp]
    if not cols or not len(comp):
        return ""
    lacking = comp[comp[cols].isna().all(axis=1)]
    if not len(lacking):
        return ""
    if len(lacking) == len(comp):
        return (
            "<p class='note'>Memory columns blank: no run JSON here records peak GPU memory or optimizer-state "
            "bytes (the ddp-profile harness writes them; bare exports and older runs have none).</p>"
        )
    return (
        "<p class='note'>Memory columns blank for "
        + ", ".join(esc(n) for n in lacking["run"])
        + ": their run JSONs record no peak GPU memory or optimizer-state bytes.</p>"
    )


def ranked_by(comp: pd.DataFrame) -> str:
    """'un-profiled step time' / 'profiled (trace) step time': what a comparison is ranked by."""
    from ddp_profile.report.measures import UNPROFILED

    bases = set(comp["rank_basis"].dropna()) if "rank_basis" in comp else set()
    if bases == {UNPROFILED}:
        return "un-profiled step time"
    return "profiled (trace) step time" if bases else "step time"


def render_group_page(group: Group) -> str:
    """Strategy comparison: the verdict, ranked difference bars, the overlap picture, the numbers."""
    from ddp_profile.plots import overlap_picture
    from ddp_profile.plots.compare import ranked_step_bars, run_label

    comp = comparison(group.runs)
    src = group_source(group)
    picked = overlap_runs(group.runs, comp)
    picture = (
        pd.concat([one_step_kernels(r, run_label(r.meta)) for r in picked], ignore_index=True)
        if picked
        else pd.DataFrame(columns=["run", "kind", "name", "start_ns", "end_ns"])
    )
    multi = ranked(comp)
    bases = sorted({(b.name, b.page) for r in group.runs if (b := r.baseline) is not None})
    body = "\n".join(
        [
            "<p>"
            + host_text(group.runs)
            + times_text(comp)
            + (
                "Efficiency vs 1 GPU = step time of the 1-GPU baseline ("
                + ", ".join(f"<a href='{esc(p)}'>{esc(n)}</a>" for n, p in bases)
                + ") / step time of the run (fixed per-GPU "
                "batch: 100 % is perfect scaling)."
                if bases
                else "No 1-GPU run of this model and dtype here, so no efficiency."
            )
            + "</p>",
            figure_div(
                ranked_step_bars(ranked_frame(multi), source=src, time_label=ranked_by(comp)),
                "bars",
                alt=strategy_alt(multi),
            ),
            "<h2>Does it overlap?</h2><p>Rank 0, the middle profiled step of each run, aligned at step start: "
            "NCCL kernels under compute kernels are hidden communication; NCCL after the last compute is exposed. "
            + esc(overlap_caption(picked, comp))
            + "</p>",
            figure_div(overlap_picture(picture, source=src), "overlap"),
            numbers_table(comp, f"Numbers (ranked by {ranked_by(comp)})"),
            run_links(group.runs),
        ]
    )
    return page(
        f"Strategies: {group.title}",
        body,
        src,
        crumbs=[(f"Strategies: {group.title}", None)],
        verdict=strategy_verdict(comp),
        glossary=list(comp.columns),
    )


def ranked_frame(multi: pd.DataFrame) -> pd.DataFrame:
    """The ranked rows with step_ns / step_min_ns / step_max_ns set to the time they are ranked by (and its
    range), for the bars figure, which draws those columns."""
    if "rank_step_ns" not in multi:
        return multi
    return multi.assign(
        step_ns=multi["rank_step_ns"], step_min_ns=multi["rank_min_ns"], step_max_ns=multi["rank_max_ns"]
    )


def times_text(comp: pd.DataFrame) -> str:
    """What the page's times are: the ranking basis of its runs and where the other time is."""
    if ranked_by(comp) == "un-profiled step time":
        return (
            "Every run of this set was also timed without nsys, so the verdict, the bars and the efficiency "
            "use that un-profiled median (CUDA events over the repeats); the table shows it beside the trace's "
            "median over profiled steps and ranks and the profiler overhead. "
        )
    return "Times are medians over profiled steps and ranks (the trace). "


def strategy_alt(multi: pd.DataFrame) -> str:
    from ddp_profile.plots.compare import run_label
    from ddp_profile.report.verdicts import rank_time

    return "Bar chart, runs ranked by time per step: " + "; ".join(
        f"{run_label(r)} {fmt_ms(rank_time(r))}" for r in multi.to_dict("records")
    )


def scaling_frame(runs: list[Run]) -> pd.DataFrame:
    """comparison per strategy (each against its own 1-GPU run, :func:`~ddp_profile.report.compare.baseline_for`),
    plus samples_per_s = world_size · batch / step time (the time the set is ranked by, rank_step_ns; batch:
    the run JSON's per-GPU batch; NaN when unknown)."""
    parts = []
    for key in dict.fromkeys((r.meta.get("strategy"), r.meta.get("bucket_mb")) for r in runs):
        mine = sorted(
            (r for r in runs if (r.meta.get("strategy"), r.meta.get("bucket_mb")) == key), key=strategy_key
        )
        comp = comparison(mine)
        batch = [((r.meta.get("config") or {}).get("batch") or r.meta.get("batch")) for r in mine]
        comp["samples_per_s"] = [
            float(b) * float(w) / (t / 1e9) if b and t and t == t else float("nan")
            for b, w, t in zip(batch, comp["world_size"], comp["rank_step_ns"], strict=False)
        ]
        parts.append(comp)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def scaling_verdict(comp: pd.DataFrame) -> str:
    """Per strategy: efficiency at the largest world size; which strategy scales best there."""
    if not len(comp):
        return ""
    ws = pd.to_numeric(comp["world_size"], errors="coerce")
    top = (
        comp[ws == ws.max()].dropna(subset=["efficiency_pct"]).sort_values("efficiency_pct", ascending=False)
    )
    if not len(top):
        return "<p>No 1-GPU baseline, so no efficiency.</p>"
    from ddp_profile.plots.compare import run_label
    from ddp_profile.report.verdicts import rank_time

    best = top.iloc[0]
    rest = "; ".join(
        f"{esc(run_label(r))} {fmt_pct(r['efficiency_pct'])}" for r in top.iloc[1:].to_dict("records")
    )
    # 'its own 1-GPU run' only when the baseline has the run's strategy and cap (baseline_for's first rule)
    base = comp[comp["run"] == best["baseline"]]
    own = len(base) and (base.iloc[0]["strategy"], str(base.iloc[0].get("bucket_mb"))) == (
        best["strategy"],
        str(best.get("bucket_mb")),
    )
    whose = "its own 1-GPU run" if own else "its 1-GPU baseline, the run without communication"
    if not own and len(base) and base.iloc[0]["strategy"] != "none":
        whose = "its 1-GPU baseline"
    return (
        f"<p><b>At {int(ws.max())} GPUs, {esc(run_label(best))} scales best</b>: efficiency "
        f"{fmt_pct(best['efficiency_pct'])} of {whose} ({esc(best['baseline'])}), step "
        f"{fmt_ms(rank_time(best))}"
        + (f"; {rest}" if rest else "")
        + f". Efficiency, throughput and step use "
        f"the {ranked_by(comp)}.</p>"
    )


def baseline_text(runs: list[Run]) -> str:
    """What the scaling page's efficiency and ideal line are measured against, following the one rule
    (:func:`ddp_profile.report.runs.baseline_for`) and naming the baselines these runs actually have."""
    from ddp_profile.plots.compare import run_label

    multi = [r for r in runs if str(r.meta.get("world_size")) != "1"]
    own = [
        r
        for r in multi
        if r.baseline is not None
        and (r.baseline.meta.get("strategy"), r.baseline.meta.get("bucket_mb"))
        == (r.meta.get("strategy"), r.meta.get("bucket_mb"))
    ]
    other = [r for r in multi if r.baseline is not None and all(r is not o for o in own)]
    none = [r for r in multi if r.baseline is None]
    rule = (
        "Efficiency = step time(1 GPU) / step time(n GPUs) against each run's 1-GPU baseline (column "
        "1-GPU baseline; the index and strategy pages use the same one): the 1-GPU run of the same strategy "
        "and bucket cap where there is one, else the no-communication (none) run. "
    )
    said = []
    if own:
        said.append(
            "the runs with a 1-GPU run of their own strategy are measured against it, and the "
            "dashed ideal line is n × that run's throughput"
        )
    if other:
        names = ", ".join(sorted({esc(r.baseline.name) for r in other if r.baseline is not None}))
        labels = sorted({esc(run_label(r.meta).rsplit(" ×", 1)[0]) for r in other})
        they = "it" if len(labels) == 1 else "they"
        said.append(
            f"{', '.join(labels)} {'has' if they == 'it' else 'have'} no 1-GPU run of "
            f"{'its' if they == 'it' else 'their'} own, so {they} {'is' if they == 'it' else 'are'} "
            f"measured against {names} (its own point at 1 GPU) and no dashed ideal line is drawn "
            f"for {'it' if they == 'it' else 'them'}"
        )
    if none:
        said.append(", ".join(esc(r.name) for r in none) + " has no 1-GPU baseline, so no efficiency")
    return rule + ("Here " + "; ".join(said) + ". " if said else "")


def render_scaling_page(group: Group) -> str:
    """Throughput vs GPUs with the ideal line, efficiency, comm share and Amdahl serial fraction."""
    from ddp_profile.plots.scaling import scaling_figure

    comp = scaling_frame(group.runs)
    src = group_source(group)
    body = "\n".join(
        [
            "<p>Weak scaling with a fixed per-GPU batch. "
            + host_text(group.runs)
            + baseline_text(group.runs)
            + "Serial fraction f solves Amdahl's law S = 1 / (f + (1 − f)/n) for the measured speedup S "
            "(Karp–Flatt); comm share = NCCL kernel time / step time (median over ranks and steps).</p>",
            figure_div(scaling_figure(comp, source=src), "scaling"),
            numbers_table(comp, "Numbers", sort="world_size", main=SCALING_MAIN),
            run_links(group.runs),
        ]
    )
    return page(
        f"Scaling: {group.title}",
        body,
        src,
        crumbs=[(f"Scaling: {group.title}", None)],
        verdict=scaling_verdict(comp),
        glossary=list(comp.columns),
    )


def run_sets(runs: list[Run]) -> str:
    """'30 runs in 4 sets: top level (22 runs, 1–2 GPUs), campaign/A (8 runs, 1–2 GPUs), …'."""
    sets: dict[str, list[Run]] = {}
    for r in runs:
        sets.setdefault(r.folder, []).append(r)

    def gpus(rs: list[Run]) -> str:
        # the run JSON's world size, else the number of ranks in the trace
        ws = sorted(
            {
                int(w)
                for r in rs
                if (w := r.meta.get("world_size") or _trace_ranks(r)) is not None and str(w).isdigit()
            }
        )
        if not ws:
            return "GPUs not recorded"
        return (f"{ws[0]}–{ws[-1]}" if len(ws) > 1 else f"{ws[0]}") + (" GPU" if ws == [1] else " GPUs")

    items = ", ".join(
        f"{esc(f + '/') if f else 'top level'} ({len(rs)} run{'s' if len(rs) != 1 else ''}, {gpus(rs)})"
        for f, rs in sets.items()
    )
    return f"{len(runs)} run{'s' if len(runs) != 1 else ''} in {len(sets)} set{'s' if len(sets) != 1 else ''}: {items}."


def _trace_ranks(run: Run) -> int | None:
    ranks = getattr(run.trace, "ranks", None)
    return int(ranks["rank"].nunique()) if ranks is not None and len(ranks) and "rank" in ranks else None


def _set_title(g: Group) -> str:
    """A comparison's title with its set named: top-level groups carry no folder in their title."""
    return g.title if g.folder else f"top level · {g.title}"


def index_verdict(runs: list[Run], groups: list[Group], context: dict | None = None) -> str:
    """The index's own answer, from the same frames the pages show: which run sets there are, the fastest
    configuration of each strategy comparison (:func:`~ddp_profile.report.verdicts.ranked`, the rule its
    page states: un-profiled time where every run of the set has it), the bucket cap each sweep measured
    fastest (the sweep verdict's rule), and links to those pages."""
    from ddp_profile.report.measures import UNPROFILED
    from ddp_profile.report.verdicts import label, rank_time

    if not runs:
        return ""
    ctx = context or {}
    head, fastest = [run_sets(runs)], []
    for g in (g for g in groups if g.kind == "strategies"):
        comp = ctx.get("comps", {}).get(g.page)
        r = ranked(comp if comp is not None else comparison(g.runs))
        if len(r):
            b = r.iloc[0].to_dict()
            how = "un-profiled" if b.get("rank_basis") == UNPROFILED else "profiled, trace"
            fastest.append(
                f"<li><a href='{esc(g.page)}'>{esc(_set_title(g))}</a>: <b>{esc(label(b))}</b>, "
                f"{fmt_ms(rank_time(b))} per step ({how}), fastest of {len(r)}</li>"
            )
    if fastest:
        head.append(
            "Use the fastest configuration of your set (ranked by un-profiled step time where every run "
            "of the set was timed without nsys, else by the trace's):"
        )
    elif groups:
        head.append(
            "No comparison here holds two multi-GPU configurations, so there is no ranking; the run "
            "pages say what bounds each step."
        )
    else:  # own jobs only: nothing to compare, so no comparison wording
        head.append("Each run page says what bounds its step and what to change.")
    out, caps = [], []
    for g in (g for g in groups if g.kind == "sweep"):
        f = ctx.get("sweeps", {}).get(g.page) or {}
        if f.get("best_cap") is not None:
            caps.append(
                f"<a href='{esc(g.page)}'>{esc(_set_title(g))}</a>: {fmt_cap(f['best_cap'])} "
                f"({fmt_ms(f.get('best_step_ns'))} per step)"
            )
    if caps:
        out.append("Bucket cap measured fastest for bucketed training: " + "; ".join(caps) + ".")
    if groups:
        out.append(
            "Each comparison says whether its steps establish the order; each run page says what bounds "
            "its step and what to change."
        )
    listed = f"<ul>{''.join(fastest)}</ul>" if fastest else ""
    tail = f"<p>{' '.join(out)}</p>" if out else ""
    return f"<p>{' '.join(head)}</p>{listed}{tail}"


SPARSE = 0.2
"""An index column filled for fewer than this share of the runs is left to the run and comparison pages."""


def glanceable(shown: pd.DataFrame) -> pd.DataFrame:
    """The index's run table without what a reader cannot use at a glance: columns no run fills, columns
    filled for fewer than :data:`SPARSE` of the runs (an un-profiled time only a timing set has; the run's
    own page keeps it), and text columns whose value every run's name already spells (strategy ``bucketed``
    of ``bucketed-25mb_xl_fp32_2xh200``), so 78 runs fit 1280 pixels without scrolling sideways."""
    shown = drop_empty_columns(shown)
    if len(shown) < 5:
        return shown
    names = shown["run"].astype(str).str.lower()
    drop = []
    for c in shown.columns:
        if c in ("run", "bound_by"):
            continue
        filled = shown[c].map(lambda v: not missing(v) and str(v).strip() not in ("", "–"))
        text = shown[c][filled]
        if filled.mean() < SPARSE:
            drop.append(c)
        elif (
            len(text)
            and text.map(lambda v: isinstance(v, str)).all()
            and all(str(v).lower() in n for v, n in zip(text, names[filled], strict=True))
        ):
            drop.append(c)
    return shown.drop(columns=drop)


def render_index(
    runs: list[Run],
    groups: list[Group],
    failures: list[str],
    context: dict | None = None,
    front: list[str] | None = None,
) -> str:
    """The index verdict (:func:`index_verdict`), every run with its headline numbers, then the
    comparisons, then what failed to load. No figure, so no chart library. ``context``: the report's
    {"comps": {strategy page: comparison}, "sweeps": {sweep page: facts}} (computed when missing).
    ``front``: HTML blocks placed first, in order (the report's extras': the findings' link and their
    timing bullets)."""
    parts = []
    if failures:
        parts.append(
            "<h2 class='fail'>Runs that failed to load</h2><ul>"
            + "".join(f"<li class='fail'>{esc(f)}</li>" for f in failures)
            + "</ul>"
        )
    for kind, title in (
        ("strategies", "Strategy comparisons"),
        ("sweep", "Bucket sweeps"),
        ("scaling", "Scaling"),
    ):
        mine = [g for g in groups if g.kind == kind]
        if mine:
            parts.append(
                f"<h2>{title}</h2><ul>"
                + "".join(
                    f"<li><a href='{esc(g.page)}'>{esc(g.title)}</a> ({len(g.runs)} runs)</li>" for g in mine
                )
                + "</ul>"
            )
    comp = comparison(runs) if runs else pd.DataFrame()
    if len(comp):
        shown = comp[["run"] + INDEX_COLUMNS]
        # what each run's page answers first: what bounds its step
        verdicts = {r.page: bound_cell(verdict_of(r.analysis)) for r in runs}
        shown.insert(1, "bound_by", [verdicts.get(p, "–") for p in comp["page"]])
        shown = glanceable(shown)
        parts.insert(
            0,
            "<h2>Runs</h2>"
            + table(
                shown,
                "Every run (trace: medians over profiled steps and ranks)",
                fold=False,
                links={"run": list(comp["page"]), "baseline": list(comp["baseline_page"])},
                names=("run",),
                clip=("baseline",),
            )
            + (
                ""
                if "efficiency_pct" not in shown
                else "<p class='note'>Efficiency is against each run's 1-GPU baseline (column baseline): the 1-GPU run "
                "of the same folder, model, dtype, GPU and strategy, else the no-communication run; the strategy "
                "and scaling pages use the same one. Efficiency uses the step time the run's set is ranked by: "
                "un-profiled where every run of the set has an un-profiled median, else the trace's.</p>"
            ),
        )
    parts[:0] = front or []
    verdict = index_verdict(runs, groups, context)
    sub = f"{len(runs)} run(s)" + (f", {len(groups)} comparison(s)" if groups else "")
    return page(
        "ddp-profile report",
        "\n".join(parts),
        sub,
        crumbs=None,
        verdict=verdict,
        glossary=["bound_by", *INDEX_COLUMNS],
    )
