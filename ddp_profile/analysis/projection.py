"""Host ranges projected onto the GPU by launch time: :func:`project` (the picture and the rule are in
``analysis.windows``' docstring). A ground helper: the step windows (``windows``) and the step table's
gradient tail (``steps``) both project ranges, and neither imports the other for it."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddp_profile.analysis.kernel_arrays import equal_range, ints

_INT64_MAX, _INT64_MIN = np.iinfo(np.int64).max, np.iinfo(np.int64).min


def project(
    ranges: pd.DataFrame,
    start: np.ndarray,
    end: np.ndarray,
    launch: np.ndarray,
    pid: np.ndarray,
    mask: np.ndarray | None = None,
    rows: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GPU [first start, last end] of the kernels (given as arrays) launched inside each host range;
    ``mask`` restricts the kernels considered (cheaper than passing copies of the selected rows), or
    ``rows``, their positions (ascending; for a few kernels, e.g. the NCCL ones: only those are read).

    Returns (gpu_start, gpu_end, launched_any). Per process, the ranges' bounds cut launch time into
    elementary segments: with B = sorted distinct {host_start} ∪ {host_end + 1}, a launch L lies in segment
    s = #{b ∈ B : b <= L}, and range [hs, he] (launch times hs <= L <= he) is the run of segments
    [#{b <= hs}, #{b <= he + 1}). One pass over the process's kernels (a chunk of rows at a time: no sort,
    no temporary longer than a chunk) keeps each segment's min start, max end and kernel count; a range's
    values are then the min / max / sum over its run of segments::

        gpu_start = min {start_k : hs <= launch_k <= he},   gpu_end = max {end_k : same k}
    """
    n = len(ranges)
    gs = np.zeros(n, dtype=np.int64)
    ge = np.zeros(n, dtype=np.int64)
    anyk = np.zeros(n, dtype=bool)
    rpid = ints(ranges["pid"]) if n else np.zeros(0, np.int64)
    hs = ints(ranges["host_start_ns"]) if n else np.zeros(0, np.int64)
    he = ints(ranges["host_end_ns"]) if n else np.zeros(0, np.int64)
    by_range = np.argsort(rpid, kind="stable")  # each process's ranges: one run, ascending positions
    procs, first = np.unique(rpid[by_range], return_index=True)
    by_pid = _rows_by_value(pid, procs) if rows is None else _among(rows, pid[rows])
    for p, lo, hi in zip(procs, first, np.append(first[1:], n)[: len(first)], strict=True):
        mine = by_range[lo:hi]
        cuts = np.sort(np.concatenate([hs[mine], he[mine] + 1]))
        cuts = cuts[np.concatenate([[True], cuts[1:] != cuts[:-1]])]  # distinct
        mn, mx, count = _segments(cuts, by_pid(p), start, end, launch, mask)
        a = np.searchsorted(cuts, hs[mine], side="right")
        b = np.searchsorted(cuts, he[mine] + 1, side="right")
        b = np.maximum(a, b)  # an inverted range launches nothing
        total = np.concatenate([[0], np.cumsum(count)])
        hit = total[b] > total[a]
        r, a, b = mine[hit], a[hit], b[hit]
        gs[r], ge[r], anyk[r] = _run_reduce(np.minimum, mn, a, b), _run_reduce(np.maximum, mx, a, b), True
    gs = np.where(anyk, gs, hs)
    ge = np.where(anyk, ge, he)
    return gs, ge, anyk


def _segments(
    cuts: np.ndarray,
    kk,
    start: np.ndarray,
    end: np.ndarray,
    launch: np.ndarray,
    mask: np.ndarray | None,
    chunk: int = 1 << 17,
):
    """Per launch segment of ``cuts`` (see :func:`project`): (min start, max end, count) of the
    kernels ``kk`` (a slice or positions) with launch >= 0 (and ``mask``). Segment 0 (launches before
    every cut) belongs to no range."""
    size = len(cuts) + 1
    mn = np.full(size, _INT64_MAX, dtype=np.int64)
    mx = np.full(size, _INT64_MIN, dtype=np.int64)
    count = np.zeros(size, dtype=np.int64)
    if isinstance(kk, slice):
        first, stop = kk.start, kk.stop
    else:
        first, stop = 0, len(kk)
    for lo in range(first, stop, chunk):
        hi = min(lo + chunk, stop)
        part = slice(lo, hi) if isinstance(kk, slice) else kk[lo:hi]
        lt, ks, ke = launch[part], start[part], end[part]
        keep = lt >= 0
        if mask is not None:
            keep &= mask[part]
        if not keep.all():  # only the kept rows are searched (a sparse mask: few of them)
            lt, ks, ke = lt[keep], ks[keep], ke[keep]
        if len(lt) and (lt[1:] >= lt[:-1]).all():  # launch order: each segment is one run of rows
            bounds = np.concatenate([[0], np.searchsorted(lt, cuts, side="left"), [len(lt)]])
            seg = np.flatnonzero(bounds[1:] > bounds[:-1])
            mn[seg] = np.minimum(mn[seg], np.minimum.reduceat(ks, bounds[seg]))
            mx[seg] = np.maximum(mx[seg], np.maximum.reduceat(ke, bounds[seg]))
            count[seg] += bounds[seg + 1] - bounds[seg]
            continue
        seg = np.searchsorted(cuts, lt, side="right")
        np.minimum.at(mn, seg, ks)
        np.maximum.at(mx, seg, ke)
        count += np.bincount(seg, minlength=size)
    return mn, mx, count


def _run_reduce(ufunc, values: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``ufunc.reduce(values[a[i]:b[i]])`` per i (a < b <= len(values) - 1), in one ``ufunc.reduceat`` over
    the interleaved bounds [a0, b0, a1, b1, ...]: its even positions are the runs [a_i, b_i), whatever the
    order or overlap of the runs (the odd positions are discarded)."""
    bounds = np.empty(2 * len(a), dtype=np.intp)
    bounds[0::2], bounds[1::2] = a, b
    return ufunc.reduceat(values, bounds)[0::2] if len(a) else values[:0].copy()


def _among(rows: np.ndarray, values: np.ndarray):
    """``lookup(v)`` = the ``rows`` whose value (``values``, aligned with ``rows``) is v, in their order."""
    return lambda v: rows[values == v]


def _rows_by_value(values: np.ndarray, wanted: np.ndarray, few: int = 16):
    """``lookup(v)`` = the positions where ``values == v``, ascending: a slice when they are one block (the
    loader's rows, one rank per process). Sorted values: two binary searches per value. Else, for a few
    wanted values, one mask each; for many (a run of 1,024 per-rank files has 1,024 processes) the rows
    are grouped by one stable sort, not scanned once per value (which grew with processes x kernels)."""
    if len(values) < 2 or bool((values[1:] >= values[:-1]).all()):

        def search(v):
            lo, hi = equal_range(values, v)
            return slice(lo, hi)

        return search
    if len(wanted) <= few:

        def scan(v):
            eq = values == v
            got = int(np.count_nonzero(eq))
            lo = int(np.argmax(eq)) if got else 0
            return slice(lo, lo + got) if got and eq[lo : lo + got].all() else np.flatnonzero(eq)

        return scan
    sel = np.argsort(values, kind="stable")
    sorted_values = values[sel]

    def lookup(v):
        lo, hi = equal_range(sorted_values, v)
        return sel[lo:hi]

    return lookup
