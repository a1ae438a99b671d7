"""From one trace, the data-parallel configuration to try next and its predicted step time.

Two levers are read off the trace (issue "beat PyTorch DDP": the tool recommends, the harness confirms):

**Bucket cap** (modelled). For each candidate cap the run's own buckets are merged, in launch order within
a (rank, step), into buckets of at least that many bytes; a merged bucket is ready when its last member's
gradients were ready (:func:`ddp_profile.analysis.costmodel.grad_ready_ns`, measured in the trace) and
takes o + bytes/w under the run's α-β fit. Replaying them through the NCCL stream
(:func:`~ddp_profile.analysis.costmodel.queue_tail`) predicts the tail after backward. The predicted step
time is the measured one shifted by the change in predicted tail::

    predicted_step_ns(cap) = measured_step_ns + tail_pred(cap) − tail_pred(current buckets)

so the fit's bias at the current configuration cancels. Buckets can only be merged, not split (the trace
knows when each bucket was ready, not each tensor), so candidates are the current cap and larger ones.

**NCCL resources** (bounded, not modelled). Compute kernels that run beside NCCL kernels lose time
(:mod:`~ddp_profile.analysis.contention`): ``contention_ns`` = estimated loss / (ranks × steps), where each
kernel name's like-for-like slowdown (its kernels under NCCL against the same kernels alone) is applied to all
of its time under NCCL (``contention.estimated_loss_ns``; the like-for-like ``lost_ns`` alone is a lower bound,
as kernels that always run beside NCCL have no alone baseline). When that loss exceeds the exposed
communication per step, taking SMs from NCCL (fewer channels, high-priority NCCL streams) targets the larger
loss; the trace bounds the gain by ``contention_ns`` but does not predict it,
so ``predicted_step_ns`` of that row carries the bucket prediction only and ``upper_gain_ns`` the bound.
Fewer channels also slow the gradient collectives, which must still finish under the backward pass. The
trace gives the room for that (:func:`channel_room`)::

    room = median over (rank, step) of (backward_end − first gradient ready) / gradient NCCL busy time

and NCCL's channel count now, c (``gridX`` of its kernels, one CTA per channel, or the run's
``--nccl-channels``). The worst case is a collective slowing in proportion to the channels taken away
(bandwidth-bound per channel), so the recommendation keeps ``ceil(c / room)`` channels, the fewest whose
worst-case slowdown still fits under backward, and cuts none when that is not below c or c is unknown.
(In the committed campaigns, 2 of 24 channels slowed gradient NCCL time 3.2–5.9×, not 12×: the bound is
conservative.)
The step a given channel count would take is predicted from the trace by
:func:`ddp_profile.analysis.channel_model.channel_prediction` (slower collectives replayed through the NCCL
queue, less SM contention with compute); the findings' recommend → confirm compares it with measured runs.

Columns (``RECOMMEND_COLUMNS``), first row = the recommendation: lever, flags (harness options), cap_bytes,
predicted_tail_ns, predicted_step_ns, measured_step_ns, predicted_gain_ns, upper_gain_ns, basis, and the
configuration the flags set, as the harness's config fields (:data:`CONFIG_FIELDS`: strategy, bucket_mb,
nccl_channels, nccl_high_priority; bucket_mb NaN for a strategy without buckets, channels 0 / high priority
False = NCCL's defaults): the flags are written from these fields (:func:`flags_of`), so a run's config can
be matched on them.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ddp_profile import schema
from ddp_profile.analysis import costmodel
from ddp_profile.analysis.contention import contention_per_step_ns
from ddp_profile.fmt import fmt_ms

MIB = 1 << 20
CAP_FACTORS = (1, 2, 4, 8, 16, 40)
"""Candidate caps as multiples of the run's cap (capped at the whole gradient); 1 is the run itself."""
CONFIG_FIELDS = ("strategy", "bucket_mb", "nccl_channels", "nccl_high_priority")
MIN_GAIN = 0.001
"""A cap change is recommended only when it is predicted to save more than this share of the step."""
BUCKETED = ("bucketed", "torch_ddp")
OVERLAP_CAPS_MIB = (1, 5, 25, 100, 250, 1000)
"""Caps tried for a per-tensor (``overlap``) run: its per-tensor ready times allow any bucket size."""


