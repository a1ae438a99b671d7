"""Alpha-beta cost model of a collective, fitted from the trace's own kernels, and what it predicts.

Fit (per collective type with known bytes, at least 3 distinct sizes), one line per size regime::

    transfer_ns ≈ o + bytes / w          o: per-collective overhead (reported in µs)
                                         w: bandwidth in bytes/ns = GB/s

Transfer time (not kernel duration) is fitted, so waiting for a late peer does not inflate the cost.

Why relative error. Message sizes span six decades (6 kB LayerNorm gradients next to an 8 GB flat buffer).
Ordinary least squares minimises absolute error, so the largest messages set the line and the intercept o
lands wherever their extrapolation meets zero bytes (42 µs on the XL traces, six times the measured cost of
a 6 kB all-reduce). The fit minimises the relative residual r = (t − o − b/w) / t instead (weighted least
squares, weight 1/t²), so a 7 µs message and a 20 ms one count alike. Weights 1/t² favour short transfers,
so a few read too short (clock skew between ranks moves time from transfer into wait) would pull the line:
the fit is iteratively reweighted with Huber weights min(1, k/|r/σ|), k = 1.345, σ = 1.4826 · median
|r − median r| (the MAD).

Why two regimes. On NCCL one line cannot follow small and large messages at once: effective bandwidth keeps
rising with size (2×H200: ≈175 GB/s at 10 MB, ≈350 GB/s at 8 GB), so a line through the small messages'
latency under-predicts the large ones' bandwidth. Where the sizes straddle the crossover o·w (some messages
latency-bound, some bandwidth-bound) the sizes are split once, between two size clusters, into a
latency-bound and a bandwidth-bound line, if that wins on BIC (:func:`regimes`). NCCL switches protocol and
channel count with size, but its kernel names do not say which ran, so the split comes from the data.
Quality, per regime over its points::

    median_rel_err_pct, p90_rel_err_pct = median and 90th percentile of 100 · |o + b/w − t| / t
    r2 = 1 − Σ(t − o − b/w)² / Σ(t − mean t)²    (plain, unweighted)

Overlap overhead of bucketed gradient synchronisation (the textbook idealisation: s gradient bytes in n_b
equal buckets of b = s/n_b, each paying o, the last one's transfer starting only when backward ends)::

    overhead(n_b) = n_b · o + s / (n_b · w),  minimal at b* = s / n_b* = √(s · w · o)

with o and w of the regime b falls in (:func:`best_bucket_bytes`).

Measured tail model (:func:`queue_tail`). Real buckets are unequal and become ready at measured times, so
the tail is predicted by replaying the bucket all-reduces through the NCCL stream, a first-in-first-out
queue, with fitted transfer times and the gradient-ready times measured in the trace::

    ready_i = latest GPU end of the kernels the process launched before all-reduce i (its gradient copy and
              pre-division run on the compute stream; the NCCL stream waits for them), max over ranks
    end_i   = max(ready_i, end_{i−1}) + o + b_i / w
    tail    = max(0, end_last − backward_end)

    backward:  [==========================]
    ready:       ^r1      ^r2       ^r3   ^r4
    NCCL:         [b1]     [b2--]    [b3---][b4]     <- b3 still running when b4 is ready: it queues
                                          |<-->| predicted tail
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddp_profile import schema

HUBER_K = 1.345  # 95 % efficiency at normal errors (Huber's usual constant)
MAX_FIT_POINTS = 20_000  # regimes are searched on a seeded random sample of at most this many kernels


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


def _weighted_line(x: np.ndarray, y: np.ndarray, wt: np.ndarray) -> tuple[float, float]:
    """(intercept, slope) minimising Σ wt·(y − a − s·x)²: the normal equations about the weighted means
    (centred, so sizes of 1e10 and their squares do not cancel digits)."""
    sw = wt.sum()  # plain sums, not BLAS dot: no thread start-up per call, pairwise-summed
    mx, my = (wt * x).sum() / sw, (wt * y).sum() / sw
    wdx = wt * (x - mx)
    sxx = (wdx * (x - mx)).sum()
    s = (wdx * (y - my)).sum() / sxx if sxx > 0 else float("nan")
    return float(my - s * mx), float(s)


def fit(bytes_: np.ndarray, transfer_ns: np.ndarray, max_iter: int = 50) -> tuple[float, float, float]:
    """(o_ns, w_bytes_per_ns, r2) of t = o + bytes/w, minimising robust relative error (module docstring).
    ``transfer_ns`` must be positive. w is NaN when the slope is not positive."""
    x = np.asarray(bytes_, dtype=float)
    y = np.asarray(transfer_ns, dtype=float)
    base = 1.0 / y**2  # relative residuals: (y − ŷ)/y, squared
    wt = base
    o, s = _weighted_line(x, y, wt)
    for _ in range(max_iter):
        r = (y - o - s * x) / y
        sigma = 1.4826 * float(np.median(np.abs(r - np.median(r))))
        if not sigma > 0:  # (nearly) exact fit: nothing to down-weight
            break
        u = np.abs(r) / sigma
        wt = base * np.minimum(1.0, HUBER_K / np.maximum(u, 1e-300))
        o_new, s_new = _weighted_line(x, y, wt)
        done = abs(o_new - o) <= 1e-7 * max(abs(o), 1.0) and abs(s_new - s) <= 1e-7 * abs(s)
        o, s = o_new, s_new
        if done:
            break
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float(((y - o - s * x) ** 2).sum()) / ss_tot if ss_tot > 0 else float("nan")
    return o, (1.0 / s if s > 0 else float("nan")), r2


def relative_errors_pct(bytes_, transfer_ns, o_ns: float, w_bytes_per_ns: float) -> np.ndarray:
    """100 · |o + b/w − t| / t per point (NaN everywhere when w is not positive)."""
    x = np.asarray(bytes_, dtype=float)
    y = np.asarray(transfer_ns, dtype=float)
    if not (np.isfinite(w_bytes_per_ns) and w_bytes_per_ns > 0):
        return np.full(x.shape, np.nan)
    return 100.0 * np.abs(o_ns + x / w_bytes_per_ns - y) / y


def _rel_sse(x, y, o, w) -> float:
    return float((((o + x / w - y) / y) ** 2).sum())


def regimes(bytes_, transfer_ns, min_sizes: int = 3) -> list[tuple[float, float, float, float, float]]:
    """[(from_bytes, to_bytes, o_ns, w_bytes_per_ns, r2)], one line per regime, by size (module docstring).

    Two regimes only when (a) the one-line fit has messages on both sides of its crossover o·w (some
    latency-bound, some bandwidth-bound), (b) a split between two size clusters (sizes within 5 % of each
    other are one cluster, never split) leaves each side ≥ ``min_sizes`` distinct sizes in ≥ 2 clusters and
    a line with o ≥ 0, w > 0, and (c) the best such split wins on BIC over the relative residuals,
    n·ln(SSE/n) + k·ln n with k = 2 (one line) vs 5 (two lines and the split). The split sits at the
    geometric mean of the two clusters it separates; each line then applies from its lower split up.
    Above MAX_FIT_POINTS kernels a seeded random sample of that many is fitted (same answer within noise,
    a bounded cost on long captures)."""
    x = np.asarray(bytes_, dtype=float)
    y = np.asarray(transfer_ns, dtype=float)
    if x.size > MAX_FIT_POINTS:
        keep = np.random.default_rng(0).choice(x.size, MAX_FIT_POINTS, replace=False)
        x, y = x[keep], y[keep]
    o, w, r2 = fit(x, y)
    one = [(0.0, np.inf, o, w, r2)]
    if not (np.isfinite(w) and w > 0 and (x < o * w).any() and (x > o * w).any()):
        return one
    u = np.unique(x)
    starts = np.flatnonzero(np.r_[True, u[1:] > 1.05 * u[:-1]])  # first size of each cluster
    best = None
    for c in starts[2:-1]:  # ≥ 2 clusters on each side
        split = float(np.sqrt(u[c - 1] * u[c]))
        lo = x < split
        if np.unique(x[lo]).size < min_sizes or np.unique(x[~lo]).size < min_sizes:
            continue
        (o1, w1, r1), (o2, w2, r2b) = fit(x[lo], y[lo]), fit(x[~lo], y[~lo])
        if not (min(o1, o2) >= 0 and w1 > 0 and w2 > 0):
            continue
        sse = _rel_sse(x[lo], y[lo], o1, w1) + _rel_sse(x[~lo], y[~lo], o2, w2)
        if best is None or sse < best[0]:
            best = (sse, [(0.0, split, o1, w1, r1), (split, np.inf, o2, w2, r2b)])
    n, sse1 = x.size, _rel_sse(x, y, o, w)
    if best is None or not sse1 > 0:
        return one
    bic = lambda sse, k: n * np.log(max(sse, 1e-300) / n) + k * np.log(n)  # noqa: E731
    return best[1] if bic(best[0], 5) < bic(sse1, 2) else one


def cost_model(collectives: pd.DataFrame, notes: list[str], min_sizes: int = 3) -> pd.DataFrame:
    """COST_MODEL_COLUMNS: one row per collective type and size regime (:func:`regimes`), by size, for the
    types with at least ``min_sizes`` distinct byte sizes. min_bytes/max_bytes: the sizes in the regime."""
    if collectives.empty:
        return schema.empty_frame(schema.COST_MODEL_COLUMNS)
    c = collectives.loc[collectives["bytes"].notna() & (collectives["transfer_ns"] > 0)]
    rows = []
    for name, g in c.groupby(c["collective"].astype("object").fillna("?"), sort=True):
        x = g["bytes"].to_numpy(dtype=float)
        if np.unique(x).size < min_sizes:
            notes.append(
                f"cost model for {name}: only {np.unique(x).size} distinct message size(s), need "
                f"{min_sizes} (run a bucket-size sweep or use more buckets)"
            )
            continue
        y = g["transfer_ns"].to_numpy(dtype=float)
        for lo, hi, o, w, r2 in regimes(x, y, min_sizes):
            if np.isnan(w):
                notes.append(
                    f"cost model for {name}: transfer time does not grow with size; bandwidth unknown"
                )
            m = (x >= lo) & (x < hi)
            err = relative_errors_pct(x[m], y[m], o, w)
            rows.append(
                {
                    "collective": name,
                    "n_points": int(m.sum()),
                    "o_us": o / 1e3,
                    "w_gb_per_s": w,
                    "r2": r2,
                    "min_bytes": int(x[m].min()),
                    "max_bytes": int(x[m].max()),
                    "median_rel_err_pct": float(np.median(err)),
                    "p90_rel_err_pct": float(np.percentile(err, 90)),
                }
            )
    if not rows:
        if c.empty:
            notes.append("cost model: no collective with known bytes (needs the harness's NVTX ranges)")
        return schema.empty_frame(schema.COST_MODEL_COLUMNS)
    return schema.select(pd.DataFrame(rows), schema.COST_MODEL_COLUMNS)


def _lines(model: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(from_bytes, o_ns, w) per regime row of one collective's model, rows sorted by size; the split
    between neighbouring rows is the geometric mean of one's max_bytes and the next's min_bytes."""
    m = model.sort_values("min_bytes", kind="stable")
    lo, hi = m["min_bytes"].to_numpy(dtype=float), m["max_bytes"].to_numpy(dtype=float)
    start = np.r_[0.0, np.sqrt(hi[:-1] * lo[1:])]
    return start, m["o_us"].to_numpy(dtype=float) * 1e3, m["w_gb_per_s"].to_numpy(dtype=float)


