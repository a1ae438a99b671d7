"""Gathering for the findings: load every committed run, analyse it, and keep the few numbers each
question needs as one flat record per run (:class:`RunData`).

Every number the findings print comes from here, from the trace (``analyze``) or from the run's own JSON
written by the harness (configuration, CUDA-event and host step timers). Nothing is typed by hand.

Runs live in two sets that must never share an axis: ``traces/<run>/`` (the 2-GPU campaign) and
``traces/scaling/<run>/`` (the 4-GPU host). Run names repeat across the two, so a run's key is
``(set, name)``. Which host ran each run is not in the exports or JSONs; an optional ``traces/hosts.txt``
(:func:`read_hosts`) records it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ddp_profile import nvtx_names as nn
from ddp_profile.analysis.contention import contention_per_step_ns
from ddp_profile.errors import TraceError
from ddp_profile.safeio import read_side_file

MAIN, SCALING, CAMPAIGN, TIMING = "main", "scaling", "campaign", "timing"
TIMING_PROTOCOL = "interleaved-repeats"
"""``timing_protocol.kind`` of the run JSONs ``python -m ddp_profile.harness.repeats`` writes (no trace)."""


@dataclass
class RunData:
    """One run's facts. Times in ns; ``*_spread`` are (min, max) over the (rank, step) rows whose median is
    the headline value.

    Not a second run model beside ``report.runs.Run`` but the findings' digest of one: a report Run is a
    loaded run (trace, analysis, page, launch diagnosis) found anywhere; a RunData adds what only the
    findings ask, computed once (:func:`summarise`): the set the run belongs to (main, scaling, campaign,
    timing: names repeat across sets, so the key is (set, name)), its compare_runs row, the spreads, host
    timers, contention and collective figures the questions read. :func:`from_report_runs` makes them from
    the report's Runs (nothing is loaded twice); ``ddp-profile findings`` alone loads through
    :func:`load_run`. Timing-only runs (no trace) exist only here."""

    set: str
    name: str
    folder: Path
    meta: dict
    trace: object = field(repr=False)
    analysis: object = field(repr=False)
    row: dict = field(default_factory=dict)  # compare_runs row (schema.COMPARISON_COLUMNS)
    summary: dict = field(default_factory=dict)  # Analysis.summary()
    spread: dict = field(default_factory=dict)  # column -> (min, max) over (rank, step) rows
    host: dict = field(default_factory=dict)  # host-side timers (harness JSON and NVTX)
    contention: dict = field(default_factory=dict)
    collectives: dict = field(default_factory=dict)
    launches: object = None  # LaunchAnalysis or why it is missing (str); None until asked (launches_of)

    # ---- run facts from the JSON ----
    @property
    def strategy(self) -> str:
        return str(self.meta.get("strategy") or "?")

    @property
    def model(self) -> str:
        return str(self.meta.get("model") or "?")

    @property
    def dtype(self) -> str:
        return str(self.meta.get("dtype") or "?")

    @property
    def world_size(self) -> int:
        return int(self.meta.get("world_size") or 1)

    @property
    def config(self) -> dict:
        return self.meta.get("config") or {}

    @property
    def bucket_mb(self) -> float | None:
        """Bucket cap of bucketed and torch_ddp runs in MiB (the harness's ``--bucket-mb`` is multiplied by
        2**20; None for the other strategies, whose config value is unused)."""
        if self.strategy in ("bucketed", "torch_ddp") and self.config.get("bucket_mb") is not None:
            return float(self.config["bucket_mb"])
        return None

    @property
    def label(self) -> str:
        b = self.bucket_mb
        return (
            f"{self.strategy} {b:g} MiB" if b is not None and self.strategy == "bucketed" else self.strategy
        )

    @property
    def units_per_rank_step(self) -> tuple[float, str]:
        """Work per rank per step: samples for the MLP (a row is one sample), tokens for language models."""
        batch = float(self.config.get("batch") or 0)
        if self.model == "mlp":
            return batch, "samples"
        return batch * float(self.config.get("seq_len") or 0), "tokens"

    @property
    def batch_label(self) -> str:
        """Work per GPU per step as configured: "16×256" (batch × sequence length) for language models, the
        batch ("64") for the MLP."""
        b = self.config.get("batch")
        if self.model == "mlp":
            return f"{b}"
        return f"{b}×{self.config.get('seq_len')}"

    @property
    def run_id(self) -> str:
        """The run folder relative to the traces folder: ``<name>`` or ``scaling/<name>`` (names repeat
        across the two sets)."""
        if self.set in (CAMPAIGN, TIMING):
            return f"{CAMPAIGN}/{self.folder.parent.name}/{self.name}"
        return f"scaling/{self.name}" if self.set == SCALING else self.name

    def v(self, key: str) -> float:
        """A compare_runs value as float (NaN when missing)."""
        x = self.row.get(key)
        return float(x) if x is not None and not pd.isna(x) else float("nan")


def find_runs(root: Path) -> list[tuple[str, Path]]:
    """(set, folder) of the run folders the findings read, from the report's one run discovery
    (:func:`ddp_profile.report.runs.discover_runs`): ``root/<run>/`` (main), ``root/scaling/<run>/`` (scaling)
    and ``root/campaign/<c>/<run>/`` (campaign); other folders (per-rank, foreign, two-node) are not sets of
    the findings. Main runs first, then scaling, then each campaign folder, each sorted by name."""
    from ddp_profile.report.runs import discover_runs

    root = Path(root)
    if not root.is_dir():
        raise TraceError(f"{root}: no such folder; pass the traces/ folder holding the run folders")
    order = {MAIN: 0, SCALING: 1, CAMPAIGN: 2}
    keyed = []
    for folder, rid in discover_runs([root]):
        parts = rid.split("/")
        if len(parts) == 1:
            keyed.append(((order[MAIN], "", rid), MAIN, folder))
        elif len(parts) == 2 and parts[0] == "scaling":
            keyed.append(((order[SCALING], "", parts[1]), SCALING, folder))
        elif len(parts) == 3 and parts[0] == CAMPAIGN:
            keyed.append(((order[CAMPAIGN], parts[1], parts[2]), CAMPAIGN, folder))
    out = [(set_name, folder) for _, set_name, folder in sorted(keyed, key=lambda k: k[0])]
    if not out:
        raise TraceError(
            f"{root}: no run folders with nsys exports (*.sqlite, *.sqlite.xz); record runs with "
            "scripts/profile_all.sh or pass the traces/ folder"
        )
    return out


def read_timing_runs(root: Path) -> list[RunData]:
    """The timing-only runs under ``root/campaign/<set>/<run>/<run>.json``: run JSONs written by the
    interleaved-repeats protocol (``timing_protocol.kind`` = :data:`TIMING_PROTOCOL`; un-profiled step times
    of every repeat, the median and its confidence interval, nvidia-smi per repeat) in folders without an
    nsys export. They have no trace: ``trace`` and ``analysis`` are None and every trace value is NaN.
    Sorted by set folder, then run name; [] when there are none."""
    import json

    from ddp_profile.report.runs import discover_runs

    base = Path(root) / CAMPAIGN
    if not base.is_dir():
        return []
    traced = {Path(folder).resolve() for folder, _ in discover_runs([base])}
    out = []
    for path in sorted(base.glob("*/*/*.json")):
        folder = path.parent
        if path.stem != folder.name or folder.name.startswith(".") or folder.resolve() in traced:
            continue
        try:
            meta = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise TraceError(f"{path}: not a readable run JSON ({exc})") from None
        if isinstance(meta, dict) and (meta.get("timing_protocol") or {}).get("kind") == TIMING_PROTOCOL:
            out.append(
                RunData(set=TIMING, name=folder.name, folder=folder, meta=meta, trace=None, analysis=None)
            )
    return out


def require_meta(folder: Path, trace) -> dict:
    """The harness's run JSON the loader found beside the exports (``trace.run``): ``<folder name>.json``
    or ``run.json``. The findings need its run facts, so a run without one is an error."""
    if trace.run:
        return trace.run
    why = "; ".join(w for w in trace.warnings if "run record" in w)
    raise TraceError(
        f"{folder}: no run JSON ({folder.name}.json){'; ' + why if why else ''}; "
        "the findings need the harness's run facts"
    )


def _spread(steps: pd.DataFrame, cols) -> dict:
    return {
        c: (float(steps[c].min()), float(steps[c].max()))
        if len(steps) and steps[c].notna().any()
        else (float("nan"), float("nan"))
        for c in cols
    }


def host_timers(meta: dict, nvtx: pd.DataFrame) -> dict:
    """Host-side estimates a student would use: the harness's host step timer and CUDA-event step timer
    (from the JSON, pooled over ranks and steps), and the host duration of the ``grad_sync_wait`` NVTX range
    (launching the all-reduces and waiting for them, as a host timer around that code measures it)."""
    out = {}
    for key in ("host_step_ms_per_rank", "step_ms_per_rank"):
        vals = np.array([x for r in (meta.get(key) or []) for x in r], dtype=float) * 1e6
        out[key.replace("_ms_per_rank", "_ns")] = (
            (float(np.median(vals)), float(vals.min()), float(vals.max()))
            if vals.size
            else (float("nan"),) * 3
        )
    w = nvtx.loc[nvtx["name"].astype("object") == nn.GRAD_WAIT] if nvtx is not None and len(nvtx) else nvtx
    if w is not None and len(w) and w["end_ns"].notna().any():
        d = (w["end_ns"] - w["start_ns"]).dropna().astype(float).to_numpy()
        out["grad_wait_ns"] = (float(np.median(d)), float(d.min()), float(d.max()))
    else:
        out["grad_wait_ns"] = (float("nan"),) * 3
    return out


def contention_facts(analysis) -> dict:
    """Total compute time lost to contention per (rank, step), and the duration-weighted slowdown."""
    c = analysis.contention
    n = max(1, len(analysis.steps))
    if c is None or not len(c):
        return {
            "lost_per_step_ns": 0.0,
            "est_lost_per_step_ns": 0.0,
            "slowdown_pct": float("nan"),
            "n_names": 0,
        }
    alone = c["baseline_ns"].sum()
    return {
        "lost_per_step_ns": float(c["lost_ns"].sum()) / n,
        # the figure the recommendation compares with exposed communication: one number per fact
        "est_lost_per_step_ns": contention_per_step_ns(c, analysis.steps),
        "slowdown_pct": 100.0 * float(c["lost_ns"].sum()) / float(alone) if alone > 0 else float("nan"),
        "n_names": int(len(c)),
    }


def collective_facts(analysis) -> dict:
    """Per (rank, step): all-reduce count and bytes; whole-run wait vs transfer split of NCCL kernel time."""
    col = analysis.collectives
    if col is None or not len(col):
        return {"n_per_step": 0.0, "bytes_per_step": 0.0, "wait_ns": 0.0, "transfer_ns": 0.0}
    c = col.loc[col["step"].notna()]
    per = c.groupby(["rank", "step"]).agg(n=("seq", "size"), b=("bytes", "sum"))
    return {
        "n_per_step": float(per["n"].median()) if len(per) else 0.0,
        "bytes_per_step": float(per["b"].median()) if len(per) else 0.0,
        "wait_ns": float(col["wait_ns"].sum()),
        "transfer_ns": float(col["transfer_ns"].sum()),
    }


def load_run(set_name: str, folder: Path) -> RunData:
    """Load, analyse and summarise one run folder."""
    from ddp_profile.analysis import analyze
    from ddp_profile.nsys.loader import load_trace

    trace = load_trace(folder)
    meta = require_meta(folder, trace)
    return summarise(set_name, folder, meta, trace, analyze(trace))


def summarise(set_name: str, folder: Path, meta: dict, trace, res, launches=None) -> RunData:
    """A RunData from an already loaded and analysed run (the report's runs are reused this way, so the
    main job loads every trace once). ``launches``: the report's launch diagnosis of the run, if made."""
    from ddp_profile.analysis import compare_runs

    row = compare_runs([(trace, res)]).iloc[0].to_dict()
    cols = ["step_ns", "compute_ns", "comm_ns", "exposed_comm_ns", "comm_tail_ns", "comm_pct"]
    return RunData(
        set=set_name,
        name=Path(folder).name,
        folder=Path(folder),
        meta=meta,
        trace=trace,
        analysis=res,
        row=row,
        summary=res.summary(),
        spread=_spread(res.steps, cols),
        host=host_timers(meta, trace.nvtx),
        contention=contention_facts(res),
        collectives=collective_facts(res),
        launches=launches,
    )


