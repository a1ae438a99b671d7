"""The step with another NCCL channel count, predicted from one trace (recommend → confirm).

NCCL runs one CTA per channel, each resident on one SM for the whole kernel, waiting or moving data. Taking
channels away does two things the trace can price:

**Slower collectives, replayed through the NCCL queue.** Each gradient collective's transfer time (its wait
for late peers excluded) becomes ``t' = max(t, bus_bytes / (channels · rate))``, where ``bus_bytes`` is what
the collective moves per rank (NCCL's bus-bandwidth convention: 2(n−1)/n of the buffer for an all-reduce,
(n−1)/n for a reduce-scatter) and ``rate`` is bytes/s one channel moves (:func:`channel_rate`; without one, the
worst case ``t · c / channels``, bandwidth-bound per channel). The collectives of a step are then replayed in
order through their stream, a first-in-first-out queue, as :func:`~ddp_profile.analysis.costmodel.queue_tail`
does, each starting when the last rank's gradients are ready and the previous one has ended::

    end_i = max(ready_i, end_{i−1}) + t_i          ready_i = max over ranks of the gradient-ready time

so a rank's lead (the stock trace's wait) is absorbed by a queue that is busy anyway instead of being added
to a slower transfer. The replay runs twice, with the stock times t and with t', and only the difference
counts, so the replay's own bias cancels.

**Less contention with compute.** While a c-channel NCCL kernel runs beside compute, compute kernels have
S − c of the GPU's S SMs (S: ``sm_count`` of the trace's GPUs), so overlapped compute loses c/S of its time.
The trace gives the compute time under NCCL per (rank, step), ``overlap_ns``; with other channels it lasts as
long as the replayed collectives stay under backward::

    overlap' = overlap · min(span', window) / min(span, window)
    recovered = (overlap · c − overlap' · channels) / S
    span = end_last − first ready (replay),  window = backward_end − first ready

This is the SM share only, a first-order estimate: wave quantisation (a grid of one CTA per SM needs a second
wave when channels hold SMs, whatever their number) and memory-bandwidth contention come on top. On
traces/campaign/A (2 × H200, fp32) it credits about half of the compute time the 2-channel run recovered.

**Step.** Backward ends ``recovered`` earlier; the optimizer, the first work that waits for the gradient
collectives, starts at X (its GPU start in the trace; backward's end when the trace has no optimizer phase),
and the work between backward's end and X (in the committed torch_ddp traces, some hundred small
device-to-device copies the host launches after backward) hides a collective ending before it::

    extra = max(X − recovered, end'_last) − max(X, end_last)            per (rank, step)
    predicted_step_ns = median step_ns + median extra

``low_ns`` reaches further down by the like-for-like contention estimate
(:func:`~ddp_profile.analysis.contention.contention_per_step_ns`) beyond what the SM share recovered.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddp_profile.analysis import costmodel
from ddp_profile.analysis.contention import contention_per_step_ns

GRADIENT = ("AllReduce", "ReduceScatter")
RESULT_KEYS = ("predicted_step_ns", "low_ns", "extra_ns", "recovered_ns", "channels_now")


def bus_factor(collective: str, n: int) -> float:
    """Bytes a rank moves per byte of the buffer (NCCL's bus-bandwidth factor): 2(n−1)/n for AllReduce,
    (n−1)/n for ReduceScatter and AllGather, 1 otherwise or for one rank."""
    if n < 2:
        return 1.0
    if collective == "AllReduce":
        return 2.0 * (n - 1) / n
    return (n - 1) / n if collective in ("ReduceScatter", "AllGather") else 1.0


def _world(analysis, run: dict | None) -> int:
    n = int((run or {}).get("world_size") or 0)
    return n or int(analysis.steps["rank"].nunique())


def _bus_bytes(grad: pd.DataFrame, n: int) -> np.ndarray:
    f = grad["collective"].astype("object").map(lambda c: bus_factor(str(c), n)).to_numpy(dtype=float)
    return grad["bytes"].to_numpy(dtype=float, na_value=np.nan) * f


def channels_now(run: dict | None, nccl_channels: int | None) -> int | None:
    """The run's channel count: its ``--nccl-channels``, else NCCL's as the trace shows it (kernel grid)."""
    cfg = (run or {}).get("config") or {}
    return int(cfg.get("nccl_channels") or 0) or nccl_channels or None


def channel_rate(analysis, run: dict | None, nccl_channels: int | None = None) -> float:
    """Bus bytes per second one NCCL channel moved in a run's gradient collectives: median over (rank, step)
    of bus bytes / (transfer time · channels). Meaningful for a run whose channels, not the link, bound its
    collectives (a run with few channels calibrates :func:`channel_prediction` for others on the same GPU
    model); NaN when unknown."""
    coll = analysis.collectives
    now = channels_now(run, nccl_channels)
    if coll is None or not len(coll) or not now or "transfer_ns" not in coll:
        return float("nan")
    g = coll.loc[coll["collective"].astype("object").isin(GRADIENT) & coll["step"].notna()]
    g = g.assign(_bus=_bus_bytes(g, _world(analysis, run)))
    per = g.groupby(["rank", "step"]).agg(t=("transfer_ns", "sum"), b=("_bus", "sum"))
    per = per.loc[(per["t"] > 0) & (per["b"] > 0)]
    return float(np.median(per["b"] / (per["t"] * 1e-9 * now))) if len(per) else float("nan")


def _transfer_ns(grad: pd.DataFrame) -> np.ndarray:
    """Each collective's transfer time: ``transfer_ns`` (its wait for late peers excluded), the whole duration
    where the trace has no split."""
    d = grad["duration_ns"].to_numpy(dtype=float, na_value=np.nan)
    if "transfer_ns" not in grad:
        return d
    t = grad["transfer_ns"].to_numpy(dtype=float, na_value=np.nan)
    return np.where(np.isfinite(t), t, d)


def _ops(grad: pd.DataFrame, ready: np.ndarray, t: np.ndarray, slower: np.ndarray) -> pd.DataFrame:
    """One row per collective operation (one queue per communicator, as in ``costmodel.queue_tail``): comm,
    seq, step, ready (latest over ranks), t and t2 (slowest rank, stock and slower), ok (all known)."""
    first = grad.groupby(["pid", "device", "stream"])["start_ns"].transform("min")
    comm = grad.assign(_f=first).groupby(["pid", "device"])["_f"].rank(method="dense")
    c = pd.DataFrame(
        {
            "comm": comm.to_numpy(),
            "seq": grad["seq"].to_numpy(),
            "step": grad["step"].to_numpy(),
            "ready": ready,
            "t": t,
            "t2": slower,
        }
    )
    ops = c.groupby(["comm", "seq"]).agg(
        step=("step", "min"),
        ready=("ready", "max"),
        t=("t", "max"),
        t2=("t2", "max"),
        n=("ready", "size"),
        known=("ready", "count"),
        t_known=("t2", "count"),
    )
    ops["ok"] = (ops["n"] == ops["known"]) & (ops["n"] == ops["t_known"])
    return ops.reset_index().sort_values(["comm", "step", "seq"])


def _replay(ops: pd.DataFrame) -> pd.DataFrame:
    """Per step: first (earliest ready), end and end2 (the last collective's end with t and with t2, latest
    over communicators); a step with an operation of unknown size, time or ready time is left out."""
    rows = []
    for (_, step), g in ops.groupby(["comm", "step"], sort=True):
        if not g["ok"].all():
            rows.append({"step": step, "first": np.nan, "end": np.nan, "end2": np.nan})
            continue
        ready = g["ready"].to_numpy(dtype=float)
        ends = []
        for col in ("t", "t2"):
            # end_i = max(ready_i, end_{i−1}) + t_i  ⇔  end_i = T_i + max_{j≤i}(ready_j − T_{j−1}), T = cumsum(t)
            t = g[col].to_numpy(dtype=float)
            cum = np.cumsum(t)
            ends.append(float(cum[-1] + np.max(ready - (cum - t))))
        rows.append({"step": step, "first": float(ready.min()), "end": ends[0], "end2": ends[1]})
    per = pd.DataFrame(rows, columns=["step", "first", "end", "end2"])
    # a step with one unknown operation is unknown (max would skip the NaN)
    return (
        per.groupby("step")
        .agg(
            first=("first", "min"),
            end=("end", "max"),
            end2=("end2", "max"),
            n=("end", "size"),
            known=("end", "count"),
        )
        .query("n == known")[["first", "end", "end2"]]
        .reset_index()
    )


def _optimizer_start(analysis) -> pd.Series:
    ph = getattr(analysis, "phases", None)
    if ph is None or not len(ph):
        return pd.Series(dtype=float)
    o = ph.loc[ph["phase"].astype("object") == "optimizer"]
    return o.groupby(["rank", "step"])["start_ns"].min().astype(float)


def channel_prediction(
    analysis,
    kernels: pd.DataFrame | None,
    run: dict | None,
    channels: int,
    nccl_channels: int | None = None,
    ready_ns=None,
    channel_bytes_per_s: float | None = None,
    sm_count: int | None = None,
) -> dict:
    """RESULT_KEYS for the step with ``channels`` NCCL channels instead of the run's (module docstring).
    ``ready_ns``: ``costmodel.grad_ready_ns`` of every row of ``analysis.collectives`` when already computed
    (else from ``kernels``); ``channel_bytes_per_s``: bus bytes/s per channel (None: the worst case);
    ``sm_count``: SMs per GPU (None: no contention term). NaN where the trace lacks what it needs."""
    nan = dict.fromkeys(RESULT_KEYS, np.nan) | {"channels_now": None}
    steps, coll = analysis.steps, analysis.collectives
    if (
        steps is None
        or not len(steps)
        or coll is None
        or not len(coll)
        or "backward_end_ns" not in steps
        or channels < 1
    ):
        return nan
    now = channels_now(run, nccl_channels)
    if not now:
        return nan
    nan["channels_now"] = now
    is_grad = coll["collective"].astype("object").isin(GRADIENT).to_numpy()
    grad = coll.loc[is_grad & coll["step"].notna().to_numpy()]
    if not len(grad) or (ready_ns is None and kernels is None):
        return nan
    keep = is_grad & coll["step"].notna().to_numpy()
    ready = costmodel.grad_ready_ns(grad, kernels) if ready_ns is None else np.asarray(ready_ns, float)[keep]
    t = _transfer_ns(grad)
    if channel_bytes_per_s:
        slower = np.maximum(
            t, _bus_bytes(grad, _world(analysis, run)) / (channels * channel_bytes_per_s) * 1e9
        )
    else:
        slower = t * now / channels
    per = _replay(_ops(grad, ready, t, slower)).dropna()
    if not len(per):
        return nan
    s = steps.merge(per, on="step", how="inner")
    bend = s["backward_end_ns"].to_numpy(dtype=float)
    opt = _optimizer_start(analysis).reindex(pd.MultiIndex.from_frame(s[["rank", "step"]])).to_numpy()
    x = np.where(np.isfinite(opt) & (opt >= bend), opt, bend)
    recovered = np.zeros(len(s))
    if sm_count and "overlap_ns" in s:
        window = bend - s["first"].to_numpy()
        span, span2 = (
            s["end"].to_numpy() - s["first"].to_numpy(),
            s["end2"].to_numpy() - s["first"].to_numpy(),
        )
        ov = s["overlap_ns"].to_numpy(dtype=float)
        ov2 = ov * np.minimum(span2, window) / np.maximum(np.minimum(span, window), 1.0)
        recovered = (ov * now - ov2 * channels) / float(sm_count)
    extra = np.maximum(x - recovered, s["end2"].to_numpy()) - np.maximum(x, s["end"].to_numpy())
    ok = np.isfinite(extra)
    if not ok.any():
        return nan
    e, rec = float(np.median(extra[ok])), float(np.median(recovered[ok]))
    pred = float(steps["step_ns"].median()) + e
    beyond = max(0.0, contention_per_step_ns(analysis.contention, steps) - rec)
    return {
        "predicted_step_ns": pred,
        "low_ns": pred - beyond,
        "extra_ns": e,
        "recovered_ns": rec,
        "channels_now": now,
    }
