"""What one rank runs that its peers do not: a per-step, cross-rank diff of the compute kernels.

Per (rank, step) (:func:`step_kernel_sums`), over the rank's step span J (the critical path's span: end of
its previous step to the end of this one, ``steps.spans``), the compute kernels (not NCCL, not
memcpy / memset) that *start* in J, grouped by kernel name::

    count   = how many kernels of that name start in J
    gpu_ns  = their summed duration (end − start)

Against its peers (:func:`diff`), for a rank s of a step and each kernel name k, with P the other ranks of
the step (a rank that runs no kernel k in the step counts 0 for it)::

    peer_count(k)  = median over P of count(k)
    extra_count(k) = max(0, count_s(k) − peer_count(k))          (kernels only s runs, by name and count)
    extra_ns(k)    = extra_count(k) · gpu_ns_s(k) / count_s(k)    (their time at s's own mean duration)
    like_ns(k)     = min(count_s(k), peer_count(k)) · (mean_s(k) − median over P of mean(k))
                     (the kernels both run, like for like: how much longer s takes on them; a peer that
                     runs no k leaves its mean out of the median)

    extra_ns   = Σ_k extra_ns(k)
    like_ns    = Σ_k like_ns(k)      (negative when s runs the shared kernels faster)

Like for like matters because a peer's kernels that run beside a NCCL kernel spinning while it waits for s
are slowed by that kernel: comparing total compute charges s's extra work with the peers' contention and
hides it. ``extra_ns`` compares work, not time. Everything is computed over whole columns: one pass per
rank to bin its kernels into steps, then array arithmetic over (step, name) × rank.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddp_profile.analysis.kernel_arrays import KernelArrays, ints
from ddp_profile.fmt import fmt_ms

SUM_COLUMNS = ["rank", "step", "name", "count", "gpu_ns"]
"""Per (rank, step, kernel name), :func:`step_kernel_sums`."""
DIFF_COLUMNS = ["step", "rank", "extra_ns", "like_ns", "extra_kernels"]
"""Per (step, rank asked for), :func:`diff`: ``extra_kernels`` = [(name, extra_count, peer_count, extra_ns)]
largest first."""
NAMED = 3
"""How many kernel names the evidence quotes (largest extra time first)."""


def step_kernel_sums(spans: pd.DataFrame, karr: KernelArrays) -> pd.DataFrame:
    """SUM_COLUMNS for the compute kernels of each (rank, step) span of ``spans`` (rank, step, start_ns,
    end_ns: ``steps.spans`` of the step table, the critical path's spans). One searchsorted and two bincounts
    per rank, no loop over steps."""
    if spans is None or spans.empty:
        return pd.DataFrame({c: pd.Series(dtype="int64" if c != "name" else object) for c in SUM_COLUMNS})
    s = spans.sort_values(["rank", "step"], kind="stable").reset_index(drop=True)
    js, je = ints(s["start_ns"]), ints(s["end_ns"])
    rank_col, step_col = ints(s["rank"]), ints(s["step"])
    names = karr.name_values()
    out = []
    for rank in np.unique(rank_col).tolist():
        rows = np.flatnonzero(rank_col == rank)
        order = rows[np.argsort(js[rows], kind="stable")]
        lo, hi = js[order], je[order]
        idx = karr.rank_index(rank)
        start, end = karr.start[idx], karr.end[idx]
        comp = np.asarray(karr.is_compute[idx], dtype=bool)
        code = np.asarray(karr.name_code[idx], dtype=np.int64)
        at = np.searchsorted(lo, start, side="right") - 1
        inside = comp & (at >= 0) & (start < hi[np.maximum(at, 0)])
        if not inside.any():
            continue
        # one integer key per (span, name): codes run from -1 (no name) to len(names) - 1
        width = len(names) + 1
        key = at[inside].astype(np.int64) * width + (code[inside] + 1)
        uniq, inverse = np.unique(key, return_inverse=True)
        count = np.bincount(inverse, minlength=len(uniq)).astype(np.int64)
        total = np.bincount(
            inverse, weights=(end[inside] - start[inside]).astype(np.float64), minlength=len(uniq)
        )
        out.append(
            pd.DataFrame(
                {
                    "rank": rank,
                    "step": step_col[order][uniq // width],
                    "name": names[(uniq % width) - 1],
                    "count": count,
                    "gpu_ns": np.rint(total).astype(np.int64),
                }
            )
        )
    if not out:
        return step_kernel_sums(pd.DataFrame(), karr)
    return pd.concat(out, ignore_index=True)[SUM_COLUMNS]


def table(sums: pd.DataFrame | None) -> tuple | None:
    """The (step, name) × rank table :func:`diff` reads: ``(ranks, step_of_row, name_of_row, count, mean)``,
    rows sorted by step then name, one column per rank (``count``: NaN where the rank is absent from the step,
    0 where it ran in the step but not that kernel; ``mean``: gpu_ns / count, NaN without a kernel). Built once
    from whole columns (one sort of integer keys), so :func:`every_rank` shares it across ranks. None when
    ``sums`` holds no named kernel."""
    if sums is None or sums.empty:
        return None
    sums = sums.loc[sums["name"].notna()]
    if sums.empty:
        return None
    rank, step = ints(sums["rank"]), ints(sums["step"])
    ranks = np.unique(rank)
    codes, names = pd.factorize(sums["name"].to_numpy(), sort=True)
    steps, step_at = np.unique(step, return_inverse=True)
    row_key, row_at = np.unique(step_at.astype(np.int64) * len(names) + codes, return_inverse=True)
    col = np.searchsorted(ranks, rank)
    shape = (len(row_key), len(ranks))
    seen = np.zeros(shape, dtype=bool)
    seen[row_at, col] = True
    c = np.zeros(shape)
    gpu = np.zeros(shape)
    np.add.at(c, (row_at, col), ints(sums["count"]).astype(float))
    np.add.at(gpu, (row_at, col), ints(sums["gpu_ns"]).astype(float))
    # a rank that ran in the step but not this kernel counts 0 of it; a rank absent from the step stays NaN
    in_step = np.zeros((len(steps), len(ranks)), dtype=bool)
    in_step[step_at, col] = True
    row_step = row_key // len(names)
    c = np.where(seen | in_step[row_step], c, np.nan)
    mean = np.where(seen, gpu, np.nan) / np.where(c > 0, c, np.nan)
    return ranks, steps[row_step], np.asarray(names, dtype=object)[row_key % len(names)], c, mean


def _row_nanmedian(a: np.ndarray) -> np.ndarray:
    """``np.nanmedian(a, axis=1)`` (NaN for an all-NaN row, without its warning) from one sort along the rows:
    the middle value, or the mean of the two middle ones, of each row's non-NaN values."""
    if a.shape[1] == 1:
        return a[:, 0].copy()
    s = np.sort(a, axis=1)  # NaN last
    k = (~np.isnan(a)).sum(axis=1)
    r = np.arange(len(a))
    lo, hi = np.maximum((k - 1) // 2, 0), k // 2
    out = (s[r, lo] + s[r, np.minimum(hi, a.shape[1] - 1)]) / 2
    out[k == 0] = np.nan
    return out


def diff(sums: pd.DataFrame | None, who: pd.Series, pivot: tuple | None = None) -> pd.DataFrame:
    """DIFF_COLUMNS for rank ``who[step]`` of each step (``who``: index step, values rank; steps without a
    rank, or whose rank has no peer in ``sums``, are left out). ``sums``: :func:`step_kernel_sums` of every
    rank; ``pivot``: its :func:`table` when the caller has it already."""
    empty = pd.DataFrame(
        {
            "step": pd.Series(dtype="int64"),
            "rank": pd.Series(dtype="int64"),
            "extra_ns": pd.Series(dtype=float),
            "like_ns": pd.Series(dtype=float),
            "extra_kernels": pd.Series(dtype=object),
        }
    )
    who = who.dropna() if who is not None else pd.Series(dtype="int64")
    if sums is None or sums.empty or who.empty:
        return empty
    pivot = pivot if pivot is not None else table(sums)
    if pivot is None:
        return empty
    ranks, step_of_row, name_of_row, c, mean = pivot
    target = who.astype("int64")
    me_rank = target.reindex(step_of_row).to_numpy(dtype=float, na_value=np.nan)
    col = np.searchsorted(ranks, np.nan_to_num(me_rank, nan=-1).astype(np.int64))
    ok = ~np.isnan(me_rank) & (col < len(ranks))
    ok[ok] &= ranks[col[ok]] == me_rank[ok].astype(np.int64)
    rows = np.flatnonzero(ok)
    if not len(rows):
        return empty
    c, mean, col = c[rows], mean[rows], col[rows]
    mine = np.zeros_like(c, dtype=bool)
    mine[np.arange(len(rows)), col] = True
    peers_c = np.where(mine, np.nan, c)
    peers_m = np.where(mine, np.nan, mean)
    has_peer = (~np.isnan(peers_c)).any(axis=1)
    peer_c, peer_m = _row_nanmedian(peers_c), _row_nanmedian(peers_m)
    my_c = np.nan_to_num(c[np.arange(len(rows)), col])
    my_m = mean[np.arange(len(rows)), col]
    extra_c = np.maximum(0.0, my_c - np.nan_to_num(peer_c))
    extra = np.where(extra_c > 0, extra_c * np.nan_to_num(my_m), 0.0)
    like = np.minimum(my_c, np.nan_to_num(peer_c)) * (my_m - peer_m)
    like = np.where(np.isfinite(like), like, 0.0)
    per = pd.DataFrame(
        {
            "step": step_of_row[rows],
            "name": name_of_row[rows],
            "extra_c": extra_c,
            "peer_c": np.nan_to_num(peer_c),
            "extra": extra,
            "like": like,
            "has_peer": has_peer,
        }
    )
    per = per.loc[per.groupby("step")["has_peer"].transform("any")]
    if per.empty:
        return empty
    tot = per.groupby("step", sort=True)[["extra", "like"]].sum()
    named = per.loc[per["extra"] > 0].sort_values(
        ["step", "extra", "name"], ascending=[True, False, True], kind="stable"
    )
    top = named.groupby("step").head(NAMED)
    # top is sorted by step: each step's named kernels are one slice of the whole columns' tuples
    tuples = list(zip(top["name"], top["extra_c"].astype(int), top["peer_c"], top["extra"], strict=True))
    at = ints(top["step"])
    cuts = [0, *(np.flatnonzero(np.diff(at)) + 1).tolist(), len(at)]
    lists = {int(at[a]): tuples[a:b] for a, b in zip(cuts[:-1], cuts[1:], strict=True) if b > a}
    steps = tot.index.to_numpy(np.int64)
    return pd.DataFrame(
        {
            "step": steps,
            "rank": target.reindex(steps).to_numpy(np.int64),
            "extra_ns": tot["extra"].to_numpy(float),
            "like_ns": tot["like"].to_numpy(float),
            "extra_kernels": [lists.get(int(s), []) for s in steps],
        }
    )


def evidence(extra_kernels: list, extra_ns: float, like_ns: float) -> str:
    """'extra kernels: <name> ×N (peers ×M) X ms + ..., X ms in all; like-for-like kernels +Y ms'."""
    parts = [
        f"{name} ×{n} more (other ranks' median ×{peer:g}) {fmt_ms(ns)}"
        for name, n, peer, ns in extra_kernels
    ]
    text = f"extra kernels {fmt_ms(extra_ns)}: " + " + ".join(parts) if parts else "no extra kernels"
    return (
        text
        + f"; like-for-like kernels {'+' if like_ns >= 0 else '−'}{fmt_ms(abs(like_ns))} against its peers"
    )


def every_rank(sums: pd.DataFrame, max_ranks: int = 64, pivot: tuple | None = None) -> pd.DataFrame:
    """DIFF_COLUMNS for every rank of every step (:func:`diff` once per rank, over one :func:`table`: ``pivot``
    when the caller has it; jobs of more than ``max_ranks`` ranks get none: one rank's extra work is then read
    off the straggler alone)."""
    if sums is None or sums.empty:
        return diff(sums, pd.Series(dtype="int64"))
    ranks = np.unique(ints(sums["rank"]))
    if len(ranks) > max_ranks:
        return diff(None, pd.Series(dtype="int64"))
    steps = np.unique(ints(sums["step"]))
    pivot = pivot if pivot is not None else table(sums)
    got = [diff(sums, pd.Series(np.full(len(steps), r), index=steps), pivot) for r in ranks.tolist()]
    return pd.concat(got, ignore_index=True)
