"""Which runs a report holds, what each is called, and which runs may be compared on one page.

No HTML here (``ddp_profile.report`` writes pages); this module decides names and groups.

Run ids and page names
----------------------
A run's id is the path of its run folder relative to the folder the user passed, with ``/`` separators:
``traces/naive_small_fp32_2xh200`` -> ``naive_small_fp32_2xh200`` and
``traces/scaling/bucketed-25mb_xl_fp32_2xh200`` -> ``scaling/bucketed-25mb_xl_fp32_2xh200``. A run folder
passed directly is named by its folder name, a single export by its file name without ``.sqlite[.xz]``.
Ids repeated across several passed folders get ``~2``, ``~3``, ... so every run has its own page.

:func:`run_page_name` maps an id to its page: ``run-`` + id with ``/`` written as ``--`` + ``.html``
(``run-scaling--bucketed-25mb_xl_fp32_2xh200.html``); characters other than letters, digits, ``-_.~`` become
``-``. :func:`group_page_name` names comparison pages the same way:
``<kind>-[<folder>--]<model>-<dtype>-<gpu>[-x<world size>].html``, kind = strategies | sweep | scaling.

Why the folder is part of every group key: the campaign folders come from different machines (the
top-level runs from a 2-GPU host, ``scaling/`` from a 4-GPU host) and reuse run names; timings from two
hosts are never put on one axis.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ddp_profile.errors import TraceError
from ddp_profile.nsys.capture import capture_window
from ddp_profile.nsys.files import EXPORT_SUFFIXES, export_stem
from ddp_profile.nsys.run_record import RANK_SUFFIX
from ddp_profile.strategy_names import STRATEGIES

if TYPE_CHECKING:  # for the annotations only: runs.py keeps importing nothing of the analysis at run time
    import pandas as pd

    from ddp_profile.analysis import Analysis
    from ddp_profile.analysis.launches import LaunchAnalysis
    from ddp_profile.trace import Trace

STRATEGY_ORDER = STRATEGIES
"""Strategies in the order the pages show them (unknown ones after, alphabetically): the harness's."""


def slug(text: str) -> str:
    """File-name-safe form of a run id or group part."""
    s = "".join(c if c.isalnum() or c in "-_.~" else "-" for c in str(text)).strip("-.")
    return s[:150] or "run"


def run_page_name(run_id: str) -> str:
    """'scaling/bucketed-25mb_xl_fp32_2xh200' -> 'run-scaling--bucketed-25mb_xl_fp32_2xh200.html'."""
    return f"run-{slug(str(run_id).replace('/', '--'))}.html"


def group_page_name(kind: str, folder: str, model, dtype, gpu, world_size=None) -> str:
    """('sweep', '', 'xl', 'fp32', 'NVIDIA H200', 2) -> 'sweep-xl-fp32-NVIDIA-H200-x2.html';
    ('scaling', 'scaling', 'mlp8', 'fp32', 'NVIDIA H200') -> 'scaling-scaling--mlp8-fp32-NVIDIA-H200.html'."""
    parts = [str(folder).replace("/", "--") + "--"] if folder else []
    parts.append("-".join(str(v) for v in (model, dtype, gpu) if v not in (None, "")) or "runs")
    if world_size is not None:
        parts.append(f"-x{int(world_size)}")
    return f"{kind}-{slug(''.join(parts))}.html"


@dataclass
class Run:
    """One loaded, analysed run and the page it gets. ``run_id`` (see the module docstring) defaults to
    ``name``; ``folder`` is the campaign folder the run came from ('' for the top level)."""

    name: str
    trace: Trace
    analysis: Analysis
    meta: dict = field(default_factory=dict)  # the run's JSON (empty for a bare export)
    run_id: str | None = None
    folder: str = ""
    launches: LaunchAnalysis | None = None
    """Per-step launch diagnosis (``analysis.launches.LaunchAnalysis``, the analysis' launch section; when the
    run has none, e.g. its export lacks the CUDA API table, ``made`` is False and its notes say why); None
    when it was not computed (runs built by hand)."""
    host_calls: pd.DataFrame | None = None
    """The main thread's launch and sync calls per rank (``analysis.host_calls``): the timeline's CPU rows;
    None when the export has no CUDA API table or they were not read."""
    host: str | None = None
    """The lent host's label from ``hosts.txt`` beside the traces (None when not listed)."""
    hosts_file: bool = False
    """Whether a ``hosts.txt`` was read beside the traces (so a None ``host`` means 'not listed there')."""
    baseline: Run | None = None
    """The 1-GPU run its speedup and efficiency use (:func:`ddp_profile.report.compare.assign_baselines`)."""
    rank_basis: str | None = None
    """Which step time ranks its set (:mod:`ddp_profile.report.measures`), fixed with the baseline."""
    baseline_set: bool = False
    """Whether ``baseline`` and ``rank_basis`` were assigned (a run may have no baseline at all)."""

    @property
    def page(self) -> str:
        return run_page_name(self.run_id or self.name)


