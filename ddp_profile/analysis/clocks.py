"""Collectives paired across ranks by what they are, and rank clocks aligned on their ends.

**Pairing.** Each rank numbers its NCCL kernels per communicator stream in issue order (``comm``, ``seq``:
``collectives.collective_rows``). A capture that starts or stops a few iterations later on one rank shifts
that rank's numbers: the collective (c, s) of the reference rank R (the lowest rank with NCCL kernels) is
(c', s − d) on rank r. Streams are paired first: r's stream c' goes to R's stream with the same set of
collective names (in order of first use among equals). For a rank of another export file than R's (another
capture, another clock), the shift d of each (rank, stream) is then chosen over the candidates that leave at least half of the shorter sequence overlapping (at most
:data:`MAX_SHIFT` either way)::

    sig(k)    = (collective name, dtype);  cls(k) = floor(log2 bytes), unknown without bytes
    agree(d)  = share of overlapping pairs (i on r, i + d on R) with sig_r(i) = sig_R(i + d) and
                cls_r(i) = cls_R(i + d) where both are known (a rank without launch times has no bytes)
    diff_d(i) = end_r(i) − end_R(i + d)
    spread(d) = median_i |diff_d(i) − median(diff_d)|

Kept: the candidates whose agree(d) is at least :data:`AGREE_MIN` and within :data:`AGREE_SLACK` of the best;
among them those whose spread is within :data:`SPREAD_TIE` times the smallest plus :data:`SPREAD_TIE_NS`, and
of those the smallest ``|d|`` (the captures' own numbering), then the smallest ``|median(diff_d)|`` (the
loader's session-start clocks). The numbering itself (d = 0) competes with ``(spread(0) − KEEP_NUMBERING_NS) /
KEEP_NUMBERING``: another shift must be :data:`KEEP_NUMBERING` times tighter and 10 µs tighter to win. Spreads
are alike where steps barely jitter or kernels of one collective do not end together (made-up traces; a
drifting clock also makes shorter overlaps look tighter): the numbering is then kept. This works because the kernels of one collective end together on every rank
(NCCL's kernels return once the last peer's data has arrived), whatever the clocks, while kernels a whole
iteration apart end a step length apart, and step lengths jitter: the right pairing is the one whose end
difference is constant. Ranks of R's own file were captured together, so their numbering is kept (d = 0).
Collectives that are not on every rank of their stream after pairing (the
iterations one capture has and another lacks) are dropped, with a note.

**Clock offset and residual**, per rank r over its paired collectives c::

    offset_r   = median_c (end_r(c) − end_R(c))
    residual_r = P90_c |end_r(c) − end_R(c) − offset_r|      (0 for R)

**Correction.** Ranks of different export files (per-rank or per-host files, whose clocks the loader put
together from the files' session start times only) are moved by −offset_r when ``|offset_r| >``
:data:`MIN_CORRECTION_NS`, even when the offset is under the residual: the median over many collectives is
far more precise than one collective's ends, and correcting every such rank makes the results independent of
how far off the session clocks were. Ranks of one file share nsys' session clock and are never moved. Every time of the rank moves (kernels, launches, NVTX, host calls), so each
analysis after the pairing sees aligned times. The correction and residual are in a note and in the JSON
(``clock_alignment``); a wait or lead smaller than the job's residual is not called (``collectives``,
``analysis.analyze``).

Opens no file; the shift search scores at most 2·:data:`MAX_SHIFT` + 1 candidates of :data:`SAMPLE` pairs each
per (rank, stream), vectorised.
"""  # noqa: E501

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ddp_profile.fmt import fmt_ms

