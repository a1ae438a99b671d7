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
from ddp_profile.analysis._common import KernelArrays, masked_durations


def contention(karr: KernelArrays, covered: np.ndarray, min_count: int = 3) -> pd.DataFrame:
    """CONTENTION_COLUMNS, sorted by lost_ns (largest first). ``covered``: overlap.overlapped_by_other_class."""
    if not karr.is_compute.any() or not karr.is_nccl.any():
        return schema.empty_frame(schema.CONTENTION_COLUMNS)
    # Which compute kernels are alone and which overlapped, as two row masks (1 B per kernel); durations
    # are taken a chunk at a time and, later, per name: no full-length int64 temporaries (on 1M kernels
    # the durations and covered times of all compute kernels, 16 B each, set the analysis' memory peak).
    alone, over = _classify(karr, covered)
    a = _by_code(karr, alone).rename(columns={"n": "n_alone", "median": "alone_median_ns"})
    del alone
    o = _by_code(karr, over).rename(columns={"n": "n_overlapped", "median": "overlapped_median_ns"})
    del over
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


def contention_samples(karr: KernelArrays, covered: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """What :func:`contention` needs of one set of kernels (e.g. one rank's), to be pooled with others':
    per compute kernel name, the durations of its alone and of its overlapped instances (int64)."""
    if not karr.is_compute.any() or not karr.is_nccl.any():
        return {}
    alone, over = _classify(karr, covered)
    names = karr.name_values()
    out = {}
    for code in np.unique(karr.name_code[alone | over]):
        sel = karr.name_code == code
        out[names[code]] = (_narrow(masked_durations(karr.start, karr.end, alone & sel)),
                            _narrow(masked_durations(karr.start, karr.end, over & sel)))
    return out


def _narrow(d: np.ndarray) -> np.ndarray:
    """Durations as int32 when they fit (kernels under 2.1 s: 4 B each on the wire), else int64."""
    return d.astype(np.int32) if len(d) and d.min() >= 0 and d.max() < 2**31 else d


def pooled_contention(samples: list[dict[str, tuple[np.ndarray, np.ndarray]]], min_count: int = 3) -> pd.DataFrame:
    """:func:`contention` from :func:`contention_samples` of disjoint kernel sets (same numbers: medians
    are taken over the pooled durations)."""
    names = list(dict.fromkeys(n for s in samples for n in s))
    rows = []
    for name in names:
        a = np.concatenate([s[name][0] for s in samples if name in s]).astype(np.int64, copy=False)
        o = np.concatenate([s[name][1] for s in samples if name in s]).astype(np.int64, copy=False)
        if len(a) >= min_count and len(o) >= min_count:
            rows.append({"name": name, "n_alone": len(a), "alone_median_ns": _median(a),
                         "n_overlapped": len(o), "overlapped_median_ns": _median(o), "_sum": int(o.sum())})
    if not rows:
        return schema.empty_frame(schema.CONTENTION_COLUMNS)
    g = pd.DataFrame(rows)
    g["n_alone"] = g["n_alone"].astype(np.int64)
    g["n_overlapped"] = g["n_overlapped"].astype(np.int64)
    g = g.sort_values("name", kind="stable")
    g["slowdown_pct"] = 100.0 * (g["overlapped_median_ns"] / g["alone_median_ns"] - 1.0)
    g["lost_ns"] = g["_sum"] - g["n_overlapped"] * g["alone_median_ns"]
    g = g.sort_values("lost_ns", ascending=False, kind="stable")
    return schema.select(g, schema.CONTENTION_COLUMNS)


def _classify(karr: KernelArrays, covered: np.ndarray, chunk: int = 1 << 18) -> tuple[np.ndarray, np.ndarray]:
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
        over[lo:hi] = named & (dur > 0) & (2 * cov >= dur)
    return alone, over


def _by_code(karr: KernelArrays, rows: np.ndarray) -> pd.DataFrame:
    """Per name code of the ``rows`` (a mask; index ``code``, ascending): count ``n``, ``median`` (float;
    the mean of the two middle values for an even count, as pandas' groupby median) and exact int64
    ``_sum`` of the durations. Same numbers as ``groupby(code).agg(size, median, sum)`` at a fraction of
    the cost and memory on millions of kernels.

    Names are few: each name's durations are gathered by one mask and their median found by partitioning
    that copy in place (memory: the largest group). With many names, one stable 16-bit sort (a radix sort)
    groups the selected rows instead."""
    code = karr.name_code
    sub = code[rows]
    uniq = np.sort(pd.unique(sub))
    idx = pd.Index(uniq, name="code")
    if len(uniq) <= 64:
        del sub
        n, med, tot = [], [], []
        for u in uniq:
            seg = masked_durations(karr.start, karr.end, rows & (code == u))
            n.append(len(seg))
            tot.append(int(seg.sum()))
            med.append(_median(seg))
        return pd.DataFrame({"n": np.array(n, dtype=np.int64), "median": np.array(med, dtype=float),
                             "_sum": np.array(tot, dtype=np.int64)}, index=idx)
    narrow = sub.astype(np.int16) if sub.max() <= np.iinfo(np.int16).max else sub
    order = np.argsort(narrow, kind="stable")
    del narrow
    c = sub[order]
    del sub
    d = masked_durations(karr.start, karr.end, rows)[order]
    del order
    starts = np.flatnonzero(np.concatenate([[True], c[1:] != c[:-1]]))
    ends = np.append(starts[1:], len(c))
    return pd.DataFrame({"n": (ends - starts).astype(np.int64),
                         "median": np.array([_median(d[s:e]) for s, e in zip(starts, ends, strict=True)], dtype=float),
                         "_sum": np.add.reduceat(d, starts).astype(np.int64)}, index=idx)


def _median(seg: np.ndarray) -> float:
    """Median of a non-empty int64 slice, partitioned in place (no copy): the middle value, or the mean of
    the two middle values as float64 ((a + b) / 2, as numpy's and pandas' medians compute it)."""
    n = len(seg)
    if n % 2:
        seg.partition(n // 2)
        return float(seg[n // 2])
    seg.partition([n // 2 - 1, n // 2])
    return (float(seg[n // 2 - 1]) + float(seg[n // 2])) / 2.0
