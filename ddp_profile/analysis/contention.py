"""Overlap contention: how much slower compute kernels run while NCCL kernels share the GPU.

A compute kernel instance is *alone* when no NCCL kernel of its (pid, device) ran at any moment of it, and
*overlapped* when NCCL ran during at least half of its duration (instances in between are left out, so each
group is clean). For each compute kernel name with at least ``min_count`` instances each way::

    alone_median_ns      = median duration of alone instances
    overlapped_median_ns = median duration of overlapped instances
    slowdown_pct         = 100 · (overlapped_median_ns / alone_median_ns − 1)
    lost_ns              = Σ over overlapped instances of (duration_ns − alone_median_ns)

    alone:        [--k--]            [--k--]
    nccl:                  [=============]
    overlapped:             [----k----]        <- k took longer: SM and memory bandwidth are shared
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddp_profile import schema
from ddp_profile.analysis._common import KernelArrays


def contention(karr: KernelArrays, covered: np.ndarray, min_count: int = 3) -> pd.DataFrame:
    """CONTENTION_COLUMNS, sorted by lost_ns (largest first). ``covered``: overlap.overlapped_by_other_class."""
    comp = karr.is_compute  # a mask, not an index array (8 B per kernel less)
    if not comp.any() or not karr.is_nccl.any():
        return schema.empty_frame(schema.CONTENTION_COLUMNS)
    # Temporaries are dropped as soon as used: on 10M kernels this function set the analysis' memory peak.
    dur = karr.end[comp]
    dur -= karr.start[comp]
    cov = covered[comp]
    code = karr.name_code[comp]
    del comp
    named = code >= 0
    a = named & (cov == 0)
    cov *= 2
    o = named & (dur > 0) & (cov >= dur)
    del cov, named
    # Grouped on integer name codes (cheap), names attached after; rows ordered by name as before sorting.
    a = _by_code(code[a], dur[a]).rename(columns={"n": "n_alone", "median": "alone_median_ns"})
    o = _by_code(code[o], dur[o]).rename(columns={"n": "n_overlapped", "median": "overlapped_median_ns"})
    del code, dur
    g = a.drop(columns="_sum").join(o, how="inner")
    g = g.loc[(g["n_alone"] >= min_count) & (g["n_overlapped"] >= min_count)].reset_index()
    if g.empty:
        return schema.empty_frame(schema.CONTENTION_COLUMNS)
    g["name"] = karr.name_values()[g["code"].to_numpy()]
    g = g.sort_values("name", kind="stable")
    g["slowdown_pct"] = 100.0 * (g["overlapped_median_ns"] / g["alone_median_ns"] - 1.0)
    g["lost_ns"] = g["_sum"] - g["n_overlapped"] * g["alone_median_ns"]
    g = g.sort_values("lost_ns", ascending=False, kind="stable")
    return schema.select(g, schema.CONTENTION_COLUMNS)


def _by_code(code: np.ndarray, dur: np.ndarray) -> pd.DataFrame:
    """Per name code (ascending, index ``code``): count ``n``, ``median`` (float; the mean of the two
    middle values for an even count, as pandas' groupby median) and exact int64 ``_sum`` of ``dur``.

    Names are few: one stable 16-bit sort (a radix sort) groups the rows, then each group's median is a
    partition of its slice. Same numbers as ``groupby(code).agg(size, median, sum)`` at a fraction of the
    cost on millions of kernels."""
    cols = {"n": np.zeros(0, np.int64), "median": np.zeros(0, float), "_sum": np.zeros(0, np.int64)}
    if len(code) == 0:
        return pd.DataFrame(cols, index=pd.Index(np.zeros(0, code.dtype), name="code"))
    narrow = code.astype(np.int16) if code.max() <= np.iinfo(np.int16).max else code
    order = np.argsort(narrow, kind="stable")
    del narrow
    c = code[order]
    d = dur[order]
    del order
    starts = np.flatnonzero(np.concatenate([[True], c[1:] != c[:-1]]))
    ends = np.append(starts[1:], len(c))
    cols["n"] = (ends - starts).astype(np.int64)
    cols["_sum"] = np.add.reduceat(d, starts).astype(np.int64)
    cols["median"] = np.array([_median(d[s:e]) for s, e in zip(starts, ends, strict=True)])
    return pd.DataFrame(cols, index=pd.Index(c[starts], name="code"))


def _median(seg: np.ndarray) -> float:
    """Median of a non-empty int64 slice, partitioned in place (no copy): the middle value, or the mean of
    the two middle values as float64 ((a + b) / 2, as numpy's and pandas' medians compute it)."""
    n = len(seg)
    if n % 2:
        seg.partition(n // 2)
        return float(seg[n // 2])
    seg.partition([n // 2 - 1, n // 2])
    return (float(seg[n // 2 - 1]) + float(seg[n // 2])) / 2.0