MAX_SHIFT = 1024
"""The largest shift (in collectives of one stream) searched either way: several iterations of any job."""
SAMPLE = 512
"""This many overlapping pairs (evenly spaced) score a finalist shift."""
SPREAD_TIE = 1.5
SPREAD_TIE_NS = 1_000
"""Spreads within 1.5 times the smallest plus 1 µs tie (the right pairing's is the clocks' noise, µs; a wrong
one's is the steps' jitter, tens of µs or more)."""
KEEP_NUMBERING = 3.0
KEEP_NUMBERING_NS = 10_000
"""A shift other than 0 must make the end differences 3 times and 10 µs tighter than the numbering's own."""
COARSE_SAMPLE = 48
"""This many pairs score every candidate shift first."""
FINALISTS = 16
"""The best candidates of the first scoring that are scored again on :data:`SAMPLE` pairs."""
MIN_PAIRS = 3
"""A candidate shift must pair at least this many collectives."""
AGREE_MIN = 0.9
"""A candidate shift must pair at least this share of kernels of the same kind, dtype and size class."""
AGREE_SLACK = 0.02
"""Candidates within this share of the best agreement compete on the spread of their end differences."""
RESIDUAL_PCT = 90
"""The residual is this percentile of the paired ends' disagreement after the correction."""
MIN_CORRECTION_NS = 1_000
"""Offsets under 1 µs are left alone (below what the ends of one collective agree to)."""


@dataclass
class Alignment:
    """What pairing and clock alignment found (``to_json``: the JSON's ``clock_alignment``)."""

    reference_rank: int | None = None
    offsets_ns: dict[int, int] = field(default_factory=dict)
    """Estimated clock offset per rank against the reference (end_r − end_R, median)."""
    residual_ns: dict[int, int] = field(default_factory=dict)
    """Disagreement left after the correction, per rank (P90)."""
    corrected_ns: dict[int, int] = field(default_factory=dict)
    """The offsets applied (times of rank r moved by −corrected_ns[r]); ranks not moved are absent."""
    shifts: dict[int, int] = field(default_factory=dict)
    """Per rank, the largest |shift| of its streams' numbering against the reference (collectives)."""
    n_paired: dict[int, int] = field(default_factory=dict)
    n_dropped: dict[int, int] = field(default_factory=dict)
    """Collectives of each rank dropped as unpaired."""
    several_files: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def residual(self) -> int:
        """The job's residual: the largest over ranks (0 for ranks of one clock)."""
        return max(self.residual_ns.values(), default=0) if self.several_files else 0

    def to_json(self) -> dict:
        def keyed(d: dict) -> dict:
            return {str(k): int(v) for k, v in sorted(d.items())}

        return {
            "reference_rank": self.reference_rank,
            "several_files": self.several_files,
            "offsets_ns": keyed(self.offsets_ns),
            "residual_ns": keyed(self.residual_ns),
            "corrected_ns": keyed(self.corrected_ns),
            "sequence_shift": keyed(self.shifts),
            "n_paired": keyed(self.n_paired),
            "n_dropped": keyed(self.n_dropped),
        }


