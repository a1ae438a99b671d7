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
    baseline_ns           = Σ over the counted keys
    lost_ns               = max(0, Σ over the counted keys of their lost_ns)   (never negative: a name whose
                            overlapped instances ran no slower than alone lost nothing, and gained nothing)
    slowdown_pct          = 100 · lost_ns / baseline_ns   (duration-weighted, like for like)
    overlapped_ns         = Σ duration of all the name's overlapped instances in steps (counted keys or not)

``lost_ns`` is a lower bound: kernels that run beside NCCL in every step have no alone baseline. Kernels
of one name are alike in what they contend for, so :func:`estimated_loss_ns` applies each name's
like-for-like slowdown to all of its overlapped time::

    estimated loss = Σ over names of overlapped_ns · lost_ns / (baseline_ns + lost_ns)

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
from ddp_profile.analysis.contention_rows import classify, name_segments, steps_of
from ddp_profile.analysis.kernel_arrays import KernelArrays, masked_durations

Samples = dict[tuple[str, int], tuple[np.ndarray, np.ndarray]]


def contention(
    karr: KernelArrays, covered: np.ndarray, windows: pd.DataFrame | None = None, min_count: int = 3
) -> pd.DataFrame:
    """CONTENTION_COLUMNS, sorted by lost_ns (largest first). ``covered``: overlap.overlapped_by_other_class;
    ``windows``: windows.phase_windows (its "step" rows key the instances; None or none: the per-name rule)."""
    if not karr.is_compute.any() or not karr.is_nccl.any():
        return schema.empty_frame(schema.CONTENTION_COLUMNS)
    if steps_of(windows) is not None:
        return _keyed_table(karr, covered, windows, min_count)
    # Per name. Which compute kernels are alone and which overlapped, as two row masks (1 B per kernel);
    # durations are taken a chunk at a time and, later, per name: no full-length int64 temporaries (on 1M
    # kernels the durations and covered times of all compute kernels, 16 B each, set the analysis' peak).
    alone, over = classify(karr, covered)
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
    g["overlapped_ns"] = g["_sum"]
    return _finish(g)


