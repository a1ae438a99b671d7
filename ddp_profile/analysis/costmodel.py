"""Alpha-beta cost model of a collective, fitted from the trace's own kernels, and what it predicts.

Fit (least squares over the collectives of one type with known bytes, at least 3 distinct sizes)::

    transfer_ns ≈ o + bytes / w          o: per-collective overhead (reported in µs)
                                         w: bandwidth in bytes/ns = GB/s;  r2: coefficient of determination

Transfer time (not kernel duration) is fitted, so waiting for a late peer does not inflate the cost.

Overlap overhead of bucketed gradient synchronisation. With s gradient bytes split into n_b equal buckets,
every bucket pays o that compute cannot hide (launch and synchronisation), and the last bucket's transfer
can only start when backward ends, so it is fully exposed::

    overhead(n_b) = n_b · o + s / (n_b · w)

    backward: [=========================]
    buckets:      [b1]   [b2]   [b3]     [b_last]    <- s/(n_b·w) after backward: the tail
                                          ^ each bucket also adds o

Minimising over n_b: d/dn_b = o − s/(n_b² · w) = 0 → n_b* = √(s / (w·o)), so the optimal bucket size is
b* = s / n_b* = √(s · w · o) (units: bytes when o is ns and w bytes/ns), and overhead(n_b*) = 2·√(s·o/w).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddp_profile import schema


def predict_overhead(o_ns: float, w_bytes_per_ns: float, total_bytes: float, n_buckets: float) -> float:
    """n_b·o + s/(n_b·w) in ns: per-bucket overhead plus the exposed transfer of the last bucket."""
    if n_buckets <= 0 or w_bytes_per_ns <= 0:
        raise ValueError("n_buckets and w must be positive")
    return n_buckets * o_ns + total_bytes / (n_buckets * w_bytes_per_ns)


def optimal_bucket_bytes(o_ns: float, w_bytes_per_ns: float, total_bytes: float) -> float:
    """b* = √(s·w·o) bytes: the bucket size minimising :func:`predict_overhead`."""
    if min(o_ns, w_bytes_per_ns, total_bytes) <= 0:
        return float("nan")
    return float(np.sqrt(total_bytes * w_bytes_per_ns * o_ns))


def fit(bytes_: np.ndarray, transfer_ns: np.ndarray) -> tuple[float, float, float]:
    """Least-squares (o_ns, w_bytes_per_ns, r2) of t = o + bytes/w. w is NaN when the slope is not positive."""
    x = np.asarray(bytes_, dtype=float)
    y = np.asarray(transfer_ns, dtype=float)
    slope, intercept = np.polyfit(x, y, 1)
    pred = intercept + slope * x
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float(((y - pred) ** 2).sum()) / ss_tot if ss_tot > 0 else float("nan")
    w = 1.0 / slope if slope > 0 else float("nan")
    return float(intercept), w, r2


def cost_model(collectives: pd.DataFrame, notes: list[str], min_sizes: int = 3) -> pd.DataFrame:
    """COST_MODEL_COLUMNS: one row per collective type with at least ``min_sizes`` distinct byte sizes."""
    if collectives.empty:
        return schema.empty_frame(schema.COST_MODEL_COLUMNS)
    c = collectives.loc[collectives["bytes"].notna() & (collectives["transfer_ns"] > 0)]
    rows = []
    for name, g in c.groupby(c["collective"].astype("object").fillna("?"), sort=True):
        x = g["bytes"].to_numpy(dtype=float)
        if np.unique(x).size < min_sizes:
            notes.append(f"cost model for {name}: only {np.unique(x).size} distinct message size(s), need "
                         f"{min_sizes} (run a bucket-size sweep or use more buckets)")
            continue
        o, w, r2 = fit(x, g["transfer_ns"].to_numpy(dtype=float))
        if np.isnan(w):
            notes.append(f"cost model for {name}: transfer time does not grow with size; bandwidth unknown")
        rows.append({"collective": name, "n_points": len(g), "o_us": o / 1e3, "w_gb_per_s": w, "r2": r2,
                     "min_bytes": int(x.min()), "max_bytes": int(x.max())})
    if not rows:
        if c.empty:
            notes.append("cost model: no collective with known bytes (needs the harness's NVTX ranges)")
        return schema.empty_frame(schema.COST_MODEL_COLUMNS)
    return schema.select(pd.DataFrame(rows), schema.COST_MODEL_COLUMNS)
