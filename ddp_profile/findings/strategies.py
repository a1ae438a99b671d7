"""Questions 1–4 (naive, flat, overlap, bucket sweep). Each function takes the run set and returns a
:class:`~ddp_profile.findings.text.Section`; all wording that states a direction is computed."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ddp_profile.analysis.costmodel import (
    fit_params,
    predict_transfer_ns,
    predicted_tail_ns,
    regime_lines,
    sweep_fit,
    sweep_prediction,
)
from ddp_profile.findings.data import grad_wait_phase
from ddp_profile.findings.text import Section, certainty, compare, mb, ms, num, pct, rel, spread


def step_row(r, page) -> dict:
    """The common table row: median step (min–max) and where the GPU time went."""
    lo, hi = r.spread["step_ns"]
    return {
        "run": r.label,
        "step, median": ms(r.v("step_ns")),
        "step min–max": spread(lo, hi),
        "compute": ms(r.v("compute_ns")),
        "NCCL kernels running": ms(r.v("comm_ns")),
        "exposed comm": ms(r.v("exposed_comm_ns")),
        "tail after backward": ms(r.v("comm_tail_ns")),
        "comm hidden": pct(r.v("overlap_pct")),
        "report page": page(r),
    }


def q1_naive(rs, page, machine) -> Section:
    s = Section("q1", "1. Naive DDP: time per step and the share spent communicating")
    n, none = rs.get("naive"), rs.get("none")
    if n is None:
        s.p("No naive run in set A: nothing to answer.")
        return s
    gw = grad_wait_phase(n.analysis)
    host_step = n.host["host_step_ns"][0]
    host_gw = n.host["grad_wait_ns"][0]
    s.p(
        f"Machine: {machine}. Runs: {n.name}" + (f" and the 1-GPU baseline {none.name}" if none else "") + "."
    )
    rows = [step_row(n, page)] + ([step_row(none, page)] if none else [])
    s.table(pd.DataFrame(rows), "Trace-measured step (medians over ranks × steps)")
    est = pd.DataFrame(
        [
            {
                "measure": "trace: NCCL kernel time per step (comm_ns)",
                "value": ms(n.v("comm_ns")),
                "share of step": pct(n.v("comm_pct")),
            },
            {
                "measure": "trace: exposed comm per step",
                "value": ms(n.v("exposed_comm_ns")),
                "share of step": pct(100 * n.v("exposed_comm_ns") / n.v("step_ns")),
            },
            {
                "measure": "host timer: grad_sync_wait NVTX range",
                "value": ms(host_gw),
                "share of step": pct(100 * host_gw / host_step),
            },
            {"measure": "host timer: whole step (harness)", "value": ms(host_step), "share of step": "–"},
            {
                "measure": "trace: GPU span of the kernels launched in grad_sync_wait",
                "value": ms(gw.get("gpu_span_ns")),
                "share of step": pct(100 * gw.get("gpu_span_ns", math.nan) / n.v("step_ns")),
            },
        ]
    )
    s.table(est, "Communication share: trace vs host timer")
    words = compare(host_gw, n.v("comm_ns"), "lower", "higher", "equal to")
    lag_end = gw.get("end_lag_ns", math.nan)
    ends = "before" if lag_end > 0 else "after"
    s.p(
        f"Naive DDP on XL fp32 takes {ms(n.v('step_ns'))} per step (min–max {spread(*n.spread['step_ns'])}); the "
        f"trace puts {ms(n.v('comm_ns'))} per step in NCCL all-reduce kernels ({pct(n.v('comm_pct'))} of the step), "
        f"{ms(n.v('exposed_comm_ns'))} of it exposed (overlap {pct(n.v('overlap_pct'))}): naive all-reduces "
        f"{n.collectives['n_per_step']:.0f} gradients one by one after backward, so nothing hides them."
        + (
            f" Against the 1-GPU run ({ms(none.v('step_ns'))}) the step is {ms(n.v('step_ns') - none.v('step_ns'))} "
            f"{compare(n.v('step_ns'), none.v('step_ns'), 'shorter', 'longer', 'no different')}; the "
            f"communication tail after backward is {ms(n.v('comm_tail_ns'))}."
            if none
            else ""
        )
    )
    s.p(
        f"The host timer around the harness's grad_sync_wait range reads {ms(host_gw)}, {words} than the trace's "
        f"NCCL time ({rel(host_gw, n.v('comm_ns'))} apart). They measure different things. On the host the range "
        f"starts when backward's kernels have been queued, not run: the GPU starts the first all-reduce "
        f"{ms(gw.get('start_lag_ns'))} later, and the range ends {ms(abs(lag_end))} {ends} the last all-reduce "
        f"finishes on the GPU. The host timer therefore times launching {n.collectives['n_per_step']:.0f} "
        f"asynchronous all-reduces (≈{num(host_gw / max(1, n.collectives['n_per_step']) / 1e3, 0)} µs each), not "
        f"the transfer; its closeness to the GPU figure is a coincidence of launch cost and message sizes. On the "
        f"GPU the all-reduces span {ms(gw.get('gpu_span_ns'))}, of which {ms(n.v('comm_ns'))} is kernel time and "
        f"the rest gaps between back-to-back small launches. Of the NCCL kernel time, "
        f"{pct(n.summary.get('wait_pct_of_comm'))} is waiting for the peer rank to arrive (counted as "
        f"communication by any timer) and the rest transfer. Only the whole-step host timer "
        f"({ms(host_step)}) is trustworthy, because the step ends with a synchronisation."
    )
    return s


def shared_fit(rs) -> pd.DataFrame:
    """The set's one α-β fit (:func:`~ddp_profile.analysis.costmodel.sweep_fit`): every multi-GPU run of the set
    whose collectives carry sizes, pooled, exactly as the report's sweep page pools them."""
    return sweep_fit([r.analysis.collectives for r in rs.values() if r.world_size > 1])


