"""Recommend → confirm: for every multi-GPU configuration of the committed bucket sweeps
(sets A and B of traces/) and of every campaign set, the step time `ddp-profile analyze --section
recommendation` predicts from the stock torch_ddp trace alone, against the step the configuration measured,
with the error per configuration and the ±5 % target.

What the stock trace predicts (:mod:`ddp_profile.analysis.recommend`): the step at each candidate bucket cap
at or above its own (buckets can be merged, not split), for the recommended row a range down to the bound on
compute lost to contention when it cuts NCCL channels, and for any other channel count at the stock cap the
channel prediction (:func:`ddp_profile.analysis.channel_model.channel_prediction`: the gradient collectives,
slower with fewer channels, replayed through the NCCL queue up to the optimizer's start, and the SM share NCCL
gives back to compute subtracted; the range reaches further down by the like-for-like contention estimate).
A configuration gets a prediction when a recommendation row names its bucket cap and NCCL channels/priority;
the bucket model replays buckets, not a strategy, so a ``bucketed`` run at a cap is compared with the stock
trace's prediction at that cap (the row at the stock cap then shows what the strategy change alone costs).
Every other configuration is listed with the reason it has none.

Measured: the un-profiled median where both the configuration and the stock run have one, the prediction then
moved by the stock run's own profiler overhead (predicted − stock profiled + stock un-profiled, so the model's
change is applied to the un-profiled step); the trace's profiled step otherwise (sets A and B of traces/ were
not timed without nsys). Error = (predicted − measured) / measured.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ddp_profile.findings.text import TOPIC_CONFIRM, Section, ms, pct, signed_pct_value
from ddp_profile.report import measures

TARGET_PCT = 5.0
"""The target for the prediction error (a requirement, not a measurement)."""
MIB = float(1 << 20)
LEVERS = (
    "shard_optimizer",
    "grad_views",
    "overlap_optimizer",
    "grad_reduce_dtype",
    "first_bucket_mb",
    "ddp_comm_hook",
    "nccl_min_ctas",
    "peer_copy_allreduce",
)
"""Harness levers no recommendation row sets: a configuration with one on has no prediction."""


def _row_for(rec: pd.DataFrame, r) -> tuple[pd.Series | None, str]:
    """(recommendation row predicting ``r``'s configuration, why none)."""
    c = r.config
    if r.strategy not in ("bucketed", "torch_ddp"):
        return None, f"strategy {r.strategy}: the bucket model predicts bucketed and torch_ddp only"
    on = [k for k in LEVERS if c.get(k)]
    if on:
        return None, f"lever {', '.join(on)} is not modelled"
    cap = float(c.get("bucket_mb") or 0) * MIB
    ch, hp = int(c.get("nccl_channels") or 0), bool(c.get("nccl_high_priority"))
    rows = (
        rec.loc[rec["lever"].astype(str) != "recommended"]
        if not ch and not hp
        else rec.loc[rec["lever"] == "recommended"]
    )
    for _, row in rows.iterrows():
        if (
            abs(float(row["cap_bytes"]) - cap) < 0.5
            and int(row.get("nccl_channels") or 0) == ch
            and bool(row.get("nccl_high_priority")) == hp
        ):
            return row, ""
    caps = rec["cap_bytes"].astype(float)
    if not len(caps):
        return None, "the stock trace gives no prediction"
    if cap < caps.min() - 0.5:
        return None, f"cap below the stock run's {caps.min() / MIB:g} MiB: buckets can be merged, not split"
    if ch or hp:
        return None, "NCCL channels/priority other than the recommended row's are not predicted"
    return None, "no candidate cap of the stock trace at this size"


def sm_count_of(trace) -> int | None:
    """SMs per GPU of a trace (its GPUs' ``sm_count``, the smallest where they differ); None when unknown."""
    gpus = getattr(trace, "gpus", None)
    if gpus is None or not len(gpus) or "sm_count" not in gpus:
        return None
    v = pd.to_numeric(gpus["sm_count"], errors="coerce").dropna()
    return int(v.min()) if len(v) and v.min() > 0 else None


def _channel_row(ref, r, why: str, rate: float | None) -> tuple[dict | None, str]:
    """For a run that differs from the stock run only in its NCCL channel count (high-priority streams or
    not): the channel prediction from the stock trace (:func:`channel_model.channel_prediction`, with the
    per-channel ``rate`` when given, else the worst case, and the stock GPUs' SM count) as a row like the
    recommendation table's; else (None, why)."""
    from ddp_profile.analysis.channel_model import channel_prediction

    c, rc = r.config, ref.config
    ch = int(c.get("nccl_channels") or 0)
    if not why.startswith("NCCL channels") or float(c.get("bucket_mb") or 0) != float(
        rc.get("bucket_mb") or 0
    ):
        return None, why
    if not ch:
        return None, "high-priority NCCL streams alone are not modelled"
    trace = getattr(ref, "trace", None)
    if trace is None:
        return None, "the stock run's trace is not loaded"
    got = channel_prediction(
        ref.analysis,
        trace.kernels,
        ref.meta,
        ch,
        nccl_channels=(getattr(trace, "meta", None) or {}).get("nccl_channels"),
        channel_bytes_per_s=rate,
        sm_count=sm_count_of(trace),
    )
    if not math.isfinite(got["predicted_step_ns"]):
        return None, "the stock trace lacks NCCL's channel count or gradient-ready times"
    beyond = got["predicted_step_ns"] - got["low_ns"]  # the contention estimate beyond the SM share, if any
    return {
        "predicted_step_ns": got["predicted_step_ns"],
        "upper_gain_ns": beyond if beyond > 0 else math.nan,
    }, ""


def channel_rates(runs) -> dict[int, tuple[str, int, float]]:
    """{id(run): (GPU name, world size, bus bytes/s per NCCL channel)} of the runs that set fewer NCCL channels
    than NCCL's choice (``--nccl-channels``: their channels, not the link, bound the collectives), from their
    traces."""
    from ddp_profile.analysis.channel_model import channel_rate

    out = {}
    for r in runs:
        if (
            int(r.config.get("nccl_channels") or 0)
            and r.analysis is not None
            and getattr(r, "trace", None) is not None
        ):
            rate = channel_rate(r.analysis, r.meta)
            if math.isfinite(rate):
                out[id(r)] = (str(r.meta.get("gpu_name")), int(r.world_size), rate)
    return out


def rate_for(r, rates: dict[int, tuple[str, int, float]]) -> float | None:
    """Leave-one-out calibration: the median per-channel rate of the other channel-limited runs on the same
    GPU model and as many GPUs (a channel's ring then spans the same peers), else on the same GPU model with
    any count; never ``r``'s own; None when there is none."""
    gpu = str(r.meta.get("gpu_name"))
    same_gpu = [(n, v) for k, (g, n, v) in rates.items() if k != id(r) and g == gpu]
    same_world = [v for n, v in same_gpu if n == int(r.world_size)]
    pick = same_world or [v for _, v in same_gpu]
    return float(np.median(pick)) if pick else None


def confirm_rows(ref, rs: list, rates: dict | None = None) -> list[dict]:
    """One dict per multi-GPU configuration of ``rs`` (the stock run ``ref`` included): predicted and
    measured step (ns), which measurement, the error (percent) or the reason there is none."""
    rec = getattr(ref.analysis, "recommendation", None)
    if rec is None or not len(rec):
        return []
    unprof = all(math.isfinite(measures.unprofiled_ns(r.meta)) for r in (ref, *rs))
    out = []
    for r in sorted(
        (r for r in rs if r.world_size > 1),
        key=lambda r: (r.strategy, float(r.config.get("bucket_mb") or 0), r.name),
    ):
        row, why = (
            (None, "the stock run itself (its prediction is its own measurement)")
            if r is ref
            else _row_for(rec, r)
        )
        item = {
            "run": r,
            "predicted_ns": math.nan,
            "low_ns": math.nan,
            "measured_ns": math.nan,
            "measure": "un-profiled median" if unprof else "profiled step (trace)",
            "error_pct": math.nan,
            "why": why,
            "model": ""
            if row is None
            else "recommended row (bucket model, contention range)"
            if row.get("lever") == "recommended"
            else "bucket model",
        }
        if row is None and r is not ref:
            rate = rate_for(r, rates or {})
            row, why = _channel_row(ref, r, why, rate)
            item["why"] = why
            if row is not None:
                item["model"] = "channel model, " + (
                    "per-channel rate of other runs" if rate else "worst case"
                )
        if row is not None:
            pred = float(row["predicted_step_ns"])
            upper = float(row["upper_gain_ns"]) if pd.notna(row.get("upper_gain_ns")) else math.nan
            shift = measures.unprofiled_ns(ref.meta) - ref.v("step_ns") if unprof else 0.0
            measured = measures.unprofiled_ns(r.meta) if unprof else r.v("step_ns")
            item.update(
                predicted_ns=pred + shift,
                low_ns=pred + shift - upper if math.isfinite(upper) else math.nan,
                measured_ns=measured,
                error_pct=100.0 * (pred + shift - measured) / measured,
            )
        out.append(item)
    return out


def q12_confirm(groups: list[tuple[str, Any, list]], page_for) -> Section:
    """``groups``: (title, stock torch_ddp run, the runs of that set) per set with a stock trace."""
    target = f"±{pct(TARGET_PCT, 0)}"
    s = Section("confirm", "Recommend → confirm: predictions from the stock trace against measured steps")
    s.p(
        f"For every multi-GPU configuration of a set, the step time the recommendation predicts from the set's "
        f"stock torch_ddp trace alone against the step it measured; the target is an error within {target}. "
        "Predictions exist for bucket caps at or above the stock cap (bucket model: the trace's "
        "gradient-ready times replayed through NCCL with merged buckets) and for the recommended NCCL channel row "
        "(its range reaches down by the bound on compute lost to contention). A bucketed run is compared with "
        "the prediction at its cap, so its error includes the difference between bucketed and torch_ddp. "
        "Configurations of other strategies or with levers the recommender does not set are named, not tabled."
    )
    rates = channel_rates([r for _, _, rs in groups for r in rs])
    if rates:
        s.p(
            "Channel counts other than NCCL's (analysis.channel_model): each gradient collective of the stock trace "
            "transfers for max(its stock time, bus bytes ÷ (channels × per-channel rate)); the collectives are "
            "replayed in order through the NCCL queue, each starting when the last rank's gradients are ready, "
            "and what ends after the optimizer's start in the stock trace is added to the step; compute under "
            "NCCL gets back the SMs the channels held (overlapped compute × channels ÷ SMs per GPU, before and "
            "after). The per-channel rate is the one input not from the stock trace: a hardware rate calibrated "
            "leave-one-out, the median of bus bytes ÷ (transfer time × channels) over the other runs with fewer "
            "channels on the same GPU model and as many GPUs (a channel's ring spans the same peers), else on the "
            f"same GPU model with any count ({len(rates)} such runs: "
            + ", ".join(f"{gpu} ×{n} {v / 1e9:.1f} GB/s" for gpu, n, v in rates.values())
            + "), never the run being predicted; with none, the worst case (transfer × stock channels ÷ "
            "channels) from the stock trace alone."
        )
    met_all, total, sets_met, sets_judged = [], 0, 0, 0
    worst_all: tuple[str, dict] | None = None  # (set title, row) of the largest error over every set
    for title, ref, rs in groups:
        rows = confirm_rows(ref, rs, rates)
        if not rows:
            s.p(f"{title}: the stock trace ({ref.name}) gives no recommendation table.")
            continue
        shown = [x for x in rows if x["run"] is not ref and not x["why"].startswith(("strategy ", "lever "))]
        table = []
        for x in shown:
            r, err = x["run"], x["error_pct"]
            table.append(
                {
                    "run": r.name,
                    "model": x["model"],
                    "predicted": ms(x["predicted_ns"])
                    + (f" (down to {ms(x['low_ns'])})" if math.isfinite(x["low_ns"]) else ""),
                    "measured": ms(x["measured_ns"]),
                    "error": signed_pct_value(err),
                    f"within {target}": "yes" if abs(err) <= TARGET_PCT else "no",
                    "report page": page_for(r),
                }
                if math.isfinite(err)
                else {
                    "run": r.name,
                    "model": "–",
                    "predicted": "–",
                    "measured": "–",
                    "error": "–",
                    f"within {target}": "no prediction: " + x["why"],
                    "report page": page_for(r),
                }
            )
        if table:
            s.table(
                pd.DataFrame(table),
                f"{title}: predicted from {ref.name} against the measured {rows[0]['measure']}",
            )
        judged = [x for x in rows if math.isfinite(x["error_pct"])]
        met = [x for x in judged if abs(x["error_pct"]) <= TARGET_PCT]
        total += len(judged)
        met_all += met
        others = [x["run"].name for x in rows if x not in shown and x["run"] is not ref]
        rest = f" Not predicted (other strategies or levers): {', '.join(others)}." if others else ""
        if judged:
            worst = max(judged, key=lambda x: abs(x["error_pct"]))
            s.p(
                f"{title}: {len(met)} of {len(judged)} predicted configurations within {target} (largest error "
                f"{signed_pct_value(worst['error_pct'])}, {worst['run'].name}).{rest}"
            )
            sets_judged += 1
            sets_met += len(met) == len(judged)
            if worst_all is None or abs(worst["error_pct"]) > abs(worst_all[1]["error_pct"]):
                worst_all = (title, worst)
        else:
            s.p(f"{title}: no configuration besides the stock run has a prediction from its trace.{rest}")
    if total:
        s.p(f"In all, {len(met_all)} of {total} predictions lie within {target} of the measured step.")
    if worst_all is not None:
        s.add_summary(
            TOPIC_CONFIRM,
            met=len(met_all),
            total=total,
            target=target,
            sets_met=sets_met,
            sets=sets_judged,
            worst_set=worst_all[0],
            worst_run=worst_all[1]["run"].name,
            worst_error=signed_pct_value(worst_all[1]["error_pct"]),
        )
    return s
