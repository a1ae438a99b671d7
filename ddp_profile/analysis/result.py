"""What :func:`ddp_profile.analysis.analyze` returns: :class:`Analysis` (one frame per section, every frame
following its ``schema`` contract; sections asked for later computed when first read) and its JSON form
(:meth:`Analysis.to_json_dict`, :func:`records`: NaN/NA as null, numpy scalars as Python)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ddp_profile import schema
from ddp_profile.memory import python_strings
from ddp_profile.schema import JSON_SECTIONS

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
    critical_path: pd.DataFrame = field(
        default_factory=lambda: schema.empty_frame(schema.CRITICAL_PATH_COLUMNS)
    )
    """``analysis.critical_path``: per step, the parts of the rank that ends it (they add up to span_ns)."""
    verdict: dict = field(default_factory=dict)
    """``analysis.verdict``: bound_by, removable_ns, what_to_change, expected_gain_ns, spread_ns, rank,
    share_pct, advice (JSON key ``verdict``)."""
    trace_totals: dict = field(default_factory=dict)
    """Under a ``--steps`` selection: the summary's whole-trace ``trace_`` values, computed before the
    collectives and overlap sections were cut to the selected steps ({} without a selection)."""
    launches: Any = None
    """``analysis.launches.LaunchAnalysis`` when ``analyze`` was given the CUDA API calls (``api=``), else None;
    not a JSON section (``ddp-profile launches`` writes its own JSON)."""
    per_rank: dict = field(default_factory=dict)
    """``analysis.verdict.per_rank``: {metric: {rank: median}} where ranks differ by more than 2x."""
    clock_alignment: dict = field(default_factory=dict)
    """``analysis.clocks.Alignment.to_json``: each rank's clock offset against the reference rank, measured
    on collective ends, the residual, the corrections applied and the collectives paired or dropped (JSON key
    ``clock_alignment``, present for a trace of several ranks with NCCL kernels)."""
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

        trace_coll = dict(self.trace_totals) or trace_keys(coll, ro)
        if by_steps:
            in_steps = coll.loc[coll["step"].notna()] if len(coll) else coll
            pop = {
                "overlap_pct": ratio(s["overlap_ns"].sum(), s["comm_ns"].sum()),
                "n_collectives": len(in_steps),
                "wait_pct_of_comm": ratio(in_steps["wait_ns"].sum(min_count=1), in_steps["duration_ns"].sum())
                if len(in_steps)
                else None,
            }
        else:  # no steps: the population is the whole trace
            pop = {
                "overlap_pct": trace_coll["trace_overlap_pct"],
                "n_collectives": len(coll),
                "wait_pct_of_comm": trace_coll["trace_wait_pct_of_comm"],
            }
        job_tail = s.groupby("step")["job_comm_tail_ns"].first() if by_steps else None
        out = {
            "population": "steps" if by_steps else "trace",
            "n_ranks": int(s["rank"].nunique()) if by_steps else int(ro["rank"].nunique()) if len(ro) else 0,
            "n_steps": int(s["step"].nunique()) if by_steps else 0,
            "step_ns": med("step_ns"),
            "span_ns": med("span_ns"),
            "compute_ns": med("compute_ns"),
            "comm_ns": med("comm_ns"),
            "overlap_ns": med("overlap_ns"),
            "exposed_comm_ns": med("exposed_comm_ns"),
            "comm_tail_ns": med("comm_tail_ns"),
            "idle_ns": med("idle_ns"),
            "comm_pct": med("comm_pct"),
            "exposed_comm_pct": med("exposed_comm_pct"),
            **pop,
            # appended
            "exposed_wait_ns": med("exposed_wait_ns"),
            "exposed_transfer_ns": med("exposed_transfer_ns"),
            "exposed_wait_pct_of_exposed": ratio(
                s["exposed_wait_ns"].sum(min_count=1), s["exposed_comm_ns"].sum()
            )
            if by_steps
            else None,
            "param_sync_ns": med("param_sync_ns"),
            "exposed_param_sync_ns": med("exposed_param_sync_ns"),
            "exposed_allgather_ns": med("exposed_allgather_ns"),
            "job_comm_tail_ns": _clean(job_tail.median()) if job_tail is not None else None,
            **trace_coll,
        }
        return out

    def json_head(self) -> dict:
        """The keys of :meth:`to_json_dict` before the sections (version, summary, notes, verdict, per_rank, and
        clock_alignment for a trace of several ranks with NCCL kernels)."""
        head = {
            "version": JSON_VERSION,
            "summary": self.summary(),
            "notes": list(self.notes),
            "verdict": _json_safe(self.verdict),
            "per_rank": _json_safe(self.per_rank),
        }
        if len(self.clock_alignment.get("n_paired") or {}) > 1:
            head["clock_alignment"] = _json_safe(self.clock_alignment)
        return head

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
    return [
        {c: _clean(v) for c, v in zip(cols, row, strict=False)}
        for row in df.itertuples(index=False, name=None)
    ]


def trace_keys(coll: pd.DataFrame, ro: pd.DataFrame) -> dict:
    """The summary's whole-trace ``trace_`` keys from the whole collective table and rank overlap."""

    def ratio(num, den) -> float | None:
        num, den = float(num), float(den)
        return 100.0 * num / den if den > 0 and num == num else None  # num NaN: every wait unknown

    return {
        "trace_n_collectives": len(coll),
        "trace_wait_pct_of_comm": ratio(coll["wait_ns"].sum(min_count=1), coll["duration_ns"].sum())
        if len(coll)
        else None,
        "trace_overlap_pct": ratio(ro["overlap_ns"].sum(), ro["comm_ns"].sum()) if len(ro) else None,
    }
