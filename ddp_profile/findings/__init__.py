"""`ddp-profile findings`: answers to the CS336 assignment-2 DDP questions, every number computed from the
committed traces (``traces/`` and ``traces/scaling/``), written as ``FINDINGS.md`` and ``findings.html``.

Layout: :mod:`.data` loads and summarises runs; :mod:`.strategies` / :mod:`.reference` turn them into
sections whose comparative words are computed (:mod:`.text`); :mod:`.render` writes Markdown and HTML;
:mod:`.figures` holds the two findings figures. Report pages are linked by name (``ddp-profile report``
writes them into the same folder).
"""

from __future__ import annotations

from pathlib import Path

from ddp_profile.findings import campaign as qc
from ddp_profile.findings import confirm as qf
from ddp_profile.findings import reference as qb
from ddp_profile.findings import strategies as qa
from ddp_profile.findings import timing as qt
from ddp_profile.findings import timing_scaling
from ddp_profile.findings.data import (
    CAMPAIGN,
    MAIN,
    SCALING,
    TIMING,
    load_all,
    machine_line,
    read_timing_runs,
)
from ddp_profile.findings.losses import q13_where_lost
from ddp_profile.findings.render import to_html, to_markdown
from ddp_profile.findings.summary import build_summary
from ddp_profile.findings.text import TOPIC_TIMING
from ddp_profile.report.hosts import HOSTS_FILE, read_hosts
from ddp_profile.report.runs import run_page_name
from ddp_profile.safeio import write_text_atomic

__all__ = ["build_findings", "run_sets", "page_for"]


def page_for(r) -> str:
    """The report page of a run: ``report.run_page_name`` of its id relative to the traces folder
    (``<run>`` or ``scaling/<run>``), as `ddp-profile report traces` names it."""
    return run_page_name(r.run_id)


def key_of(r) -> str:
    return f"bucketed-{r.bucket_mb:g}" if r.strategy == "bucketed" else r.strategy


def run_sets(runs) -> dict:
    """{"small" | "A" | "B": {strategy key: run}} of the runs in traces/ (scaling runs are left out)."""
    sets: dict[str, dict] = {"small": {}, "A": {}, "B": {}}
    for r in runs:
        if r.set != MAIN:
            continue
        name = (
            "small"
            if r.model == "small"
            else "A"
            if (r.model, r.dtype) == ("xl", "fp32")
            else "B"
            if (r.model, r.dtype) == ("xl", "bf16")
            else None
        )
        if name:
            sets[name][key_of(r)] = r
    return sets


def build_sections(root: Path, runs, page_exists=None) -> tuple[list, dict]:
    """The sections and the sets; ``page_exists(name)`` filters the links to the report's comparison pages
    (the report writes them before the findings; a partial campaign has fewer of them)."""
    sets = run_sets(runs)
    hosts = read_hosts(root)
    m_main = machine_line(root, MAIN, runs)
    m_scal = machine_line(root, SCALING, runs)
    a = sets["A"]
    fit = qa.shared_fit(a)  # the same sweep_fit as the report's sweep page: one o, w and b*
    secs = [
        qa.q1_naive(a, page_for, m_main),
        qa.q2_flat(a, page_for, m_main, fit),
        qa.q3_overlap(a, page_for, m_main),
        qa.q4_buckets(a, page_for, m_main, fit),
        qb.q5_torch(
            [("Set A (XL fp32)", a), ("Set B (XL bf16)", sets["B"]), ("Set small (fp32)", sets["small"])],
            page_for,
            m_main,
            hosts,
        ),
        qb.q6_contention(a, page_for, m_main),
    ]
    q7, scal = qb.q7_scaling([r for r in runs if r.set == SCALING], page_for, m_scal)
    secs += [q7, qb.q8_dtype(a, sets["B"], page_for, m_main)]
    camp = qc.campaign_sets(runs)
    if camp:
        m_camp = {
            name: machine_line(root, CAMPAIGN, runs, sub=f"campaign/{qc.set_folder(name)}") for name in camp
        }
        secs += [qc.q9_sharding(camp, page_for, m_camp), qc.q10_beat_ddp(camp, page_for, m_camp)]
        lost = q13_where_lost(runs)
        secs += [lost] if lost is not None else []
    stock = [
        (
            f"Set {k} (traces/, {'XL fp32' if k == 'A' else 'XL bf16'} bucket sweep)",
            sets[k]["torch_ddp"],
            list(sets[k].values()),
        )
        for k in ("A", "B")
        if "torch_ddp" in sets[k]
    ]
    stock += [
        (qc.set_label(name, True), ref, rs)
        for name, rs in sorted(camp.items())
        if (ref := qc.stock_reference(rs)) is not None
    ]
    if stock:
        secs.append(qf.q12_confirm(stock, page_for))
    timed = read_timing_runs(root)
    if timed:
        m_time = {
            f: machine_line(root, TIMING, timed, sub=f"campaign/{f}")
            for f in {r.folder.parent.name for r in timed}
        }
        secs.append(qt.q11_timing(timed, m_time))
        scaled = timing_scaling.timing_scaling(timed)
        secs += [scaled] if scaled is not None else []
    folders: dict[str, list] = {}  # campaign folder -> its runs (a folder split by GPU count is one here)
    for r in runs:
        if r.set == CAMPAIGN:
            folders.setdefault(r.folder.parent.name, []).append(r)
    secs += [qb.limits(runs, hosts, sets, {MAIN: m_main, SCALING: m_scal}, folders)]
    pages = {
        "q1": [("strategies", a)],
        "q2": [("strategies", a)],
        "q3": [("strategies", a)],
        "q4": [("sweep", a), ("sweep", sets["small"])],
        "q5": [("strategies", a), ("strategies", sets["B"]), ("strategies", sets["small"])],
        "q7": [("scaling", {r.name: r for r in runs if r.set == SCALING})],
        "q8": [("strategies", a), ("strategies", sets["B"])],
    }
    for sec in secs:
        links = [
            x
            for kind, rs in pages.get(sec.key, ())
            for x in comparison_links(kind, rs)
            if page_exists is None or page_exists(x[1])
        ]
        if links:
            sec.links(list(dict.fromkeys(links)))
    return secs, {"sets": sets, "scaling": scal}