@dataclass
class Group:
    """Runs compared on one page. kind: "strategies" | "scaling" | "sweep"."""

    kind: str
    title: str
    runs: list
    page_name: str | None = None
    folder: str = ""

    @property
    def page(self) -> str:
        return self.page_name or f"{self.kind}-{slug(self.title)}.html"


# ---- discovery ------------------------------------------------------------------------------------------


def _is_trace(p: Path) -> bool:
    return p.is_file() and p.name.endswith(EXPORT_SUFFIXES)


def _holds_traces(folder: Path) -> bool:
    try:
        return any(_is_trace(c) for c in folder.iterdir())
    except OSError:
        return False


def job_groups(files: list[Path]) -> list[list[Path]]:
    """``files`` (exports of one folder) grouped into jobs by their capture windows (UTC, from the exports):
    files whose windows overlap, directly or through others, are one job's per-rank files; a file that overlaps
    none is a job of its own. One group when any file lacks its session start (nothing to group by)::

        a [-----)                 b starts before a ends: one job {a, b}
        b     [------)
        c               [---)     c overlaps neither: its own job
    """
    if len(files) < 2:
        return [list(files)]
    found = [capture_window(f) for f in files]
    windows = [w for w in found if w is not None]
    if len(windows) < len(files):
        return [list(files)]
    order = sorted(range(len(files)), key=lambda i: windows[i])
    groups: list[list[Path]] = []
    end: int | None = None
    for i in order:
        s, e = windows[i]
        if end is None or s >= end:
            groups.append([])
            end = e
        groups[-1].append(files[i])
        end = max(end, e)
    return [sorted(g) for g in groups]


def _runs_of_folder(folder: Path, rid: str, split_jobs: bool, notes: list | None) -> list[tuple[Path, str]]:
    """A folder holding exports: one run, or one per export when its exports are of several jobs (their
    captures do not overlap in time). Groups of several files each cannot be passed as one location: refused,
    saying how to report them."""
    exports = sorted(c for c in folder.iterdir() if _is_trace(c))
    # run_rank0, run_rank1: named as one job's ranks, they stay one run (the loader says what is wrong with them)
    named_apart = len({RANK_SUFFIX.sub("", export_stem(f)) for f in exports}) > 1
    groups = job_groups(exports) if split_jobs and named_apart else [exports]
    if len(groups) == 1:
        return [(folder, rid)]
    listed = "; ".join(", ".join(f.name for f in g) for g in groups)
    if any(len(g) > 1 for g in groups):
        raise TraceError(
            f"{folder}: its exports are of {len(groups)} jobs whose captures do not overlap in time "
            f"({listed}); put each job's files in a folder of its own, or pass --folder-is-one-job "
            "to report the folder as one job"
        )
    if notes is not None:
        notes.append(
            f"{folder}: {len(groups)} exports whose captures do not overlap in time, reported as "
            f"{len(groups)} runs ({listed}); pass --folder-is-one-job to report them as one job's "
            "per-rank files"
        )
    return [(g[0], export_stem(g[0])) for g in groups]


