"""The analysis engine: one front function delegating to one module per analysis.

``analyze(trace)`` takes a loaded trace (attributes ``kernels``, ``nvtx``, ``gpus``, ``ranks``, ``meta``,
``run``; see ``ddp_profile.schema``) and returns an :class:`Analysis` holding one frame per analysis:

- ``windows``: steps and phases found in NVTX (else inferred from the kernel sequence and the launching
  threads: ``infer``) and projected onto the GPU by launch time;
- ``steps``: per (rank, step) compute / comm / overlap / exposed comm (wait vs transfer) / tail / idle;
- ``comm_kinds``: per (rank, step, collective kind) NCCL time, exposed, waiting, by phase and after backward;
- ``overlap``: per kernel name (nsys ``nccl_gpu_overlap_trace`` semantics) and per rank (HTA semantics);
- ``collectives``: NCCL kernels matched across ranks, wait vs transfer, bytes and bus bandwidth;
- ``costmodel``: alpha-beta fit, predicted overhead, optimal bucket size;
- ``contention``: compute slowdown while NCCL runs;
- ``compare``: several runs side by side, scaling efficiency and Amdahl's serial fraction.

Each module's docstring defines its numbers as formulas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ddp_profile import schema
from ddp_profile.analysis import collectives as _coll
from ddp_profile.analysis import comm_kinds as _ck
from ddp_profile.analysis import contention as _cont
from ddp_profile.analysis import costmodel as _cm
from ddp_profile.analysis import infer as _infer
from ddp_profile.analysis import overlap as _ov
from ddp_profile.analysis import parts as _parts
from ddp_profile.analysis import recommend as _rec
from ddp_profile.analysis import steps as _steps
from ddp_profile.analysis import windows as _win
from ddp_profile.analysis._common import KernelArrays, rank_used_several_devices
from ddp_profile.analysis.compare import amdahl_serial_fraction, compare_runs
from ddp_profile.analysis.costmodel import optimal_bucket_bytes, predict_overhead
from ddp_profile.memory import return_freed_memory
from ddp_profile.schema import JSON_SECTIONS

__all__ = ["Analysis", "analyze", "compare_runs", "predict_overhead", "optimal_bucket_bytes",
           "amdahl_serial_fraction", "JSON_SECTIONS"]

JSON_VERSION = 1


@dataclass
class Analysis:
    """Everything ``analyze`` computed for one trace; every frame follows its ``schema`` contract."""

    steps: pd.DataFrame
    phases: pd.DataFrame
    rank_overlap: pd.DataFrame
    kernel_overlap: pd.DataFrame
    collectives: pd.DataFrame
    cost_model: pd.DataFrame
    contention: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    comm_kinds: pd.DataFrame = field(default_factory=lambda: schema.empty_frame(schema.COMM_KIND_COLUMNS))
    recommendation: pd.DataFrame = field(default_factory=lambda: schema.empty_frame(schema.RECOMMEND_COLUMNS))
    """``analysis.recommend``: the configuration to try next, with its predicted step time (first row)."""
    _deferred: dict = field(default_factory=dict, repr=False, compare=False)
    """Sections not computed yet (``analyze(sections=...)``): name -> function computing the frame."""

    # ---- sections computed on first access (analyze(sections=...)) --------------------------------------
    def defer(self, name: str, compute) -> None:
        """Compute section ``name`` (an attribute) with ``compute()`` when it is first read, not now."""
        self._deferred[name] = compute
        self.__dict__.pop(name, None)  # so that reading it reaches __getattr__

    def __getattr__(self, name: str):
        deferred = self.__dict__.get("_deferred")  # only reached for attributes not set: deferred sections
        if deferred and name in deferred:
            value = deferred.pop(name)()
            setattr(self, name, value)
            return value
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __getstate__(self) -> dict:
        """Pickled (report cache, Dask) with every deferred section computed: the functions stay here."""
        for name in list(self.__dict__.get("_deferred", {})):
            getattr(self, name)
        return self.__dict__

    def summary(self) -> dict:
        """Headline numbers over one population: the selected steps (``population`` = "steps"), or the whole
        trace when it has no steps ("trace"). Keys prefixed ``trace_`` are always whole-trace (all ranks, all
        kernels, warm-up included) and ignore the step selection. NaN -> None.

        Over the population: ``*_ns``/``*_pct`` of the step table are medians over (rank, step) rows;
        ``overlap_pct`` = 100·Σ overlap_ns / Σ comm_ns over those rows; ``n_collectives``, ``wait_pct_of_comm``
        = 100·Σ wait_ns / Σ duration_ns over collectives launched inside the selected steps;
        ``exposed_wait_pct_of_exposed`` = 100·Σ exposed_wait_ns / Σ exposed_comm_ns over the rows;
        ``job_comm_tail_ns`` = median over steps (one value per step index)."""
        s = self.steps
        coll = self.collectives
        ro = self.rank_overlap
        by_steps = not s.empty

        def med(col):
            return _clean(s[col].median()) if by_steps else None

        def ratio(num, den):
            num, den = float(num), float(den)
            return _clean(100.0 * num / den) if den > 0 else None

        trace_coll = {"trace_n_collectives": len(coll),
                      "trace_wait_pct_of_comm": ratio(coll["wait_ns"].sum(), coll["duration_ns"].sum())
                      if len(coll) else None,
                      "trace_overlap_pct": ratio(ro["overlap_ns"].sum(), ro["comm_ns"].sum()) if len(ro) else None}
        if by_steps:
            in_steps = coll.loc[coll["step"].notna()] if len(coll) else coll
            pop = {
                "overlap_pct": ratio(s["overlap_ns"].sum(), s["comm_ns"].sum()),
                "n_collectives": len(in_steps),
                "wait_pct_of_comm": ratio(in_steps["wait_ns"].sum(), in_steps["duration_ns"].sum())
                if len(in_steps) else None,
            }
        else:  # no steps: the population is the whole trace
            pop = {"overlap_pct": trace_coll["trace_overlap_pct"], "n_collectives": len(coll),
                   "wait_pct_of_comm": trace_coll["trace_wait_pct_of_comm"]}
        job_tail = s.groupby("step")["job_comm_tail_ns"].first() if by_steps else None
        out = {
            "population": "steps" if by_steps else "trace",
            "n_ranks": int(s["rank"].nunique()) if by_steps else int(ro["rank"].nunique()) if len(ro) else 0,
            "n_steps": int(s["step"].nunique()) if by_steps else 0,
            "step_ns": med("step_ns"), "compute_ns": med("compute_ns"), "comm_ns": med("comm_ns"),
            "overlap_ns": med("overlap_ns"), "exposed_comm_ns": med("exposed_comm_ns"),
            "comm_tail_ns": med("comm_tail_ns"), "idle_ns": med("idle_ns"), "comm_pct": med("comm_pct"),
            "exposed_comm_pct": med("exposed_comm_pct"),
            **pop,
            # appended (issues 14, 15)
            "exposed_wait_ns": med("exposed_wait_ns"), "exposed_transfer_ns": med("exposed_transfer_ns"),
            "exposed_wait_pct_of_exposed": ratio(s["exposed_wait_ns"].sum(), s["exposed_comm_ns"].sum())
            if by_steps else None,
            "param_sync_ns": med("param_sync_ns"), "exposed_param_sync_ns": med("exposed_param_sync_ns"),
            "exposed_allgather_ns": med("exposed_allgather_ns"),
            "job_comm_tail_ns": _clean(job_tail.median()) if by_steps else None,
            **trace_coll,
        }
        return out

    def to_json_dict(self) -> dict:
        """{"version", "summary", "notes", <section>: [row dicts]} with the keys of JSON_SECTIONS; NaN/NA ->
        null. Per kernel name, NCCL rows also carry ``compute_overlap_pct`` (= overlap_pct)."""
        out = {"version": JSON_VERSION, "summary": self.summary(), "notes": list(self.notes)}
        for key, attr in JSON_SECTIONS.items():
            out[key] = records(getattr(self, attr))
        for row in out["kernels"]:
            if row.get("kind") == "nccl":
                row["compute_overlap_pct"] = row["overlap_pct"]
        return out


def _clean(v):
    """A JSON-safe scalar: numpy -> Python, NaN/NA -> None."""
    if v is None or v is pd.NA or v is pd.NaT:
        return None
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return None if math.isnan(v) else float(v)
    if isinstance(v, np.bool_):
        return bool(v)
    return v


def records(df: pd.DataFrame) -> list[dict]:
    """Rows as JSON-safe dicts."""
    cols = list(df.columns)
    return [{c: _clean(v) for c, v in zip(cols, row, strict=False)} for row in df.itertuples(index=False, name=None)]


def _ddp_bucket_bytes(trace) -> list[int] | None:
    """Stock torch_ddp's bucket sizes from the run JSON (``layout.ddp_bucket_bytes``), else None."""
    run = getattr(trace, "run", None) or {}
    layout = run.get("layout") if isinstance(run, dict) else None
    sizes = layout.get("ddp_bucket_bytes") if isinstance(layout, dict) else None
    if run.get("strategy") != "torch_ddp" or not isinstance(sizes, list) or not sizes:
        return None
    if not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes):
        return None
    return sizes