def regime_lines(model: pd.DataFrame, bytes_) -> tuple[np.ndarray, np.ndarray]:
    """(o_ns, w_bytes_per_ns) per size: the line of the regime holding that size (``model``: the rows of one
    collective from :func:`cost_model` or :func:`sweep_fit`). NaN without a model."""
    b = np.asarray(bytes_, dtype=float)
    if model is None or not len(model):
        return np.full(b.shape, np.nan), np.full(b.shape, np.nan)
    start, o, w = _lines(model)
    k = np.clip(np.searchsorted(start, b, side="right") - 1, 0, len(start) - 1)
    return o[k], w[k]


def predict_transfer_ns(model: pd.DataFrame, bytes_) -> np.ndarray:
    """Predicted transfer time o + b/w per size under :func:`regime_lines`; NaN where w is not positive."""
    b = np.asarray(bytes_, dtype=float)
    o, w = regime_lines(model, b)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(w > 0, o + b / w, np.nan)


def best_bucket_bytes(model: pd.DataFrame, total_bytes: float) -> float:
    """The bucket size b minimising overhead = s·o/b + b/w (n_b = s/b equal buckets) with each regime's o
    and w over its own sizes: √(s·w·o) where that lies inside its regime, else the best regime edge."""
    if model is None or not len(model) or not np.isfinite(total_bytes) or total_bytes <= 0:
        return float("nan")
    start, o, w = _lines(model)
    end = np.r_[start[1:], np.inf]
    cands = []
    for a, z, oi, wi in zip(start, end, o, w, strict=True):
        if not (np.isfinite([oi, wi]).all() and wi > 0 and oi > 0):
            continue
        cands += [
            b
            for b in (optimal_bucket_bytes(oi, wi, total_bytes), a, z)
            if np.isfinite(b) and a <= b <= z and 0 < b <= total_bytes
        ]
    if not cands:
        return float("nan")
    k = np.clip(np.searchsorted(start, cands, side="right") - 1, 0, len(start) - 1)
    cost = total_bytes * o[k] / np.asarray(cands) + np.asarray(cands) / w[k]
    return float(cands[int(np.nanargmin(cost))])


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

    Returns the regime rows (SWEEP_FIT_COLUMNS, by size) of the collective type with the most points (the
    all-reduce), each with n_runs pooled, s = ``grad_bytes_per_step`` (median over the pooled runs of
    :func:`gradient_bytes_per_step`) and b* (:func:`best_bucket_bytes`) in bytes. Empty when no fit exists.
    The report's sweep page and the findings both call this, so they state the same lines and b*."""
    frames = [c for c in collectives_frames if c is not None and len(c) and c["bytes"].notna().any()]
    if not frames:
        return pd.DataFrame(columns=SWEEP_FIT_COLUMNS)
    cm = cost_model(pd.concat(frames, ignore_index=True), [], min_sizes)
    if not len(cm):
        return pd.DataFrame(columns=SWEEP_FIT_COLUMNS)
    top = cm.groupby("collective")["n_points"].sum().sort_values(kind="stable").index[-1]
    rows = cm.loc[cm["collective"] == top].sort_values("min_bytes", kind="stable").reset_index(drop=True)
    s = float(np.nanmedian([gradient_bytes_per_step(c) for c in frames]))
    rows["n_runs"] = len(frames)
    rows["grad_bytes_per_step"] = s
    rows["b_star_bytes"] = best_bucket_bytes(rows, s)
    return rows[SWEEP_FIT_COLUMNS]