def _size_class(nbytes: pd.Series) -> np.ndarray:
    b = nbytes.to_numpy(dtype=float, na_value=np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        cls = np.floor(np.log2(np.where(b > 0, b, np.nan)))
    return np.where(np.isnan(cls), -1, cls).astype(np.int64)


def signatures(rows: pd.DataFrame) -> np.ndarray:
    """One int64 per row: (collective name, dtype, size class + 1) as a code whose low 7 bits are the size
    class + 1 (0: unknown); :func:`same` compares two such codes."""
    name, _ = pd.factorize(rows["collective"].astype("object").fillna("?"))
    dtype, _ = pd.factorize(rows["dtype"].astype("object").fillna("?"))
    return (name.astype(np.int64) * 4096 + dtype) * 128 + (_size_class(rows["bytes"]) + 1)


def same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Whether signatures agree: same name and dtype, and same size class where both are known."""
    ca, cb = a & 127, b & 127
    return ((a >> 7) == (b >> 7)) & ((ca == cb) | (ca == 0) | (cb == 0))


def _score(
    sig_a, end_a, sig_b, end_b, cand, i0, i1, sample: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(agree, spread, |median end difference|) per candidate shift, ``sample`` evenly spaced pairs each (a pair
    repeats when the overlap is shorter), a block of candidates at a time."""
    k = np.arange(sample, dtype=np.float64) / max(sample - 1, 1)
    agree, spread, lag = (np.empty(len(cand)) for _ in range(3))
    for lo in range(0, len(cand), 256):
        sl = slice(lo, lo + 256)
        pos = i0[sl, None] + np.rint(k[None, :] * (i1[sl] - i0[sl] - 1)[:, None]).astype(np.int64)
        other = pos + cand[sl, None]
        agree[sl] = same(sig_b[pos], sig_a[other]).mean(axis=1)
        diff = (end_b[pos] - end_a[other]).astype(np.float64)
        med = np.median(diff, axis=1)
        spread[sl], lag[sl] = np.median(np.abs(diff - med[:, None]), axis=1), np.abs(med)
    return agree, spread, lag


def best_shift(
    sig_a: np.ndarray, end_a: np.ndarray, sig_b: np.ndarray, end_b: np.ndarray
) -> tuple[int, float] | None:
    """(d, spread) pairing B[i] with A[i + d] (see the module docstring), None when no candidate qualifies.
    Every candidate is scored on :data:`COARSE_SAMPLE` pairs, the :data:`FINALISTS` best again on :data:`SAMPLE`."""
    na, nb = len(sig_a), len(sig_b)
    need = max(MIN_PAIRS, (min(na, nb) + 1) // 2)
    cand = np.arange(max(-(nb - need), -MAX_SHIFT), min(na - need, MAX_SHIFT) + 1, dtype=np.int64)
    i0, i1 = np.maximum(0, -cand), np.minimum(nb, na - cand)
    fits = i1 - i0 >= need
    cand, i0, i1 = cand[fits], i0[fits], i1[fits]
    for sample in (COARSE_SAMPLE, SAMPLE):
        if not len(cand):
            return None
        agree, spread, lag = _score(sig_a, end_a, sig_b, end_b, cand, i0, i1, sample)
        ok = np.flatnonzero((agree >= AGREE_MIN) & (agree >= agree.max() - AGREE_SLACK))
        # the captures' own numbering (d = 0) yields only to a clearly tighter shift
        key = np.where(cand[ok] == 0, (spread[ok] - KEEP_NUMBERING_NS) / KEEP_NUMBERING, spread[ok])
        tied = key <= max(key.min(initial=np.inf), 0.0) * SPREAD_TIE + SPREAD_TIE_NS
        order = ok[np.lexsort((lag[ok], np.abs(cand[ok]), np.where(tied, 0.0, key)))][:FINALISTS]
        cand, i0, i1 = cand[order], i0[order], i1[order]
    if not len(cand):
        return None
    return int(cand[0]), float(spread[order[0]])


def _stream_map(rows: pd.DataFrame, ref: int) -> dict[tuple[int, int], int]:
    """(rank, comm) -> the reference's comm with the same set of collective names (first use order)."""
    pairs = rows[["rank", "comm", "collective"]].astype({"collective": "object"}).fillna({"collective": "?"})
    pairs = pairs.drop_duplicates().astype({"collective": str}).sort_values(["rank", "comm", "collective"])
    names = pairs.groupby(["rank", "comm"], sort=True)["collective"].agg("|".join)
    ref_by_names: dict[str, list[int]] = {}
    for (rank, comm), key in names.items():
        if rank == ref:
            ref_by_names.setdefault(key, []).append(int(comm))
    out: dict[tuple[int, int], int] = {}
    used: dict[tuple[int, str], int] = {}
    for (rank, comm), key in names.items():
        cands = ref_by_names.get(key, [])
        k = used.get((int(rank), key), 0)
        if k < len(cands):
            out[(int(rank), int(comm))] = cands[k]
            used[(int(rank), key)] = k + 1
    return out


def pair(rows: pd.DataFrame, several_files: dict[int, bool] | None = None) -> tuple[pd.DataFrame, Alignment]:
    """Pair ``rows`` (``collective_rows`` of every rank, concatenated) across ranks and estimate clocks: the
    rows kept (paired on every rank of their stream), renumbered ``comm``/``seq`` in the reference's numbering,
    times unchanged; and the :class:`Alignment` (``several_files``: rank -> whether it comes from another file
    than the reference, i.e. another clock; None: one file)."""
    al = Alignment()
    if rows is None or not len(rows):
        return rows, al
    ranks = np.unique(rows["rank"].to_numpy(np.int64))
    ref = int(ranks[0])
    al.reference_rank = ref
    al.several_files = bool(several_files and any(several_files.values()))
    if len(ranks) < 2:
        return rows, al
    rows = rows.sort_values(["rank", "comm", "seq"], kind="stable").reset_index(drop=True)
    sig = signatures(rows)
    end = rows["end_ns"].to_numpy(np.int64)
    rank_col, comm_col = rows["rank"].to_numpy(np.int64), rows["comm"].to_numpy(np.int64)
    seq = rows["seq"].to_numpy(np.int64).copy()
    comm = comm_col.copy()
    paired = np.zeros(len(rows), dtype=bool)
    groups = pd.Series(np.arange(len(rows))).groupby([rank_col, comm_col], sort=True).indices
    streams = _stream_map(rows, ref)
    for (rank, c), idx in groups.items():
        target = streams.get((int(rank), int(c)))
        if target is None:
            continue
        if rank == ref:
            paired[idx] = True
            continue
        a = groups.get((ref, target))
        own_clock = not (several_files or {}).get(int(rank))  # one capture of every rank: its numbering holds
        got = (
            (0, 0.0)
            if own_clock and a is not None
            else best_shift(sig[a], end[a], sig[idx], end[idx])
            if a is not None
            else None
        )
        if got is None:
            continue
        d = got[0]
        seq[idx] = seq[idx] + d
        comm[idx] = target
        paired[idx] = True
        if abs(d) > abs(al.shifts.get(int(rank), 0)):
            al.shifts[int(rank)] = int(d)
    rows["comm"], rows["seq"] = comm, seq
    # keep a collective only when every rank of its stream has it
    key = comm * (1 << 40) + seq
    ok = paired.copy()
    ranks_of_comm = pd.Series(rank_col[paired]).groupby(comm[paired]).nunique()
    per_key = pd.Series(rank_col[paired]).groupby(key[paired]).nunique()
    need = ranks_of_comm.reindex(comm[paired]).to_numpy()
    ok[paired] = per_key.reindex(key[paired]).to_numpy() == need
    dropped = pd.Series(~ok).groupby(rank_col).sum()
    al.n_dropped = {int(r): int(n) for r, n in dropped.items() if n}
    al.n_paired = {int(r): int(n) for r, n in pd.Series(ok).groupby(rank_col).sum().items()}
    _estimate(al, rows.loc[ok], key[ok], several_files or {})
    _notes(al)
    return rows.loc[ok].reset_index(drop=True), al


def _estimate(al: Alignment, kept: pd.DataFrame, key: np.ndarray, several: dict[int, bool]) -> None:
    """Offsets and residuals per rank from the kept (paired) rows; the corrections to apply."""
    ref = al.reference_rank
    rank = kept["rank"].to_numpy(np.int64)
    end = kept["end_ns"].to_numpy(np.int64)
    at_ref = rank == ref
    ref_key, first = np.unique(key[at_ref], return_index=True)
    ref_end = end[at_ref][first]
    for r in np.unique(rank):
        if r == ref:
            al.offsets_ns[int(r)], al.residual_ns[int(r)] = 0, 0
            continue
        mine = rank == r
        j = np.searchsorted(ref_key, key[mine])
        hit = (j < len(ref_key)) & (ref_key[np.minimum(j, len(ref_key) - 1)] == key[mine])
        if not hit.any():
            continue
        diff = end[mine][hit] - ref_end[j[hit]]
        off = int(np.median(diff))
        res = int(np.percentile(np.abs(diff - off), RESIDUAL_PCT))
        al.offsets_ns[int(r)], al.residual_ns[int(r)] = off, res
        if several.get(int(r)) and abs(off) > MIN_CORRECTION_NS:
            al.corrected_ns[int(r)] = off


def _us(ns: float) -> str:
    return f"{ns / 1e3:.1f} µs" if abs(ns) < 1e5 else fmt_ms(ns)


def _notes(al: Alignment) -> None:
    if al.n_dropped:
        items = ", ".join(f"rank {r}: {n}" for r, n in sorted(al.n_dropped.items()))
        shifted = {r: d for r, d in al.shifts.items() if d}
        how = (
            (
                "; "
                + ", ".join(
                    f"rank {r}'s capture starts {abs(d)} collective(s) "
                    f"{'later' if d > 0 else 'earlier'} than rank {al.reference_rank}'s"
                    for r, d in sorted(shifted.items())
                )
            )
            if shifted
            else ""
        )
        al.notes.append(
            f"collectives paired across ranks by kind, size class and sequence{how}: the ones not seen "
            f"on every rank (a capture starting or stopping at another iteration) are dropped ({items})"
        )
    if not al.several_files:
        return
    worst = max(al.residual_ns.values(), default=0)
    if al.corrected_ns:
        moved = ", ".join(f"rank {r} by {_us(-o)}" for r, o in sorted(al.corrected_ns.items()))
        al.notes.append(
            f"clocks aligned on collective ends (the ends of one collective agree across ranks): {moved} "
            f"onto rank {al.reference_rank}'s clock; residual {_us(worst)} (P{RESIDUAL_PCT} of the "
            "paired ends' disagreement): waits and straggler leads under it are not called"
        )
    elif al.offsets_ns:
        al.notes.append(
            f"clocks checked on collective ends: the files' clocks agree within {_us(worst)} "
            f"(P{RESIDUAL_PCT}), no correction"
        )


def refuse_leads(per_step: pd.DataFrame, residual_ns: float) -> pd.DataFrame:
    """``straggler.stragglers``' rows with the straggler left unnamed where its lead is not larger than the clock
    residual (who arrived last is then within the clocks' disagreement): rank NA, lead NaN, cause unknown."""
    if not residual_ns or per_step is None or not len(per_step):
        return per_step
    lead = per_step["straggler_lead_ns"].to_numpy(dtype=float)
    doubt = ~np.isnan(lead) & (lead <= residual_ns)
    if not doubt.any():
        return per_step
    out = per_step.copy()
    evidence = [
        f"lead {_us(v)} is within the clock residual {_us(residual_ns)}: no straggler called"
        for v in lead[doubt]
    ]
    out.loc[doubt, "straggler_rank"] = pd.NA
    out.loc[doubt, "straggler_lead_ns"] = np.nan
    out.loc[doubt, "straggler_cause"] = "unknown"
    out.loc[doubt, "straggler_evidence"] = evidence
    return out


# ---- the pipeline's use -----------------


def rank_files(trace) -> dict:
    """rank -> the export file it was read from (``trace.ranks``; {} when unknown)."""
    ranks = getattr(trace, "ranks", None)
    if ranks is None or not len(ranks) or "file" not in ranks:
        return {}
    return {int(r): str(f) for r, f in zip(ranks["rank"], ranks["file"], strict=False)}


def align_parts(found: list, *, move: bool = True) -> Alignment:
    """Between stages 1 and 2: the collectives of every part paired across ranks by what they are and rank
    clocks aligned on their ends (:func:`pair`). Each part's rows become the paired ones
    (renumbered, unpaired dropped) and, for a corrected rank, its rows' and host steps' times move onto the
    reference's clock (in place); stage 3 moves the rest (``pipeline.rank_part``'s ``clock_offsets``).
    ``move`` False: pairing only, every time left on its own rank's clock (for host-side measures that compare
    a rank's steps with its own host calls)."""
    have = [(i, p.rows) for i, p in enumerate(found) if p.rows is not None and len(p.rows)]
    if not have:
        return Alignment()
    rows = (
        pd.concat([r.assign(_part=i) for i, r in have], ignore_index=True)
        if len(have) > 1
        else have[0][1].assign(_part=have[0][0])
    )
    files = {r: f for p in found for r, f in p.rank_files.items()}
    ref = int(rows["rank"].min())
    several = {r: (f != files.get(ref)) for r, f in files.items()} if files else None
    kept, al = pair(rows, several)
    if not move:
        al.corrected_ns = {}
    if al.corrected_ns:
        kept = shift_columns(kept, al.corrected_ns, ("start_ns", "end_ns", "launch"), ("launch",))
    by_part = kept.groupby("_part", sort=False).indices
    for i, _ in have:
        at = by_part.get(i)
        p = found[i]
        p.rows = kept.iloc[at].drop(columns="_part").reset_index(drop=True) if at is not None else None
    if al.corrected_ns:
        for p in found:
            p.steps = shift_columns(p.steps, al.corrected_ns, ("host_start_ns", "host_end_ns"))
            p.gpu_steps = shift_columns(p.gpu_steps, al.corrected_ns, ("start_ns", "end_ns"))
    return al


class Lazy:
    """An object built on first attribute access (the aligned copy of a trace, only if a deferred section is
    read)."""

    def __init__(self, build):
        self._build, self._obj = build, None

    def __getattr__(self, name):
        if self._obj is None:
            self._obj = self._build()
        return getattr(self._obj, name)


# ---- applying the correction -----------------------------------------------------------------------------


def _per_row(rank, offsets: dict[int, int]) -> np.ndarray:
    """Offset per row for a rank column (missing ranks and ranks without a correction: 0)."""
    r = pd.array(rank, dtype="Int64")
    keys = np.asarray(r.fillna(-1), dtype=np.int64)
    uniq, inv = np.unique(keys, return_inverse=True)
    table = np.array([offsets.get(int(u), 0) for u in uniq], dtype=np.int64)
    return table[inv.reshape(-1)]


def shift_columns(
    df: pd.DataFrame, offsets: dict[int, int], columns, keep_negative: tuple = ()
) -> pd.DataFrame:
    """A copy of ``df`` with ``columns`` moved by −offset of each row's rank (``keep_negative``: columns whose
    negative values mean "none" and stay as they are, e.g. ``launch_ns`` = -1)."""
    if df is None or not len(df) or not offsets:
        return df
    off = _per_row(df["rank"], offsets)
    out = df.copy()
    for c in columns:
        if c not in out:
            continue
        v = out[c]
        moved = v - off
        if c in keep_negative:
            moved = v.where(v.isna() | (v < 0), moved)
        out[c] = moved.astype(v.dtype) if not isinstance(v.dtype, np.dtype) or v.dtype.kind != "f" else moved
    return out


@dataclass
class ShiftedPart:
    """A part's trace with its ranks' clocks corrected (what stage 3 reads): kernels, NVTX and host calls
    moved; its kernel arrays are built again from them."""

    kernels: pd.DataFrame
    nvtx: pd.DataFrame | None
    host_waits: pd.DataFrame | None
    meta: dict
    run: dict | None
    ranks: pd.DataFrame | None = None
    kernel_arrays: object = None


def shifted(trace, offsets: dict[int, int]) -> ShiftedPart:
    """``trace`` (a part: kernels, nvtx, host_waits, meta, run) with each rank's times moved by −offset."""
    return ShiftedPart(
        kernels=shift_columns(trace.kernels, offsets, ("start_ns", "end_ns", "launch_ns"), ("launch_ns",)),
        nvtx=shift_columns(getattr(trace, "nvtx", None), offsets, ("start_ns", "end_ns")),
        host_waits=shift_columns(getattr(trace, "host_waits", None), offsets, ("start_ns", "end_ns")),
        meta=getattr(trace, "meta", None) or {},
        run=getattr(trace, "run", None),
        ranks=getattr(trace, "ranks", None),
    )