def size(nbytes: float) -> str:
    """Bytes as KiB below 1 MiB, else MiB (binary, as every page)."""
    return mb(nbytes) if not np.isfinite(nbytes) or nbytes >= 2**20 else f"{nbytes / 2**10:.1f} KiB"


def fit_members(rs) -> list:
    return [
        r
        for r in rs.values()
        if r.world_size > 1
        and r.analysis.collectives is not None
        and len(r.analysis.collectives)
        and r.analysis.collectives["bytes"].notna().any()
    ]


def fit_sentence(fit, rs) -> str:
    """ "t = o + bytes/w with o = … µs, w = … GB/s for … (median error …) from one fit over N all-reduce
    kernels of runs …" (or why there is none): every size regime of the shared fit, with its quality."""
    o, w, _ = fit_params(fit)
    if not np.isfinite([o, w]).all():
        return "no α-β fit (no collectives with at least 3 distinct sizes)"
    lines = "; ".join(
        f"o = {num(r.o_us, 1)} µs, w = {num(r.w_gb_per_s, 0)} GB/s for {size(float(r.min_bytes))} to "
        f"{size(float(r.max_bytes))} (median error {pct(r.median_rel_err_pct)}, 90th percentile "
        f"{pct(r.p90_rel_err_pct)})"
        for r in fit.itertuples()
    )
    row = fit.iloc[0]
    how = "one line" if len(fit) == 1 else f"{len(fit)} lines, one per message-size regime,"
    return (
        f"{lines}: {how} fitted in relative terms (robust weighted least squares) over "
        f"{int(fit['n_points'].sum())} all-reduce kernels of the {int(row['n_runs'])} runs whose collectives "
        f"carry sizes ({', '.join(r.label for r in fit_members(rs))}), the same fit as the report's "
        "bucket-sweep page"
    )