def discover_runs(
    paths: list, *, split_jobs: bool = True, notes: list | None = None
) -> list[tuple[Path, str]]:
    """(location, run id) per run: a trace file, a run folder (holds exports), or any folder whose
    sub-folders (at any depth) hold run folders. Sorted by id within each passed folder; ids unique. A
    folder's exports are one run (per-rank files of one job) unless their captures do not overlap in time
    (:func:`job_groups`; ``split_jobs`` False keeps them one run): then each export is a run, and a line
    saying so is added to ``notes``."""
    found: list[tuple[Path, str]] = []
    for p in map(Path, paths):
        if not p.exists():
            raise TraceError(
                f"{p}: no such file or folder; pass a run folder, an nsys SQLite export or traces/"
            )
        if p.is_file():
            if not _is_trace(p):
                hint = (
                    f"convert it with `nsys export --type sqlite -o {p.stem}.sqlite {p}`"
                    if p.suffix in (".nsys-rep", ".qdrep", ".qdstrm")
                    else "pass a file made by `nsys export --type sqlite` (plain or compressed with xz or gzip)"
                )
                raise TraceError(f"{p}: not an nsys SQLite export (*{', *'.join(EXPORT_SUFFIXES)}); {hint}")
            found.append((p, export_stem(p)))
        elif _holds_traces(p):
            found.extend(_runs_of_folder(p, p.resolve().name, split_jobs, notes))
        else:
            runs = []
            for root, dirs, _files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                here = Path(root)
                if here != p and _holds_traces(here):
                    runs.extend(_runs_of_folder(here, here.relative_to(p).as_posix(), split_jobs, notes))
                    dirs[:] = []  # a run folder's sub-folders (e.g. recipe/) are part of that run
            found.extend(sorted(runs, key=lambda r: r[1]))
    seen_paths: set[Path] = set()
    out: list[tuple[Path, str]] = []
    ids: dict[str, int] = {}
    for path, rid in found:
        key = path.resolve()
        if key in seen_paths:
            continue
        seen_paths.add(key)
        ids[rid] = ids.get(rid, 0) + 1
        out.append((path, rid if ids[rid] == 1 else f"{rid}~{ids[rid]}"))
    return out


def discover(paths: list) -> list[Path]:
    """Run locations only (see :func:`discover_runs`)."""
    return [p for p, _ in discover_runs(paths)]


def normalise_meta(meta: dict) -> dict:
    """run JSON -> the flat keys pages use: run_name, strategy, model, dtype, world_size, bucket_mb,
    gpu_name (top-level keys win; ``config`` fills gaps; the campaign writes ``run`` and ``config.bucket_mb``)."""
    m = dict(meta or {})
    cfg = m.get("config")
    if not isinstance(cfg, dict):
        cfg = {}
    for key, alts in (
        ("run_name", ("run_name", "run", "name")),
        ("strategy", ("strategy",)),
        ("model", ("model",)),
        ("dtype", ("dtype",)),
        ("world_size", ("world_size",)),
        ("bucket_mb", ("bucket_mb",)),
        ("gpu_name", ("gpu_name",)),
    ):
        if m.get(key) is None:
            for src in (m, cfg):
                v = next((src.get(a) for a in alts if src.get(a) is not None), None)
                if v is not None:
                    m[key] = v
                    break
    if m.get("strategy") not in ("bucketed", "torch_ddp"):
        m["bucket_mb"] = None  # strategies without buckets: a config default, not a setting
    m["variant"] = run_variant(str(m.get("run_name") or ""), str(m.get("strategy") or ""))
    return m


PROGRAM_FILE = "program.json"
"""Beside a foreign trace: what the program was (``program``, ``parallelism``, ``world_size``, ...)."""


def fill_from_trace(meta: dict, trace, program: dict | None = None) -> dict:
    """``meta`` (normalised run JSON) with what it lacks taken from the run's ``program.json`` (world
    size, GPU; kept whole as ``meta["program"]``) and else from the trace itself: the number of ranks it
    holds and their GPU. Values the run JSON states are kept."""
    m = dict(meta)
    prog = program if isinstance(program, dict) else None
    if prog:
        m["program"] = prog
        for key in ("world_size", "gpu_name"):
            v = prog.get(key)
            if m.get(key) is None and isinstance(v, (int, str)) and not isinstance(v, bool):
                m[key] = v
    ranks = getattr(trace, "ranks", None)
    if ranks is not None and len(ranks):
        if m.get("world_size") is None and "rank" in ranks:
            m["world_size"] = int(ranks["rank"].nunique())
        if m.get("gpu_name") is None and "gpu_name" in ranks and ranks["gpu_name"].notna().any():
            m["gpu_name"] = str(ranks["gpu_name"].dropna().iloc[0])
    return m