def merge_buckets(
    collectives: pd.DataFrame, ready_ns: np.ndarray, cap_bytes: float
) -> tuple[pd.DataFrame, np.ndarray]:
    """The collectives of each (pid, device, stream, step) merged greedily in ``seq`` order into buckets of at
    least ``cap_bytes`` (the last may be smaller): bytes summed, ready = the latest member's ready time,
    seq/start of the first member. Rows without a step or size are dropped."""
    c = collectives.assign(_ready=np.asarray(ready_ns, dtype=float))
    c = c.loc[c["step"].notna() & c["bytes"].notna()].sort_values(["pid", "device", "stream", "step", "seq"])
    if not len(c):
        return c.drop(columns="_ready"), np.array([], dtype=float)
    keys = ["pid", "device", "stream", "step"]
    size = c["bytes"].to_numpy(dtype=float)
    group_id = c.groupby(keys, sort=False).ngroup().to_numpy()
    new_bucket = np.ones(len(c), dtype=bool)
    acc, prev = 0.0, -1
    for i in range(len(c)):  # one pass over the collectives (thousands per trace, not kernels)
        if group_id[i] != prev or acc >= cap_bytes:
            new_bucket[i], acc, prev = True, 0.0, group_id[i]
        else:
            new_bucket[i] = False
        acc += size[i]
    label = np.cumsum(new_bucket)
    merged = (
        c.assign(_b=label)
        .groupby("_b", sort=True)
        .agg(
            rank=("rank", "first"),
            pid=("pid", "first"),
            device=("device", "first"),
            stream=("stream", "first"),
            seq=("seq", "first"),
            step=("step", "first"),
            start_ns=("start_ns", "first"),
            bytes=("bytes", "sum"),
            _ready=("_ready", "max"),
            _n=("_ready", "size"),
            _known=("_ready", "count"),
        )
    )
    ready = merged["_ready"].where(merged["_n"] == merged["_known"]).to_numpy(dtype=float)
    return merged.drop(columns=["_ready", "_n", "_known"]).reset_index(drop=True), ready


def fields_of(strategy: str, cap_bytes: float | None = None) -> dict:
    """CONFIG_FIELDS of ``strategy`` with a cap of ``cap_bytes`` (None: no --bucket-mb) and NCCL's default
    resources. bucket_mb is the MiB value the flags print (``%g``), so flags and fields agree exactly."""
    return {
        "strategy": strategy,
        "bucket_mb": float(f"{cap_bytes / MIB:g}") if cap_bytes is not None else np.nan,
        "nccl_channels": 0,
        "nccl_high_priority": False,
    }


def flags_of(fields: dict) -> str:
    """The harness options that set ``fields`` (CONFIG_FIELDS): '--strategy torch_ddp --bucket-mb 100
    --nccl-channels 2 --nccl-high-priority'."""
    out = [f"--strategy {fields['strategy']}"]
    mb = fields.get("bucket_mb")
    if mb is not None and not pd.isna(mb):
        out.append(f"--bucket-mb {float(mb):g}")
    return " ".join(out + _nccl_flags(fields))


def _nccl_flags(fields: dict) -> list[str]:
    out = [f"--nccl-channels {int(fields['nccl_channels'])}"] if fields.get("nccl_channels") else []
    return out + (["--nccl-high-priority"] if fields.get("nccl_high_priority") else [])


def _tail(collectives, ready, steps, model) -> float:
    q = costmodel.queue_tail(collectives, ready, steps, model)
    v = q["predicted_tail_ns"].astype(float) if len(q) else pd.Series(dtype=float)
    return float(v.median()) if v.notna().any() else float("nan")


