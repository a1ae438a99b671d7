"""The conductor: :func:`analyze` and its stages, one code path for every trace. The stages run where each
rank's data is (the whole trace in this process: :class:`LocalRanks`; per-rank files on Dask:
``distributed.DistributedTrace``) and the reduce steps see only small tables. Only this module imports the
per-analysis modules' stages (``tests/project/test_layers.py``); the result is :class:`~.result.Analysis`.

1. :func:`step_part` (per part): host step ranges (NVTX, else inferred: ``infer.steps_from_trace``) with the
   part's own step numbers, and the rank's NCCL kernels, one row per collective, with issue order
   (``comm``, ``seq``) and the step that launched it.
2. reduce (:func:`analyze`): one step identity across ranks (``analysis.identity``: the same collective
   ``(comm, seq)`` in the same iteration on every rank), the ``--steps`` selection by label, then
   ``collectives.match_parts``: the collective table, grouped by hashing (O(rows), rows = collectives x
   ranks); each kernel's wait for the last arrival.
3. :func:`rank_part` (per part, given its labelled steps and matched rows): phase windows (NVTX, else
   inferred), step metrics with the wait split, per-kind communication, rank overlap, per-name kernel sums,
   the durations contention needs for exact medians (int32), gradient-ready times for the recommendation.
4. :func:`combine` (reduce): concatenation in rank order, the job-level tail across ranks, notes.

Given the CUDA API calls (``api``), the launch section is measured between stages 2 and 3, over the labelled
host steps of stage 2 and the part's kernel arrays (before stage 3 consumes their launch times).

A part holds whole ranks (one file, several files joined, or the whole trace); frames have a fresh 0..n-1
index. A new section: its per-part share as a :class:`RankPart` field filled in :func:`rank_part`, merged in
:func:`combine` (the one place parts become the Analysis' fields), or computed in :func:`combine` from the
merged frames when it needs every rank. Opens no file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ddp_profile import schema
from ddp_profile.analysis import after_backward as ab
from ddp_profile.analysis import answers, clocks, infer, unknowns
from ddp_profile.analysis import collectives as coll
from ddp_profile.analysis import comm_kinds as ck
from ddp_profile.analysis import contention as cont
from ddp_profile.analysis import costmodel as cm
from ddp_profile.analysis import critical_path as cp
from ddp_profile.analysis import identity as ident
from ddp_profile.analysis import kernel_diff as kd
from ddp_profile.analysis import launches as la
from ddp_profile.analysis import overlap as ov
from ddp_profile.analysis import recommend as rec
from ddp_profile.analysis import steps as st
from ddp_profile.analysis import windows as win
from ddp_profile.analysis.kernel_arrays import KernelArrays, in_steps, rank_used_several_devices
from ddp_profile.analysis.kernel_families import gemm_wave_ratio
from ddp_profile.analysis.notes import kernel_notes, merged_notes, step_notes
from ddp_profile.analysis.result import Analysis, trace_keys
from ddp_profile.memory import python_strings, return_freed_memory
from ddp_profile.schema import OPTIONAL_SECTIONS

LAZY_SECTIONS = (*OPTIONAL_SECTIONS, "kernels")
"""JSON sections a trace held in this process computes only when asked for (or first read): the optional ones
and the per-kernel-name table, which neither the verdict nor the summary reads."""

SUMS_CHUNK = 1 << 16
"""Rows per chunk of the per-name kernel sums (``overlap.kernel_overlap``'s): their temporaries set the
analysis' memory peak on a million kernels with the default chunk."""
INFERRED_PHASES_NOTE = (
    "no phase NVTX ranges: forward / backward / optimizer inferred from the launching thread "
    "(backward = compute kernels launched from autograd threads, per micro-step; forward = "
    "what the main thread launched before them; optimizer = after the last gradient "
    "collective)"
)


class LocalRanks:
    """A trace held in this process as the stages see a part: the whole trace is one part (every stage runs
    once over all its ranks, as one batch of several files does on Dask). ``kernel_arrays`` is built once
    and shared by the stages."""

    def __init__(self, trace):
        self.kernels = (
            trace.kernels if trace.kernels is not None else schema.empty_frame(schema.KERNEL_COLUMNS)
        )
        self.nvtx = trace.nvtx
        self.meta = getattr(trace, "meta", None) or {}
        self.run = getattr(trace, "run", None)
        self.host_waits = getattr(trace, "host_waits", None)  # [answers] the straggler's evidence
        self.ranks = getattr(trace, "ranks", None)
        self.kernel_arrays = KernelArrays(self.kernels)

    def map_ranks(self, fn, per_part: list | None = None, **kwargs) -> list:
        """``[fn(self, per_part[0], **kwargs)]`` (or ``[fn(self, **kwargs)]``): one part."""
        return [fn(self, **kwargs) if per_part is None else fn(self, per_part[0], **kwargs)]


def kernel_arrays(trace) -> KernelArrays:
    """The part's KernelArrays: the one :class:`LocalRanks` keeps, else built from its kernels."""
    karr = getattr(trace, "kernel_arrays", None)
    if karr is None:
        kernels = trace.kernels if trace.kernels is not None else schema.empty_frame(schema.KERNEL_COLUMNS)
        karr = KernelArrays(kernels)
    return karr


@dataclass
class StepPart:
    """Stage 1 of one part: its host steps (RANGE_COLUMNS, the part's own step numbers) and collective rows."""

    steps: pd.DataFrame
    rows: pd.DataFrame | None
    notes: list[str]
    inferred: bool
    ranks: list[int]
    """Ranks that ran GPU work in this part."""
    n_kernels: int = 0
    any_launch: bool = False
    n_unknown: int = 0
    peer_copies: tuple[int, int] = (0, 0)
    """(count, summed ns) of peer-to-peer copies (``collectives.peer_copies``), for the no-NCCL note; (0, 0) for a
    part with NCCL rows, whose copies no note names."""
    nccl_nvtx: bool = False
    """Whether NCCL's own NVTX ranges (domain NCCL) are in the part (for the message-size note)."""
    gaps: unknowns.RankGaps | None = (
        None  # per rank: kernels, unnamed, NCCL, launched (what its capture lacks)
    )
    rank_files: dict = field(default_factory=dict)  # rank -> its export file (one file: one clock)
    rank_pids: dict = field(default_factory=dict)  # rank -> its process (for steps borrowed from a peer)
    gpu_steps: pd.DataFrame | None = None  # unknowns.gpu_steps: each host step's GPU window

    def nbytes(self) -> int:
        frames = [self.steps, self.rows]
        return sum(int(f.memory_usage(deep=True).sum()) for f in frames if f is not None)


def step_part(trace, *, step_pattern: str | None = None, **_ignored) -> StepPart:
    """Stage 1 on a part: host steps (``infer.steps_from_trace``) and ``collectives.collective_rows``."""
    karr = kernel_arrays(trace)
    nvtx = getattr(trace, "nvtx", None)
    host_steps, notes, inferred = infer.steps_from_trace(nvtx, karr, step_pattern)
    kind = karr.frame["kind"] if karr.frame is not None and "kind" in karr.frame else None
    rows = coll.collective_rows(karr, nvtx, host_steps)
    return StepPart(
        steps=host_steps,
        rows=rows,
        notes=notes,
        inferred=inferred,
        ranks=[int(r) for r in karr.distinct_ranks()],
        n_kernels=len(karr.start),
        any_launch=bool((karr.launch >= 0).any()),
        n_unknown=int((kind == "unknown").sum()) if kind is not None else 0,
        peer_copies=coll.peer_copies(karr) if rows is None else (0, 0),  # the no-NCCL note's only
        nccl_nvtx=coll.has_nccl_ranges(nvtx),
        rank_files=clocks.rank_files(trace),
        gaps=unknowns.rank_gaps(karr),
        rank_pids=unknowns.rank_pids(karr),
        gpu_steps=unknowns.gpu_steps(host_steps, karr),
    )


def label_steps(found: list[StepPart], steps) -> tuple[list[pd.DataFrame], list[str]]:
    """One step identity over every part's steps (:mod:`ddp_profile.analysis.identity`), then the
    selection: (each part's labelled host steps, notes). Each part's collective rows get the labels in
    place (NA outside the selection)."""
    inferred = not any(not p.steps.empty and not p.inferred for p in found)
    # NVTX steps on some rank: ranks where only inference found steps have none (as one whole trace would)
    own = [p.steps if inferred or not p.inferred else p.steps.iloc[:0] for p in found]
    own = unknowns.without_silent(own, found) if inferred else own  # their cycles would be micro-steps
    every = [s for s in own if not s.empty]
    all_steps = pd.concat(every, ignore_index=True) if every else schema.empty_frame(win.RANGE_COLUMNS)
    rows = [p.rows[["rank", "comm", "seq", "step"]] for p in found if p.rows is not None and len(p.rows)]
    labels, notes = ident.common_steps(
        all_steps, pd.concat(rows, ignore_index=True) if rows else None, inferred
    )
    labels = ident.select(labels, steps)
    for p in found:
        if p.rows is not None:
            ident.relabel(p.rows, labels, keep_unlabelled=True)
    out = [ident.relabel(s, labels) if not s.empty else s for s in own]
    return unknowns.borrow_steps(found, out, labels, notes), notes


def labelled_steps(
    trace, *, step_pattern: str | None = None, steps="all"
) -> tuple[pd.DataFrame, list[str], bool]:
    """Host step ranges (``windows.RANGE_COLUMNS``) with the common step labels, selected by ``steps`` (as
    :func:`~ddp_profile.analysis.analyze`), the notes on how they were found, and whether they were
    inferred: what ``launches`` measures over and ``inspect`` reports."""
    found = LocalRanks(trace).map_ranks(step_part, step_pattern=step_pattern)
    clocks.align_parts(found, move=False)  # collectives paired by what they are, for one step identity
    host, notes = label_steps(found, steps)
    inferred = not host[0].empty and not any(not p.steps.empty and not p.inferred for p in found)
    return host[0], step_notes(found) + notes, inferred


@dataclass
class RankInput:
    """What stage 3 of one part is given: its labelled, selected host steps and its matched collective rows."""

    steps: pd.DataFrame
    matched: pd.DataFrame | None


@dataclass
class RankPart:
    """One part's share of an analysis: small tables only (see the module docstring)."""

    windows: pd.DataFrame
    steps: pd.DataFrame
    kinds: list
    rank_overlap: pd.DataFrame
    kernel_sums: pd.DataFrame | None
    contention: dict = field(default_factory=dict)
    contention_table: pd.DataFrame | None = None
    """A part holding every rank (``whole``): the finished contention table, in place of the samples."""
    ready: pd.DataFrame | None = None
    notes: list[str] = field(default_factory=list)
    other_kind: tuple = (0, [])
    several_devices: bool = False
    first_rank: int = 0
    paths: pd.DataFrame | None = None
    """``critical_path.rank_paths`` of its ranks (needs their kernels' launch times: computed here)."""
    host_waits: pd.DataFrame | None = None
    """Its ranks' ``Trace.host_waits`` (a few rows per step: the straggler's evidence)."""
    after_backward: pd.DataFrame | None = None
    """``after_backward.after_backward`` of its ranks (a row per rank and step)."""
    step_kernels: pd.DataFrame | None = None
    """``kernel_diff.step_kernel_sums`` of its ranks (per rank, step and kernel name: the straggler's cause)."""
    trace_rank_overlap: pd.DataFrame | None = None
    """Under a ``--steps`` selection: the whole-trace rank overlap (the summary's ``trace_`` keys), while
    ``rank_overlap`` and the kernel sums hold the kernels of the selected steps only."""
    file_sums: list | None = None
    """For a part of several files (a Dask batch): (first rank, ``kernel_sums``) per file, in place of
    ``kernel_sums``: first appearances are then ordered by rank over files, as with one part per file."""

    def nbytes(self) -> int:
        """Approximate size of what travels to the reduce step."""
        frames = [
            self.windows,
            self.steps,
            self.rank_overlap,
            self.trace_rank_overlap,
            self.kernel_sums,
            self.ready,
            self.paths,
            self.after_backward,
            self.step_kernels,
            self.host_waits,
            *self.kinds,
            *(f for _, f in self.file_sums or []),
        ]
        size = sum(int(f.memory_usage(deep=True).sum()) for f in frames if f is not None)
        return size + sum(a.nbytes + o.nbytes for a, o in self.contention.values())


def inputs(table: pd.DataFrame, steps: list[pd.DataFrame]) -> list[RankInput]:
    """Each part's :class:`RankInput` (``steps``: its labelled host steps) from the collective table, split
    once by ``_file`` (not one scan per part); ``_row`` = the row's position in the whole table (added to
    ``table`` in place)."""
    table["_row"] = np.arange(
        len(table)
    )  # in place: the table is the caller's, ``combine`` selects its columns
    if len(steps) == 1:
        return [RankInput(steps[0], table)]
    if "_file" in table and len(table):
        at = table.groupby("_file", sort=False).indices
        none = np.zeros(0, dtype=np.intp)
        return [RankInput(s, table.iloc[at.get(i, none)]) for i, s in enumerate(steps)]
    return [RankInput(s, table) for s in steps]


def rank_part(
    trace,
    given: RankInput,
    *,
    phase_patterns: dict[str, str] | None = None,
    need_ready: bool = True,
    whole: bool = False,
    with_kinds: bool = True,
    with_kernel_sums: bool = True,
    selected: bool = False,
    clock_offsets: dict[int, int] | None = None,
    **_ignored,
) -> RankPart:
    """Stage 3 on a part holding whole ranks, given its labelled steps and its rows of the collective table
    (:func:`~ddp_profile.analysis.collectives.match_parts`, with ``_row``). ``need_ready``: measure gradient-ready times (the recommendation's replay
    needs them); ``whole``: the part holds every rank (contention is then finished here); ``with_kinds``
    False: no comm_kinds rows (``analyze`` computes them later, when read), ``with_kernel_sums`` False: no
    per-name kernel sums (the ``kernels`` section, likewise); ``selected``: a ``--steps``
    selection is in force, so the rank overlap and per-name kernel sums count the kernels that start inside
    the selected steps' windows only (the whole-trace rank overlap is kept for the ``trace_`` keys).

    ``clock_offsets``: rank -> the clock correction ``clocks.align_parts`` found (applied before anything).
    Each stage's freed temporaries are handed back before the next one's (glibc otherwise keeps them
    resident and each stage's peak stacks on them); arrays whose last user is done are dropped."""  # noqa: E501
    if clock_offsets and set(clock_offsets) & set(kernel_arrays(trace).distinct_ranks().tolist()):
        trace = clocks.shifted(trace, clock_offsets)
    kernels = trace.kernels if trace.kernels is not None else schema.empty_frame(schema.KERNEL_COLUMNS)
    karr = kernel_arrays(trace)
    nvtx = getattr(trace, "nvtx", None)
    notes: list[str] = []
    host_steps, table = given.steps, given.matched
    host_phases = win.find_phases(nvtx, host_steps, phase_patterns)
    if host_phases.empty and not host_steps.empty:
        host_phases = infer.infer_phases(host_steps, karr, nvtx)
        if not host_phases.empty:
            notes.append(INFERRED_PHASES_NOTE)
    windows = win.phase_windows(host_steps, host_phases, karr)
    return_freed_memory()
    step_frame, kinds = st.step_tables(windows, karr, table, job_tail=False, with_kinds=with_kinds)
    if isinstance(kinds, pd.DataFrame):  # no steps: one empty frame, not a list of per-rank ones
        kinds = [kinds]
    other_kind = ck.other_kinds(karr)
    paths = cp.rank_paths(step_frame, karr, table) if not step_frame.empty else None  # [answers] needs launch
    step_kernels = kd.step_kernel_sums(
        st.spans(step_frame) if not step_frame.empty else None, karr
    )  # [answers]
    karr.launch = None  # type: ignore[assignment]  # its last users were the collective and step tables
    return_freed_memory()
    part = RankPart(
        windows=windows,
        steps=step_frame,
        kinds=kinds,
        rank_overlap=schema.empty_frame([]),
        kernel_sums=None,
        notes=notes,
        other_kind=other_kind,
        several_devices=rank_used_several_devices(kernels, karr),
        first_rank=int(karr.rank.min()) if len(karr.rank) else np.iinfo(np.int32).max,
    )
    part.paths, part.host_waits = paths, getattr(trace, "host_waits", None)  # [answers]
    part.after_backward = ab.after_backward(kernels, step_frame)  # [answers]
    part.step_kernels = step_kernels  # [answers]
    if need_ready and table is not None and len(table):
        part.ready = pd.DataFrame(
            {"_row": table["_row"].to_numpy(), "ready": cm.grad_ready_ns(table, kernels)}
        )
    # Cached rank sets and the comm kinds' memos go before the rank overlap: it reads only the rank totals
    # the step table recorded (a rank without them has its sets built again).
    karr.drop_rank_sets()
    karr.drop_memos()
    return_freed_memory()
    part.rank_overlap = ov.rank_overlap(karr)
    chosen = in_steps(karr, step_frame) if selected and not step_frame.empty else None
    if chosen is not None:
        part.trace_rank_overlap = part.rank_overlap
        part.rank_overlap = ov.rank_overlap(karr.subset(np.flatnonzero(chosen)))
    karr.drop_rank_sets()
    karr.is_copy = None  # type: ignore[assignment]  # the overlap tables and contention read compute and NCCL only
    return_freed_memory()
    covered = ov.overlapped_by_other_class(karr)
    return_freed_memory()
    if with_kernel_sums:
        kernel_sums_into(part, karr, covered, chosen, (getattr(trace, "meta", None) or {}).get("file_rows"))
    return_freed_memory()
    if whole:
        part.contention_table = cont.contention(karr, covered, windows)
    else:
        part.contention = cont.contention_samples(karr, covered, windows)
    return part


def kernel_sums_into(part, karr: KernelArrays, covered: np.ndarray, chosen, files) -> None:
    """The part's per-name kernel sums (the ``kernels`` section's additive part): ``part.kernel_sums``, or per
    file (``files``: each file's rows, several files joined in one Dask batch) ``part.file_sums``, ordered by
    rank in :func:`combine`; ``chosen``: the kernels a ``--steps`` selection keeps (None: all)."""
    if files:
        part.file_sums = []
        for rows in files:
            rows = rows[chosen[rows]] if chosen is not None else rows
            sub = karr.subset(rows)
            first = int(sub.rank.min()) if len(rows) else np.iinfo(np.int32).max
            part.file_sums.append((first, ov.kernel_sums(sub, covered[rows], SUMS_CHUNK)))
    elif chosen is not None:
        rows = np.flatnonzero(chosen)
        part.kernel_sums = ov.kernel_sums(karr.subset(rows), covered[rows], SUMS_CHUNK)
    else:
        part.kernel_sums = ov.kernel_sums(karr, covered, SUMS_CHUNK)


def _ordered(frames: list[pd.DataFrame], by: list[str], empty: list[str]) -> pd.DataFrame:
    frames = [f for f in frames if f is not None and not f.empty]
    if not frames:
        return schema.empty_frame(empty)
    out = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    return out.sort_values(by, kind="stable").reset_index(drop=True)


def _file_sums(parts: list[RankPart]) -> list:
    """Every file's ``kernel_sums``, in order of its first rank (stable: file order among equals)."""
    got = [
        pair
        for p in parts
        for pair in (p.file_sums if p.file_sums is not None else [(p.first_rank, p.kernel_sums)])
    ]
    return [f for _, f in sorted(got, key=lambda pair: pair[0])]


def combine(
    parts: list[RankPart],
    collectives: pd.DataFrame,
    notes: list[str],
    match_notes: list[str],
    selected: bool = False,
) -> dict:
    """Stage 4: the fields of an :class:`~ddp_profile.analysis.Analysis` from every part and the collective
    table (:func:`~ddp_profile.analysis.collectives.match_parts`), plus ``ready_ns`` (per collective table row, for ``recommend``), ``rank_paths`` and
    ``host_waits`` (for ``answers.attach``). ``notes``: the earlier stages' (kernels, steps, identity),
    ``match_notes``: the collective table's. Parts of disjoint ranks, any order (put in rank order here)."""  # noqa: E501
    parts = sorted(parts, key=lambda p: p.first_rank)
    notes = [*notes, *merged_notes([p.notes for p in parts]), *match_notes]
    n_other = sum(p.other_kind[0] for p in parts)
    if n_other:
        notes.append(
            ck.other_kind_message(n_other, list(dict.fromkeys(n for p in parts for n in p.other_kind[1]))[:3])
        )
    windows = _ordered([p.windows for p in parts], ["rank"], schema.PHASE_COLUMNS + ["pid"])
    steps = _ordered([p.steps for p in parts], ["rank", "step"], schema.STEP_METRIC_COLUMNS)
    steps = st.with_job_tail(steps) if not steps.empty else steps
    if not steps.empty and steps["comm_tail_ns"].isna().all():
        notes.append(
            "no backward NVTX range inside the steps: comm_tail_ns is missing (name the backward "
            "range 'backward' or pass --phase backward=REGEX)"
        )
    if any(p.several_devices for p in parts):
        notes.append("a rank used several GPUs: its kernel sets are merged across them")
    ready = np.full(len(collectives), np.nan)
    for p in parts:
        if p.ready is not None and len(p.ready):
            ready[p.ready["_row"].to_numpy()] = p.ready["ready"].to_numpy(float)
    collectives = coll.reported(collectives).reset_index(drop=True)
    rank_overlap = _ordered([p.rank_overlap for p in parts], ["rank"], schema.RANK_OVERLAP_COLUMNS)
    keep, totals = None, {}
    if selected:  # every section over the selected steps; the summary's trace_ keys over the whole trace
        full = [p.trace_rank_overlap for p in parts if p.trace_rank_overlap is not None]
        totals = trace_keys(
            collectives, _ordered(full, ["rank"], schema.RANK_OVERLAP_COLUMNS) if full else rank_overlap
        )
        keep = collectives["step"].notna().to_numpy()
        collectives, ready = collectives.loc[keep].reset_index(drop=True), ready[keep]
    whole = [p.contention_table for p in parts if p.contention_table is not None]
    contention = (
        whole[0] if len(parts) == 1 and whole else cont.pooled_contention([p.contention for p in parts])
    )
    return dict(
        steps=schema.select(steps, schema.STEP_METRIC_COLUMNS).reset_index(drop=True),
        phases=schema.select(windows, schema.PHASE_COLUMNS).reset_index(drop=True),
        rank_overlap=rank_overlap,
        trace_totals=totals,
        collective_rows=keep,
        kernel_overlap=ov.finish_kernel_overlap(_file_sums(parts)).reset_index(drop=True),
        collectives=collectives,
        cost_model=cm.cost_model(collectives, notes),
        contention=contention.reset_index(drop=True),
        notes=notes,
        comm_kinds=ck.finish([k for p in parts for k in p.kinds]).reset_index(drop=True),
        ready_ns=ready,
        rank_paths=_ordered([p.paths for p in parts], ["rank", "step"], cp.PATH_COLUMNS),  # [answers]
        host_waits=_ordered([p.host_waits for p in parts], ["rank", "start_ns"], schema.HOST_WAIT_COLUMNS),
        after_backward=_ordered(
            [p.after_backward for p in parts], ["rank", "step"], schema.AFTER_BACKWARD_COLUMNS
        ),  # [answers]
        step_kernels=_ordered([p.step_kernels for p in parts], ["rank", "step"], kd.SUM_COLUMNS),  # [answers]
    )


# ---- the conductor ----------------------------------------------------------------------------------------


@python_strings()
def analyze(
    trace,
    *,
    step_pattern: str | None = None,
    phase_patterns: dict[str, str] | None = None,
    steps="all",
    host_waits: pd.DataFrame | None = None,
    sections=None,
    api: pd.DataFrame | str | None = None,
) -> Analysis:
    """Run every analysis on a loaded trace. ``steps``: "all", "A:B" (A <= step label < B, open ends
    allowed), one label, or labels; a selection that keeps no step raises UsageError naming the labels.
    ``host_waits``: schema.HOST_WAIT_COLUMNS, the calls that name a straggler's host cause (default: the
    trace's own, ``Trace.host_waits`` as ``load_trace`` read them, from each part).
    ``sections``: JSON section names wanted now (default None: all). For a trace held in this process, the
    :data:`LAZY_SECTIONS` not named are computed when first read (``res.comm_kinds``), so they never
    come out empty or stale; a trace held on workers (``map_ranks``) computes every section now.
    ``api``: the CUDA API calls (``nsys.api.load_api_calls``), or why they cannot be read: the ``launches``
    section (``launches.analyze_launches``) over the same labelled steps and kernel arrays; None: no section.

    One code path (this module): the per-part stages run where the ranks are (this
    process for a loaded trace; the workers for a trace with ``map_ranks(fn, per_part, **kwargs)``, e.g.
    :class:`ddp_profile.distributed.DistributedTrace`), the cross-rank steps here, on small tables only."""
    local = not hasattr(trace, "map_ranks")
    later = set(LAZY_SECTIONS) - set(sections) if sections is not None and local else set()
    held = LocalRanks(trace) if local else trace
    found = held.map_ranks(step_part, step_pattern=step_pattern)
    notes = kernel_notes(found) + step_notes(found)
    clock = clocks.align_parts(found)  # collectives paired by what they are; clocks aligned on their ends
    notes += clock.notes
    host_steps, id_notes = label_steps(found, steps)  # the parts' collective rows relabelled in place
    notes += id_notes
    launches = None if api is None else _launches(held, api, host_steps, step_notes(found) + id_notes, local)
    gaps = unknowns.merge([p.gaps for p in found if p.gaps is not None])
    notes += unknowns.notes(gaps)
    match_notes: list[str] = []
    table = coll.match_parts(
        found,
        match_notes,
        coll.ddp_bucket_bytes(getattr(trace, "run", None)),
        residual_ns=clock.residual,
        unseen=unknowns.nameless(gaps),
        waits_unknown=unknowns.waits_unknown(gaps),
    )
    del found  # the collective rows: the table holds what is needed of them
    return_freed_memory()
    run = getattr(trace, "run", None)
    given = inputs(table, host_steps)
    selected = steps not in (None, "all")
    got = held.map_ranks(
        rank_part,
        given,
        phase_patterns=phase_patterns,
        selected=selected,
        need_ready=rec.needs_ready_times(run) and "recommendation" not in later,
        whole=local,
        with_kinds="comm_kinds" not in later,
        with_kernel_sums="kernels" not in later,
        clock_offsets=clock.corrected_ns,
    )
    fields = combine(got, table, notes, match_notes, selected=selected)
    fields["steps"], fields["rank_overlap"] = unknowns.blank(fields["steps"], fields["rank_overlap"], gaps)
    ready = fields.pop("ready_ns")
    rank_paths, waits, after_backward = (
        fields.pop("rank_paths"),
        fields.pop("host_waits"),
        fields.pop("after_backward"),
    )
    step_kernels = fields.pop("step_kernels")
    keep = fields.pop("collective_rows")  # None, or the table rows kept by a --steps selection
    waits = (
        waits
        if host_waits is None
        else clocks.shift_columns(host_waits, clock.corrected_ns, ("start_ns", "end_ns"))
    )
    res = Analysis(**fields, launches=launches)
    res.clock_alignment = clock.to_json()
    res.notes += infer.extra_work_notes(res.steps)  # by the common labels, so after them
    channels = (getattr(trace, "meta", None) or {}).get("nccl_channels")
    if clock.corrected_ns and later:  # the deferred sections read the kernels on the aligned clocks too
        held = clocks.Lazy(lambda unaligned=held: clocks.shifted(unaligned, clock.corrected_ns))
    if "comm_kinds" in later:
        res.defer("comm_kinds", lambda: _later_comm_kinds(held, got, given))
    if "kernels" in later:
        res.defer("kernel_overlap", lambda: _later_kernel_overlap(held, got, selected))
    if "recommendation" in later:
        res.defer(
            "recommendation",
            lambda: rec.recommend(
                res,
                None,
                run,
                nccl_channels=channels,
                ready_ns=_later_ready(held, given, run, len(table), keep),
            ),
        )
    else:
        res.recommendation = rec.recommend(res, None, run, ready_ns=ready, nccl_channels=channels)
    # [answers] rank paths and host-wait calls from the ranks' stage (analysis/answers.py)
    answers.attach(
        res,
        rank_paths,
        waits,
        cont.contention_per_step_ns(res.contention, res.steps),
        gemm_wave_ratio(res.contention),
        after_backward,
        step_kernels,
        run,
        min_lead_ns=clock.residual,
    )
    return res


def _launches(held, api, host_steps: list, notes: list[str], local: bool):
    """The launch section, before stage 3 consumes the part's kernel arrays (their launch times)."""
    if isinstance(api, str):
        return la.LaunchAnalysis.missing(api)
    if not local:
        return la.LaunchAnalysis.missing(
            "the launch diagnosis needs the trace in this process, not on workers"
        )
    out = la.analyze_launches(held.kernel_arrays, api, host_steps[0], notes)
    held.kernel_arrays.drop_rank_sets()  # stage 3 builds its own, as without this section
    return out


# ---- deferred sections of a trace held in this process (one part: LocalRanks) ------------------------


def _later_comm_kinds(held, got: list, given: list) -> pd.DataFrame:
    """``comm_kinds`` as :func:`analyze` computes it with every section, from the part's windows and matched
    collective rows (its kernel arrays built again: the stages consumed theirs)."""
    kinds: list[pd.DataFrame] = []
    for part, inp in zip(got, given, strict=True):
        k = st.step_tables(part.windows, KernelArrays(held.kernels), inp.matched, job_tail=False)[1]
        kinds += [k] if isinstance(k, pd.DataFrame) else k
    return ck.finish(kinds).reset_index(drop=True)


def _later_kernel_overlap(held, got: list, selected: bool) -> pd.DataFrame:
    """The ``kernels`` section as :func:`analyze` computes it with every section (the kernel arrays built
    again: the stages consumed theirs)."""
    for part in got:
        karr = KernelArrays(held.kernels)
        chosen = in_steps(karr, part.steps) if selected and not part.steps.empty else None
        covered = ov.overlapped_by_other_class(karr)
        kernel_sums_into(part, karr, covered, chosen, (getattr(held, "meta", None) or {}).get("file_rows"))
    return ov.finish_kernel_overlap(_file_sums(got)).reset_index(drop=True)


def _later_ready(held, given: list, run, n: int, keep: np.ndarray | None = None) -> np.ndarray:
    """The gradient-ready time per collective table row, as the stages measure it for ``recommend`` (``keep``:
    the rows a ``--steps`` selection kept, None: all)."""
    ready = np.full(n, np.nan)
    if rec.needs_ready_times(run):
        for inp in given:
            t = inp.matched
            if t is not None and len(t):
                ready[t["_row"].to_numpy()] = cm.grad_ready_ns(t, held.kernels)
    return ready[keep] if keep is not None else ready