def comparison_links(kind: str, rs: dict) -> list[tuple[str, str]]:
    """(text, page) of the report's comparison pages ('strategies', 'sweep', 'scaling') that hold a set's
    runs, named as :func:`ddp_profile.report.runs.group_runs` names them."""
    from ddp_profile.report.runs import group_page_name, normalise_meta

    out = []
    keys: dict[tuple, None] = {}  # ordered set of (folder, model, dtype, gpu, world size)
    for r in rs.values() if isinstance(rs, dict) else rs:
        m = normalise_meta(r.meta)
        folder = "scaling" if r.set == SCALING else ""
        ws = None if kind == "scaling" else m.get("world_size")
        if kind != "scaling" and (ws is None or int(ws) <= 1):
            continue
        keys[(folder, m.get("model"), m.get("dtype"), m.get("gpu_name"), ws)] = None
    for folder, model, dtype, gpu, ws in keys:
        title = f"{kind} page: {folder + '/ ' if folder else ''}{model} {dtype}" + (f" ×{ws}" if ws else "")
        out.append((title, group_page_name(kind, folder, model, dtype, gpu, ws)))
    return out


def describe_set(name: str, rs: dict) -> str:
    """ "A = XL fp32, batch 4×256 per GPU" from the set's run JSONs (every distinct value listed)."""
    vals = list(rs.values())
    models = "/".join(dict.fromkeys("XL" if r.model == "xl" else f"model {r.model}" for r in vals))
    dtypes = "/".join(dict.fromkeys(r.dtype + (" autocast" if r.dtype == "bf16" else "") for r in vals))
    return f"{name} = {models} {dtypes}, batch {' / '.join(qb.batches(rs))} per GPU"


def torch_ddp_line(root: Path, runs) -> str:
    """How the torch_ddp runs wrapped the model, per traces folder, from each run JSON's
    ``config.ddp_nvtx_hook``: stock DDP, with the project's opt-in NVTX comm hook (a different GPU path), or
    not recorded (JSONs without the field)."""
    groups: dict = {}
    for r in runs:
        if r.strategy == "torch_ddp":
            v = r.config.get("ddp_nvtx_hook")
            how = (
                "ran stock PyTorch DDP (no comm hook)"
                if v is False
                else "ran DDP with the opt-in NVTX comm hook"
                if v
                else "do not record whether the hook was on (no config.ddp_nvtx_hook in the JSON)"
            )
            where = f"{root.as_posix()}/{'scaling/' if r.set == SCALING else ''}"
            groups.setdefault((where, how), []).append(r)
    if not groups:
        return ""
    return (
        "torch_ddp runs: "
        + "; ".join(f"{len(g)} in {w} {how}" for (w, how), g in groups.items())
        + ". The hook's cost is measured by scripts/ddp_hook_ab.sh, not by these traces."
    )


