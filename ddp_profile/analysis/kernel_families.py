"""Where a step's GPU time goes, kernel family by kernel family: per (rank, step), per rank, and on the
critical path's rank.

Families are the launch diagnosis' kernel groups (``kernel_groups.GROUPS``: the first ``kernel_groups.KERNEL_GROUPS``
pattern matching the kernel's short name, else "other"; NCCL kernels by kind; memcpy and memset "copy").
Steps are the critical path's step spans J = [end of the rank's previous selected step, end of this step)
(``steps.spans``, from the step table's GPU windows), so the spans tile each rank's timeline as the
critical path's parts do, and a kernel belongs to the step whose span its start lies in. Per (rank, step,
family), :func:`family_steps`::

    kernels = number of the family's activities starting in J
    gpu_ns  = Σ (end − start) of them, each in full (also when it ends after J)

A sum of durations, not a union: two kernels of a family running at once on two streams count twice, so
the non-NCCL families of a step can add up to a little more than the critical path's ``compute_ns`` (the
union of the same activities clipped to J). Every family of ``kernel_groups.GROUPS`` has a row for every
(rank, step), 0 where it ran nothing.

Summaries (:func:`family_per_rank`, :func:`family_on_critical_rank`) are sums over the steps divided by the
number of steps, not medians, so the families of a summary add up to its total per step::

    kernels_per_step = Σ kernels / steps
    gpu_ns_per_step  = Σ gpu_ns / steps
    mean_ns          = Σ gpu_ns / Σ kernels   (NaN without kernels)

``family_on_critical_rank`` takes each step's row from its critical rank (``schema.CRITICAL_PATH_COLUMNS``:
the rank whose step ends last), the rank the critical path's parts describe.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddp_profile import schema
from ddp_profile.analysis.kernel_arrays import KernelArrays
from ddp_profile.analysis.kernel_groups import GEMM, GROUPS, kernel_group_codes, name_group
from ddp_profile.analysis.steps import spans


def family_steps(kernels: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """``schema.FAMILY_STEP_COLUMNS``, one row per (rank, step, family of ``kernel_groups.GROUPS``), rows by rank,
    step, then family in GROUPS order. ``kernels``: KERNEL_COLUMNS (the trace's kernels, memcpys and
    memsets); ``steps``: the step table (rank, step, start_ns, end_ns: GPU windows) of the selected steps."""
    if steps is None or steps.empty or kernels is None or kernels.empty:
        return schema.empty_frame(schema.FAMILY_STEP_COLUMNS)
    karr = KernelArrays(kernels)
    code = kernel_group_codes(karr)
    dur = karr.end - karr.start
    n_fam = len(GROUPS)
    sp = spans(steps)
    parts = []
    for rank, rows in sp.groupby("rank", sort=True).indices.items():
        js, je = sp["start_ns"].to_numpy()[rows], sp["end_ns"].to_numpy()[rows]
        idx = karr.rank_index(rank)
        s = karr.start[idx]
        at = np.searchsorted(js, s, side="right") - 1  # spans of a rank are sorted and do not overlap
        inside = (at >= 0) & (s < je[np.maximum(at, 0)])
        cell = at[inside] * n_fam + code[idx][inside]  # (step position, family) as one integer
        size = len(rows) * n_fam
        kernels_n = np.bincount(cell, minlength=size)
        gpu_ns = np.bincount(cell, weights=dur[idx][inside], minlength=size)
        parts.append(
            pd.DataFrame(
                {
                    "rank": int(rank),
                    "step": np.repeat(sp["step"].to_numpy()[rows], n_fam),
                    "family": np.tile(np.asarray(GROUPS, dtype=object), len(rows)),
                    "kernels": kernels_n.astype(np.int64),
                    "gpu_ns": np.rint(gpu_ns).astype(np.int64),
                }
            )
        )
    return schema.select(pd.concat(parts, ignore_index=True), schema.FAMILY_STEP_COLUMNS)


def _summarise(rows: pd.DataFrame, key: str, steps: pd.Series) -> pd.DataFrame:
    """Sums of ``rows`` (FAMILY_STEP_COLUMNS) per (``key``, family), divided by ``steps`` (the number of steps
    per value of ``key``)."""
    g = rows.groupby([key, "family"], sort=False)[["kernels", "gpu_ns"]].sum().reset_index()
    n = g[key].map(steps).to_numpy(np.int64)
    g["steps"] = n
    g["kernels_per_step"] = g["kernels"] / n
    g["gpu_ns_per_step"] = g["gpu_ns"] / n
    g["mean_ns"] = (g["gpu_ns"] / g["kernels"].where(g["kernels"] > 0)).astype(float)
    return g


def family_per_rank(per_step: pd.DataFrame) -> pd.DataFrame:
    """``schema.FAMILY_COLUMNS``, one row per (rank, family), from :func:`family_steps`: sums over the rank's
    steps divided by their number. Rows by rank, then family in ``kernel_groups.GROUPS`` order."""
    if per_step.empty:
        return schema.empty_frame(schema.FAMILY_COLUMNS)
    steps = per_step.groupby("rank")["step"].nunique()
    return schema.select(_summarise(per_step, "rank", steps), schema.FAMILY_COLUMNS)


def family_on_critical_rank(per_step: pd.DataFrame, critical: pd.DataFrame) -> pd.DataFrame:
    """``schema.CRITICAL_FAMILY_COLUMNS``, one row per family: per step the critical rank's row (``critical``:
    ``schema.CRITICAL_PATH_COLUMNS``), summed over the steps both frames have and divided by their number.
    Rows in ``kernel_groups.GROUPS`` order; empty when no step is in both."""
    if per_step.empty or critical is None or critical.empty:
        return schema.empty_frame(schema.CRITICAL_FAMILY_COLUMNS)
    pick = critical[["step", "critical_rank"]].rename(columns={"critical_rank": "rank"}).astype("int64")
    rows = per_step.astype({"rank": "int64", "step": "int64"}).merge(pick, on=["rank", "step"], how="inner")
    if rows.empty:
        return schema.empty_frame(schema.CRITICAL_FAMILY_COLUMNS)
    rows = rows.assign(path=0)
    steps = pd.Series({0: rows["step"].nunique()})
    return schema.select(_summarise(rows, "path", steps), schema.CRITICAL_FAMILY_COLUMNS)


def gemm_contention(contention: pd.DataFrame | None) -> pd.Series | None:
    """The GEMM family's row of :func:`contention_by_family` (``schema.FAMILY_CONTENTION_COLUMNS``), None when no
    GEMM ran both beside NCCL and alone often enough to compare."""
    fam = contention_by_family(contention)
    g = fam.loc[fam["family"] == GEMM]
    return g.iloc[0] if len(g) else None


def gemm_wave_ratio(contention: pd.DataFrame | None) -> float:
    """The GEMM family's median like-for-like ratio (:func:`gemm_contention`'s ``median_ratio``), NaN without it."""
    row = gemm_contention(contention)
    return float(row["median_ratio"]) if row is not None else float("nan")


def contention_by_family(contention: pd.DataFrame) -> pd.DataFrame:
    """``schema.FAMILY_CONTENTION_COLUMNS``: the like-for-like contention rows (``schema.CONTENTION_COLUMNS``,
    one per kernel name, :mod:`ddp_profile.analysis.contention`) summed by kernel family, families in GROUPS
    order, only those with counted names::

        baseline_ns  = Σ baseline_ns of its names   (what its overlapped instances take alone)
        lost_ns      = Σ lost_ns of its names        (each name's never below 0)
        slowdown_pct = 100 · lost_ns / baseline_ns
        median_ratio = median over its names of overlapped_median_ns / alone_median_ns

    A GEMM family slowed by ~100 % beside NCCL is the signature of persistent GEMMs (one CTA per SM) pushed
    into a second wave by the SMs an NCCL kernel holds."""
    if contention is None or contention.empty:
        return schema.empty_frame(schema.FAMILY_CONTENTION_COLUMNS)
    c = contention.assign(
        family=[name_group(n) for n in contention["name"].astype(object)],
        ratio=contention["overlapped_median_ns"] / contention["alone_median_ns"],
    )
    rows = []
    for family in GROUPS:
        g = c[c["family"] == family]
        if g.empty:
            continue
        base, lost = float(g["baseline_ns"].sum()), float(g["lost_ns"].sum())
        rows.append(
            {
                "family": family,
                "names": len(g),
                "n_overlapped": int(g["n_overlapped"].sum()),
                "baseline_ns": base,
                "lost_ns": lost,
                "slowdown_pct": 100.0 * lost / base if base > 0 else np.nan,
                "median_ratio": float(g["ratio"].median()),
            }
        )
    return pd.DataFrame(rows, columns=schema.FAMILY_CONTENTION_COLUMNS)


__all__ = [
    "contention_by_family",
    "gemm_contention",
    "gemm_wave_ratio",
    "family_steps",
    "family_per_rank",
    "family_on_critical_rank",
]
