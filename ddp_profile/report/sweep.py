"""The bucket-sweep page: measured time per step and comm tail vs bucket cap, beside the tail model.

The α-β lines come from :func:`ddp_profile.analysis.costmodel.sweep_fit` over every run of the same
folder, model, dtype, GPU and world size whose collectives carry sizes (naive, flat, overlap and the
bucketed runs) — the same fit the findings use, so both state the same lines and b*. The tail at each
measured cap is predicted by :func:`ddp_profile.analysis.costmodel.predicted_tail_ns`: the run's own buckets
replayed through the NCCL queue at the gradient-ready times measured in its trace, each taking the fitted
transfer time. The equal-bucket formula n_b·o + s/(n_b·w) is kept beside it (with each run's measured
bucket count, never ⌈s/cap⌉: tensors are never split) because its minimum defines b*.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddp_profile.fmt import fmt_bytes, fmt_number, missing
from ddp_profile.report.compare import comparison, group_source
from ddp_profile.report.glossary import fmt_ms
from ddp_profile.report.html import esc, figure_div, page, run_links, table
from ddp_profile.report.runs import Group, Run

MODEL_TRACE = "model n_b·o + s/(n_b·w)"  # the name plots.sweep gives the model line (renamed here)


def fit_members(group: Group, runs: list[Run] | None = None) -> list[Run]:
    """Runs pooled into the sweep's fit: every run (any strategy) sharing the sweep's folder, model, dtype,
    GPU and world size. Runs without collective sizes (torch_ddp, 1-GPU) drop out inside ``sweep_fit``."""

    def key(r: Run):
        m = r.meta
        return (r.folder, m.get("model"), m.get("dtype"), m.get("gpu_name"), str(m.get("world_size")))

    ref = key(group.runs[0])
    pool = list(runs) if runs else list(group.runs)
    mine = [r for r in pool if key(r) == ref]
    return mine or list(group.runs)


def pooled_fit(group: Group, runs: list[Run] | None = None) -> tuple[pd.DataFrame, pd.DataFrame, list[Run]]:
    """(pooled collectives with known bytes, the shared sweep_fit row, the runs that went into it)."""
    from ddp_profile.analysis.costmodel import sweep_fit

    members = [
        r
        for r in fit_members(group, runs)
        if r.analysis.collectives is not None
        and len(r.analysis.collectives)
        and r.analysis.collectives["bytes"].notna().any()
    ]
    if not members:
        return pd.DataFrame(), sweep_fit([]), []
    pooled = pd.concat([r.analysis.collectives for r in members], ignore_index=True)
    return pooled, sweep_fit([r.analysis.collectives for r in members]), members


def measured_bucket_count(run: Run) -> float:
    """Buckets per step the run really had: the harness's ``bucket_count``, else the median number of
    collectives per (rank, step) in the trace."""
    n = run.meta.get("bucket_count")
    if n:
        return float(n)
    col = run.analysis.collectives
    if col is None or not len(col) or not col["step"].notna().any():
        return float("nan")
    return float(col.loc[col["step"].notna()].groupby(["rank", "step"]).size().median())


def sweep_model(group: Group, fit: pd.DataFrame) -> tuple[pd.DataFrame | None, float | None]:
    """(model frame, b* in MiB): one row per measured bucketed cap with bucket_mb, bucket_count (measured),
    ideal_count (⌈s/cap⌉, for comparison only), predicted_ns (the queue model's tail), overhead_ns (the
    equal-bucket formula), comm_tail_ns (measured); (None, None) without a fit."""
    from ddp_profile.analysis.costmodel import fit_params, predicted_tail_ns, sweep_prediction

    o, w, _ = fit_params(fit)
    if not np.isfinite([o, w]).all():
        return None, None
    s = float(fit["grad_bytes_per_step"].iloc[0])
    bucketed = sorted(
        (
            r
            for r in group.runs
            if r.meta.get("strategy") == "bucketed" and r.meta.get("bucket_mb") is not None
        ),
        key=lambda r: float(r.meta["bucket_mb"]),
    )
    if not bucketed or not np.isfinite(s):
        return None, None
    caps = [float(r.meta["bucket_mb"]) for r in bucketed]
    counts = [measured_bucket_count(r) for r in bucketed]
    tails = [
        float(np.nanmedian(r.analysis.steps["comm_tail_ns"])) if len(r.analysis.steps) else float("nan")
        for r in bucketed
    ]
    queue = [
        predicted_tail_ns(r.analysis.collectives, getattr(r.trace, "kernels", None), r.analysis.steps, fit)
        for r in bucketed
    ]
    curve = pd.DataFrame(
        {
            "bucket_mb": caps,
            "bucket_count": counts,
            "ideal_count": [int(np.ceil(s / (c * 2**20))) for c in caps],
            "predicted_ns": queue,
            "overhead_ns": sweep_prediction(fit, s, counts),
            "comm_tail_ns": tails,
        }
    )
    curve.attrs.update(total_mb=s / 2**20)
    return curve, float(fit["b_star_bytes"].iloc[0]) / 2**20


def _ratio_words(pred: pd.Series, meas: pd.Series, what: str) -> str:
    ok = pred.notna() & meas.notna() & (meas > 0)
    if not ok.any():
        return f"{what}: no cap to compare."
    r = pred[ok] / meas[ok]
    return f"{what} ÷ measured tail: {r.min():.2f}× to {r.max():.2f}× across the caps."


def _accuracy(curve: pd.DataFrame) -> str:
    """How far the models are from the measured tail, in words computed from the numbers."""
    ok = curve.dropna(subset=["predicted_ns", "comm_tail_ns"])
    ok = ok[ok["comm_tail_ns"] > 0]
    if not len(ok):
        return "No measured tail and predicted tail to compare."
    best_model = float(ok.loc[ok["predicted_ns"].idxmin(), "bucket_mb"])
    best_meas = float(ok.loc[ok["comm_tail_ns"].idxmin(), "bucket_mb"])
    return (
        _ratio_words(curve["predicted_ns"], curve["comm_tail_ns"], "Queue model")
        + " "
        + _ratio_words(curve["overhead_ns"], curve["comm_tail_ns"], "Equal-bucket formula")
        + " "
        f"The queue model's shortest tail is at {best_model:g} MiB, the shortest measured tail at "
        f"{best_meas:g} MiB"
        + (" (the same cap)." if best_model == best_meas else " (different caps).")
        + " The queue model leaves out the launch delay between a gradient being ready and its all-reduce "
        "starting, and that the last buckets run beside the copy-back of averaged gradients, which slows "
        "them; the equal-bucket formula charges every bucket o and ignores when buckets become ready."
    )


def fit_lines_text(fit: pd.DataFrame) -> str:
    """ "o = 7.0 µs, w = 204 GB/s for 6.3 KiB – 9.8 MiB (median error 8.5 %, 90th pct 17.2 %, 6,160 kernels);
    ..." — every regime of a :func:`sweep_fit`, with its quality (o and w as the plot's legend gives them,
    sizes through ``fmt.fmt_bytes``)."""
    return "; ".join(
        f"o = {r.o_us:.1f} µs, w = {r.w_gb_per_s:.0f} GB/s for {fmt_bytes(r.min_bytes)} – {fmt_bytes(r.max_bytes)} "
        f"(median error {r.median_rel_err_pct:.1f} %, 90th percentile {r.p90_rel_err_pct:.1f} %, "
        f"{int(r.n_points):,} kernels)"
        for r in fit.itertuples()
    )


def model_text(curve, opt, fit, members) -> str:

    if curve is None:
        return (
            "<p class='note'>No α-β fit (the collectives carry no sizes or fewer than 3 distinct sizes), "
            "so no model curve.</p>"
        )

    def td(v, text: str) -> str:  # a number's cell: data-v right-aligns it, as in every other table
        return f"<td data-v='{v}'>{text}</td>" if not missing(v) else f"<td>{text}</td>"

    rows = "".join(
        "<tr>"
        + f"<td>{c.bucket_mb:g}</td>"
        + td(c.bucket_count, fmt_number(float(c.bucket_count)))
        + td(c.ideal_count, fmt_number(int(c.ideal_count)))
        + "".join(td(v, fmt_ms(v, unit=False)) for v in (c.predicted_ns, c.overhead_ns, c.comm_tail_ns))
        + "</tr>"
        for c in curve.itertuples()
    )
    names = ", ".join(esc(r.name) for r in members)
    regimes = (
        "one line"
        if len(fit) == 1
        else f"{len(fit)} lines, one per message-size regime (one line could not follow both the small and "
        "the large messages)"
    )
    return (
        f"<p>Transfer time t = o + bytes/w, fitted in relative terms (robust weighted least squares) over "
        f"all {len(members)} runs of this host, model and dtype whose collectives carry sizes ({names}) as "
        f"{regimes}: {esc(fit_lines_text(fit))}. The findings use the same fit.</p>"
        "<p>Model tail: each bucketed run's own buckets replayed through the NCCL stream, each starting when "
        "its gradients are ready (GPU end of the kernels launched before it, measured in the trace) and "
        "the previous bucket is done, and taking the fitted t; predicted tail = last end − backward end. "
        "The dashed model line only joins the values at the measured caps. For comparison, the "
        "equal-bucket formula n_b·o + s/(n_b·w) with s = "
        f"{curve.attrs['total_mb']:,.1f} MiB and each run's <b>measured</b> bucket count n_b (tensors are "
        "never split, so small caps give far fewer buckets than ⌈s/cap⌉); its minimum, "
        f"b* = √(s·w·o) = {opt:,.1f} MiB with the regime's o and w, is marked. {esc(_accuracy(curve))}</p>"
        "<table><thead><tr><th>cap (MiB)</th><th>buckets (measured)</th><th>⌈s/cap⌉ (idealised)</th>"
        "<th>model tail (ms)</th><th>n_b·o + s/(n_b·w) (ms)</th><th>measured tail (ms)</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )


def sweep_facts(group: Group, runs: list[Run] | None = None) -> dict:
    """Everything the sweep page and the run pages' advice need, computed once per sweep: the comparison,
    the pooled fit, the model curve, b* (MiB) and the measured best cap by median step time."""
    comp = comparison(group.runs)
    pooled, fit, members = pooled_fit(group, runs)
    curve, opt = sweep_model(group, fit)
    b = comp[comp["strategy"] == "bucketed"].dropna(subset=["bucket_mb", "step_ns"])
    best = b.loc[b["step_ns"].idxmin()] if len(b) else None
    return {
        "comp": comp,
        "pooled": pooled,
        "fit": fit,
        "members": members,
        "curve": curve,
        "b_star_mib": opt,
        "best_cap": float(best["bucket_mb"]) if best is not None else None,
        "best_step_ns": float(best["step_ns"]) if best is not None else None,
    }


def render_sweep_page(group: Group, runs: list[Run] | None = None, facts: dict | None = None) -> str:
    from ddp_profile.plots import alpha_beta_figure, bucket_sweep_figure
    from ddp_profile.report.index import numbers_table
    from ddp_profile.report.verdicts import sweep_verdict

    f = facts or sweep_facts(group, runs)
    comp, pooled, fit, members, curve, opt = (
        f[k] for k in ("comp", "pooled", "fit", "members", "curve", "b_star_mib")
    )
    src = group_source(group)
    fig = bucket_sweep_figure(comp, curve, opt, source=src)
    fig.update_traces(
        selector={"name": MODEL_TRACE},
        mode="lines+markers",
        name="model tail: buckets queued at measured ready times (points joined)",
    )
    ddp = [r for r in group.runs if r.meta.get("strategy") == "torch_ddp"]
    shown = (
        fit.drop(columns=["grad_bytes_per_step", "b_star_bytes"]).assign(
            s_mib=fit["grad_bytes_per_step"] / 2**20, b_star_mib=fit["b_star_bytes"] / 2**20
        )
        if len(fit)
        else fit
    )
    b = comp[comp["strategy"] == "bucketed"].dropna(subset=["bucket_mb"]).sort_values("bucket_mb")
    d = comp[comp["strategy"] == "torch_ddp"]
    verdict = sweep_verdict(
        b["bucket_mb"].astype(float).tolist(),
        b["step_ns"].tolist(),
        b["comm_tail_ns"].tolist(),
        opt,
        ddp=d.iloc[0].to_dict() if len(d) else None,
        spread={float(r.bucket_mb): (r.step_min_ns, r.step_max_ns) for r in b.itertuples()},
    )
    alt = "Bucket sweep: time per step by cap: " + "; ".join(
        f"{c:g} MiB {fmt_ms(t)}" for c, t in zip(b["bucket_mb"], b["step_ns"], strict=False)
    )
    body = "\n".join(
        [
            figure_div(fig, "sweep", alt=alt),
            model_text(curve, opt, fit, members),
            "<p class='note'>torch_ddp (PyTorch DDP at its bucket cap) is shown as single points: its "
            "all-reduces carry no per-bucket NVTX ranges, so its message sizes are unknown and it is not in "
            "the fit.</p>"
            if ddp
            else "",
            figure_div(alpha_beta_figure(pooled, fit, source=src), "alphabeta")
            if len(pooled)
            else "<p class='note'>No collective sizes in these traces, so no α-β plot.</p>",
            table(
                shown,
                "α-β fit (t = o + bytes / w, one row per size regime, relative errors), every run with "
                "collective sizes pooled (the findings' fit)",
            ),
            numbers_table(comp, "Numbers (ranked by step time)", sort="step_ns"),
            run_links(group.runs),
        ]
    )
    return page(
        f"Bucket sweep: {group.title}",
        body,
        src,
        crumbs=[(f"Bucket sweep: {group.title}", None)],
        verdict=verdict,
        glossary=list(comp.columns) + list(shown.columns),
    )
