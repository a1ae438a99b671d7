"""The analysis split for distributed runs: what :func:`ddp_profile.analysis.analyze` computes, in stages that
run where each rank's trace is and a reduce step that sees only small tables.

1. :func:`collective_part` (per rank): the rank's NCCL kernels, one row per collective, with issue order
   (``comm``, ``seq``), step and bucket.
2. :func:`match` (reduce): the collective table: the same collective on every rank is ``(comm, seq)``,
   grouped by hashing (O(rows), rows = collectives x ranks); each kernel's wait for the last arrival.
3. :func:`rank_part` (per rank, given its matched rows): step and phase windows, step metrics with the wait
   split, per-kind communication, rank overlap, per-name kernel sums, the durations contention needs for
   exact medians (int32), gradient-ready times for the recommendation.
4. :func:`combine` (reduce): concatenation in rank order, the job-level tail across ranks, notes.

Same numbers as ``analyze`` on the whole trace when the ranks agree on the step pattern's source (project
ranges on every rank or on none) and, with ``steps="A:B"``, on the set of step indices; frames have a fresh
0..n-1 index. Opens no file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ddp_profile import schema
from ddp_profile.analysis import collectives as coll
from ddp_profile.analysis import comm_kinds as ck
from ddp_profile.analysis import contention as cont
from ddp_profile.analysis import costmodel as cm
from ddp_profile.analysis import critical_path as cp
from ddp_profile.analysis import overlap as ov
from ddp_profile.analysis import steps as st
from ddp_profile.analysis import windows as win
from ddp_profile.analysis._common import KernelArrays, rank_used_several_devices

NO_RANGES = "no NVTX ranges in the trace"


@dataclass
class RankPart:
    """One rank's (or one file's) share of an analysis: small tables only (see the module docstring)."""

    windows: pd.DataFrame
    steps: pd.DataFrame
    kinds: list
    rank_overlap: pd.DataFrame
    kernel_sums: pd.DataFrame | None
    contention: dict = field(default_factory=dict)
    ready: pd.DataFrame | None = None
    n_kernels: int = 0
    any_launch: bool = False
    step_notes: list[str] = field(default_factory=list)
    other_kind: tuple = (0, [])
    several_devices: bool = False
    first_rank: int = 0
    paths: pd.DataFrame | None = None
    """``critical_path.rank_paths`` of its ranks (needs their kernels' launch times: computed here)."""
    host_waits: pd.DataFrame | None = None
    """Its ranks' ``Trace.host_waits`` (a few rows per step: the straggler's evidence)."""
    file_sums: list | None = None
    """For a part of several files (a Dask batch): (first rank, ``kernel_sums``) per file, in place of
    ``kernel_sums``: first appearances are then ordered by rank over files, as with one part per file."""

    def nbytes(self) -> int:
        """Approximate size of what travels to the reduce step."""
        frames = [self.windows, self.steps, self.rank_overlap, self.kernel_sums, self.ready, self.paths,
                  self.host_waits, *self.kinds,
                  *(f for _, f in self.file_sums or [])]
        size = sum(int(f.memory_usage(deep=True).sum()) for f in frames if f is not None)
        return size + sum(a.nbytes + o.nbytes for a, o in self.contention.values())


def _host_steps(trace, step_pattern, steps):
    host_steps, notes = win.find_steps(trace.nvtx, step_pattern)
    return win.select_steps(host_steps, steps), notes


def collective_part(trace, *, step_pattern: str | None = None, steps="all", **_ignored) -> pd.DataFrame | None:
    """Stage 1 on one rank's trace: ``collectives.collective_rows`` (None without NCCL kernels)."""
    host_steps, _ = _host_steps(trace, step_pattern, steps)
    return coll.collective_rows(KernelArrays(trace.kernels), getattr(trace, "nvtx", None), host_steps)


def match(rows: list[pd.DataFrame | None], notes: list[str], ddp_bucket_bytes: list[int] | None = None,
          ranks=None) -> pd.DataFrame:
    """Stage 2: the collective table from every rank's :func:`collective_part` (ranks already the run's).
    Rows keep ``_file`` when the inputs carry it (which part each row came from)."""
    frames: list[pd.DataFrame] = [r for r in rows if r is not None and len(r)]
    if len(frames) > 1:
        frames = [pd.concat(frames, ignore_index=True).sort_values("rank", kind="stable").reset_index(drop=True)]
    keep = frames[0]["_file"].to_numpy() if frames and "_file" in frames[0] else None
    table = coll.match_collectives(list(frames), notes, ddp_bucket_bytes, ranks=ranks)  # keeps the row order
    if keep is not None:
        table = table.assign(_file=keep)
    return table


def rank_part(trace, matched: pd.DataFrame | None = None, *, step_pattern: str | None = None,
              phase_patterns: dict[str, str] | None = None, steps="all") -> RankPart:
    """Stage 3 on a trace holding one rank (or any set of whole ranks); ``matched``: its rows of the
    collective table (:func:`match`), with ``_row`` = their position in the whole table."""
    kernels = trace.kernels if trace.kernels is not None else schema.empty_frame(schema.KERNEL_COLUMNS)
    karr = KernelArrays(kernels)
    host_steps, step_notes = _host_steps(trace, step_pattern, steps)
    host_phases = win.find_phases(trace.nvtx, host_steps, phase_patterns)
    windows = win.phase_windows(host_steps, host_phases, karr)
    table = matched
    step_frame, kinds = st.step_tables(windows, karr, table, job_tail=False)
    part = RankPart(windows=windows, steps=step_frame, kinds=kinds, rank_overlap=ov.rank_overlap(karr),
                    kernel_sums=None, n_kernels=len(kernels), any_launch=bool((karr.launch >= 0).any()),
                    step_notes=step_notes, other_kind=ck.other_kinds(karr),
                    several_devices=rank_used_several_devices(kernels, karr),
                    first_rank=int(karr.rank.min()) if len(karr.rank) else np.iinfo(np.int32).max)
    part.paths = cp.rank_paths(step_frame, karr, table) if not step_frame.empty else None  # [answers]
    part.host_waits = getattr(trace, "host_waits", None)  # [answers]
    if table is not None and len(table):
        part.ready = pd.DataFrame({"_row": table["_row"].to_numpy(), "ready": cm.grad_ready_ns(table, kernels)})
    karr.drop_rank_sets()
    covered = ov.overlapped_by_other_class(karr)
    files = (getattr(trace, "meta", None) or {}).get("file_rows")
    if files:  # several files joined (one Dask batch): per-name sums per file, ordered by rank in combine
        part.file_sums = []
        for rows in files:
            sub = karr.subset(rows)
            first = int(sub.rank.min()) if len(rows) else np.iinfo(np.int32).max
            part.file_sums.append((first, ov.kernel_sums(sub, covered[rows])))
    else:
        part.kernel_sums = ov.kernel_sums(karr, covered)
    part.contention = cont.contention_samples(karr, covered, windows)
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
    if any(not p.windows.empty for p in parts):
        return []
    notes = [n for p in parts for n in p.step_notes]
    other = [n for n in notes if not n.startswith(NO_RANGES)]
    return other[:1] or notes[:1]


def _file_sums(parts: list[RankPart]) -> list:
    """Every file's ``kernel_sums``, in order of its first rank (stable: file order among equals)."""
    got = [pair for p in parts for pair in (p.file_sums if p.file_sums is not None else [(p.first_rank, p.kernel_sums)])]
    return [f for _, f in sorted(got, key=lambda pair: pair[0])]


def combine(parts: list[RankPart], collectives: pd.DataFrame, match_notes: list[str]) -> dict:
    """Stage 4: the fields of an :class:`~ddp_profile.analysis.Analysis` from every rank's part and the
    collective table (:func:`match`, with its notes), plus ``ready_ns`` (per collective table row, for
    ``recommend``), ``rank_paths`` and ``host_waits`` (for ``answers.attach``). Parts of disjoint ranks, any order (put in rank order here)."""
    parts = sorted(parts, key=lambda p: p.first_rank)
    notes: list[str] = []
    if sum(p.n_kernels for p in parts) == 0:
        notes.append("the trace has no GPU kernels (profile with `nsys profile -t cuda`)")
    elif not any(p.any_launch for p in parts):
        notes.append("kernels have no launch times (CUDA API trace missing): steps cannot be projected onto "
                     "the GPU; profile with `nsys profile -t cuda,nvtx`")
    notes += _step_notes(parts)
    notes += match_notes
    n_other = sum(p.other_kind[0] for p in parts)
    if n_other:
        notes.append(ck.other_kind_message(n_other, list(dict.fromkeys(n for p in parts for n in p.other_kind[1]))[:3]))
    windows = _ordered([p.windows for p in parts], ["rank"], schema.PHASE_COLUMNS + ["pid"])
    steps = _ordered([p.steps for p in parts], ["rank", "step"], schema.STEP_METRIC_COLUMNS)
    steps = st.with_job_tail(steps) if not steps.empty else steps
    if not steps.empty and steps["comm_tail_ns"].isna().all():
        notes.append("no backward NVTX range inside the steps: comm_tail_ns is missing (name the backward "
                     "range 'backward' or pass --phase backward=REGEX)")
    if any(p.several_devices for p in parts):
        notes.append("a rank used several GPUs: its kernel sets are merged across them")
    ready = np.full(len(collectives), np.nan)
    for p in parts:
        if p.ready is not None and len(p.ready):
            ready[p.ready["_row"].to_numpy()] = p.ready["ready"].to_numpy(float)
    collectives = schema.select(collectives, schema.COLLECTIVE_COLUMNS).reset_index(drop=True)
    return dict(
        steps=schema.select(steps, schema.STEP_METRIC_COLUMNS).reset_index(drop=True),
        phases=schema.select(windows, schema.PHASE_COLUMNS).reset_index(drop=True),
        rank_overlap=_ordered([p.rank_overlap for p in parts], ["rank"], schema.RANK_OVERLAP_COLUMNS),
        kernel_overlap=ov.finish_kernel_overlap(_file_sums(parts)).reset_index(drop=True),
        collectives=collectives,
        cost_model=cm.cost_model(collectives, notes),
        contention=cont.pooled_contention([p.contention for p in parts]).reset_index(drop=True),
        notes=notes,
        comm_kinds=ck.finish([k for p in parts for k in p.kinds]).reset_index(drop=True),
        ready_ns=ready,
        rank_paths=_ordered([p.paths for p in parts], ["rank", "step"], cp.PATH_COLUMNS),  # [answers]
        host_waits=_ordered([p.host_waits for p in parts], ["rank", "start_ns"], schema.HOST_WAIT_COLUMNS),
    )