OPTIONAL_SECTIONS = ("comm_kinds", "recommendation")
"""Sections ``analyze(sections=...)`` computes only when asked for (else on first access of the attribute)."""


def analyze(trace, *, step_pattern: str | None = None, phase_patterns: dict[str, str] | None = None,
            steps="all", sections=None) -> Analysis:
    """Run every analysis on a loaded trace. ``steps``: "all", "A:B" (slice over step indices) or ints.
    ``sections``: JSON section names wanted now (default None: all); of :data:`OPTIONAL_SECTIONS`, those not
    named are computed when first read (``res.comm_kinds``), so they never come out empty or stale.

    A trace whose ranks are held where their data lives (``trace.map_ranks(fn, per_file, **kwargs)``, e.g.
    :class:`ddp_profile.distributed.DistributedTrace` on a Dask cluster) is analysed in the stages of
    :mod:`ddp_profile.analysis.parts`; only small tables come back."""
    later = set() if sections is None else set(OPTIONAL_SECTIONS) - set(sections)
    if hasattr(trace, "map_ranks"):
        return _staged(trace, step_pattern, phase_patterns, steps, later)
    notes: list[str] = []
    kernels = trace.kernels if trace.kernels is not None else schema.empty_frame(schema.KERNEL_COLUMNS)
    karr = KernelArrays(kernels)
    if len(kernels) == 0:
        notes.append("the trace has no GPU kernels (profile with `nsys profile -t cuda`)")
    elif (karr.launch < 0).all():
        notes.append("kernels have no launch times (CUDA API trace missing): steps cannot be projected onto "
                     "the GPU; profile with `nsys profile -t cuda,nvtx`")
    # NVTX step ranges, else the training loop's period in the kernel sequence (analysis/infer.py).
    host_steps, step_notes, _ = _infer.steps_from_trace(trace.nvtx, karr, step_pattern)
    notes += step_notes
    host_steps = _win.select_steps(host_steps, steps)
    host_phases = _win.find_phases(trace.nvtx, host_steps, phase_patterns)
    if host_phases.empty and not host_steps.empty:
        host_phases = _infer.infer_phases(host_steps, karr, trace.nvtx)
        if not host_phases.empty:
            notes.append("no phase NVTX ranges: forward / backward / optimizer inferred from the launching thread "
                         "(backward = kernels launched from autograd threads, forward = main thread before them, "
                         "optimizer = main thread after them)")
    windows = _win.phase_windows(host_steps, host_phases, karr)
    # The collective table first: the step table splits exposed comm with its per-kernel wait intervals.
    coll = _coll.collective_table(karr, getattr(trace, "nvtx", None), host_steps, notes, _ddp_bucket_bytes(trace))
    return_freed_memory()
    step_frame, kinds_frame = _steps.step_tables(windows, karr, coll, with_kinds="comm_kinds" not in later)
    if (note := _ck.other_kind_note(karr)) is not None:
        notes.append(note)
    karr.launch = None  # launch times' last users were the collective and step tables
    return_freed_memory()
    if not step_frame.empty and step_frame["comm_tail_ns"].isna().all():
        notes.append("no backward NVTX range inside the steps: comm_tail_ns is missing (name the backward "
                     "range 'backward' or pass --phase backward=REGEX)")
    if rank_used_several_devices(kernels, karr):
        notes.append("a rank used several GPUs: its kernel sets are merged across them")
    # Any cached rank sets and the comm kinds' memos (their last user: the note above) go before the rank
    # overlap: it reads only the rank totals, kept apart (``KernelArrays.rank_totals``; a rank without them
    # has its sets built again). Before the step table recorded its totals itself, its cached sets kept
    # ~18 MB resident under the rank overlap on the 1M-kernel replica.
    karr.drop_rank_sets()
    karr.drop_memos()
    return_freed_memory()
    rank_overlap = _ov.rank_overlap(karr)
    karr.drop_rank_sets()  # built for ranks without steps only (no totals from the step table): freed
    karr.is_copy = None  # the rank sets' last user: the overlap tables and contention read compute and NCCL only
    # Each stage's freed temporaries are handed back before the next one's (glibc otherwise keeps them
    # resident and each stage's peak stacks on them): ~10 MB off the 1M-kernel peak, values unchanged.
    return_freed_memory()
    covered = _ov.overlapped_by_other_class(karr)
    return_freed_memory()
    kernel_overlap = _ov.kernel_overlap(karr, covered)
    return_freed_memory()
    res = Analysis(
        steps=step_frame,
        phases=schema.select(windows, schema.PHASE_COLUMNS),
        rank_overlap=rank_overlap,
        kernel_overlap=kernel_overlap,
        collectives=coll,
        cost_model=_cm.cost_model(coll, notes),
        contention=_cont.contention(karr, covered, windows),
        notes=notes,
        comm_kinds=kinds_frame,
    )
    if "comm_kinds" in later:
        res.defer("comm_kinds", lambda: _steps.step_tables(windows, KernelArrays(kernels), coll)[1])

    def recommendation():
        return _rec.recommend(res, kernels, getattr(trace, "run", None),
                              nccl_channels=(getattr(trace, "meta", None) or {}).get("nccl_channels"))

    if "recommendation" in later:
        res.defer("recommendation", recommendation)
    else:
        res.recommendation = recommendation()
    return res


