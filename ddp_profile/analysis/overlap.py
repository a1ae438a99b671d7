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

import numpy as np
import pandas as pd

from ddp_profile import intervals as iv
from ddp_profile import schema
from ddp_profile.analysis._common import COMPUTE, NCCL, KernelArrays, covered_by_normalized, pair_groups, pct


def overlapped_by_other_class(karr: KernelArrays, chunk: int = 1 << 17) -> np.ndarray:
    """Per kernel row: ns of it covered by the other class (compute<->NCCL) on its (pid, device); 0 for
    copies. One vectorised :func:`intervals.covered_length` per (pid, device) and class. int32 when every
    kernel is shorter than 2^31 ns (2.1 s; a covered time never exceeds its kernel's duration): 4 B per
    kernel less while the overlap tables and contention use it."""
    n = len(karr.start)
    longest = max((int((karr.end[lo:lo + chunk] - karr.start[lo:lo + chunk]).max()) for lo in range(0, n, chunk)),
                  default=0)
    out = np.zeros(n, dtype=np.int32 if longest < 2**31 else np.int64)
    for idx in pair_groups(karr.pid, karr.device):
        comp = idx[karr.is_compute[idx]]
        nccl = idx[karr.is_nccl[idx]]
        del idx
        if comp.size and nccl.size:
            # = intervals.covered_length, each class's set normalised once and the queries taken a chunk at
            # a time (same values; the temporaries are chunk-sized, not one per kernel of the process).
            for queries, (ss, se) in ((nccl, iv.normalize(karr.start[comp], karr.end[comp])),
                                      (comp, iv.normalize(karr.start[nccl], karr.end[nccl]))):
                for lo in range(0, len(queries), chunk):
                    q = queries[lo:lo + chunk]
                    out[q] = covered_by_normalized(karr.start[q], karr.end[q], ss, se)
                del ss, se
    return out


def kernel_overlap(karr: KernelArrays, covered: np.ndarray, chunk: int = 1 << 18) -> pd.DataFrame:
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
        g = pd.concat(frames, ignore_index=True).groupby(["kind", "name"], sort=False, dropna=False).agg(
            count=("count", "sum"), total_ns=("total_ns", "sum"), overlapped_ns=("overlapped_ns", "sum")).reset_index()
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
    # Per (kind, name) pair as one integer key, (name code + 1) * 2 + (1 if NCCL): counts and exact sums
    # by bincount, a chunk of rows at a time, so every temporary is chunk-sized (on 1M kernels the
    # full-length keys, factorize codes and durations of a one-shot grouping set the analysis' memory peak).
    # Pairs keep their order of first appearance (the sort below is stable: ties stay in that order).
    n_keys = 2 * (len(karr.names) + 1)
    count = np.zeros(n_keys, dtype=np.int64)
    total = np.zeros(n_keys, dtype=np.int64)
    overlapped = np.zeros(n_keys, dtype=np.int64)
    first = np.full(n_keys, len(keep), dtype=np.int64)
    for lo in range(0, len(keep), chunk):
        rows = np.flatnonzero(keep[lo:lo + chunk])
        if rows.size == 0:
            continue
        key = karr.name_code[lo:lo + chunk][rows].astype(np.int32)
        key += 1
        key *= 2
        key += karr.is_nccl[lo:lo + chunk][rows]
        seen, at = np.unique(key, return_index=True)
        np.minimum.at(first, seen, at + lo)
        dur = karr.end[lo:lo + chunk][rows] - karr.start[lo:lo + chunk][rows]
        count += np.bincount(key, minlength=n_keys)
        total += _int_sums(key, dur, n_keys)
        overlapped += _int_sums(key, covered[lo:lo + chunk][rows], n_keys)
    present = np.flatnonzero(count)
    present = present[np.argsort(first[present], kind="stable")]
    g = pd.DataFrame({
        "kind": np.where(present % 2 == 1, NCCL, COMPUTE).astype(object),
        "name": karr.name_values()[present // 2 - 1],
        "count": count[present],
        "total_ns": total[present], "overlapped_ns": overlapped[present],
    })
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
    for rank in np.unique(karr.rank[karr.rank >= 0]):
        totals = karr.rank_totals(rank)
        c, n, o = totals[COMPUTE], totals[NCCL], totals["overlap"]
        rows.append({"rank": int(rank), "compute_ns": c, "comm_ns": n, "overlap_ns": o, "exposed_comm_ns": n - o})
    if not rows:
        return schema.empty_frame(schema.RANK_OVERLAP_COLUMNS)
    out = pd.DataFrame(rows)
    out["overlap_pct"] = pct(out["overlap_ns"], out["comm_ns"])
    return schema.select(out, schema.RANK_OVERLAP_COLUMNS)
