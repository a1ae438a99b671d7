"""Overlap of communication and computation over the whole trace, in two published conventions.

Per kernel (the semantics of nsys's ``nccl_gpu_overlap_trace`` recipe, so numbers can be cross-checked
against NVIDIA's tool): for each NCCL kernel k, the time during which at least one compute kernel ran on
the same process and GPU; for each compute kernel, the same with NCCL kernels::

    overlapped_ns(k) = |[k.start, k.end) ∩ ∪{other-class kernels of k's (pid, device)}|
    per (kind, name): overlap_pct = 100 · Σ overlapped_ns / Σ duration_ns   (duration-weighted)

    compute:  [-----]   [--]
    nccl k:      [---------)      overlapped_ns(k) = 2 + 2 = 4 of 9 -> 44 %

Per rank (Holistic Trace Analysis' convention): C, N = unions of the rank's compute and NCCL kernels::

    overlap_ns = |C ∩ N|,  exposed_comm_ns = |N| − |C ∩ N|,  overlap_pct = 100 · |C ∩ N| / |N|
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from ddp_profile import intervals as iv
from ddp_profile import schema
from ddp_profile.analysis.kernel_arrays import COMPUTE, NCCL, KernelArrays, pair_groups, pct, row_runs


def overlapped_by_other_class(karr: KernelArrays, chunk: int = 1 << 15) -> np.ndarray:
    """Per kernel row: ns of it covered by the other class (compute<->NCCL) on its (pid, device); 0 for
    copies. Per (pid, device) and class, :func:`intervals.covered_length` of the kernels against the other
    class's set. int32 when every kernel is shorter than 2^31 ns (2.1 s; a covered time never exceeds its
    kernel's duration): 4 B per kernel less while the overlap tables and contention use it."""
    n = len(karr.start)
    longest = max(
        (int((karr.end[lo : lo + chunk] - karr.start[lo : lo + chunk]).max()) for lo in range(0, n, chunk)),
        default=0,
    )
    out = np.zeros(n, dtype=np.int32 if longest < 2**31 else np.int64)
    runs = row_runs(karr.pid, karr.device, max_runs=1 << 16)  # 1,024 ranks joined: one run each
    if runs is None:
        groups: Iterator[slice | np.ndarray] = pair_groups(karr.pid, karr.device)
    else:
        groups = (slice(lo, hi) for lo, hi in runs)
    for rows in groups:
        if not isinstance(rows, slice):
            _cover_rows(karr, rows, out, chunk)
        # Sorted by start: a run of one rank in the loader's (rank, start) order, else checked.
        elif (karr.time_ordered() and karr.rank[rows.start] == karr.rank[rows.stop - 1]) or iv.is_sorted(
            karr.start[rows], chunk
        ):
            _cover_sorted(
                karr.start[rows],
                karr.end[rows],
                karr.is_compute[rows],
                karr.is_nccl[rows],
                max(longest, 0),
                out[rows],
                chunk,
            )
        else:
            _cover_rows(karr, np.arange(rows.start, rows.stop), out, chunk)
    return out


def _cover_rows(karr: KernelArrays, idx: np.ndarray, out: np.ndarray, chunk: int) -> None:
    """``out[idx]`` for one (pid, device) group's rows in any order: each class's set normalised once and
    the queries taken a chunk at a time (the temporaries are chunk-sized, not one per kernel)."""
    comp = idx[karr.is_compute[idx]]
    nccl = idx[karr.is_nccl[idx]]
    del idx
    if comp.size and nccl.size:
        for queries, (ss, se) in (
            (nccl, iv.normalize(karr.start[comp], karr.end[comp])),
            (comp, iv.normalize(karr.start[nccl], karr.end[nccl])),
        ):
            for lo in range(0, len(queries), chunk):
                q = queries[lo : lo + chunk]
                out[q] = iv.covered_by_normalized(karr.start[q], karr.end[q], ss, se)
            del ss, se