def from_report_runs(root: Path, report_runs) -> list[RunData]:
    """RunData for the report's runs that :func:`find_runs` finds under ``root`` (matched by their id, the
    folder path relative to ``root``), in folder order; raises TraceError when ``root`` holds no campaign.
    Runs the report could not load, or without a run JSON, are left out."""
    by_id = {str(r.run_id or r.name): r for r in report_runs}
    out = []
    for s, d in find_runs(root):
        rel = d.relative_to(root).as_posix()
        r = by_id.get(rel)
        if r is None:
            continue
        meta = getattr(r.trace, "run", None)
        if not meta:  # a bare export without the harness's JSON: nothing the questions can use
            continue
        out.append(summarise(s, d, meta, r.trace, r.analysis, getattr(r, "launches", None)))
    return out


def launches_of(r: RunData):
    """The run's launch diagnosis (``LaunchAnalysis``, or a str saying why there is none), made on first use
    and kept on the run: the findings ask only for each set's 1-GPU run, so ``ddp-profile findings`` reads
    the CUDA API table of those runs alone, and the report's runs arrive with theirs already made."""
    if r.launches is None:
        if r.trace is None:
            return "no trace loaded for this run"
        from ddp_profile.report.runs import launch_diagnosis

        r.launches = launch_diagnosis(r.trace)
    return r.launches