def program_text(meta: dict) -> str:
    """'fsdp2_loop.py: FSDP2 fully_shard per TransformerEncoderLayer + root, fp32, AdamW — foreign (not the
    ddp-profile harness)' from ``meta["program"]``; '' when the run has no program.json."""
    prog = meta.get("program") if isinstance(meta.get("program"), dict) else None
    if not prog:
        return ""
    parts = [str(prog[k]) for k in ("program", "parallelism") if isinstance(prog.get(k), (str, int, float))]
    text = ": ".join(parts)
    if isinstance(prog.get("made_by"), str):
        text += f" — {prog['made_by']}"
    return text


def run_variant(run_name: str, strategy: str) -> str:
    """What the harness's run name adds to strategy and cap: 'views, optoverlap, ch2, hiprio', '+zero1',
    'noreshard' ('' for a plain run). Runs with a variant are not points of a bucket sweep."""
    # <label>_<model>_<dtype>_<n>x<gpu>; the label itself may hold '_' (torch_ddp)
    head = run_name.rsplit("_", 3)[0] if run_name.count("_") >= 3 else run_name
    if not strategy or not head.startswith(strategy):
        return ""
    rest = re.sub(r"^-[0-9.]+mb", "", head[len(strategy) :])
    parts = [p for p in re.split(r"-|(?=\+)", rest) if p]
    return ", ".join(parts)


# ---- grouping -------------------------------------------------------------------------------------------


def _ws(run: Run) -> int:
    return int(run.meta["world_size"])


def strategy_key(run: Run) -> tuple:
    s = str(run.meta.get("strategy"))
    mb = run.meta.get("bucket_mb")
    return (
        STRATEGY_ORDER.index(s) if s in STRATEGY_ORDER else len(STRATEGY_ORDER),
        s,
        float(mb) if mb is not None else 0.0,
        _ws(run),
    )


def baseline_for(run: Run, pool: list[Run]) -> Run | None:
    """The 1-GPU run that ``run``'s speedup and efficiency are measured against; the one rule every page
    uses. Among the 1-GPU runs of the same folder, model, dtype and GPU: the one of the same strategy and
    bucket cap (weak scaling of that strategy), else the ``none`` run, else the first in strategy order.
    None when there is no such run."""

    def key(r):
        m = r.meta
        return (r.folder, m.get("model"), m.get("dtype"), m.get("gpu_name"))

    ones = sorted(
        (r for r in pool if key(r) == key(run) and str(r.meta.get("world_size")) == "1"), key=strategy_key
    )
    same = [
        r
        for r in ones
        if (r.meta.get("strategy"), r.meta.get("bucket_mb"))
        == (run.meta.get("strategy"), run.meta.get("bucket_mb"))
    ]
    found = same or [r for r in ones if r.meta.get("strategy") == "none"] or ones
    return found[0] if found else None


def _hw_text(folder, model, dtype, gpu) -> str:
    where = f"{folder}/ · " if folder else ""
    return where + " · ".join(str(v) for v in (gpu, f"model {model}", dtype) if v)