def fit_params(fit: pd.DataFrame, nbytes: float | None = None) -> tuple[float, float, float]:
    """(o_ns, w_bytes_per_ns, r2) of the :func:`sweep_fit` regime holding ``nbytes`` (default: the regime
    with the largest sizes, the one buckets live in); NaNs when there is no usable fit."""
    if fit is None or not len(fit):
        return float("nan"), float("nan"), float("nan")
    start, _, _ = _lines(fit)
    rows = fit.sort_values("min_bytes", kind="stable").reset_index(drop=True)
    k = (
        len(rows) - 1
        if nbytes is None
        else int(np.clip(np.searchsorted(start, nbytes, side="right") - 1, 0, len(rows) - 1))
    )
    row = rows.iloc[k]
    o, w, r2 = float(row["o_us"]) * 1e3, float(row["w_gb_per_s"]), float(row["r2"])
    return (o, w, r2) if np.isfinite([o, w]).all() and w > 0 else (float("nan"), float("nan"), r2)


def sweep_prediction(fit: pd.DataFrame, total_bytes: float, bucket_counts) -> np.ndarray:
    """overhead(n_b) = n_b·o + s/(n_b·w) in ns for each bucket count, o and w from the :func:`sweep_fit`
    regime of the mean bucket s/n_b.

    The equal-bucket idealisation behind b* (module docstring), not a prediction of the measured tail (see
    :func:`queue_tail`). ``bucket_counts`` should be the counts the runs really had (the harness's
    ``bucket_count``). NaN where the fit or a count is missing."""
    out = []
    for n in bucket_counts:
        n = float(n) if n is not None else float("nan")
        ok = np.isfinite([n, total_bytes]).all() and n > 0
        o, w, _ = fit_params(fit, total_bytes / n) if ok else (float("nan"),) * 3
        ok = ok and np.isfinite([o, w]).all()
        out.append(predict_overhead(o, w, total_bytes, n) if ok else float("nan"))
    return np.asarray(out, dtype=float)


