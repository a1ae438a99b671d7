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
    comp = np.flatnonzero(karr.is_compute)
    if comp.size == 0 or not karr.is_nccl.any():
        return schema.empty_frame(schema.CONTENTION_COLUMNS)
    dur = karr.end[comp] - karr.start[comp]
    cov = covered[comp]
    alone = cov == 0
    over = (dur > 0) & (2 * cov >= dur)
    # Grouped on integer name codes (cheap), names attached after; rows ordered by name as before sorting.
    code = karr.name_code[comp]
    named = code >= 0
    a, o = (named & alone), (named & over)
    # Series grouped by an array: no DataFrame whose two columns would be copied into one block first.
    a = pd.Series(dur[a]).groupby(code[a]).agg(n_alone="size", alone_median_ns="median").rename_axis("code")
    o = pd.Series(dur[o]).groupby(code[o]).agg(n_overlapped="size", overlapped_median_ns="median",
                                               _sum="sum").rename_axis("code")
    g = a.join(o, how="inner")
    g = g.loc[(g["n_alone"] >= min_count) & (g["n_overlapped"] >= min_count)].reset_index()
    if g.empty:
        return schema.empty_frame(schema.CONTENTION_COLUMNS)
    g["name"] = karr.name_values()[g["code"].to_numpy()]
    g = g.sort_values("name", kind="stable")
    g["slowdown_pct"] = 100.0 * (g["overlapped_median_ns"] / g["alone_median_ns"] - 1.0)
    g["lost_ns"] = g["_sum"] - g["n_overlapped"] * g["alone_median_ns"]
    g = g.sort_values("lost_ns", ascending=False, kind="stable")
    return schema.select(g, schema.CONTENTION_COLUMNS)