def intro(root: Path, runs, pages: bool | None = None) -> list[str]:
    """The opening paragraphs. ``pages``: None for FINDINGS.md (committed, so the report pages it links may
    not exist), else whether the report's run pages are in the folder findings.html is written to."""
    main = [r for r in runs if r.set == MAIN]
    scal = [r for r in runs if r.set == SCALING]
    camp = [r for r in runs if r.set == CAMPAIGN]
    hosts = read_hosts(root)
    labels = {hosts[r.run_id] for r in main if r.run_id in hosts}
    where = (
        f"from {len(labels)} host{'s' if len(labels) != 1 else ''} named in {root.as_posix()}/{HOSTS_FILE}"
        if labels
        else "host not recorded"
    )

    def gpus(rs):
        ws = sorted({r.world_size for r in rs})
        return "–".join(str(w) for w in (ws[0], ws[-1])) if ws else "0"

    folders = sorted({r.folder.parent.name for r in camp})
    camp_names = (
        f" (campaign set{'s' if len(folders) > 1 else ''} {', '.join(folders)}, apart from sets small/A/B)"
        if folders
        else ""
    )
    sets = run_sets(runs)
    described = "; ".join(describe_set(n, rs) for n, rs in sets.items() if rs)
    if pages is None:  # FINDINGS.md, committed without the pages
        where_pages = (
            "The 'report page' links open the per-run HTML pages generated by `ddp-profile report` (the "
            "main job: `pip install . && ddp-profile report` writes them, findings.html and this file "
            "into reports/); they are not committed, so generate them before following a link."
        )
    elif pages:
        where_pages = (
            "The 'report page' links open the per-run HTML pages `ddp-profile report` wrote beside this page."
        )
    else:
        where_pages = (
            "The 'report page' links name per-run HTML pages that are not in this folder: "
            "`ddp-profile report` writes them here."
        )
    return [
        where_pages,
        f"Generated by `ddp-profile report` (or `ddp-profile findings {root.as_posix()}` for just this file and "
        f"findings.html) from {len(runs)} real Nsight Systems traces ({len(main)} in {root.as_posix()}/ with "
        f"{gpus(main)} GPUs per run, {where}; {len(scal)} in {root.as_posix()}/scaling/ with {gpus(scal)} GPUs "
        f"per run; {len(camp)} in {root.as_posix()}/campaign/{camp_names}, each also timed without nsys). Every number below is computed from those traces and their run JSONs. "
        + (f"Sets: {described}. " if described else "")
        + "Times are medians over ranks × measured steps with the min–max over the same rows. "
        + torch_ddp_line(root, runs),
    ]


def build_findings(root, out_dir, progress=None, runs=None, headline: list | None = None) -> dict:
    """Load every run under ``root`` (or take ``runs``, RunData already analysed, e.g. from
    :func:`ddp_profile.findings.data.from_report_runs`), answer the questions, write FINDINGS.md,
    findings.html and (if missing) plotly.min.js into ``out_dir``, each atomically; other files there are left
    alone. Returns {file name: bytes written}. ``headline``: a list that receives the summary's timing bullets
    (per dtype, the configuration closest to one GPU), for the report's index page."""
    from plotly.offline import get_plotlyjs

    from ddp_profile.findings import figures
    from ddp_profile.report.html import PLOTLY_JS

    root, out_dir = Path(root), Path(out_dir)
    if runs is None:
        runs = load_all(root, progress)
    secs, extra = build_sections(root, runs, page_exists=lambda name: (out_dir / name).exists())
    a = extra["sets"]["A"]
    figs = {}
    picked = [a[k] for k in ("naive", "overlap") if k in a]
    if picked:
        figs["timeline"] = figures.timeline_figure(
            picked, f"{machine_line(root, MAIN, runs).split(' (')[0]} · XL fp32"
        )
    if len(extra["scaling"]):
        figs["scaling"] = figures.scaling_figure(
            extra["scaling"], machine_line(root, SCALING, runs).split(" (")[0]
        )
    title = "Findings: CS336 assignment 2 DDP questions, answered from Nsight Systems traces"
    summary = build_summary(secs)
    if headline is not None:
        headline.extend(summary.about(TOPIC_TIMING))
    md = to_markdown(title, intro(root, runs), secs, summary)
    pages = any((out_dir / page_for(r)).exists() for r in runs)
    html_text = to_html(title, intro(root, runs, pages), secs, figs, summary)
    write_text_atomic(out_dir / "FINDINGS.md", md, make_parents=True)
    write_text_atomic(out_dir / "findings.html", html_text, make_parents=True)
    out = {"FINDINGS.md": len(md.encode()), "findings.html": len(html_text.encode())}
    if not (out_dir / PLOTLY_JS).exists():
        js = get_plotlyjs()
        write_text_atomic(out_dir / PLOTLY_JS, js, make_parents=True)
        out[PLOTLY_JS] = len(js.encode())
    return out