def group_runs(runs: list[Run]) -> list[Group]:
    """Comparisons that make sense, all within one (folder, model, dtype, GPU):

    - strategies: every configuration (strategy, bucket cap and lever variant) at one world size n > 1 when
      there are two or more, plus one 1-GPU baseline (``none`` if present) for efficiency vs 1 GPU;
    - sweep: the ``bucketed`` runs at one world size with at least two bucket sizes (plus torch_ddp there);
    - scaling: strategies with runs at two or more world sizes (1-GPU runs included), all on one page, with
      the 1-GPU baseline of each (:func:`baseline_for`, e.g. the ``none`` run) when it is another run.
    """
    groups = []
    usable = [r for r in runs if r.meta.get("strategy") and r.meta.get("world_size")]
    keys = dict.fromkeys(
        (r.folder, r.meta.get("model"), r.meta.get("dtype"), r.meta.get("gpu_name")) for r in usable
    )
    for key in keys:
        folder, model, dtype, gpu = key
        same = sorted(
            (
                r
                for r in usable
                if (r.folder, r.meta.get("model"), r.meta.get("dtype"), r.meta.get("gpu_name")) == key
            ),
            key=strategy_key,
        )
        ones = [r for r in same if _ws(r) == 1]
        base = [r for r in ones if r.meta["strategy"] == "none"][:1] or ones[:1]
        hw = _hw_text(folder, model, dtype, gpu)
        for ws in sorted({_ws(r) for r in same} - {1}):
            at = [r for r in same if _ws(r) == ws]
            # lever variants of one strategy (torch_ddp stock vs -ch9-hiprio) are configurations too
            if (
                len({(r.meta["strategy"], r.meta.get("bucket_mb"), r.meta.get("variant") or "") for r in at})
                >= 2
            ):
                groups.append(
                    Group(
                        "strategies",
                        f"{hw} · {ws} GPUs",
                        base + at,
                        group_page_name("strategies", folder, model, dtype, gpu, ws),
                        folder,
                    )
                )
            sweep = [
                r
                for r in at
                if r.meta["strategy"] == "bucketed"
                and r.meta.get("bucket_mb") is not None
                and not r.meta.get("variant")
            ]
            if len({float(r.meta["bucket_mb"]) for r in sweep}) >= 2:
                ddp = [r for r in at if r.meta["strategy"] == "torch_ddp" and not r.meta.get("variant")]
                groups.append(
                    Group(
                        "sweep",
                        f"{hw} · {ws} GPUs",
                        sweep + ddp,
                        group_page_name("sweep", folder, model, dtype, gpu, ws),
                        folder,
                    )
                )
        scaling = [
            r
            for r in same
            if len(
                {
                    _ws(o)
                    for o in same
                    if o.meta["strategy"] == r.meta["strategy"]
                    and o.meta.get("bucket_mb") == r.meta.get("bucket_mb")
                }
            )
            >= 2
        ]
        if scaling:  # with the 1-GPU run each point's efficiency is against (baseline_for), shown as a point
            for r in list(scaling):
                b = baseline_for(r, same)
                if b is not None and all(b is not o for o in scaling):
                    scaling.append(b)
            scaling.sort(key=strategy_key)
            groups.append(
                Group("scaling", hw, scaling, group_page_name("scaling", folder, model, dtype, gpu), folder)
            )
    return groups


def read_api(trace):
    """The run's CUDA API calls (``nsys.api.load_api_calls``), or why they cannot be read (one sentence)."""
    from ddp_profile.errors import DdpProfileError
    from ddp_profile.nsys.api import load_api_calls

    try:
        return load_api_calls(trace)
    except DdpProfileError as exc:
        return str(exc)


def launch_diagnosis(trace, steps="all"):
    """The analysis' launch section over the ``steps`` selected (``LaunchAnalysis``; when it cannot be made,
    empty with the reason in its notes)."""
    from ddp_profile.analysis import analyze

    return analyze(trace, steps=steps, api=read_api(trace), sections=[]).launches


def host_diagnosis(trace, analysis, api):
    """(the launch section of ``analysis`` = ``analyze(trace, api=api)``, a ``LaunchAnalysis``; the main
    thread's launch and sync calls per rank for the timeline's CPU rows (``analysis.host_calls``; None
    without the API table)).

    ``api``: the run's API calls, or why they cannot be read, as ``nsys.api.load_calls_and_waits`` gives
    them (:func:`load_one` reads them once with the trace's host waits), or :func:`read_api`'s. A run whose
    export lacks the table still gets its page: the launch block then says why it is missing instead of
    failing the whole run. The CPU rows keep the calls inside the analysis' steps."""
    from ddp_profile.analysis.host_calls import main_thread_calls
    from ddp_profile.analysis.launches import LaunchAnalysis
    from ddp_profile.errors import DdpProfileError
    from ddp_profile.nsys.api import host_waits_of

    launches = analysis.launches
    if launches is None:
        launches = LaunchAnalysis.missing("the launch diagnosis was not computed for this run")
    if api is None or isinstance(api, str):
        return launches, None
    phases = analysis.phases
    step_rows = phases[phases["phase"] == "step"] if phases is not None and len(phases) else None
    try:
        waits = host_waits_of(trace)  # the nsys layer's syncs and copies to the host: the CPU rows' syncs
    except DdpProfileError:
        waits = None
    return launches, main_thread_calls(api, step_rows, waits)