def _keyed_table(
    karr: KernelArrays, covered: np.ndarray, windows: pd.DataFrame, min_count: int
) -> pd.DataFrame:
    """:func:`contention` with step windows, name by name in numpy (the same numbers as pooling
    :func:`contention_samples`, without a Python object per key)."""
    names = karr.name_values()
    rows = []
    for code, r, k, a, d in name_segments(karr, covered, windows):
        del r
        packed = _packed(k, a, d)
        if packed is None:
            g, d = _sorted_by_key(k, a, d)  # rows _packed cannot pack: per row 2·k + is_alone, sorted
            del k, a
            head = np.flatnonzero(np.concatenate([[True], g[1:] != g[:-1]]))
            size = np.diff(np.append(head, len(g)))
            gk, ga = g[head] >> 1, (g[head] & 1).astype(bool)
            del g
            sums = np.add.reduceat(d, head) if len(head) else np.zeros(0, np.int64)
        else:
            del k, a, d
            d, (head, size, gk, ga, sums) = packed, _packed_groups(packed)
        low = packed is not None  # durations are the low 32 bits of d's rows
        mid = head + (size - 1) // 2  # groups are sorted: the median is the middle value(s)
        med = (_low(d[mid], low).astype(float) + _low(d[head + size // 2], low).astype(float)) / 2.0
        keys, key_of = np.unique(gk, return_inverse=True)
        n_a, n_o = np.zeros(len(keys), np.int64), np.zeros(len(keys), np.int64)
        med_a, sum_o = np.zeros(len(keys)), np.zeros(len(keys), np.int64)
        n_a[key_of[ga]], med_a[key_of[ga]] = size[ga], med[ga]
        n_o[key_of[~ga]] = size[~ga]
        sum_o[key_of[~ga]] = sums[~ga]
        counted = (n_a >= min_count) & (n_o >= min_count)
        if not counted.any():
            continue
        group_counted = counted[key_of]  # each group's key counted or not
        n_alone, med_alone = _union_median(d, head, size, group_counted & ga, low)
        n_over, med_over = _union_median(d, head, size, group_counted & ~ga, low)
        del d, packed
        rows.append(
            {
                "name": names[code],
                "n_alone": n_alone,
                "alone_median_ns": med_alone,
                "n_overlapped": n_over,
                "overlapped_median_ns": med_over,
                "baseline_ns": float((n_o[counted] * med_a[counted]).sum()),
                "_sum": int(sum_o[counted].sum()),
                "overlapped_ns": int(sum_o.sum()),
            }
        )
    if not rows:
        return schema.empty_frame(schema.CONTENTION_COLUMNS)
    g = pd.DataFrame(rows)
    for c in ("n_alone", "n_overlapped", "_sum", "overlapped_ns"):
        g[c] = g[c].astype(np.int64)
    return _finish(g)


LOW = (1 << 32) - 1  # the duration's bits in a packed row (:func:`_packed`)


def _low(x: np.ndarray, packed: bool) -> np.ndarray:
    """The durations of packed rows (:func:`_packed`: their low 32 bits); unpacked durations as they are."""
    return x & LOW if packed else x


def _packed(k: np.ndarray, a: np.ndarray, d: np.ndarray, chunk: int = 1 << 15) -> np.ndarray | None:
    """The durations ``d`` (int64, overwritten) as k << 33 | is_alone << 32 | duration, sorted in place: the
    order of :func:`_sorted_by_key` in the array of the durations, a chunk at a time (no other per-row
    array). None, ``d`` untouched, when k ≥ 2^30 or a duration is outside [0, 2^32)."""
    if not len(k) or k.min() < 0 or k.max() >= 2**30 or d.min() < 0 or d.max() >= 2**32:
        return None
    for lo in range(0, len(d), chunk):
        hi = k[lo : lo + chunk].astype(np.int64)
        hi <<= 1
        hi |= a[lo : lo + chunk]
        hi <<= 32
        d[lo : lo + chunk] |= hi
    d.sort()
    return d


def _packed_groups(packed: np.ndarray, chunk: int = 1 << 15):
    """(head, size, k, is_alone, Σ duration) per run of one (k, is_alone) in sorted :func:`_packed` rows.
    The runs' starts are found a chunk at a time; each run's sum of durations as Σ packed − size · (its
    high bits), in uint64 arithmetic (exact modulo 2^64, and the true sum, ≤ size · 2^32, is below 2^63)."""
    cuts = [np.zeros(min(len(packed), 1), dtype=np.intp)]
    for lo in range(0, len(packed) - 1, chunk):
        g = packed[lo : lo + chunk + 1] >> 32
        cuts.append(np.flatnonzero(g[1:] != g[:-1]) + lo + 1)
    head = np.concatenate(cuts)
    size = np.diff(np.append(head, len(packed)))
    top = packed[head] >> 32
    u = packed.view(np.uint64)
    sums = (
        np.add.reduceat(u, head) - size.astype(np.uint64) * (top.astype(np.uint64) << np.uint64(32))
    ).astype(np.int64)
    return head, size, top >> 1, (top & 1).astype(bool), sums


def _union_median(
    d: np.ndarray, head: np.ndarray, size: np.ndarray, sel: np.ndarray, packed: bool
) -> tuple[int, float]:
    """(count, :func:`_median`) of the durations in the selected sorted runs d[head_i : head_i + size_i]
    together. Packed rows (:func:`_packed`): each order statistic by a binary search over the 32-bit
    duration x, counting the rows ≤ x of every selected run with one ``searchsorted`` of (its high bits | x)
    (a run is sorted and its high bits are its own): no per-row array is gathered."""
    if not packed:
        vals = d[np.repeat(sel, size)]
        return len(vals), _median(vals)
    head, n = head[sel], int(size[sel].sum())
    if n == 0:
        return 0, _median(d[:0])
    top = d[head] & ~LOW

    def select(j: int) -> int:  # the j-th smallest duration (0-based): the least x with #{≤ x} > j
        lo, hi = 0, LOW
        while lo < hi:
            x = (lo + hi) // 2
            if int((np.searchsorted(d, top | x, side="right") - head).sum()) > j:
                hi = x
            else:
                lo = x + 1
        return lo

    if n % 2:
        return n, float(select(n // 2))
    return n, (float(select(n // 2 - 1)) + float(select(n // 2))) / 2.0


def _sorted_by_key(k: np.ndarray, a: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(2·k + is_alone, duration) per row, ordered by key k, overlapped before alone, then duration: the
    order :func:`_packed` gives in place, for the rows it cannot pack (k ≥ 2^30 or a duration outside
    [0, 2^32)), by one three-key lexsort."""
    o = np.lexsort((d, a, k))
    g = k[o].astype(np.int64) * 2
    g += a[o]
    return g, d[o]


def contention_samples(
    karr: KernelArrays, covered: np.ndarray, windows: pd.DataFrame | None = None
) -> Samples:
    """What :func:`contention` needs of one set of kernels (e.g. one rank's), to be pooled with others':
    per key (name, k) the durations of its alone and of its overlapped instances (int32 when they fit).
    Without step windows k is -1 (the per-name rule); :func:`pooled_contention` drops such keys when some
    set had step windows, as :func:`contention` leaves out kernels outside every step."""
    if not karr.is_compute.any() or not karr.is_nccl.any():
        return {}
    names = karr.name_values()
    out = {}
    for code, _, k, a, d in name_segments(karr, covered, windows):
        o = np.argsort(k, kind="stable")
        k, a, d = k[o], a[o], d[o]
        cuts = np.flatnonzero(k[1:] != k[:-1]) + 1
        for lo, hi in zip(np.append(0, cuts), np.append(cuts, len(k)), strict=True):
            out[(names[code], int(k[lo]))] = (_narrow(d[lo:hi][a[lo:hi]]), _narrow(d[lo:hi][~a[lo:hi]]))
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
    overlapped: dict[str, int] = {}  # every key's overlapped time, counted or not
    for key in sorted(pooled):
        a = np.concatenate(pooled[key][0]).astype(np.int64, copy=False)
        o = np.concatenate(pooled[key][1]).astype(np.int64, copy=False)
        overlapped[key[0]] = overlapped.get(key[0], 0) + int(o.sum())
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
        rows.append(
            {
                "name": name,
                "n_alone": len(a),
                "alone_median_ns": _median(a),
                "n_overlapped": len(o),
                "overlapped_median_ns": _median(o),
                "baseline_ns": baseline,
                "_sum": total,
                "overlapped_ns": overlapped[name],
            }
        )
    g = pd.DataFrame(rows)
    g["n_alone"] = g["n_alone"].astype(np.int64)
    g["n_overlapped"] = g["n_overlapped"].astype(np.int64)
    g["_sum"] = g["_sum"].astype(np.int64)
    g["overlapped_ns"] = g["overlapped_ns"].astype(np.int64)
    return _finish(g)


def _finish(g: pd.DataFrame) -> pd.DataFrame:
    """lost_ns and slowdown_pct from ``_sum`` (Σ overlapped durations) and ``baseline_ns``; sorted and
    selected as CONTENTION_COLUMNS."""
    g = g.sort_values("name", kind="stable")
    g["baseline_ns"] = g["baseline_ns"].astype(float)
    # never negative: overlapped instances that ran no slower than alone (noise, or a key pairing unlike
    # kernels) cost nothing, they are no gain
    g["lost_ns"] = np.maximum(g["_sum"] - g["baseline_ns"], 0.0)
    base = g["baseline_ns"].to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        g["slowdown_pct"] = np.where(
            base > 0, 100.0 * g["lost_ns"].to_numpy() / np.where(base > 0, base, 1.0), np.nan
        )
    g = g.sort_values("lost_ns", ascending=False, kind="stable")
    return schema.select(g, schema.CONTENTION_COLUMNS)


def estimated_loss_ns(table: pd.DataFrame) -> float:
    """Compute time lost to NCCL, estimated: each name's like-for-like slowdown applied to all of its
    overlapped time, Σ overlapped_ns · lost_ns / (baseline_ns + lost_ns), over the rows of a
    CONTENTION_COLUMNS table (0 when empty). ``lost_ns`` counts only kernels also seen alone (a lower
    bound); this extends it to the same names' kernels that always run beside NCCL."""
    if table is None or not len(table):
        return 0.0
    measured = (table["baseline_ns"] + table["lost_ns"]).to_numpy(dtype=float)
    share = np.divide(
        table["lost_ns"].to_numpy(dtype=float), measured, out=np.zeros(len(table)), where=measured > 0
    )
    return float((table["overlapped_ns"].to_numpy(dtype=float) * share).sum())


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
        return pd.DataFrame(
            {
                "n": np.array(n, dtype=np.int64),
                "median": np.array(med, dtype=float),
                "_sum": np.array(tot, dtype=np.int64),
            },
            index=idx,
        )
    narrow = sub.astype(np.int16) if sub.max() <= np.iinfo(np.int16).max else sub
    order = np.argsort(narrow, kind="stable")
    del narrow
    c = sub[order]
    del sub
    d = masked_durations(karr.start, karr.end, rows)[order]
    del order
    starts = np.flatnonzero(np.concatenate([[True], c[1:] != c[:-1]]))
    ends = np.append(starts[1:], len(c))
    return pd.DataFrame(
        {
            "n": (ends - starts).astype(np.int64),
            "median": np.array([_median(d[s:e]) for s, e in zip(starts, ends, strict=True)], dtype=float),
            "_sum": np.add.reduceat(d, starts).astype(np.int64),
        },
        index=idx,
    )


def _median(seg: np.ndarray) -> float:
    """Median of a non-empty int64 slice, partitioned in place (no copy): the middle value, or the mean of
    the two middle values as float64 ((a + b) / 2, as numpy's and pandas' medians compute it)."""
    n = len(seg)
    if n % 2:
        seg.partition(n // 2)
        return float(seg[n // 2])
    seg.partition([n // 2 - 1, n // 2])
    return (float(seg[n // 2 - 1]) + float(seg[n // 2])) / 2.0


def contention_per_step_ns(contention: pd.DataFrame, steps: pd.DataFrame) -> float:
    """Compute time lost to NCCL per rank-step, estimated (:func:`contention.estimated_loss_ns`: each kernel
    name's like-for-like slowdown applied to all of its time under NCCL) / (ranks × steps)."""
    if contention is None or not len(contention) or steps is None or not len(steps):
        return 0.0
    return estimated_loss_ns(contention) / max(len(steps), 1)
