"""Overlap contention: how much slower compute kernels run while NCCL kernels share the GPU.

A compute kernel instance is *alone* when no NCCL kernel of its (pid, device) ran at any moment of it, and
*overlapped* when NCCL ran during at least half of its duration (instances in between are left out, so each
group is clean). One kernel name often covers several kernels (the same GEMM or elementwise kernel at
several shapes), so instances are compared like for like, by *key*: a training loop launches the same
sequence every step, so the k-th instance of a name (by GPU start) inside a rank's step window is the same
kernel in every step and on every rank, and the key is (name, k). Per key with at least ``min_count``
instances each way (pooled over steps and ranks)::

    alone_median(key) = median duration of the key's alone instances
    baseline_ns       = Σ over the key's overlapped instances of alone_median(key)
    lost_ns           = Σ over the key's overlapped instances of duration_ns − baseline_ns

and one row per name over its counted keys (keys without enough instances either way are left out)::

    n_alone, n_overlapped = instances of the counted keys, each way
    alone_median_ns, overlapped_median_ns = medians over those instances
    baseline_ns, lost_ns  = Σ over the counted keys
    slowdown_pct          = 100 · lost_ns / baseline_ns   (duration-weighted, like for like)

    step s:   alone:  [--k#3--]          [-k#7-]
    step s+1: nccl:               [=============]
              overlapped:          [---k#7---]        <- k#7 took longer than k#7 alone: SM and memory
                                                         bandwidth are shared (k#3 is not its baseline)

Only kernels that started inside a step window count. Without step windows (a trace with no steps found)
the key is the name alone, over the whole trace: the per-name rule, where a name covering several shapes
can give a negative lost_ns.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddp_profile import schema
from ddp_profile.analysis._common import KernelArrays, masked_durations

Samples = dict[tuple[str, int], tuple[np.ndarray, np.ndarray]]


def contention(karr: KernelArrays, covered: np.ndarray, windows: pd.DataFrame | None = None,
               min_count: int = 3) -> pd.DataFrame:
    """CONTENTION_COLUMNS, sorted by lost_ns (largest first). ``covered``: overlap.overlapped_by_other_class;
    ``windows``: windows.phase_windows (its "step" rows key the instances; None or none: the per-name rule)."""
    if not karr.is_compute.any() or not karr.is_nccl.any():
        return schema.empty_frame(schema.CONTENTION_COLUMNS)
    ordinal = step_ordinals(karr, windows)
    if ordinal is not None:
        return pooled_contention([_keyed_samples(karr, covered, ordinal)], min_count)
    # Per name. Which compute kernels are alone and which overlapped, as two row masks (1 B per kernel);
    # durations are taken a chunk at a time and, later, per name: no full-length int64 temporaries (on 1M
    # kernels the durations and covered times of all compute kernels, 16 B each, set the analysis' peak).
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
    g["baseline_ns"] = g["n_overlapped"] * g["alone_median_ns"]
    return _finish(g)


def step_ordinals(karr: KernelArrays, windows: pd.DataFrame | None) -> np.ndarray | None:
    """Per kernel row (int32): the position k = 0, 1, ... of a named compute kernel among the instances of
    its name that started inside the same step window of its rank (by GPU start, then row order); -1 for
    other rows and kernels outside every step. A kernel belongs to the latest step window of its rank that
    started at or before it, if it started before that window's end. None when ``windows`` has no step."""
    steps = windows.loc[windows["phase"] == "step"] if windows is not None and len(windows) else None
    if steps is None or steps.empty:
        return None
    out = np.full(len(karr.start), -1, dtype=np.int32)
    rows = np.flatnonzero(karr.is_compute & (karr.name_code >= 0))
    win = np.full(len(rows), -1, dtype=np.int64)
    krank, kstart = karr.rank[rows], karr.start[rows]
    base = 0
    for rank, g in steps.groupby("rank", sort=True):
        ws, we = g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64)
        by_start = np.argsort(ws, kind="stable")
        ws, we = ws[by_start], we[by_start]
        mine = np.flatnonzero(krank == rank)
        at = np.searchsorted(ws, kstart[mine], side="right") - 1
        inside = at >= 0
        inside[inside] = kstart[mine[inside]] < we[at[inside]]
        win[mine[inside]] = base + at[inside]
        base += len(ws)
    keep = win >= 0
    rows, win = rows[keep], win[keep]
    order = np.lexsort((karr.start[rows], karr.name_code[rows], win))  # by window, name, start (stable)
    rows, win, code = rows[order], win[order], karr.name_code[rows[order]]
    first = np.flatnonzero(np.concatenate([[True], (win[1:] != win[:-1]) | (code[1:] != code[:-1])]))
    out[rows] = np.arange(len(rows)) - np.repeat(first, np.diff(np.append(first, len(rows))))
    return out