def load_all(root: Path, progress=None) -> list[RunData]:
    """Every run under ``root`` (see :func:`find_runs`), in folder order."""
    runs = []
    found = find_runs(root)
    for i, (s, d) in enumerate(found, 1):
        if progress:
            progress(f"[{i}/{len(found)}] {s}: {d.name}")
        runs.append(load_run(s, d))
    return runs


def machine_line(root: Path, set_name: str, runs: list[RunData], sub: str | None = None) -> str:
    """ "2× NVIDIA H200, NVLink NV18 between every pair" from machine.txt (nvidia-smi and topo -m) of the set,
    found in ``root/sub`` (default: the set's folder; a campaign set passes its own, e.g. ``campaign/C``)."""
    if sub is None:
        sub = {SCALING: "scaling", CAMPAIGN: "campaign/A"}.get(set_name, "")
    path = Path(root) / sub / "machine.txt"
    gpus, links = [], set()
    text = read_side_file(path) if path.is_file() else None
    if text is not None:
        for line in text.decode("utf-8", errors="replace").splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) >= 2 and parts[0].isdigit():
                gpus.append(parts[1])
            links |= {t for t in line.split() if t.startswith("NV") and t[2:].isdigit()}
    if not gpus:
        names = {g for r in runs if r.set == set_name and (g := r.meta.get("gpu_name")) is not None}
        n = max((r.world_size for r in runs if r.set == set_name), default=0)
        gpus = [", ".join(sorted(names)) or "unknown GPU"] * n
    name = ", ".join(sorted(set(gpus)))
    link = (
        f"NVLink {'/'.join(sorted(links))} between every GPU pair" if links else "interconnect not recorded"
    )
    return f"{len(gpus)}× {name} on one host, {link} (from {path.as_posix()})"