def comm_window(grad: pd.DataFrame, ready_ns: np.ndarray, steps: pd.DataFrame) -> pd.DataFrame:
    """Per (rank, step) with both known: ``comm`` (the gradient collectives' summed duration), ``window``
    (from the first one's ready time to the end of backward), ``transfer`` and ``wait`` (their summed
    transfer and wait time, where the collectives carry them) and ``bytes``; ns and bytes."""
    cols = ["comm", "window", "transfer", "wait", "bytes"]
    if "duration_ns" not in grad or not len(grad):
        return pd.DataFrame(columns=cols, dtype=float)
    n = len(grad)

    def col(name):
        return grad[name].to_numpy(dtype=float) if name in grad else np.full(n, np.nan)

    g = pd.DataFrame(
        {
            "rank": grad["rank"].to_numpy(),
            "step": grad["step"].to_numpy(),
            "d": col("duration_ns"),
            "ready": np.asarray(ready_ns, dtype=float),
            "t": col("transfer_ns"),
            "w": col("wait_ns"),
            "b": col("bytes"),
        }
    )
    g = g.loc[g["step"].notna()]
    per = g.groupby(["rank", "step"]).agg(
        comm=("d", "sum"),
        first=("ready", "min"),
        transfer=("t", "sum"),
        wait=("w", "sum"),
        bytes=("b", "sum"),
    )
    bend = steps.set_index(["rank", "step"])["backward_end_ns"].astype(float)
    out = per.assign(window=bend.reindex(per.index).to_numpy() - per["first"].to_numpy())[cols]
    return out.loc[np.isfinite(out["window"].to_numpy()) & (out["comm"].to_numpy() > 0)].reset_index(
        drop=True
    )


def channel_room(grad: pd.DataFrame, ready_ns: np.ndarray, steps: pd.DataFrame) -> float:
    """How many times longer the gradient collectives could take and still end by the end of backward: per
    (rank, step), (backward_end_ns − the first gradient collective's ready time) / the collectives' summed
    duration, median over (rank, step); NaN when unknown."""
    per = comm_window(grad, ready_ns, steps)
    return float(np.median(per["window"] / per["comm"])) if len(per) else float("nan")


def channels_to_keep(now: int | None, room: float) -> int | None:
    """``ceil(now / room)``: the fewest channels whose worst-case slowdown (in proportion to the channels
    taken away) fits in ``room``; None when no channel can go (unknown count or room, or no fewer fits)."""
    if not now or not np.isfinite(room) or room <= 1.0:
        return None
    keep = max(1, math.ceil(now / room))
    return keep if keep < now else None


def _channel_reason(now: int | None, room: float, keep: int | None) -> str:
    if not now:
        return "; NCCL's channel count is not in the trace (no NCCL kernel grid), so none can be chosen"
    if not np.isfinite(room):
        return "; the trace does not show when gradients were ready, so the room under backward is unknown"
    if not keep:
        return (
            f"; gradient NCCL time could grow only {room:.2f}× and still end under backward: none of NCCL's "
            f"{now} channels can go"
        )
    return (
        f"; gradient NCCL time could grow {room:.2f}× and still end under backward: {keep} of NCCL's {now} "
        f"channels is the fewest whose worst-case slowdown ({now}/{keep} = {now / keep:.2f}×) fits"
    )


def needs_ready_times(run: dict | None) -> bool:
    """Whether :func:`recommend` replays gradient-ready times for this run (its strategy's buckets)."""
    cfg = (run or {}).get("config") or {}
    return str(cfg.get("strategy") or (run or {}).get("strategy") or "") in (*BUCKETED, "overlap")