def contention_samples(karr: KernelArrays, covered: np.ndarray, windows: pd.DataFrame | None = None) -> Samples:
    """What :func:`contention` needs of one set of kernels (e.g. one rank's), to be pooled with others':
    per key (name, k) the durations of its alone and of its overlapped instances (int32 when they fit).
    Without step windows k is -1 (the per-name rule); :func:`pooled_contention` drops such keys when some
    set had step windows, as :func:`contention` leaves out kernels outside every step."""
    if not karr.is_compute.any() or not karr.is_nccl.any():
        return {}
    ordinal = step_ordinals(karr, windows)
    if ordinal is not None:
        return _keyed_samples(karr, covered, ordinal)
    alone, over = _classify(karr, covered)
    names = karr.name_values()
    out = {}
    for code in np.unique(karr.name_code[alone | over]):
        sel = karr.name_code == code
        out[(names[code], -1)] = (_narrow(masked_durations(karr.start, karr.end, alone & sel)),
                                  _narrow(masked_durations(karr.start, karr.end, over & sel)))
    return out


def _keyed_samples(karr: KernelArrays, covered: np.ndarray, ordinal: np.ndarray) -> Samples:
    """:func:`contention_samples` of the kernels with a step ordinal: per (name, k), ascending."""
    alone, over = _classify(karr, covered)
    sel = np.flatnonzero((alone | over) & (ordinal >= 0))
    del over
    code, k = karr.name_code[sel].astype(np.int64), ordinal[sel].astype(np.int64)
    order = np.lexsort((k, code))
    sel, code, k = sel[order], code[order], k[order]
    dur, is_alone = karr.end[sel] - karr.start[sel], alone[sel]
    cuts = np.flatnonzero((code[1:] != code[:-1]) | (k[1:] != k[:-1])) + 1
    names = karr.name_values()
    out = {}
    for lo, hi in zip(np.append(0, cuts), np.append(cuts, len(sel)), strict=True):
        if hi > lo:
            d, a = dur[lo:hi], is_alone[lo:hi]
            out[(names[code[lo]], int(k[lo]))] = (_narrow(d[a]), _narrow(d[~a]))
    return out


def _narrow(d: np.ndarray) -> np.ndarray:
    """Durations as int32 when they fit (kernels under 2.1 s: 4 B each on the wire), else int64."""
    return d.astype(np.int32) if len(d) and d.min() >= 0 and d.max() < 2**31 else d


def pooled_contention(samples: list[Samples], min_count: int = 3) -> pd.DataFrame:
    """:func:`contention` from :func:`contention_samples` of disjoint kernel sets (same numbers: medians
    are taken over the pooled durations, keys summed in order of k)."""
    keyed = any(k >= 0 for s in samples for _, k in s)
    pooled: dict[tuple[str, int], tuple[list, list]] = {}
    for s in samples:
        for key, (a, o) in s.items():
            if key[1] >= 0 or not keyed:
                got = pooled.setdefault(key, ([], []))
                got[0].append(a)
                got[1].append(o)
    per_name: dict[str, list] = {}
    for key in sorted(pooled):
        a = np.concatenate(pooled[key][0]).astype(np.int64, copy=False)
        o = np.concatenate(pooled[key][1]).astype(np.int64, copy=False)
        if len(a) >= min_count and len(o) >= min_count:
            acc = per_name.setdefault(key[0], [[], [], 0.0, 0])
            acc[0].append(a)
            acc[1].append(o)
            acc[2] += len(o) * _median(a)
            acc[3] += int(o.sum())
    if not per_name:
        return schema.empty_frame(schema.CONTENTION_COLUMNS)
    rows = []
    for name, (a_parts, o_parts, baseline, total) in per_name.items():
        a, o = np.concatenate(a_parts), np.concatenate(o_parts)
        rows.append({"name": name, "n_alone": len(a), "alone_median_ns": _median(a), "n_overlapped": len(o),
                     "overlapped_median_ns": _median(o), "baseline_ns": baseline, "_sum": total})
    g = pd.DataFrame(rows)
    g["n_alone"] = g["n_alone"].astype(np.int64)
    g["n_overlapped"] = g["n_overlapped"].astype(np.int64)
    g["_sum"] = g["_sum"].astype(np.int64)
    return _finish(g)


def _finish(g: pd.DataFrame) -> pd.DataFrame:
    """lost_ns and slowdown_pct from ``_sum`` (Σ overlapped durations) and ``baseline_ns``; sorted and
    selected as CONTENTION_COLUMNS."""
    g = g.sort_values("name", kind="stable")
    g["baseline_ns"] = g["baseline_ns"].astype(float)
    g["lost_ns"] = g["_sum"] - g["baseline_ns"]
    base = g["baseline_ns"].to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        g["slowdown_pct"] = np.where(base > 0, 100.0 * g["lost_ns"].to_numpy() / np.where(base > 0, base, 1.0), np.nan)
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
