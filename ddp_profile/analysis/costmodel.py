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


# ---- the one sweep model shared by the report's sweep page and the findings ------------------------------

SWEEP_FIT_COLUMNS = [*schema.COST_MODEL_COLUMNS, "n_runs", "grad_bytes_per_step", "b_star_bytes"]


def gradient_bytes_per_step(collectives: pd.DataFrame) -> float:
    """s: the bytes all-reduced per (rank, step), median over (rank, step) rows with known sizes; NaN if none."""
    if collectives is None or not len(collectives):
        return float("nan")
    c = collectives.loc[collectives["step"].notna() & collectives["bytes"].notna()]
    if not len(c):
        return float("nan")
    return float(c.groupby(["rank", "step"])["bytes"].sum().median())


def sweep_fit(collectives_frames, min_sizes: int = 3) -> pd.DataFrame:
    """ONE α-β fit for a host/model/dtype: every run whose collectives carry sizes (naive, flat, overlap,
    bucketed; torch_ddp carries none) pooled, so the fit spans the widest range of message sizes.

    Returns one row (SWEEP_FIT_COLUMNS): the COST_MODEL_COLUMNS of the collective type with the most points
    (the all-reduce), plus n_runs pooled, s = ``grad_bytes_per_step`` (median over the pooled runs of
    :func:`gradient_bytes_per_step`) and b* = √(s·w·o) in bytes. Empty when no fit exists. The report's
    sweep page and the findings both call this, so they state the same o, w and b*."""
    frames = [c for c in collectives_frames
              if c is not None and len(c) and c["bytes"].notna().any()]
    if not frames:
        return pd.DataFrame(columns=SWEEP_FIT_COLUMNS)
    cm = cost_model(pd.concat(frames, ignore_index=True), [], min_sizes)
    if not len(cm):
        return pd.DataFrame(columns=SWEEP_FIT_COLUMNS)
    row = cm.sort_values("n_points", kind="stable").iloc[[-1]].reset_index(drop=True)
    s = float(np.nanmedian([gradient_bytes_per_step(c) for c in frames]))
    row["n_runs"] = len(frames)
    row["grad_bytes_per_step"] = s
    o_ns, w = float(row["o_us"].iloc[0]) * 1e3, float(row["w_gb_per_s"].iloc[0])
    row["b_star_bytes"] = optimal_bucket_bytes(o_ns, w, s) if np.isfinite([o_ns, w, s]).all() else float("nan")
    return row[SWEEP_FIT_COLUMNS]


def fit_params(fit: pd.DataFrame) -> tuple[float, float, float]:
    """(o_ns, w_bytes_per_ns, r2) of a :func:`sweep_fit` row; NaNs when there is no usable fit."""
    if fit is None or not len(fit):
        return float("nan"), float("nan"), float("nan")
    row = fit.iloc[0]
    o, w, r2 = float(row["o_us"]) * 1e3, float(row["w_gb_per_s"]), float(row["r2"])
    return (o, w, r2) if np.isfinite([o, w]).all() and w > 0 else (float("nan"), float("nan"), r2)


def sweep_prediction(fit: pd.DataFrame, total_bytes: float, bucket_counts) -> np.ndarray:
    """overhead(n_b) = n_b·o + s/(n_b·w) in ns for each bucket count, with o and w from :func:`sweep_fit`.

    ``bucket_counts`` should be the counts the runs really had (the harness's ``bucket_count``): tensors are
    never split, so a small cap gives far fewer buckets than ⌈s/cap⌉. NaN where the fit or a count is missing."""
    o, w, _ = fit_params(fit)
    out = []
    for n in bucket_counts:
        n = float(n) if n is not None else float("nan")
        ok = np.isfinite([o, w, n, total_bytes]).all() and n > 0
        out.append(predict_overhead(o, w, total_bytes, n) if ok else float("nan"))
    return np.asarray(out, dtype=float)