def _staged(trace, step_pattern, phase_patterns, steps, later=frozenset()) -> Analysis:
    """``analyze`` on a trace whose ranks are held elsewhere (``trace.map_ranks``, e.g.
    :class:`ddp_profile.distributed.DistributedTrace`): the stages of :mod:`ddp_profile.analysis.parts` run
    where the ranks are; collectives are matched and the parts combined here, from small tables only."""
    kw = {"step_pattern": step_pattern, "steps": steps}
    rows = trace.map_ranks(_parts.collective_part, **kw)
    rows = [r.assign(_file=i) if r is not None else None for i, r in enumerate(rows)]
    match_notes: list[str] = []
    ranks = trace.ranks["rank"].to_numpy() if getattr(trace, "ranks", None) is not None else None
    table = _parts.match(rows, match_notes, _ddp_bucket_bytes(trace), ranks)
    table = table.assign(_row=np.arange(len(table)))
    if "_file" in table:  # each file's rows, the table split once (not one scan of it per file)
        at = table.groupby("_file", sort=False).indices
        none = np.zeros(0, dtype=np.intp)
        per_file = [table.iloc[at.get(i, none)] for i in range(len(rows))]
    else:
        per_file = [table] * len(rows)
    got = trace.map_ranks(_parts.rank_part, per_file, phase_patterns=phase_patterns, **kw)
    fields = _parts.combine(got, table, match_notes)
    ready = fields.pop("ready_ns")
    res = Analysis(**fields)

    def recommendation():
        return _rec.recommend(res, None, getattr(trace, "run", None), ready_ns=ready,
                              nccl_channels=(getattr(trace, "meta", None) or {}).get("nccl_channels"))

    if "recommendation" in later:
        res.defer("recommendation", recommendation)
    else:
        res.recommendation = recommendation()
    return res