def transfer_per_step(r, fit) -> tuple[float, float, float]:
    """(predicted, of it the per-call overheads o, measured) Σ transfer time of a run's collectives per
    (rank, step), medians over the rows."""
    c = r.analysis.collectives
    c = c.loc[c["step"].notna() & c["bytes"].notna()] if c is not None and len(c) else None
    if c is None or not len(c):
        return math.nan, math.nan, math.nan
    b = c["bytes"].to_numpy(dtype=float, na_value=np.nan)
    g = c.assign(_p=predict_transfer_ns(fit, b), _o=regime_lines(fit, b)[0])
    g = g.groupby(["rank", "step"])[["_p", "_o", "transfer_ns"]].sum(min_count=1)
    return float(g["_p"].median()), float(g["_o"].median()), float(g["transfer_ns"].median())


def q2_flat(rs, page, machine, fit=None) -> Section:
    s = Section("q2", "2. Flat vs naive: one large all-reduce vs many small ones")
    n, f = rs.get("naive"), rs.get("flat")
    if n is None or f is None:
        s.p("Set A lacks a naive or flat run.")
        return s
    fit = shared_fit(rs) if fit is None else fit
    nb = n.collectives["n_per_step"]
    sbytes = n.collectives["bytes_per_step"]
    steps = n.analysis.steps
    copy_f = float(f.analysis.steps["copy_ns"].median()) if len(f.analysis.steps) else math.nan
    copy_n = float(steps["copy_ns"].median()) if len(steps) else math.nan
    s.p(f"Machine: {machine}. Runs: {n.name}, {f.name}.")
    t = pd.DataFrame(
        [
            dict(
                step_row(r, page),
                **{
                    "all-reduces/step": f"{r.collectives['n_per_step']:.0f}",
                    "copies (memcpy) per step": ms(float(r.analysis.steps["copy_ns"].median())),
                },
            )
            for r in (n, f)
        ]
    )
    s.table(t, "Naive vs flat (XL fp32)")
    pred_n, fixed_n, meas_n = transfer_per_step(
        n, fit
    )  # Σ fitted o + b/w over each call; Σ measured transfer
    pred_f, _, meas_f = transfer_per_step(f, fit)
    lo, hi = (float(fit["min_bytes"].min()), float(fit["max_bytes"].max())) if len(fit) else (math.nan,) * 2
    s.p(
        f"Flat is {compare(f.v('step_ns'), n.v('step_ns'))} than naive by {ms(abs(f.v('step_ns') - n.v('step_ns')))} "
        f"per step ({rel(f.v('step_ns'), n.v('step_ns'))}), {certainty(f.spread['step_ns'], n.spread['step_ns'])}. "
        f"Its NCCL time is {ms(f.v('comm_ns'))} against naive's {ms(n.v('comm_ns'))} "
        f"({compare(f.v('comm_ns'), n.v('comm_ns'), 'less', 'more', 'the same')}). The α-β model has "
        f"{fit_sentence(fit, rs)}. Summing its t over each run's calls per step, it predicts "
        f"{ms(pred_n)} of transfer for naive's {nb:.0f} calls ({ms(fixed_n)} of it fixed per-call overhead; "
        f"measured {ms(meas_n)} of transfer, {rel(pred_n, meas_n)} off) and {ms(pred_f)} for flat's one call "
        f"of {mb(sbytes)} (measured {ms(meas_f)}, {rel(pred_f, meas_f)} off). Measured transfer excludes the "
        f"time a rank waited for its peer inside the NCCL kernel. Fitted on relative errors, where a {size(lo)} "
        f"and a {size(hi)} message count alike, the model describes naive's many small calls "
        f"{'poorly' if abs(pred_n / meas_n - 1) > 0.1 else 'fairly well'} and flat's one large call "
        f"{'poorly' if abs(pred_f / meas_f - 1) > 0.1 else 'fairly well'} (10 % as the line between the two). "
        f"Flattening costs elsewhere: flat's compute kernels (which include "
        f"the copies into and out of the flat buffer) take {ms(f.v('compute_ns'))} per step, "
        f"{ms(abs(f.v('compute_ns') - n.v('compute_ns')))} {compare(f.v('compute_ns'), n.v('compute_ns'), 'less', 'more', 'no different')} "
        f"than naive's, and memcpy {ms(copy_f)} against {ms(copy_n)}. "
        f"Neither overlaps "
        f"(overlap {pct(f.v('overlap_pct'))} and {pct(n.v('overlap_pct'))}); both leave the whole transfer after "
        f"backward (tails {ms(f.v('comm_tail_ns'))} and {ms(n.v('comm_tail_ns'))})."
    )
    return s


