"""Interval algebra: an edge-case table with hand-derived answers, then properties checked by hypothesis
against a brute-force reference on an integer grid (a boolean array with one cell per nanosecond)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddp_profile import intervals as iv


def S(*pairs):
    """A set from (start, end) pairs."""
    return (np.array([p[0] for p in pairs], dtype=np.int64), np.array([p[1] for p in pairs], dtype=np.int64))


def pairs(x):
    return list(zip(x[0].tolist(), x[1].tolist(), strict=False))


# ---- edge-case table -----------------------------------------------------------------------------------
# (a, b, union, intersection, a minus b)
CASES = {
    "both empty": (S(), S(), [], [], []),
    "one empty": (S((0, 5)), S(), [(0, 5)], [], [(0, 5)]),
    "touching endpoints": (S((0, 5)), S((5, 9)), [(0, 9)], [], [(0, 5)]),  # half-open: no shared time
    "containment": (S((0, 10)), S((3, 6)), [(0, 10)], [(3, 6)], [(0, 3), (6, 10)]),
    "contained": (S((3, 6)), S((0, 10)), [(0, 10)], [(3, 6)], []),
    "identical": (S((2, 7)), S((2, 7)), [(2, 7)], [(2, 7)], []),
    "partial": (S((0, 6)), S((4, 9)), [(0, 9)], [(4, 6)], [(0, 4)]),
    "disjoint": (S((0, 2)), S((5, 8)), [(0, 2), (5, 8)], [], [(0, 2)]),
    "zero length dropped": (S((3, 3), (0, 1)), S((4, 2)), [(0, 1)], [], [(0, 1)]),
    "unsorted overlapping a": (S((6, 9), (0, 4), (3, 7)), S((8, 12)), [(0, 12)], [(8, 9)], [(0, 8)]),
    "b splits a twice": (
        S((0, 10)),
        S((2, 3), (5, 7)),
        [(0, 10)],
        [(2, 3), (5, 7)],
        [(0, 2), (3, 5), (7, 10)],
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_edge_cases(name):
    a, b, u, i, d = CASES[name]
    assert pairs(iv.union(a, b)) == u
    assert pairs(iv.intersect(a, b)) == i
    assert pairs(iv.difference(a, b)) == d
    assert iv.total_length(*a) + iv.total_length(*b) - iv.total_length(*iv.intersect(a, b)) == sum(
        e - s for s, e in u
    )


def test_normalize_merges_touching_and_keeps_inputs():
    s = np.array([5, 0, 3, 20], dtype=np.int64)
    e = np.array([9, 4, 5, 20], dtype=np.int64)
    s0, e0 = s.copy(), e.copy()
    # [0,4) and [3,5) overlap, [5,9) touches -> one interval [0,9); [20,20) is empty.
    assert pairs(iv.normalize(s, e)) == [(0, 9)]
    assert (s == s0).all() and (e == e0).all()


def test_clip():
    # window [3, 10): [0,5) -> [3,5); [7,8) stays; [12,15) outside.
    assert pairs(iv.clip(*S((0, 5), (7, 8), (12, 15)), 3, 10)) == [(3, 5), (7, 8)]
    assert pairs(iv.clip(*S((0, 5)), 5, 9)) == []


def test_covered_length_known():
    # S = [0,6) ∪ [10,19). Query [3,14): 3 (3..6) + 4 (10..14) = 7. Query [0,100): 6 + 9 = 15.
    # Query [6,10): the gap -> 0. Query [12,12): empty -> 0. Inverted [9,2) -> 0.
    got = iv.covered_length([3, 0, 6, 12, 9], [14, 100, 10, 12, 2], *S((0, 6), (10, 19)))
    assert got.tolist() == [7, 15, 0, 0, 0]
    assert iv.covered_length([1], [2], *S()).tolist() == [0]
    assert iv.covered_length([], [], *S((0, 1))).tolist() == []


# ---- properties against an integer-grid reference -------------------------------------------------------
GRID = 64
interval = st.tuples(st.integers(0, GRID), st.integers(0, GRID))
iset = st.lists(interval, max_size=8).map(lambda ps: S(*ps) if ps else S())


def grid(x):
    g = np.zeros(GRID, dtype=bool)
    for s, e in zip(*x, strict=False):
        g[s:e] = True
    return g


def from_grid(g):
    """Maximal runs of True cells, as (start, end) pairs."""
    d = np.diff(np.concatenate([[0], g.astype(int), [0]]))
    return list(zip(np.flatnonzero(d == 1).tolist(), np.flatnonzero(d == -1).tolist(), strict=False))


@settings(max_examples=300, deadline=None)
@given(iset, iset)
def test_against_grid(a, b):
    ga, gb = grid(a), grid(b)
    assert pairs(iv.normalize(*a)) == from_grid(ga)
    assert pairs(iv.union(a, b)) == from_grid(ga | gb)
    assert pairs(iv.intersect(a, b)) == from_grid(ga & gb)
    assert pairs(iv.difference(a, b)) == from_grid(ga & ~gb)
    assert iv.total_length(*a) == ga.sum()


@settings(max_examples=300, deadline=None)
@given(iset, iset)
def test_algebraic_properties(a, b):
    la, lb = iv.total_length(*a), iv.total_length(*b)
    inter = iv.total_length(*iv.intersect(a, b))
    assert iv.total_length(*iv.union(a, b)) == la + lb - inter  # inclusion-exclusion
    # comm = a, compute = b: hidden (overlapped) + exposed = comm
    assert inter + iv.total_length(*iv.difference(a, b)) == la
    na = iv.normalize(*a)
    assert pairs(iv.normalize(*na)) == pairs(na)  # idempotence
    assert pairs(iv.union(a, a)) == pairs(na) and pairs(iv.intersect(a, a)) == pairs(na)
    assert pairs(iv.intersect(a, b)) == pairs(iv.intersect(b, a))


@settings(max_examples=300, deadline=None)
@given(iset, st.lists(interval, max_size=8), st.integers(0, GRID), st.integers(0, GRID))
def test_covered_and_clip_against_grid(a, queries, lo, hi):
    ga = grid(a)
    qs = [q[0] for q in queries]
    qe = [q[1] for q in queries]
    expect = [int(ga[s:e].sum()) if e > s else 0 for s, e in queries]
    assert iv.covered_length(qs, qe, *a).tolist() == expect
    w = np.zeros(GRID, dtype=bool)
    w[lo:hi] = True
    assert pairs(iv.clip(*a, lo, hi)) == from_grid(ga & w)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, GRID), st.integers(-3, 12), st.booleans()), max_size=40),
    st.integers(1, 7),
)
def test_pieces_a_chunk_at_a_time_are_the_normalised_set(rows, chunk):
    """normalize_rows / normalized_pieces over sorted starts, a few rows a chunk (an interval open across
    chunks, masked-out and empty rows at chunk edges): the pieces are non-empty, in order, and together
    normalize's set of the selected rows."""
    rows = sorted(rows)
    s = np.array([r[0] for r in rows], dtype=np.int64)
    e = s + np.array([r[1] for r in rows], dtype=np.int64)
    mask = np.array([r[2] for r in rows], dtype=bool)
    for m in (None, mask):
        expect = pairs(iv.normalize(s if m is None else s[m], e if m is None else e[m]))
        pieces = list(iv.normalized_pieces(s, e, m, chunk))
        assert all(len(p[0]) for p in pieces)
        assert [x for p in pieces for x in pairs(p)] == expect
        assert pairs(iv.normalize_rows(s, e, m, chunk)) == expect
    unsorted = list(iv.normalized_pieces(s[::-1], e[::-1], chunk=chunk))  # unsorted: normalize's set
    assert [x for p in unsorted for x in pairs(p)] == pairs(iv.normalize(s, e))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 60), st.integers(0, 8), st.booleans()), min_size=0, max_size=40),
    st.lists(st.tuples(st.integers(-5, 70), st.integers(-4, 30)), min_size=0, max_size=12),
    st.integers(1, 7),
)
def test_window_index_adds_the_coverage_of_each_piece(rows, windows, chunk):
    """WindowIndex.add_covered piece by piece (windows in any order, overlapping, inverted, outside every
    piece) gives covered_by_normalized of the whole set: the windows it skips cover none of a piece."""
    rows = sorted(rows)
    s = np.array([r[0] for r in rows], dtype=np.int64)
    e = s + np.array([r[1] for r in rows], dtype=np.int64)
    ws = np.array([w[0] for w in windows], dtype=np.int64)
    we = ws + np.array([w[1] for w in windows], dtype=np.int64)
    index = iv.WindowIndex(ws, we)
    got = np.zeros(len(ws), dtype=np.int64)
    for ps, pe in iv.normalized_pieces(s, e, None, chunk):
        index.add_covered(got, ps, pe)
    assert got.tolist() == iv.covered_by_normalized(ws, we, *iv.normalize(s, e)).tolist()
