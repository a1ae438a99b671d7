"""Pure interval algebra over numpy arrays of half-open intervals ``[start, end)`` in integer nanoseconds.

Every analysis number (compute time, overlap, exposed communication, the communication tail) is built from
these few functions, so they are small, vectorised (no Python loop per interval) and never mutate their
inputs. A *set* is a pair ``(starts, ends)`` of equal-length 1-D arrays. A *normalised* set is sorted,
disjoint, non-touching and has no empty intervals; :func:`normalize` produces one from anything, and every
function returning a set returns a normalised one.

Half-open means touching intervals do not overlap: ``[0, 5)`` and ``[5, 9)`` share no time, and their union
is ``[0, 9)``. Empty or inverted intervals (``end <= start``) cover nothing and are dropped.

Complexity: O(n log n) for the sort in :func:`normalize` and the sweep, O((n + m) log n) for
:func:`covered_length`; suitable for millions of kernels.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "normalize",
    "union",
    "intersect",
    "difference",
    "total_length",
    "clip",
    "covered_length",
    "window_length",
]

_EMPTY = np.zeros(0, dtype=np.int64)


def _arrays(starts, ends) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(starts, dtype=np.int64).ravel()
    e = np.asarray(ends, dtype=np.int64).ravel()
    if s.shape != e.shape:
        raise ValueError(f"starts and ends differ in length ({s.size} vs {e.size})")
    return s, e


def normalize(starts, ends) -> tuple[np.ndarray, np.ndarray]:
    """Sort and merge overlapping or touching intervals; drop empty ones. Returns new arrays.

    ::

        in :  [---)   [-----)
                  [-----)        [--)[--)
        out:  [-------------)    [------)
    """
    s, e = _arrays(starts, ends)
    keep = e > s
    if not keep.all():  # copies only when some interval is empty
        s, e = s[keep], e[keep]
    del keep
    if s.size == 0:
        return _EMPTY.copy(), _EMPTY.copy()
    if not (s[1:] >= s[:-1]).all():  # kernels come sorted by start: then the stable sort is the identity
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
        del order
    reach = np.maximum.accumulate(e)
    # A new merged interval starts where the start lies beyond everything seen so far (strictly: touching
    # intervals merge because [a, b) and [b, c) cover [a, c) without a gap).
    new = np.ones(s.size, dtype=bool)
    np.greater(s[1:], reach[:-1], out=new[1:])
    # Boolean selections (new arrays, never views of the inputs; no 8-byte index per interval): each merged
    # interval starts at a "new" start and ends at the reach just before the next "new" start.
    out_s = s[new]
    out_e = np.empty(len(out_s), dtype=np.int64)
    out_e[:-1] = reach[:-1][new[1:]]
    out_e[-1] = reach[-1]
    return out_s, out_e


def is_sorted(x: np.ndarray, chunk: int = 1 << 15) -> bool:
    """``x`` is non-decreasing, checked a chunk at a time (no full-length temporary; stops at the first
    chunk out of order)."""
    for a in range(0, max(len(x) - 1, 0), chunk):
        y = x[a : a + chunk + 1]
        if not (y[1:] >= y[:-1]).all():
            return False
    return True


def normalize_rows(
    starts: np.ndarray, ends: np.ndarray, mask: np.ndarray | None = None, chunk: int = 1 << 15
) -> tuple[np.ndarray, np.ndarray]:
    """``normalize(starts[mask], ends[mask])`` (all rows without ``mask``): the :func:`normalized_pieces`
    concatenated. Sorted ``starts`` (a rank's kernels as the loader orders them) are merged a chunk of rows at
    a time, with no temporary longer than a chunk (the selected rows are never copied whole); unsorted input
    takes :func:`normalize`. Same arrays either way."""
    pieces = list(normalized_pieces(starts, ends, mask, chunk))
    if not pieces:
        return _EMPTY.copy(), _EMPTY.copy()
    return (
        np.concatenate([p[0] for p in pieces]).astype(np.int64, copy=False),
        np.concatenate([p[1] for p in pieces]).astype(np.int64, copy=False),
    )


def normalized_pieces(
    starts: np.ndarray, ends: np.ndarray, mask: np.ndarray | None = None, chunk: int = 1 << 15
):
    """``normalize(starts[mask], ends[mask])`` in consecutive pieces, a generator: each piece is a non-empty
    normalised set, and the pieces in order, concatenated, are that one normalised set (pieces are disjoint
    and non-touching). A caller summing over the set (its length, its coverage of a few windows: both add up
    over disjoint pieces) never holds it whole.

    Sorted ``starts``: a chunk of rows at a time. Merging needs only the interval still open at the chunk's
    end (its start and reach, carried to the next chunk); every interval closed inside a chunk goes out with
    it. 32k rows a chunk: each temporary (256 KB) stays in cache and is reused (a rank of 125k kernels in one
    131k chunk took ~50 % more CPU time). Unsorted input: one piece, :func:`normalize`'s."""
    s_all, e_all = _arrays(starts, ends)
    if not is_sorted(s_all, chunk):
        s, e = normalize(s_all if mask is None else s_all[mask], e_all if mask is None else e_all[mask])
        if len(s):
            yield s, e
        return
    open_s = open_e = None  # the interval open at the end of the chunks so far (None: no row kept yet)
    for a in range(0, len(s_all), chunk):
        s, e = s_all[a : a + chunk], e_all[a : a + chunk]
        keep = e > s
        if mask is not None:
            keep &= mask[a : a + chunk]
        if not keep.any():
            continue
        if not keep.all():
            s, e = s[keep], e[keep]
        reach = np.maximum.accumulate(e)
        if open_e is not None:
            np.maximum(reach, open_e, out=reach)
        # A merged interval starts where the start lies beyond everything seen so far (strictly: touching
        # intervals merge); each one ends at the reach just before the next one starts.
        new = np.empty(len(s), dtype=bool)
        new[0] = open_e is None or s[0] > open_e
        np.greater(s[1:], reach[:-1], out=new[1:])
        firsts = s[new]
        closed_e = reach[:-1][
            new[1:]
        ]  # end of the interval before each new start (after the chunk's first row)
        if open_e is not None and new[0]:  # the open interval ended before this chunk
            closed_e = np.concatenate([np.array([open_e], dtype=np.int64), closed_e])
        if len(firsts):
            closed_s = (
                firsts[:-1]
                if open_s is None
                else np.concatenate([np.array([open_s], dtype=np.int64), firsts[:-1]])
            )
            if len(closed_s):
                yield closed_s, closed_e
            open_s = firsts[-1]
        open_e = reach[-1]
    if open_s is not None:
        yield np.array([open_s], dtype=np.int64), np.array([open_e], dtype=np.int64)


def _sweep(*sets) -> tuple[np.ndarray, list[np.ndarray]]:
    """Elementary segments between all boundaries of normalised sets, and each set's coverage of them.

    Returns ``(bounds, covers)``: segment k is ``[bounds[k], bounds[k+1])`` and ``covers[i][k]`` is True
    when set i covers it. Sets must be normalised (disjoint), so coverage per set is 0 or 1.
    """
    bounds = np.sort(np.concatenate([np.concatenate([s, e]) for s, e in sets] + [_EMPTY]))
    if bounds.size:  # dedupe a sorted array (cheaper than np.unique's hashing on millions of values)
        bounds = bounds[np.concatenate([[True], bounds[1:] != bounds[:-1]])]
    covers = []
    if bounds.size < 2:
        return bounds, [np.zeros(0, dtype=bool) for _ in sets]
    mids = bounds[:-1]
    for s, e in sets:
        # Segment starting at `mid` lies inside interval j iff s[j] <= mid < e[j]; j = last start <= mid.
        j = np.searchsorted(s, mids, side="right") - 1
        inside = j >= 0
        inside[inside] = mids[inside] < e[j[inside]]
        covers.append(inside)
    return bounds, covers


def _segments(bounds: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if bounds.size < 2:
        return _EMPTY.copy(), _EMPTY.copy()
    return normalize(bounds[:-1][mask], bounds[1:][mask])


def union(a, b) -> tuple[np.ndarray, np.ndarray]:
    """Time covered by a or b.

    ::

        a:   [----)      [--)
        b:      [----)        [--)
        out: [-------)   [--) [--)
    """
    s1, e1 = _arrays(*a)
    s2, e2 = _arrays(*b)
    return normalize(np.concatenate([s1, s2]), np.concatenate([e1, e2]))


def intersect(a, b) -> tuple[np.ndarray, np.ndarray]:
    """Time covered by both a and b (each may be unnormalised).

    ::

        a:   [------)    [--)
        b:      [-------------)
        out:    [---)    [--)
    """
    na, nb = normalize(*a), normalize(*b)
    bounds, (ca, cb) = _sweep(na, nb)
    return _segments(bounds, ca & cb)


def difference(a, b) -> tuple[np.ndarray, np.ndarray]:
    """Time covered by a but not by b (each may be unnormalised).

    ::

        a:   [----------)
        b:      [--)  [-----)
        out: [--)  [--)
    """
    na, nb = normalize(*a), normalize(*b)
    bounds, (ca, cb) = _sweep(na, nb)
    return _segments(bounds, ca & ~cb)


def total_length(starts, ends) -> int:
    """|∪ intervals|: the time covered at least once (overlaps counted once).

    ::

        [----)            4
           [----)    ->   + 3 (only the part not yet covered)  = 7
    """
    s, e = normalize(starts, ends)
    return int((e - s).sum())


def clip(starts, ends, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Cut every interval to the window ``[lo, hi)`` and drop what falls outside (result normalised).

    ::

        window:      |-----------|
        in :    [------)   [--)     [--)
        out:         [-)   [--)
    """
    s, e = _arrays(starts, ends)
    return normalize(np.clip(s, lo, hi), np.clip(e, lo, hi))


def _cumulative(ns: np.ndarray, ne: np.ndarray, t: np.ndarray) -> np.ndarray:
    """F(t) = |S ∩ (-inf, t)| for a normalised set S, vectorised over t::

    F(t) = P(k) − max(0, ne[k−1] − t),   k = #{j : ns[j] <= t},   P(k) = Σ_{j<k} (ne[j] − ns[j])
    """
    k = np.searchsorted(ns, t, side="right")  # intervals that start at or before t
    out = _prefix_lengths(ns, ne, k)
    has = k > 0
    # The interval k-1 may still be running at t: subtract the part after t.
    out[has] -= np.maximum(ne[k[has] - 1] - t[has], 0)
    return out


_FEW_QUERIES_FROM = 1 << 14  # sets shorter than this take the prefix sum: its fresh array costs little


def _prefix_lengths(ns: np.ndarray, ne: np.ndarray, k: np.ndarray) -> np.ndarray:
    """P(k) = Σ_{j<k} (ne[j] − ns[j]) per k (int64, a new array). A long set and few queries (n >= 16,384
    and k.size·8 < n, e.g. steps against a rank's kernels): segment sums between the distinct k's
    (``add.reduceat`` over ns and ne, no full-length temporary: at ~1M kernels each fresh full-length array
    costs more than the arithmetic), then a prefix sum over those. Else one prefix sum over all n lengths,
    computed in place. Integer sums, so both give the same numbers."""
    n = len(ns)
    if n == 0:
        return np.zeros(len(k), dtype=np.int64)
    if n >= _FEW_QUERIES_FROM and k.size * 8 < n:
        cuts = np.sort(np.concatenate([np.zeros(1, dtype=k.dtype), k]))
        cuts = cuts[np.concatenate([[True], cuts[1:] != cuts[:-1]]) & (cuts < n)]
        # strictly increasing from 0: segment i = [cuts[i], cuts[i+1]) (the last one: to n)
        seg = np.add.reduceat(ne, cuts, dtype=np.int64)
        seg -= np.add.reduceat(ns, cuts, dtype=np.int64)
        at = np.zeros(len(cuts) + 1, dtype=np.int64)  # at[i] = P(cuts[i]); at[len(cuts)] = P(n)
        np.cumsum(seg, out=at[1:])
        return at[np.searchsorted(cuts, k)]
    cum = np.empty(n + 1, dtype=np.int64)
    cum[0] = 0
    np.subtract(ne, ns, out=cum[1:])
    np.cumsum(cum[1:], out=cum[1:])
    return cum[k]


def covered_length(q_starts, q_ends, starts, ends) -> np.ndarray:
    """For each query interval (any order, may overlap), the length of it covered by the set S.

    ``out[i] = |[q_starts[i], q_ends[i]) ∩ ∪S|``, computed as ``F(q_end) − F(q_start)`` with
    ``F(t) = |∪S ∩ (−∞, t)|`` from a prefix sum over the normalised set and one binary search per query
    end: O((n + m) log n), no loop per query. Used for per-kernel overlap and per-step clipping.

    ::

        S:      [-----)    [--------)
        query:     [----------)          -> 3 + 3 = 6 covered
    """
    qs, qe = _arrays(q_starts, q_ends)
    ns, ne = normalize(starts, ends)
    if qs.size == 0:
        return _EMPTY.copy()
    if ns.size == 0:
        return np.zeros(qs.size, dtype=np.int64)
    qe = np.maximum(qe, qs)  # inverted queries cover nothing
    return _cumulative(ns, ne, qe) - _cumulative(ns, ne, qs)


def window_length(q_starts, q_ends) -> np.ndarray:
    """Length of each query window, ``max(0, end − start)`` (helper kept here so units stay in one place)."""
    qs, qe = _arrays(q_starts, q_ends)
    return np.maximum(qe - qs, 0)


def intersect_normalized(
    a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`intersect` for two sets already normalised (sorted, disjoint, non-touching), without
    sorting their boundaries: the b intervals meeting a[i] are the contiguous run j with
    b.end[j] > a.start[i] and b.start[j] < a.end[i] (two binary searches), and each such pair gives
    [max(starts), min(ends)). Pairs come out sorted and, because neither input has touching intervals,
    disjoint and non-touching: the same normalised set ``intersect`` returns (the representation is unique),
    at O((n + m) log m) with no sort of n + m values (the sweep's sort dominated 10M-kernel analyses).

    The intersection is symmetric and its normalised form unique, so the smaller set drives the searches:
    the temporaries are then per interval of the small set (NCCL kernels, not the rank's compute kernels)."""
    if len(a[0]) > len(b[0]):
        a, b = b, a
    (as_, ae), (bs, be) = a, b
    lo = np.searchsorted(be, as_, side="right")
    hi = np.searchsorted(bs, ae, side="left")
    count = np.maximum(hi - lo, 0)
    total = int(count.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    i = np.repeat(np.arange(len(as_)), count)
    first = np.cumsum(count) - count  # position of each a interval's first pair
    j = np.arange(total) - np.repeat(first - lo, count)
    s = np.maximum(as_[i], bs[j])
    e = np.minimum(ae[i], be[j])
    keep = e > s
    return s[keep], e[keep]


class WindowIndex:
    """Query windows [ws, we) (any order, may overlap) sorted once by start, for adding up a set's coverage of
    them piece by piece (:meth:`add_covered`): each piece is measured only against the windows that can meet
    its span, so the pieces of a rank's kernels cost their rows plus the windows, not pieces × windows (the
    100,000 step windows of a long capture against each of a rank's ~40 pieces)."""

    def __init__(self, ws: np.ndarray, we: np.ndarray):
        self.ws, self.we = np.asarray(ws, dtype=np.int64), np.asarray(we, dtype=np.int64)
        self.order = np.argsort(self.ws, kind="stable")
        self.start = self.ws[self.order]
        # the furthest end of the windows up to each one, in start order (non-decreasing): every window before
        # the first whose reach passes t ends at or before t
        self.reach = np.maximum.accumulate(self.we[self.order]) if len(self.order) else self.start

    def add_covered(self, got: np.ndarray, ps: np.ndarray, pe: np.ndarray) -> None:
        """``got += covered_by_normalized(ws, we, ps, pe)`` for a non-empty normalised piece: the windows outside
        [ps[0], pe[-1]) cover none of it and are skipped (the same integers)."""
        a = int(np.searchsorted(self.reach, ps[0], side="right"))
        b = int(np.searchsorted(self.start, pe[-1], side="left"))
        if b > a:
            sel = self.order[a:b]
            got[sel] += covered_by_normalized(self.ws[sel], self.we[sel], ps, pe)


def covered_by_normalized(
    q_starts: np.ndarray, q_ends: np.ndarray, ns: np.ndarray, ne: np.ndarray
) -> np.ndarray:
    """:func:`covered_length` for a set already normalised (skips its re-normalisation: per-rank sets
    are queried five times per step table)."""
    qs = np.asarray(q_starts, dtype=np.int64)
    qe = np.asarray(q_ends, dtype=np.int64)
    if qs.size == 0:
        return np.zeros(0, dtype=np.int64)
    if ns.size == 0:
        return np.zeros(qs.size, dtype=np.int64)
    qe = np.maximum(qe, qs)  # inverted queries cover nothing
    return _cumulative(ns, ne, qe) - _cumulative(ns, ne, qs)