def q3_overlap(rs, page, machine) -> Section:
    s = Section("q3", "3. Overlapping individual parameter all-reduces vs naive and flat")
    runs = [rs.get(k) for k in ("naive", "flat", "overlap")]
    if any(r is None for r in runs):
        s.p("Set A lacks one of naive, flat, overlap.")
        return s
    n, f, ov = runs
    s.p(f"Machine: {machine}. Runs: {n.name}, {f.name}, {ov.name}.")
    s.table(pd.DataFrame([step_row(r, page) for r in runs]), "Naive, flat and overlap (XL fp32)")
    s.p(
        f"Overlap launches each parameter's all-reduce from a gradient hook during backward: "
        f"{pct(ov.v('overlap_pct'))} of its NCCL time runs under compute kernels against {pct(n.v('overlap_pct'))} "
        f"for naive, its exposed communication is {ms(ov.v('exposed_comm_ns'))} against {ms(n.v('exposed_comm_ns'))} "
        f"(naive) and {ms(f.v('exposed_comm_ns'))} (flat), and the tail after backward shrinks to "
        f"{ms(ov.v('comm_tail_ns'))}. The step is {compare(ov.v('step_ns'), n.v('step_ns'))} than naive by "
        f"{ms(abs(ov.v('step_ns') - n.v('step_ns')))} and {compare(ov.v('step_ns'), f.v('step_ns'))} than flat by "
        f"{ms(abs(ov.v('step_ns') - f.v('step_ns')))}. The step gains less than the exposed communication it "
        f"removed ({ms(n.v('exposed_comm_ns') - ov.v('exposed_comm_ns'))}) because its compute kernels take "
        f"{ms(ov.v('compute_ns'))} per step against naive's {ms(n.v('compute_ns'))}: NCCL shares the GPU "
        f"(question 6), and its NCCL kernels stay resident longer ({ms(ov.v('comm_ns'))} of kernel time; "
        f"{pct(ov.summary.get('wait_pct_of_comm'))} of it waiting for the peer)."
    )
    s.fig(
        "timeline",
        "Does it overlap? Rank 0, the middle profiled step of naive and overlap, aligned at step "
        "start on one time axis: NCCL under compute is hidden; NCCL after the last compute is exposed.",
    )
    return s


def _bucket_layout(r) -> dict:
    """Counts and sizes from the run JSON: buckets, size ÷ cap, buckets over the cap, single-tensor buckets
    over the cap (tensors are never split), mean/min/max bucket bytes."""
    bb = np.asarray(r.meta.get("bucket_bytes") or [], dtype=float)
    params = (r.meta.get("layout") or {}).get("bucket_params") or [[]] * len(bb)
    cap = (r.bucket_mb or math.nan) * 2**20
    total = float(r.meta.get("param_bytes") or bb.sum())
    single_big = sum(1 for b, p in zip(bb, params, strict=False) if len(p) == 1 and b > cap)
    return {
        "n": int(r.meta.get("bucket_count") or len(bb)),
        "size_over_cap": math.ceil(total / cap),
        "over_cap": int((bb > cap).sum()),
        "single_big": single_big,
        "mean": float(bb.mean()) if bb.size else math.nan,
        "min": float(bb.min()) if bb.size else math.nan,
        "max": float(bb.max()) if bb.size else math.nan,
        "total": total,
    }