# ---- the measured-ready-time tail model ---------------------------------------------------------------------


def grad_ready_ns(collectives: pd.DataFrame, kernels: pd.DataFrame) -> np.ndarray:
    """Per collectives row: the GPU time its input was ready, float ns (NaN where unknown).

    That is the latest GPU end of the non-NCCL kernels its process launched on that device before the
    collective's own launch: PyTorch makes the NCCL stream wait for the work queued on the current stream
    at launch (the bucket's gradient copies and pre-division). Kernels are matched to rows by (pid, device,
    stream, start_ns); rows without a launch time, or with no earlier kernel, stay NaN."""
    out = np.full(len(collectives), np.nan)
    if not len(collectives) or kernels is None or not len(kernels) or "launch_ns" not in kernels:
        return out
    keys = ["pid", "device", "stream", "start_ns"]
    # Whole-frame columns as numpy once (no object or per-group copies of a million-row frame): the
    # (pid, device) groups the collectives need are then found with boolean masks, a few passes in all.
    launch_col = kernels["launch_ns"]
    if not pd.api.types.is_numeric_dtype(launch_col.dtype):
        launch_col = pd.to_numeric(launch_col, errors="coerce")
    has_launch = launch_col.notna().to_numpy()
    launch = launch_col.to_numpy(dtype=float, na_value=np.nan)
    is_nccl = _equals(kernels["kind"], "nccl")
    sel = np.flatnonzero(is_nccl & has_launch)
    nccl = kernels.iloc[sel][keys].astype("int64").assign(_launch=launch[sel])
    c = collectives[keys].astype("int64").reset_index(drop=True).assign(_row=np.arange(len(collectives)))
    c = c.merge(nccl.drop_duplicates(keys), on=keys, how="inner")
    if not len(c):
        return out
    other = ~is_nccl & has_launch
    kpid, kdev = _numbers(kernels["pid"]), _numbers(kernels["device"])
    end = _numbers(kernels["end_ns"])
    cpid, cdev = c["pid"].to_numpy(), c["device"].to_numpy()
    for pid, dev in dict.fromkeys(zip(cpid.tolist(), cdev.tolist(), strict=True)):
        idx = np.flatnonzero(other & (kpid == pid) & (kdev == dev))  # this process's kernels, frame order
        if not len(idx):
            continue
        mine = (cpid == pid) & (cdev == dev)
        lk = launch[idx]
        order = np.argsort(lk, kind="stable")
        lk = lk[order]
        ends = np.maximum.accumulate(end[idx][order].astype(float))
        j = (
            np.searchsorted(lk, c["_launch"].to_numpy(dtype=float)[mine], side="left") - 1
        )  # launched strictly before
        out[c["_row"].to_numpy()[mine]] = np.where(j >= 0, ends[np.maximum(j, 0)], np.nan)
    return out


