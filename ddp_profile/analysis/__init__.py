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
from ddp_profile.analysis import answers as _answers
from ddp_profile.analysis import infer as _infer
from ddp_profile.analysis import parts as _parts
from ddp_profile.analysis import recommend as _rec
from ddp_profile.analysis.compare import amdahl_serial_fraction, compare_runs
from ddp_profile.analysis.costmodel import optimal_bucket_bytes, predict_overhead
from ddp_profile.analysis.kernel_arrays import KernelArrays
from ddp_profile.analysis.kernel_families import gemm_wave_ratio
from ddp_profile.memory import python_strings, return_freed_memory
from ddp_profile.schema import JSON_SECTIONS, OPTIONAL_SECTIONS

__all__ = ["Analysis", "analyze", "KernelArrays", "compare_runs", "predict_overhead", "optimal_bucket_bytes",
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
    critical_path: pd.DataFrame = field(default_factory=lambda: schema.empty_frame(schema.CRITICAL_PATH_COLUMNS))
    """``analysis.critical_path``: per step, the parts of the rank that ends it (they add up to span_ns)."""
    verdict: dict = field(default_factory=dict)
    """``analysis.verdict``: bound_by, removable_ns, what_to_change, expected_gain_ns, spread_ns, rank,
    share_pct, advice (JSON key ``verdict``)."""
    trace_totals: dict = field(default_factory=dict)
    """Under a ``--steps`` selection: the summary's whole-trace ``trace_`` values, computed before the
    collectives and overlap sections were cut to the selected steps ({} without a selection)."""
    per_rank: dict = field(default_factory=dict)
    """``analysis.verdict.per_rank``: {metric: {rank: median}} where ranks differ by more than 2x."""
    _deferred: dict = field(default_factory=dict, repr=False, compare=False)
    """Sections not computed yet (``analyze(sections=...)``): name -> function computing the frame."""

    # ---- sections computed on first access (analyze(sections=...)) --------------------------------------
    def defer(self, name: str, compute) -> None:
        """Compute section ``name`` (an attribute) with ``compute()`` when it is first read, not now (with the
        string storage ``analyze`` makes its frames with: ``memory.python_strings``)."""
        self._deferred[name] = python_strings()(compute)
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
        ``job_comm_tail_ns`` = median over steps (one value per step label: the same iteration on every rank)."""
        s = self.steps
        coll = self.collectives
        ro = self.rank_overlap
        by_steps = not s.empty

        def med(col):
            return _clean(s[col].median()) if by_steps else None

        def ratio(num, den):
            num, den = float(num), float(den)
            return _clean(100.0 * num / den) if den > 0 else None

        trace_coll = dict(self.trace_totals) or _parts.trace_keys(coll, ro)
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
            "step_ns": med("step_ns"), "span_ns": med("span_ns"), "compute_ns": med("compute_ns"), "comm_ns": med("comm_ns"),
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

    def json_head(self) -> dict:
        """The keys of :meth:`to_json_dict` before the sections (version, summary, notes, verdict, per_rank)."""
        return {"version": JSON_VERSION, "summary": self.summary(), "notes": list(self.notes),
                "verdict": _json_safe(self.verdict), "per_rank": _json_safe(self.per_rank)}

    def to_json_dict(self) -> dict:
        """{"version", "summary", "notes", <section>: [row dicts]} with the keys of JSON_SECTIONS; NaN/NA ->
        null. Per kernel name, NCCL rows also carry ``compute_overlap_pct`` (= overlap_pct)."""
        out = self.json_head()
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


def _json_safe(v):
    """Nested dicts/lists with JSON-safe scalars (dict keys as str)."""
    if isinstance(v, dict):
        return {str(k): _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    return _clean(v)


def records(df: pd.DataFrame) -> list[dict]:
    """Rows as JSON-safe dicts."""
    cols = list(df.columns)
    return [{c: _clean(v) for c, v in zip(cols, row, strict=False)} for row in df.itertuples(index=False, name=None)]


def _ddp_bucket_bytes(trace) -> list[int] | None:
    """Stock torch_ddp's all-reduce sizes from the run JSON (``layout.ddp_bucket_bytes``; with a compressing
    comm hook such as ``--ddp-comm-hook bf16``, ``layout.reduce_bytes``, the bytes the hook sends), else None."""
    run = getattr(trace, "run", None) or {}
    layout = run.get("layout") if isinstance(run, dict) else None
    sizes = (layout.get("reduce_bytes") or layout.get("ddp_bucket_bytes")) if isinstance(layout, dict) else None
    if run.get("strategy") != "torch_ddp" or not isinstance(sizes, list) or not sizes:
        return None
    if not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes):
        return None
    return sizes


@python_strings()
def analyze(trace, *, step_pattern: str | None = None, phase_patterns: dict[str, str] | None = None,
            steps="all", host_waits: pd.DataFrame | None = None, sections=None) -> Analysis:
    """Run every analysis on a loaded trace. ``steps``: "all", "A:B" (A <= step label < B, open ends
    allowed), one label, or labels; a selection that keeps no step raises UsageError naming the labels.
    ``host_waits``: schema.HOST_WAIT_COLUMNS, the calls that name a straggler's host cause (default: the
    trace's own, ``Trace.host_waits`` as ``load_trace`` read them, from each part).
    ``sections``: JSON section names wanted now (default None: all). For a trace held in this process, the
    :data:`OPTIONAL_SECTIONS` not named are computed when first read (``res.comm_kinds``), so they never
    come out empty or stale; a trace held on workers (``map_ranks``) computes every section now.

    One code path (:mod:`ddp_profile.analysis.parts`): the per-part stages run where the ranks are (this
    process for a loaded trace; the workers for a trace with ``map_ranks(fn, per_part, **kwargs)``, e.g.
    :class:`ddp_profile.distributed.DistributedTrace`), the cross-rank steps here, on small tables only."""
    local = not hasattr(trace, "map_ranks")
    later = set(OPTIONAL_SECTIONS) - set(sections) if sections is not None and local else set()
    held = _parts.LocalRanks(trace) if local else trace
    found = held.map_ranks(_parts.step_part, step_pattern=step_pattern)
    notes = _parts.kernel_notes(found) + _parts.step_notes(found)
    host_steps, id_notes = _parts.label_steps(found, steps)  # the parts' collective rows relabelled in place
    notes += id_notes
    match_notes: list[str] = []
    table = _parts.match(found, match_notes, _ddp_bucket_bytes(trace))
    del found  # the collective rows: the table holds what is needed of them
    return_freed_memory()
    run = getattr(trace, "run", None)
    given = _parts.inputs(table, host_steps)
    selected = steps not in (None, "all")
    got = held.map_ranks(_parts.rank_part, given, phase_patterns=phase_patterns, selected=selected,
                         need_ready=_rec.needs_ready_times(run) and "recommendation" not in later, whole=local,
                         with_kinds="comm_kinds" not in later)
    fields = _parts.combine(got, table, notes, match_notes, selected=selected)
    ready = fields.pop("ready_ns")
    rank_paths, waits, after_backward = fields.pop("rank_paths"), fields.pop("host_waits"), fields.pop("after_backward")
    step_kernels = fields.pop("step_kernels")
    keep = fields.pop("collective_rows")  # None, or the table rows kept by a --steps selection
    waits = host_waits if host_waits is not None else waits
    res = Analysis(**fields)
    res.notes += _infer.extra_work_notes(res.steps)  # by the common labels, so after them
    channels = (getattr(trace, "meta", None) or {}).get("nccl_channels")
    if "comm_kinds" in later:
        res.defer("comm_kinds", lambda: _later_comm_kinds(held, got, given))
    if "recommendation" in later:
        res.defer("recommendation", lambda: _rec.recommend(res, None, run, nccl_channels=channels,
                                                           ready_ns=_later_ready(held, given, run, len(table), keep)))
    else:
        res.recommendation = _rec.recommend(res, None, run, ready_ns=ready, nccl_channels=channels)
    # [answers] rank paths and host-wait calls from the ranks' stage (analysis/answers.py)
    _answers.attach(res, rank_paths, waits, _rec.contention_per_step_ns(res.contention, res.steps),
                    gemm_wave_ratio(res.contention), after_backward, step_kernels, run)
    return res


# ---- deferred sections of a trace held in this process (one part: parts.LocalRanks) ------------------------

def _later_comm_kinds(held, got: list, given: list) -> pd.DataFrame:
    """``comm_kinds`` as :func:`analyze` computes it with every section, from the part's windows and matched
    collective rows (its kernel arrays built again: the stages consumed theirs)."""
    from ddp_profile.analysis import comm_kinds as ck
    from ddp_profile.analysis import steps as st

    kinds: list[pd.DataFrame] = []
    for part, inp in zip(got, given, strict=True):
        k = st.step_tables(part.windows, KernelArrays(held.kernels), inp.matched, job_tail=False)[1]
        kinds += [k] if isinstance(k, pd.DataFrame) else k
    return ck.finish(kinds).reset_index(drop=True)


def _later_ready(held, given: list, run, n: int, keep: np.ndarray | None = None) -> np.ndarray:
    """The gradient-ready time per collective table row, as the stages measure it for ``recommend`` (``keep``:
    the rows a ``--steps`` selection kept, None: all)."""
    from ddp_profile.analysis.costmodel import grad_ready_ns

    ready = np.full(n, np.nan)
    if _rec.needs_ready_times(run):
        for inp in given:
            t = inp.matched
            if t is not None and len(t):
                ready[t["_row"].to_numpy()] = grad_ready_ns(t, held.kernels)
    return ready[keep] if keep is not None else ready
