"""Which rows of each kernel name :mod:`ddp_profile.analysis.contention` compares: the named compute kernels
inside each rank's step windows, their class (alone: no NCCL kernel of their (pid, device) ran at any moment
of them; overlapped: NCCL ran during at least half of their duration) and their key position k (the k-th
instance of the name, by GPU start, inside its step window). See contention's docstring for the numbers.

Everything here works a name or a chunk of rows at a time on the loader's (rank, start)-ordered arrays, so no
full-length temporary is held per name (this is where contention's memory goes on 1M-kernel traces).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from ddp_profile.analysis.kernel_arrays import TRIM_ROWS, KernelArrays, equal_range
from ddp_profile.memory import return_freed_memory


def steps_of(windows: pd.DataFrame | None) -> pd.DataFrame | None:
    steps = windows.loc[windows["phase"] == "step"] if windows is not None and len(windows) else None
    return None if steps is None or steps.empty else steps


def _window_ids(
    karr: KernelArrays, rows: np.ndarray, steps: pd.DataFrame, chunk: int = 1 << 16
) -> np.ndarray:
    """Per row of ``rows`` (int32): the step window of its rank it started in (the latest that started at
    or before it, if it started before that window's end), -1 for none. Windows are numbered in (rank,
    start) order. One search over all ranks' windows keyed (rank index, start), a chunk of rows at a time
    (no full-length temporaries). Rows in the loader's order with disjoint windows take
    :func:`_window_rows` instead."""
    ranks = np.unique(steps["rank"].to_numpy(np.int64))
    ws, we = steps["start_ns"].to_numpy(np.int64), steps["end_ns"].to_numpy(np.int64)
    wr = np.searchsorted(ranks, steps["rank"].to_numpy(np.int64))
    out = np.full(len(rows), -1, dtype=np.int32)
    span = int(max(ws.max(), we.max(), karr.start.max() if len(karr.start) else 0)) + 1
    if (
        min(int(ws.min()), int(karr.start.min()) if len(karr.start) else 0) < 0
        or span * (len(ranks) + 1) >= 2**62
    ):
        span = 0  # keys would not fit int64: per rank below
    if span:
        wkey = wr * span + ws
        by = np.argsort(wkey, kind="stable")
        wkey, wend, wrank = wkey[by], we[by], wr[by]
        for lo in range(0, len(rows), chunk):
            r = rows[lo : lo + chunk]
            kr = karr.rank[r].astype(np.int64)
            ri = np.minimum(np.searchsorted(ranks, kr), len(ranks) - 1)
            st = karr.start[r]
            at = np.searchsorted(wkey, ri * span + st, side="right") - 1
            ok = (at >= 0) & (ranks[ri] == kr)
            ok[ok] &= (wrank[at[ok]] == ri[ok]) & (st[ok] < wend[at[ok]])
            out[lo : lo + chunk][ok] = at[ok]
        return out
    base = np.concatenate([[0], np.cumsum(np.bincount(wr, minlength=len(ranks)))])
    for i, rank in enumerate(ranks):  # pragma: no cover - timestamps beyond int64 keys
        mine = np.flatnonzero(karr.rank[rows] == rank)
        sel = np.flatnonzero(wr == i)
        order = sel[np.argsort(ws[sel], kind="stable")]
        at = np.searchsorted(ws[order], karr.start[rows[mine]], side="right") - 1
        ok = at >= 0
        ok[ok] &= karr.start[rows[mine[ok]]] < we[order[at[ok]]]
        out[mine[ok]] = base[i] + at[ok]
    return out


def _window_rows(karr: KernelArrays, steps: pd.DataFrame) -> tuple[np.ndarray, np.ndarray] | None:
    """For rows in (rank, start) order (``karr.time_ordered()``) and step windows that do not overlap within
    a rank: each non-empty window's rows as one slice [lo, hi), ascending and disjoint, found by two binary
    searches of its bounds in its rank's starts (the rows that started in [start_ns, end_ns)). None when
    windows overlap or are inverted (then :func:`_window_ids`)."""
    ranks = np.unique(steps["rank"].to_numpy(np.int64))
    wr = np.searchsorted(ranks, steps["rank"].to_numpy(np.int64))
    ws, we = steps["start_ns"].to_numpy(np.int64), steps["end_ns"].to_numpy(np.int64)
    order = np.lexsort((ws, wr))
    s_r, s_s, s_e = wr[order], ws[order], we[order]
    same = s_r[1:] == s_r[:-1]
    if (same & (s_s[1:] < s_e[:-1])).any() or (s_e < s_s).any():
        return None
    lo, hi = [], []
    for i, rank in enumerate(ranks):
        a, b = equal_range(karr.rank, rank)
        if b > a:
            st = karr.start[a:b]  # a view: the rank's rows are one sorted range
            mine = s_r == i
            lo.append(st.searchsorted(s_s[mine], "left") + a)
            hi.append(st.searchsorted(s_e[mine], "left") + a)
    dtype = np.int32 if len(karr.start) < 2**31 else np.int64  # the row positions' dtype (_positions)
    lo_all: np.ndarray = np.concatenate(lo).astype(dtype) if lo else np.zeros(0, dtype)
    hi_all: np.ndarray = np.concatenate(hi).astype(dtype) if hi else np.zeros(0, dtype)
    keep = hi_all > lo_all
    return lo_all[keep], hi_all[keep]


MASKED_NAMES = 64  # up to this many kernel names, each name's rows are found by a mask, not a sort


def name_segments(karr: KernelArrays, covered: np.ndarray, windows: pd.DataFrame | None):
    """Per compute kernel name: (name code, rows, k, is_alone, duration) of its instances that ran alone or
    overlapped. k is the position of each instance among all its name's instances in the same step window of
    its rank (by GPU start, then row order), or -1 for all when there are no step windows; instances outside
    every step window are dropped. One name at a time, so temporaries are one name's rows long."""
    steps = steps_of(windows)
    bounds = _window_rows(karr, steps) if steps is not None and karr.time_ordered() else None
    if bounds is not None:
        yield from _ordered_segments(karr, covered, *bounds)
        return
    is_alone, over = classify(karr, covered)
    classified = is_alone | over
    del over
    # Positions count every instance of the name in the window, classified or not (an instance partly under
    # NCCL is still the k-th launch); only classified instances are returned.
    rows = _positions(
        lambda lo, hi: (
            karr.is_compute[lo:hi] & (karr.name_code[lo:hi] >= 0) if steps is not None else classified[lo:hi]
        ),
        len(karr.start),
    )
    wid = None
    if steps is not None and len(rows):
        wid = _window_ids(karr, rows, steps)
        keep = wid >= 0
        rows, wid = rows[keep], wid[keep]
        del keep
    presorted = wid is not None and karr.time_ordered()  # then each name's rows are in (window, start) order
    code = karr.name_code[rows]
    uniq = np.unique(code)
    parts: Iterator[
        tuple[int, slice | np.ndarray]
    ]  # each name's rows: a slice of the sorted rows, or positions
    if len(uniq) > MASKED_NAMES:  # many names: one stable sort groups them (few: one mask per name, no sort)
        order = np.argsort(
            code.astype(np.int16) if uniq[-1] <= np.iinfo(np.int16).max else code, kind="stable"
        )
        rows, code = rows[order], code[order]
        wid = wid[order] if wid is not None else None
        del order
        cuts = np.flatnonzero(code[1:] != code[:-1]) + 1
        parts = (
            (int(code[lo]), slice(lo, hi))
            for lo, hi in zip(np.append(0, cuts), np.append(cuts, len(rows)), strict=True)
        )
    else:
        parts = ((int(u), np.flatnonzero(code == u)) for u in uniq)
    for u, at in parts:
        r = rows[at]
        if len(r) == 0:
            continue
        if wid is None:
            k = np.full(len(r), -1, dtype=np.int32)
        else:
            w = wid[at]
            if not presorted:  # not in the loader's (rank, start) order: sort by window, start, row
                o = np.lexsort((r, karr.start[r], w))
                r, w = r[o], w[o]
            first = np.flatnonzero(np.concatenate([[True], w[1:] != w[:-1]])).astype(np.int32)
            k = np.arange(len(r), dtype=np.int32) - np.repeat(first, np.diff(np.append(first, len(r))))
            del w, first
        c = classified[r]
        r, k = r[c], k[c]
        if len(r):
            yield u, r, k, is_alone[r], karr.end[r] - karr.start[r]