def _cover_sorted(
    s: np.ndarray,
    e: np.ndarray,
    is_comp: np.ndarray,
    is_nccl: np.ndarray,
    longest: int,
    out: np.ndarray,
    chunk: int,
) -> None:
    """``out`` for one (pid, device) group's rows sorted by start (the loader's order), touching only the
    compute kernels that can meet NCCL. With N = ∪[ns_j, ne_j) and R_i = max{c.end : compute row c ≤ i}, a
    compute kernel at row i meets [ns_j, ne_j) only if R_i > ns_j and c.start < ne_j: the rows from the first
    with R_i > ns_j (:func:`_first_rows`) to the first starting at or after ne_j (binary searches per NCCL
    interval), about the compute kernels that do meet NCCL (a quarter of them on the replica export, 2 % on
    the synthetic one); every other row keeps 0. R_i > ns_j needs c.start > ns_j − longest for some c ≤ i:
    that looser bound, from the starts alone, is taken when it already leaves under a quarter of the rows.
    NCCL kernels are then covered group by group of NCCL intervals (those whose first row is in the same
    ``chunk`` of rows): a kernel k in [ns_j, ne_j) meets only compute rows in [first_j, hi_j), so
    |k ∩ ∪C| = |k ∩ ∪C_g| with C_g the compute rows from the group's first first_j to its last hi_j (merged
    a chunk of rows at a time: no copy of their times, no set of every compute kernel meeting N at once).
    Same values as :func:`_cover_rows`."""
    nccl = np.concatenate(
        [np.zeros(0, np.intp)]
        + [np.flatnonzero(is_nccl[c0 : c0 + chunk]) + c0 for c0 in range(0, len(s), chunk)]
    )
    nset = _prefix(*iv.normalize(s[nccl], e[nccl]))  # few rows: NCCL kernels are a few % of all
    if not len(nset[0]) or not is_comp.any():
        return
    hi = s.searchsorted(nset[2][1:], side="left")
    first = s.searchsorted(nset[0] - longest, side="right")
    if int(np.maximum(hi - _disjoint(first, hi), 0).sum()) > len(s) // 4:
        first = _first_rows(e, is_comp, nset[0], chunk)
    lo = _disjoint(first, hi)  # disjoint row ranges [lo, hi) (hi never decreases)
    for c0 in range(0, len(s), chunk):
        c1 = c0 + chunk
        j0, j1 = int(hi.searchsorted(c0, side="right")), int(lo.searchsorted(c1, side="left"))
        a, b = np.clip(lo[j0:j1], c0, c1), np.clip(hi[j0:j1], c0, c1)
        q = _expand(a, np.maximum(b - a, 0))
        q = q[is_comp[q]]
        out[q] = _covered(s[q], e[q], nset)
    ns, ne, k_start = nset[0], nset[2][1:], s[nccl]
    groups = np.flatnonzero(np.diff(first // chunk)) + 1
    for g0, g1 in zip([0, *groups.tolist()], [*groups.tolist(), len(first)], strict=True):
        r0, r1 = int(first[g0]), int(hi[g1 - 1])
        if r1 <= r0:
            continue
        # Of the span, the rows of the group's ranges [lo_j, hi_j), the first from first_j: they hold every
        # [first_j, hi_j) (a row before lo_j is in an earlier range of the group), and are disjoint.
        a = np.minimum(lo[g0:g1], r1) - r0
        a[0] = 0
        b = hi[g0:g1] - r0
        a, b = a[b > a], b[b > a]  # non-empty: each of a and b strictly increasing (no repeated index)
        marks = np.zeros(r1 - r0 + 1, dtype=np.int8)
        marks[a] += 1
        marks[b] -= 1
        rows = np.cumsum(marks[:-1], dtype=np.int8).view(bool)  # 0 or 1: the ranges are disjoint
        del marks
        rows &= is_comp[r0:r1]
        cset = _prefix(*iv.normalize_rows(s[r0:r1], e[r0:r1], rows))
        del rows
        if not len(cset[0]):
            continue
        k0, k1 = (
            int(k_start.searchsorted(ns[g0], side="left")),
            int(k_start.searchsorted(ne[g1 - 1], side="left")),
        )
        for c0 in range(k0, k1, chunk):
            q = nccl[c0 : min(c0 + chunk, k1)]
            out[q] = _covered(s[q], e[q], cset)


def _disjoint(first: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``first`` raised to the previous interval's ``hi``: row ranges [lo_j, hi_j) that do not overlap."""
    lo = first.copy()
    lo[1:] = np.maximum(lo[1:], hi[:-1])
    return lo


def _first_rows(e: np.ndarray, is_comp: np.ndarray, ns: np.ndarray, chunk: int) -> np.ndarray:
    """Per sorted time ns_j: the first row i with R_i = max{e[c] : compute row c ≤ i} > ns_j (len(e) when
    none), a binary search in R for each; R is built a chunk of rows at a time (its running maximum carried
    from chunk to chunk), and each ns_j is searched in the chunk where R passes it."""
    out = np.full(len(ns), len(e), dtype=np.intp)
    carry, j = np.iinfo(np.int64).min, 0
    for c0 in range(0, len(e), chunk):
        reach = np.where(is_comp[c0 : c0 + chunk], e[c0 : c0 + chunk], np.iinfo(np.int64).min)
        np.maximum.accumulate(reach, out=reach)
        np.maximum(reach, carry, out=reach)
        j1 = int(ns.searchsorted(reach[-1], side="left"))  # the times R has passed by this chunk's end
        if j1 > j:
            out[j:j1] = reach.searchsorted(ns[j:j1], side="right") + c0
            j = j1
        carry = reach[-1]
    return out


def _prefix(ns: np.ndarray, ne: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A normalised set as (starts, cum, ends_before) for :func:`_covered`: cum[k] = Σ_{i<k} (ne_i − ns_i)
    and ends_before[k] = ne_{k−1}, with ends_before[0] the int64 minimum (before every time)."""
    cum = np.zeros(len(ns) + 1, dtype=np.int64)
    np.cumsum(ne - ns, out=cum[1:])
    before = np.empty(len(ns) + 1, dtype=np.int64)
    before[0] = np.iinfo(np.int64).min
    before[1:] = ne
    return ns, cum, before


def _covered(qs: np.ndarray, qe: np.ndarray, pset: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
    """``intervals.covered_length`` of fresh query arrays (overwritten) against a :func:`_prefix` set, as
    F(max(qe, qs)) − F(qs) with F(t) = |S ∩ (−∞, t)| = cum[k] + t − max(ends_before[k], t), k the number
    of set intervals starting at or before t (the part of interval k−1 after t is not covered before t).
    Exact int64 arithmetic: the same values."""
    ns, cum, before = pset
    np.maximum(qe, qs, out=qe)  # inverted queries cover nothing
    ks = ns.searchsorted(qs, side="right")
    ke = ns.searchsorted(qe, side="right")
    got = cum[ke]
    got -= cum[ks]
    got += qe
    got -= qs
    got -= np.maximum(before[ke], qe, out=qe)
    got += np.maximum(before[ks], qs, out=qs)
    return got


def _expand(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(s, s + n)`` over (start, length) pairs, without a Python loop."""
    total = int(lengths.sum())
    out = np.arange(total, dtype=np.intp)
    out += np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    return out


def kernel_overlap(karr: KernelArrays, covered: np.ndarray, chunk: int = 1 << 16) -> pd.DataFrame:
    """KERNEL_OVERLAP_COLUMNS: per (kind, name) of compute and NCCL kernels, duration-weighted overlap."""
    return finish_kernel_overlap([kernel_sums(karr, covered, chunk)])


def finish_kernel_overlap(parts: list[pd.DataFrame | None]) -> pd.DataFrame:
    """KERNEL_OVERLAP_COLUMNS from :func:`kernel_sums` of disjoint kernel sets (e.g. one per rank, in rank
    order): sums per (kind, name), pairs in order of first appearance, then sorted as the table is."""
    frames: list[pd.DataFrame] = [p for p in parts if p is not None and len(p)]
    if not frames:
        return schema.empty_frame(schema.KERNEL_OVERLAP_COLUMNS)
    if len(frames) == 1:
        g = frames[0].copy()
    else:
        g = (
            pd.concat(frames, ignore_index=True)
            .groupby(["kind", "name"], sort=False, dropna=False)
            .agg(count=("count", "sum"), total_ns=("total_ns", "sum"), overlapped_ns=("overlapped_ns", "sum"))
            .reset_index()
        )
    g["overlap_pct"] = pct(g["overlapped_ns"], g["total_ns"])
    g["_nccl"] = g["kind"] != NCCL
    g = g.sort_values(["_nccl", "total_ns"], ascending=[True, False], kind="stable")
    return schema.select(g, schema.KERNEL_OVERLAP_COLUMNS)


def kernel_sums(karr: KernelArrays, covered: np.ndarray, chunk: int = 1 << 18) -> pd.DataFrame | None:
    """Per (kind, name) of compute and NCCL kernels: count, total_ns, overlapped_ns, in order of first
    appearance (None when there are none): the additive part of :func:`kernel_overlap`."""
    keep = karr.is_compute | karr.is_nccl
    if not keep.any():
        return None
    # Per (kind, name) pair as one integer key, (name code + 2) * 2 + (1 if NCCL), and key 0 for every other
    # row: counts and exact sums by bincount over contiguous chunks of rows (no row selection, every
    # temporary chunk-sized: on 1M kernels full-length keys and durations set the analysis' memory peak).
    # Pairs keep their order of first appearance (the sort below is stable: ties stay in that order): each
    # chunk's new keys in the order it meets them (a hash of the chunk's keys, only when it has new ones).
    n_keys = 2 * (len(karr.names) + 2)
    count = np.zeros(n_keys, dtype=np.int64)
    total = np.zeros(n_keys, dtype=np.int64)
    overlapped = np.zeros(n_keys, dtype=np.int64)
    seen = np.zeros(n_keys, dtype=bool)
    seen[0] = True
    present: list[int] = []
    for lo in range(0, len(keep), chunk):
        key = karr.name_code[lo : lo + chunk].astype(np.int32)
        key += 2
        key *= 2
        key += karr.is_nccl[lo : lo + chunk]
        key *= keep[lo : lo + chunk]
        counts = np.bincount(key, minlength=n_keys)
        if (counts[~seen] > 0).any():
            new = pd.unique(key)
            new = new[~seen[new]]
            present.extend(new.tolist())
            seen[new] = True
        count += counts
        dur = karr.end[lo : lo + chunk] - karr.start[lo : lo + chunk]
        total += _int_sums(key, dur, n_keys)
        overlapped += _int_sums(key, covered[lo : lo + chunk], n_keys)
    at = np.array(present, dtype=np.int64)
    g = pd.DataFrame(
        {
            "kind": np.where(at % 2 == 1, NCCL, COMPUTE).astype(object),
            "name": karr.name_values()[at // 2 - 2],
            "count": count[at],
            "total_ns": total[at],
            "overlapped_ns": overlapped[at],
        }
    )
    return g


def _int_sums(groups: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Exact int64 per-group sums (bincount sums in float64, exact only below 2^53: split in two halves
    when the total could exceed that)."""
    if values.size == 0:
        return np.zeros(n, dtype=np.int64)
    if max(-float(values.min()), float(values.max())) * len(values) < 2**53:
        return np.bincount(groups, values, n).astype(np.int64)
    hi, lo = values >> 26, values & ((1 << 26) - 1)
    return (np.bincount(groups, hi, n).astype(np.int64) << 26) + np.bincount(groups, lo, n).astype(np.int64)


def rank_overlap(karr: KernelArrays) -> pd.DataFrame:
    """RANK_OVERLAP_COLUMNS over the whole trace, per rank (HTA semantics)."""
    rows = []
    for rank in (r for r in karr.distinct_ranks().tolist() if r >= 0):
        totals = karr.rank_totals(rank)
        c, n, o = totals[COMPUTE], totals[NCCL], totals["overlap"]
        rows.append(
            {"rank": int(rank), "compute_ns": c, "comm_ns": n, "overlap_ns": o, "exposed_comm_ns": n - o}
        )
    if not rows:
        return schema.empty_frame(schema.RANK_OVERLAP_COLUMNS)
    out = pd.DataFrame(rows)
    out["overlap_pct"] = pct(out["overlap_ns"], out["comm_ns"])
    return schema.select(out, schema.RANK_OVERLAP_COLUMNS)