def q4_buckets(rs, page, machine, fit=None) -> Section:
    bk = sorted([r for k, r in rs.items() if k.startswith("bucketed")], key=lambda r: r.bucket_mb)
    caps = ", ".join(f"{r.bucket_mb:g}" for r in bk)
    s = Section("q4", f"4. Bucketed at {caps} MiB" if bk else "4. Bucketed DDP: the bucket-size sweep")
    n = rs.get("naive")
    if not bk:
        s.p("No bucketed runs in set A.")
        return s
    fit = shared_fit(rs) if fit is None else fit
    s_bytes = float(fit["grad_bytes_per_step"].iloc[0]) if len(fit) else math.nan
    s.p(f"Machine: {machine}. Runs: {', '.join(r.name for r in bk)}.")
    rows = []
    preds = sweep_prediction(fit, s_bytes, [_bucket_layout(r)["n"] for r in bk])  # measured bucket counts
    for r, pred in zip(bk, preds, strict=True):
        lay = _bucket_layout(r)
        queue = predicted_tail_ns(
            r.analysis.collectives, getattr(r.trace, "kernels", None), r.analysis.steps, fit
        )
        rows.append(
            {
                "cap": f"{r.bucket_mb:g} MiB",
                "step (median)": ms(r.v("step_ns")),
                "step min–max": spread(*r.spread["step_ns"]),
                "buckets": lay["n"],
                "size ÷ cap": lay["size_over_cap"],
                "buckets > cap": lay["over_cap"],
                "of them one tensor": lay["single_big"],
                "mean bucket": mb(lay["mean"]),
                "largest": mb(lay["max"]),
                "tail (measured)": ms(r.v("comm_tail_ns")),
                "tail (queue model)": ms(queue),
                "n_b·o + s/(n_b·w)": ms(pred),
                "exposed comm": ms(r.v("exposed_comm_ns")),
                "compute": ms(r.v("compute_ns")),
                "report page": page(r),
                "_pred": pred,
                "_queue": queue,
                "_r": r,
            }
        )
    df = pd.DataFrame(rows)
    s.table(
        df.drop(columns=["_pred", "_queue", "_r"]),
        "Bucket sweep (XL fp32); tensor layout from each run's JSON",
    )
    small = [x for x in rows if x["buckets"] < x["size ÷ cap"]]
    big_tensors = sorted({int(b) for b in (n.meta.get("bucket_bytes") or [])}, reverse=True)[:2] if n else []
    if small:
        s.p(
            f"Bucket counts differ from gradient size ÷ cap ({mb(rows[0]['_r'].meta.get('param_bytes', math.nan))} of "
            f"fp32 gradients) wherever the cap is small: tensors are never split and a bucket closes only once it "
            f"reaches the cap, so a bucket holds whole tensors and overshoots. XL's largest tensors "
            f"({', '.join(mb(b) for b in big_tensors)}: the embedding / LM head and the FFN matrices) exceed the "
            f"smaller caps and each fills a bucket of its own; at "
            + "; ".join(
                f"{x['cap']} the {x['buckets']} buckets (not {x['size ÷ cap']}) average {x['mean bucket']}, "
                f"{x['buckets > cap']} above the cap"
                for x in small
            )
            + "."
        )
    best = min(rows, key=lambda x: x["_r"].v("step_ns"))
    bstar = float(fit["b_star_bytes"].iloc[0]) if len(fit) else math.nan
    tail_best = min(rows, key=lambda x: x["_r"].v("comm_tail_ns"))
    measured = [x for x in rows if x["_r"].v("comm_tail_ns") > 0]
    q_ratio = [x["_queue"] / x["_r"].v("comm_tail_ns") for x in measured if np.isfinite(x["_queue"])]
    f_ratio = [x["_pred"] / x["_r"].v("comm_tail_ns") for x in measured if np.isfinite(x["_pred"])]
    q_rows = [x for x in rows if np.isfinite(x["_queue"])]
    q_best = min(q_rows, key=lambda x: x["_queue"]) if q_rows else None
    s.p(
        f"Transfer times come from {fit_sentence(fit, rs)}. The tail model replays each run's own buckets through "
        f"the NCCL stream: a bucket starts when its gradients are ready (the GPU end of the kernels launched "
        f"before its all-reduce, measured in the trace) and the previous bucket is done, and takes the fitted "
        f"time; the predicted tail is the last bucket's end minus the end of backward (column 'tail (queue "
        f"model)'). "
        + (
            f"It gives {min(q_ratio):.2f}× to {max(q_ratio):.2f}× the measured tail: "
            + ", ".join(f"{x['cap']}: {x['tail (queue model)']} vs {x['tail (measured)']}" for x in q_rows)
            + (
                ". Within 25 % at every cap"
                if all(0.8 <= v <= 1.25 for v in q_ratio)
                else ". Not within 25 % at every cap"
            )
            + (
                f"; its shortest tail is at {q_best['cap']}, the measured one at {tail_best['cap']}"
                + (" (the same cap). " if q_best["cap"] == tail_best["cap"] else " (different caps). ")
                if q_best
                else ". "
            )
            if q_ratio
            else "It has no prediction here (no ready times or no fit). "
        )
        + "What it leaves out: the launch delay between a gradient being ready and its all-reduce starting, and "
        "that the last buckets run beside the copy-back of averaged gradients into .grad, which slows them."
    )
    s.p(
        f"The textbook formula overhead(n_b) = n_b·o + s/(n_b·w) (s = {mb(s_bytes)}, each run's measured bucket "
        f"count n_b, o and w of the regime of the mean bucket) assumes equal buckets, every one paying o, and "
        f"the last one's whole transfer after backward; "
        + (f"it gives {min(f_ratio):.2f}× to {max(f_ratio):.2f}× the measured tail, " if f_ratio else "")
        + f"so it does not predict the tail; its minimum for equal buckets, b* = √(s·w·o) = {mb(bstar)} (the "
        f"value the report's sweep page marks), is where per-bucket overhead and the last bucket's transfer "
        f"balance. Measured, the shortest tail is at {tail_best['cap']} ({tail_best['tail (measured)']}) and the "
        f"fastest step at {best['cap']} ({best['step (median)']}, range {best['step min–max']}). The step time "
        "is set less by the tail than by compute: the compute column moves by "
        f"{ms(max(x['_r'].v('compute_ns') for x in rows) - min(x['_r'].v('compute_ns') for x in rows))} across the "
        f"sweep and is {compare(rows[0]['_r'].v('compute_ns'), rows[-1]['_r'].v('compute_ns'), 'lower', 'higher', 'the same')} "
        f"at {rows[0]['cap']} than at {rows[-1]['cap']}: more, smaller buckets mean more NCCL kernels running "
        "beside compute, each slowing it (question 6)."
    )
    hidden = [
        100.0 * (1 - x["_r"].v("exposed_comm_ns") / x["_r"].v("comm_ns"))
        for x in rows
        if x["_r"].v("comm_ns")
    ]
    hidden = hidden or [float("nan")]
    s.p(
        "What would make the sweep match the textbook expectation (a U-shaped step time with a clear optimum): "
        "communication that is a larger share of the step. On this host the all-reduces of all gradients take "
        f"{ms(min(x['_r'].v('comm_ns') for x in rows))}–{ms(max(x['_r'].v('comm_ns') for x in rows))} of NCCL "
        f"kernel time per step across the sweep against ≈{ms(rows[0]['_r'].v('compute_ns'))} of fp32 compute, and "
        f"every bucket size hides {pct(min(hidden), 0)}–{pct(max(hidden), 0)} of it (1 − exposed ÷ NCCL time). Faster compute (bf16 autocast, TF32, a larger batch per GPU cut into more steps), a slower "
        "interconnect (PCIe or across hosts), or more ranks (the ring's 2(n−1)/n traffic and more peers to wait "
        "for) all raise the exposed share, and then the n_b·o vs s/(n_b·w) trade-off decides the step time."
    )
    return s