def _equals(col: pd.Series, value: str) -> np.ndarray:
    """``col == value`` as a bool array (missing -> False); a categorical compares its categories once."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        hit = np.append(np.asarray(col.cat.categories, dtype=object) == value, False)
        return hit[col.cat.codes.to_numpy()]
    return col.astype("object").eq(value).to_numpy(dtype=bool)


def _numbers(col: pd.Series) -> np.ndarray:
    """A numeric column as numpy (missing -> NaN, which equals nothing)."""
    if isinstance(col.dtype, np.dtype) and col.dtype.kind in "iuf":
        return col.to_numpy()
    return pd.to_numeric(col, errors="coerce").to_numpy(dtype=float, na_value=np.nan)


def queue_tail(
    collectives: pd.DataFrame, ready_ns: np.ndarray, steps: pd.DataFrame, model: pd.DataFrame
) -> pd.DataFrame:
    """Predicted tail per (rank, step): the collectives of each step replayed through their NCCL stream
    (module docstring), each taking :func:`predict_transfer_ns` of its size under ``model``. Columns rank,
    step, predicted_tail_ns, comm_tail_ns (measured, from ``steps``). A step whose collectives lack a size
    or a ready time gets NaN. Needs ready times set by compute, not by earlier collectives: true of
    bucketed and overlap runs, not of naive (its per-tensor work waits for each all-reduce)."""
    cols = ["rank", "step", "predicted_tail_ns", "comm_tail_ns"]
    if steps is None or not len(steps) or collectives is None or not len(collectives):
        return pd.DataFrame(columns=cols)
    c = collectives.assign(_ready=np.asarray(ready_ns, dtype=float)).loc[collectives["step"].notna()]
    # One queue per communicator: a process's NCCL streams numbered by first use, as in the collective table,
    # so (comm, seq) names the same operation on every rank.
    first = c.groupby(["pid", "device", "stream"])["start_ns"].transform("min")
    c = c.assign(
        _comm=c.assign(_f=first).groupby(["pid", "device"])["_f"].rank(method="dense"),
        _t=predict_transfer_ns(model, c["bytes"].to_numpy(dtype=float, na_value=np.nan)),
    )
    ops = c.groupby(["_comm", "seq"]).agg(
        step=("step", "min"),
        ready=("_ready", "max"),
        t=("_t", "max"),
        n=("_ready", "size"),
        n_ready=("_ready", "count"),
    )
    ops["ok"] = (ops["n"] == ops["n_ready"]) & ops["t"].notna()
    last: dict = {}
    for (_, step), g in ops.reset_index().sort_values(["_comm", "seq"]).groupby(["_comm", "step"]):
        if not g["ok"].all():
            last[int(step)] = np.nan
            continue
        # end_i = max(ready_i, end_{i-1}) + t_i  ⇔  end_i = T_i + max_{j≤i}(ready_j − T_{j−1}), T = cumsum(t)
        t = g["t"].to_numpy(dtype=float)
        cum = np.cumsum(t)
        end = cum + np.maximum.accumulate(g["ready"].to_numpy(dtype=float) - (cum - t))
        last[int(step)] = max(last.get(int(step), -np.inf), float(end[-1]))
    s = steps[["rank", "step", "backward_end_ns", "comm_tail_ns"]].reset_index(drop=True)
    end_last = pd.Series(
        [last.get(int(k), np.nan) if pd.notna(k) else np.nan for k in s["step"]], dtype=float
    )
    bwd = pd.to_numeric(s["backward_end_ns"], errors="coerce").astype(float)
    s["predicted_tail_ns"] = np.maximum(end_last - bwd, 0.0).where(end_last.notna() & bwd.notna())
    return s[cols]


def predicted_tail_ns(
    collectives: pd.DataFrame, kernels: pd.DataFrame, steps: pd.DataFrame, model: pd.DataFrame
) -> float:
    """Median over (rank, step) of :func:`queue_tail` under ``model`` (e.g. a :func:`sweep_fit`); NaN if none."""
    if model is None or not len(model) or collectives is None or not len(collectives):
        return float("nan")
    q = queue_tail(collectives, grad_ready_ns(collectives, kernels), steps, model)
    v = q["predicted_tail_ns"].astype(float) if len(q) else pd.Series(dtype=float)
    return float(v.median()) if v.notna().any() else float("nan")