def hosts_of(rs, hosts: dict[str, str]) -> dict[str | None, list]:
    """The runs of a set ({key: run} or a list) grouped by host label (None: not in the hosts file), the
    largest group first."""
    groups: dict = {}
    for r in rs.values() if isinstance(rs, dict) else rs:
        groups.setdefault(hosts.get(r.run_id), []).append(r)
    return dict(sorted(groups.items(), key=lambda kv: (-len(kv[1]), str(kv[0]))))


def grad_wait_phase(analysis) -> dict:
    """The ``grad_sync_wait`` range on both clocks, medians over (rank, step): host duration, GPU span of the
    kernels launched inside it, and the GPU's lag behind the host at its start and end. A host range that
    ends before its kernels finish timed the launches, not the communication."""
    p = analysis.phases
    g = p.loc[p["phase"] == "grad_wait"] if p is not None and len(p) else p
    if g is None or not len(g):
        return {}
    f = g.astype({c: "float64" for c in ("start_ns", "end_ns", "host_start_ns", "host_end_ns")})
    return {
        "host_ns": float((f["host_end_ns"] - f["host_start_ns"]).median()),
        "gpu_span_ns": float((f["end_ns"] - f["start_ns"]).median()),
        "start_lag_ns": float((f["start_ns"] - f["host_start_ns"]).median()),
        "end_lag_ns": float((f["end_ns"] - f["host_end_ns"]).median()),
    }