def _ordered_segments(
    karr: KernelArrays, covered: np.ndarray, wlo: np.ndarray, whi: np.ndarray, chunk: int = 1 << 16
):
    """:func:`name_segments` for rows in (rank, start) order and step windows that are the row slices
    [wlo, whi) (:func:`_window_rows`). The named compute rows are grouped by name a chunk of rows at a time
    (one stable sort of the chunk's name codes: a radix sort), so each name's rows come out ascending, and
    are the only full-length array (4 B per kernel); each name's windows, positions k and classes are then
    found from its own rows only (two binary searches per window, its covered times and durations), with
    4-byte rows and 2-byte k where they fit, and classes and durations a chunk of rows at a time
    (:func:`_classes`). Peak per name of n rows: 4n (rows) + 2n (k) + n (is_alone) + 8n (durations)."""
    pieces: dict[int, list[np.ndarray]] = {}
    for lo in range(0, len(karr.start), chunk):
        code = karr.name_code[lo : lo + chunk]
        pos = np.flatnonzero(karr.is_compute[lo : lo + chunk] & (code >= 0))
        code = code[pos]
        if len(code) == 0:
            continue
        if code.dtype.itemsize > 2 and code.max() <= np.iinfo(np.int16).max:
            code = code.astype(np.int16)  # a 16-bit stable sort is a radix sort
        order = np.argsort(code, kind="stable")
        pos, code = (pos[order] + lo).astype(wlo.dtype), code[order]
        del order
        cuts = np.flatnonzero(code[1:] != code[:-1]) + 1
        for a, b in zip(np.append(0, cuts).tolist(), np.append(cuts, len(code)).tolist(), strict=True):
            pieces.setdefault(int(code[a]), []).append(pos[a:b].copy())  # not views: each name's go with it
        del pos, code
    # Smallest names first (the table is sorted by name later): the largest name's arrays are then made
    # with no other name's rows still held.
    for u in sorted(pieces, key=lambda c: (sum(len(p) for p in pieces[c]), c)):
        own = pieces.pop(u)[::-1]
        r = np.empty(sum(len(p) for p in own), dtype=own[0].dtype)  # filled piece by piece, each freed
        n = 0
        while own:
            piece = own.pop()
            r[n : n + len(piece)] = piece
            n += len(piece)
            del piece
        # The name's rows in window j are r[a_j:b_j] (r ascending, windows disjoint row ranges): a search per
        # window, then int8 marks: in a window or not (+1 at a_j, −1 at b_j, summed). The rows in windows are
        # kept in place; k = a row's position among them less c_j, the kept rows before its window.
        a, b = r.searchsorted(wlo, side="left"), r.searchsorted(whi, side="left")
        a, b = a[b > a], b[b > a]
        if len(a) == 0:
            continue
        marks = np.zeros(len(r) + 1, dtype=np.int8)
        marks[a] += 1
        marks[b] -= 1
        inside = np.cumsum(marks[:-1], dtype=np.int8).view(bool)  # 0 or 1: the windows are disjoint
        del marks
        r = _compact(r, inside)
        del inside
        size = b - a
        c = np.cumsum(size) - size
        k = np.empty(len(r), dtype=np.int16 if size.max() <= 2**15 else np.int32)  # k < its window's size
        for lo in range(0, len(r), 1 << 15):
            at = np.arange(lo, min(lo + (1 << 15), len(r)))
            k[lo : lo + len(at)] = at - c[c.searchsorted(at, side="right") - 1]
        del a, b, c, size
        if len(r) >= TRIM_ROWS:
            # The smaller names' and this one's freed temporaries (heap memory, under glibc's mmap threshold)
            # go back to the OS before its classes and durations are made: they stayed resident between live
            # blocks (~6 MB on the 1M-kernel replica's peak).
            return_freed_memory()
        r, k, alone, d = _classes(karr, covered, r, k)
        if len(d):
            # Handed over from a list, so the generator's frame keeps none of them while the caller works.
            out: list[tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = [(u, r, k, alone, d)]
            del r, k, alone, d
            yield out.pop()


def _compact(x: np.ndarray, mask: np.ndarray, chunk: int = 1 << 15) -> np.ndarray:
    """``x[mask]`` made in ``x`` itself (an array of its own, no view of it held): each chunk's selection
    written at n ≤ its start (a selection is a copy, read before its slots are overwritten), then shrunk."""
    n = 0
    for lo in range(0, len(x), chunk):
        got = x[lo : lo + chunk][mask[lo : lo + chunk]]
        x[n : n + len(got)] = got
        n += len(got)
    x.resize(n, refcheck=False)
    return x


def _classes(
    karr: KernelArrays, covered: np.ndarray, rows: np.ndarray, k: np.ndarray, chunk: int = 1 << 15
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The rows that ran alone or overlapped, and their k, is_alone and durations, a chunk of rows at a time
    (covered times and durations chunk-sized). ``rows`` and ``k`` (arrays of their own) are compacted in
    place and shrunk, as is the durations' array: no per-row mask, no second copy of the kept rows. Alone:
    covered 0. Overlapped: 2·cov ≥ d > 0, tested as cov ≥ d − cov (no doubling of an int32)."""
    alone = np.empty(len(rows), dtype=bool)
    dur = np.empty(len(rows), dtype=np.int64)
    n = 0
    for lo in range(0, len(rows), chunk):
        r = rows[lo : lo + chunk]
        cov = covered[r]
        d = _durations(karr, r)
        al = cov == 0
        d -= cov
        keep = cov >= d
        d += cov
        keep &= d > 0
        keep |= al
        m = int(np.count_nonzero(keep))
        # Written at n ≤ lo: every value is read (a selection is a copy) before its slot is overwritten.
        rows[n : n + m], k[n : n + m] = r[keep], k[lo : lo + chunk][keep]
        alone[n : n + m], dur[n : n + m] = al[keep], d[keep]
        n += m
    for a in (rows, k, alone, dur):
        a.resize(n, refcheck=False)  # no view of them is held: the dropped rows' memory goes back
    return rows, k, alone, dur


def _durations(karr: KernelArrays, rows: np.ndarray, chunk: int = 1 << 16) -> np.ndarray:
    """``end[rows] − start[rows]`` (int64), the start times gathered a chunk at a time."""
    d = karr.end[rows]
    for lo in range(0, len(rows), chunk):
        d[lo : lo + chunk] -= karr.start[rows[lo : lo + chunk]]
    return d


def _positions(mask_of, n: int, chunk: int = 1 << 18) -> np.ndarray:
    """``np.flatnonzero`` of the mask ``mask_of(lo, hi)`` gives chunk by chunk, as int32 when positions fit
    (no full-length int64 index array on the way)."""
    dtype = np.int32 if n < 2**31 else np.int64
    parts = [
        (np.flatnonzero(mask_of(lo, min(lo + chunk, n))) + lo).astype(dtype) for lo in range(0, n, chunk)
    ]
    return np.concatenate(parts) if parts else np.empty(0, dtype=dtype)


def step_ordinals(karr: KernelArrays, windows: pd.DataFrame | None) -> np.ndarray | None:
    """Per kernel row (int32): the key position k of each named compute kernel that ran alone or overlapped
    (:func:`name_segments`), -1 for other rows and kernels outside every step; None without step windows."""
    if steps_of(windows) is None:
        return None
    covered = np.zeros(len(karr.start), dtype=np.int64)  # every named compute kernel counts as alone here
    out = np.full(len(karr.start), -1, dtype=np.int32)
    for _, r, k, _, _ in name_segments(karr, covered, windows):
        out[r] = k
    return out


def classify(karr: KernelArrays, covered: np.ndarray, chunk: int = 1 << 18) -> tuple[np.ndarray, np.ndarray]:
    """Row masks of the named compute kernels that ran alone (covered 0 ns) and overlapped (covered at
    least half of a positive duration), filled a chunk of rows at a time."""
    n = len(covered)
    alone = np.zeros(n, dtype=bool)
    over = np.zeros(n, dtype=bool)
    for lo in range(0, n, chunk):
        hi = lo + chunk
        named = karr.is_compute[lo:hi] & (karr.name_code[lo:hi] >= 0)
        cov = covered[lo:hi]
        dur = karr.end[lo:hi] - karr.start[lo:hi]
        alone[lo:hi] = named & (cov == 0)
        over[lo:hi] = named & (dur > 0) & (cov >= dur - cov)  # 2·cov ≥ dur, without doubling an int32
    return alone, over