def recommend(
    analysis,
    kernels: pd.DataFrame | None,
    run: dict | None = None,
    ready_ns=None,
    nccl_channels: int | None = None,
) -> pd.DataFrame:
    """RECOMMEND_COLUMNS for one analysed run (module docstring); empty when the run has no sized gradient
    collectives or no backward phase to measure a tail against. ``run``: the harness run record, for the
    strategy and its current flags. ``ready_ns``: ``costmodel.grad_ready_ns`` of every row of
    ``analysis.collectives`` when already computed (per rank, by ``analysis.pipeline``); then ``kernels`` is
    not used. ``nccl_channels``: NCCL's channel count as the trace shows it (``Trace.meta``), for the
    channel lever when the run record does not set one."""
    steps, coll, model = analysis.steps, analysis.collectives, analysis.cost_model
    cols = schema.RECOMMEND_COLUMNS
    if steps is None or not len(steps) or coll is None or not len(coll) or model is None or not len(model):
        return schema.empty_frame(cols)
    is_grad = coll["collective"].astype("object").isin(["AllReduce", "ReduceScatter"]).to_numpy()
    grad = coll.loc[is_grad]
    sized = grad.loc[grad["bytes"].notna() & grad["step"].notna()]
    if not len(sized) or "backward_end_ns" not in steps or steps["backward_end_ns"].isna().all():
        return schema.empty_frame(cols)
    model = model.loc[model["collective"].astype("object").isin(["AllReduce", "ReduceScatter"])]
    measured = float(steps["step_ns"].median())
    per_step = sized.groupby(["rank", "step"])["bytes"]
    total, current = float(per_step.sum().median()), float(sized["bytes"].median())
    cfg = (run or {}).get("config") or {}
    strategy = str(cfg.get("strategy") or (run or {}).get("strategy") or "")
    if strategy not in (*BUCKETED, "overlap"):
        # naive's ready times are set by its own earlier all-reduces and flat has one collective per step:
        # neither tells when buckets of another size would have been ready. Unknown strategies likewise.
        return schema.empty_frame(cols)
    # Measured only now: the ready times cost a pass over every kernel and serve only the replay below.
    ready = (
        costmodel.grad_ready_ns(grad, kernels) if ready_ns is None else np.asarray(ready_ns, float)[is_grad]
    )
    base_tail = _tail(grad, ready, steps, model)
    if strategy == "overlap":  # one all-reduce per tensor: bucketing it is what `bucketed` does
        cap_now, now, strategy = current, fields_of("overlap"), "bucketed"
    else:
        cap_now = float(cfg.get("bucket_mb") or current / MIB) * MIB
        now = fields_of(strategy, cap_now)
    basis = "queue replay of measured gradient-ready times, buckets merged to the cap, the run's own alpha-beta fit"
    rows = [
        {
            "lever": "current",
            "flags": flags_of(now),
            "cap_bytes": cap_now,
            "predicted_tail_ns": base_tail,
            "predicted_step_ns": measured,
            "measured_step_ns": measured,
            "predicted_gain_ns": 0.0,
            "upper_gain_ns": np.nan,
            "basis": "the run as measured",
            **now,
        }
    ]
    caps = {round(min(cap_now * f, total)) for f in CAP_FACTORS[1:]}
    if now["strategy"] == "overlap":
        caps = {round(min(mib * MIB, total)) for mib in OVERLAP_CAPS_MIB}
    for cap in sorted(caps - {round(cap_now)}):
        merged, mready = merge_buckets(grad, ready, cap)
        tail = _tail(merged, mready, steps, model)
        pred = measured + tail - base_tail if np.isfinite([tail, base_tail]).all() else float("nan")
        fields = fields_of(strategy, cap)
        rows.append(
            {
                "lever": "bucket cap",
                "flags": flags_of(fields),
                "cap_bytes": cap,
                **fields,
                "predicted_tail_ns": tail,
                "predicted_step_ns": pred,
                "measured_step_ns": measured,
                "predicted_gain_ns": measured - pred,
                "upper_gain_ns": np.nan,
                "basis": basis,
            }
        )
    table = pd.DataFrame(rows)
    gain = table["predicted_gain_ns"]
    # A new cap only when the model predicts a gain beyond MIN_GAIN of the step; otherwise keep the cap.
    best = (
        table.loc[gain.idxmax()] if gain.notna().any() and gain.max() > MIN_GAIN * measured else table.iloc[0]
    )
    lost = contention_per_step_ns(analysis.contention, steps)
    exposed = float(steps["exposed_comm_ns"].median()) if "exposed_comm_ns" in steps else 0.0
    now_channels = int(cfg.get("nccl_channels") or 0) or nccl_channels
    room = channel_room(grad, ready, steps)
    keep = channels_to_keep(now_channels, room)
    use_channels = lost > exposed and keep is not None
    fields = {k: best[k] for k in CONFIG_FIELDS} | (
        {"nccl_channels": keep, "nccl_high_priority": True} if use_channels else {}
    )
    flags = flags_of(fields)
    basis = (
        f"bucket cap from the queue replay ({best['flags']}); compute lost to NCCL contention ({fmt_ms(lost)}/step, "
        "each kernel name's like-for-like slowdown over all its time under NCCL) "
        f"{'exceeds' if lost > exposed else 'does not exceed'} exposed communication ({fmt_ms(exposed)}/step)"
        + (_channel_reason(now_channels, room, keep) if lost > exposed else "")
        + f"; so NCCL channels are {f'cut to {keep}, with high-priority streams' if use_channels else 'left as they are'}"  # noqa: E501
    )
    head = (
        best.to_dict()
        | fields
        | {
            "lever": "recommended",
            "flags": flags,
            "basis": basis,
            "upper_gain_ns": (measured - best["predicted_step_ns"]) + lost if use_channels else np.nan,
        }
    )
    table = pd.concat([pd.DataFrame([head]), table], ignore_index=True)
    return schema.select(table, cols)
