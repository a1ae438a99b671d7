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
from ddp_profile.analysis._common import COMPUTE, NCCL, KernelArrays, int_groups, masked_durations, pct


def overlapped_by_other_class(karr: KernelArrays) -> np.ndarray:
    """Per kernel row: ns of it covered by the other class (compute<->NCCL) on its (pid, device); 0 for
    copies. One vectorised :func:`intervals.covered_length` per (pid, device) and class."""
    out = np.zeros(len(karr.start), dtype=np.int64)
    for idx in int_groups(karr.pid, karr.device):
        comp = idx[karr.is_compute[idx]]
        nccl = idx[karr.is_nccl[idx]]
        if comp.size and nccl.size:
            out[nccl] = iv.covered_length(karr.start[nccl], karr.end[nccl], karr.start[comp], karr.end[comp])
            out[comp] = iv.covered_length(karr.start[comp], karr.end[comp], karr.start[nccl], karr.end[nccl])
    return out


def kernel_overlap(karr: KernelArrays, covered: np.ndarray) -> pd.DataFrame:
    """KERNEL_OVERLAP_COLUMNS: per (kind, name) of compute and NCCL kernels, duration-weighted overlap."""
    keep = karr.is_compute | karr.is_nccl
    if not keep.any():
        return schema.empty_frame(schema.KERNEL_OVERLAP_COLUMNS)
    # Group on integer codes: (kind, name) pairs in order of first appearance, sums by bincount.
    # Key = name code * 2 + (1 if NCCL), built in place; temporaries dropped once summed (on 10M kernels
    # this function's arrays set the analysis' memory peak).
    key = karr.name_code[keep].astype(np.int64)
    key *= 2
    key += karr.is_nccl[keep]
    pair, first = pd.factorize(key)
    del key
    n = len(first)
    if n <= np.iinfo(np.int16).max:  # few (kind, name) pairs: 2 B per kernel instead of 8 for what follows
        pair = pair.astype(np.int16)
    dur = masked_durations(karr.start, karr.end, keep)
    total = _int_sums(pair, dur, n)
    del dur
    overlapped = _int_sums(pair, covered[keep], n)
    g = pd.DataFrame({
        "kind": np.where(first % 2 == 1, NCCL, COMPUTE).astype(object),
        "name": karr.name_values()[first // 2],
        "count": np.bincount(pair, minlength=n),
        "total_ns": total, "overlapped_ns": overlapped,
    })
    g["overlap_pct"] = pct(g["overlapped_ns"], g["total_ns"])
    g["_nccl"] = g["kind"] != NCCL
    g = g.sort_values(["_nccl", "total_ns"], ascending=[True, False], kind="stable")
    return schema.select(g, schema.KERNEL_OVERLAP_COLUMNS)


def _int_sums(groups: np.ndarray, values: np.ndarray, n: int, chunk: int = 1 << 18) -> np.ndarray:
    """Exact int64 per-group sums (bincount sums in float64, exact only below 2^53: split in two halves
    when the total could exceed that). Summed a chunk of rows at a time, added in int64: bincount's float
    copy of the weights and the halves stay chunk-sized (on 1M kernels they set the analysis' peak)."""
    out = np.zeros(n, dtype=np.int64)
    for start in range(0, len(values), chunk):
        g, v = groups[start:start + chunk], values[start:start + chunk]
        if max(-float(v.min()), float(v.max())) * len(v) < 2**53:
            out += np.bincount(g, v, n).astype(np.int64)
        else:
            hi, lo = v >> 26, v & ((1 << 26) - 1)
            out += (np.bincount(g, hi, n).astype(np.int64) << 26) + np.bincount(g, lo, n).astype(np.int64)
    return out


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
