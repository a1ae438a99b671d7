"""The analysis split for distributed runs: a per-rank stage (:func:`rank_part`) and a reduce stage
(:func:`combine`) that together give what :func:`ddp_profile.analysis.analyze` gives on the whole trace.

``rank_part`` sees one rank's trace (one per-rank export, loaded where the file is) and keeps only small
tables: the rank's step and phase windows, step metrics, rank overlap, per-name kernel sums, its NCCL kernels
(one row per collective, for the cross-rank matching) and, per compute kernel name, the durations contention
needs for exact medians. ``combine`` pools them: cross-rank collective matching (``comm``, ``seq`` grouped by
hashing: O(rows), rows = collectives x ranks), the cost model and the notes.

Same numbers as ``analyze`` on the whole trace when the ranks agree on the step pattern's source (project
ranges on every rank or on none) and, with ``steps="A:B"``, on the set of step indices; frames have a fresh
0..n-1 index. Opens no file: a part is computed by whoever holds the rank's trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ddp_profile import schema
from ddp_profile.analysis import collectives as coll
from ddp_profile.analysis import contention as cont
from ddp_profile.analysis import costmodel as cm
from ddp_profile.analysis import overlap as ov
from ddp_profile.analysis import steps as st
from ddp_profile.analysis import windows as win
from ddp_profile.analysis._common import KernelArrays

NO_RANGES = "no NVTX ranges in the trace"


@dataclass
class RankPart:
    """One rank's (or one file's) share of an analysis: small tables only (see the module docstring)."""

    windows: pd.DataFrame
    steps: pd.DataFrame
    rank_overlap: pd.DataFrame
    kernel_sums: pd.DataFrame | None
    collectives: pd.DataFrame | None
    contention: dict = field(default_factory=dict)
    n_kernels: int = 0
    any_launch: bool = False
    step_notes: list[str] = field(default_factory=list)
    several_devices: bool = False

    def remap_ranks(self, mapping: dict[int, int]) -> RankPart:
        """The part with its ``rank`` columns renamed through ``mapping`` (local rank -> run rank)."""
        def remap(df):
            if df is None or df.empty or "rank" not in df:
                return df
            df = df.copy()
            df["rank"] = df["rank"].map(lambda r: mapping.get(int(r), int(r)) if pd.notna(r) else r).astype(df["rank"].dtype)
            return df

        self.windows, self.steps, self.rank_overlap = remap(self.windows), remap(self.steps), remap(self.rank_overlap)
        self.collectives = remap(self.collectives)
        return self

    def nbytes(self) -> int:
        """Approximate size of what travels to the reduce step."""
        frames = [self.windows, self.steps, self.rank_overlap, self.kernel_sums, self.collectives]
        size = sum(int(f.memory_usage(deep=True).sum()) for f in frames if f is not None)
        return size + sum(a.nbytes + o.nbytes for a, o in self.contention.values())


def rank_part(trace, *, step_pattern: str | None = None, phase_patterns: dict[str, str] | None = None,
              steps="all", several_devices=None) -> RankPart:
    """The per-rank stage of ``analyze`` on a trace holding one rank (or any set of whole ranks).
    ``several_devices(kernels, karr)``: analyze's test of whether a rank used several GPUs."""
    kernels = trace.kernels if trace.kernels is not None else schema.empty_frame(schema.KERNEL_COLUMNS)
    karr = KernelArrays(kernels)
    host_steps, step_notes = win.find_steps(trace.nvtx, step_pattern)
    host_steps = win.select_steps(host_steps, steps)
    host_phases = win.find_phases(trace.nvtx, host_steps, phase_patterns)
    windows = win.phase_windows(host_steps, host_phases, karr)
    step_frame = st.step_metrics(windows, karr)
    part = RankPart(
        windows=windows, steps=step_frame, rank_overlap=ov.rank_overlap(karr), kernel_sums=None, collectives=None,
        n_kernels=len(kernels), any_launch=bool((karr.launch >= 0).any()), step_notes=step_notes,
        several_devices=bool(several_devices(kernels, karr)) if several_devices else False,
    )
    karr.drop_rank_sets()
    part.collectives = coll.collective_rows(karr, getattr(trace, "nvtx", None), host_steps)
    covered = ov.overlapped_by_other_class(karr)
    part.kernel_sums = ov.kernel_sums(karr, covered)
    part.contention = cont.contention_samples(karr, covered)
    return part


def _ordered(frames: list[pd.DataFrame], by: list[str], empty: list[str]) -> pd.DataFrame:
    frames = [f for f in frames if f is not None and not f.empty]
    if not frames:
        return schema.empty_frame(empty)
    out = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    return out.sort_values(by, kind="stable").reset_index(drop=True)


def _step_notes(parts: list[RankPart]) -> list[str]:
    """``find_steps``' note on the whole trace: none when some rank has steps; "no ranges" only when no rank
    has any NVTX range, else the pattern note."""
    if any(not p.steps.empty or not p.windows.empty for p in parts):
        return []
    notes = [n for p in parts for n in p.step_notes]
    other = [n for n in notes if not n.startswith(NO_RANGES)]
    return other[:1] or notes[:1]


def combine(parts: list[RankPart], *, ddp_bucket_bytes: list[int] | None = None) -> dict:
    """The reduce stage: the fields of an :class:`~ddp_profile.analysis.Analysis` from the parts of all ranks
    (parts of disjoint ranks; any order: they are put in rank order here)."""
    def first_rank(p):
        r = p.rank_overlap["rank"] if not p.rank_overlap.empty else p.windows.get("rank", pd.Series(dtype=int))
        return int(r.min()) if len(r) else np.iinfo(np.int64).max

    parts = sorted(parts, key=first_rank)
    notes: list[str] = []
    n_kernels = sum(p.n_kernels for p in parts)
    if n_kernels == 0:
        notes.append("the trace has no GPU kernels (profile with `nsys profile -t cuda`)")
    elif not any(p.any_launch for p in parts):
        notes.append("kernels have no launch times (CUDA API trace missing): steps cannot be projected onto "
                     "the GPU; profile with `nsys profile -t cuda,nvtx`")
    notes += _step_notes(parts)
    windows = _ordered([p.windows for p in parts], ["rank"], schema.PHASE_COLUMNS + ["pid"])
    steps = _ordered([p.steps for p in parts], ["rank", "step"], schema.STEP_METRIC_COLUMNS)
    if not steps.empty and steps["comm_tail_ns"].isna().all():
        notes.append("no backward NVTX range inside the steps: comm_tail_ns is missing (name the backward "
                     "range 'backward' or pass --phase backward=REGEX)")
    if any(p.several_devices for p in parts):
        notes.append("a rank used several GPUs: its kernel sets are merged across them")
    rank_overlap = _ordered([p.rank_overlap for p in parts], ["rank"], schema.RANK_OVERLAP_COLUMNS)
    rows = [p.collectives for p in parts if p.collectives is not None]
    if len(rows) > 1:
        rows = [_ordered(rows, ["rank"], [])]
    collectives = coll.match_collectives(rows, notes, ddp_bucket_bytes)
    return dict(
        steps=steps,
        phases=schema.select(windows, schema.PHASE_COLUMNS).reset_index(drop=True),
        rank_overlap=rank_overlap,
        kernel_overlap=ov.finish_kernel_overlap([p.kernel_sums for p in parts]).reset_index(drop=True),
        collectives=collectives,
        cost_model=cm.cost_model(collectives, notes),
        contention=cont.pooled_contention([p.contention for p in parts]).reset_index(drop=True),
        notes=notes,
    )
