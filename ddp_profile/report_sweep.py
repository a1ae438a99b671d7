"""The bucket-sweep page: measured time per step and comm tail vs bucket cap, beside the overhead model.

The model's o and w come from :func:`ddp_profile.analysis.costmodel.sweep_fit` over every run of the same
folder, model, dtype, GPU and world size whose collectives carry sizes (naive, flat, overlap and the
bucketed runs) — the same fit the findings use, so both state the same b*. The model is evaluated at each
measured cap with the bucket count the run really had (the harness's ``bucket_count``), never ⌈s/cap⌉:
tensors are never split, so at 1 MiB the XL model gets a few hundred buckets, not thousands.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddp_profile.report_runs import Group, Run

MODEL_TRACE = "model n_b·o + s/(n_b·w)"  # the name plots.sweep gives the model line


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

    members = [r for r in fit_members(group, runs) if r.analysis.collectives is not None
               and len(r.analysis.collectives) and r.analysis.collectives["bytes"].notna().any()]
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
    """(model frame, b* in MiB): one row per measured bucketed cap with bucket_size_mb, bucket_count (measured),
    ideal_count (⌈s/cap⌉, for comparison only), predicted_ns, comm_tail_ns; (None, None) without a fit."""
    from ddp_profile.analysis.costmodel import fit_params, sweep_prediction

    o, w, _ = fit_params(fit)
    if not np.isfinite([o, w]).all():
        return None, None
    s = float(fit["grad_bytes_per_step"].iloc[0])
    bucketed = sorted((r for r in group.runs if r.meta.get("strategy") == "bucketed"
                       and r.meta.get("bucket_size_mb") is not None),
                      key=lambda r: float(r.meta["bucket_size_mb"]))
    if not bucketed or not np.isfinite(s):
        return None, None
    caps = [float(r.meta["bucket_size_mb"]) for r in bucketed]
    counts = [measured_bucket_count(r) for r in bucketed]
    tails = [float(np.nanmedian(r.analysis.steps["comm_tail_ns"])) if len(r.analysis.steps) else float("nan")
             for r in bucketed]
    curve = pd.DataFrame({"bucket_size_mb": caps, "bucket_count": counts,
                          "ideal_count": [int(np.ceil(s / (c * 2**20))) for c in caps],
                          "predicted_ns": sweep_prediction(fit, s, counts), "comm_tail_ns": tails})
    curve.attrs.update(o_us=o / 1e3, w_gb_per_s=w, total_mb=s / 2**20)
    return curve, float(fit["b_star_bytes"].iloc[0]) / 2**20


def _accuracy(curve: pd.DataFrame) -> str:
    """How far the model is from the measured tail, in words computed from the numbers."""
    ok = curve.dropna(subset=["predicted_ns", "comm_tail_ns"])
    ok = ok[ok["comm_tail_ns"] > 0]
    if not len(ok):
        return "No measured tail to compare the model with."
    ratio = ok["predicted_ns"] / ok["comm_tail_ns"]
    best_model = float(ok.loc[ok["predicted_ns"].idxmin(), "bucket_size_mb"])
    best_meas = float(ok.loc[ok["comm_tail_ns"].idxmin(), "bucket_size_mb"])
    return (f"Model ÷ measured tail ranges from {ratio.min():.2f}× to {ratio.max():.2f}× across the caps; the model's "
            f"smallest overhead is at {best_model:g} MiB, the shortest measured tail at {best_meas:g} MiB"
            + (" (the same cap)." if best_model == best_meas else " (different caps: the model does not "
               "predict the measured optimum).") + " The model counts only what bucketing adds (per-bucket "
            "overhead o and the last bucket's exposed transfer, with equal buckets); real buckets are unequal and "
            "NCCL slows the compute it overlaps, which the model ignores.")


def model_text(curve, opt, fit, members) -> str:
    from ddp_profile.report import esc

    if curve is None:
        return ("<p class='note'>No α-β fit (the collectives carry no sizes or fewer than 3 distinct sizes), "
                "so no model curve.</p>")
    rows = "".join(f"<tr><td>{c.bucket_size_mb:g}</td><td>{c.bucket_count:.0f}</td><td>{c.ideal_count}</td>"
                   f"<td>{c.predicted_ns / 1e6:.3f}</td><td>{c.comm_tail_ns / 1e6:.3f}</td></tr>"
                   for c in curve.itertuples())
    names = ", ".join(esc(r.name) for r in members)
    return (f"<p>Model: overhead(n_b) = n_b·o + s/(n_b·w) with s = {curve.attrs['total_mb']:,.1f} MiB of "
            f"gradients all-reduced per step, o = {curve.attrs['o_us']:.1f} µs and w = "
            f"{curve.attrs['w_gb_per_s']:.0f} GB/s from one α-β fit over all {len(members)} runs of this host, "
            f"model and dtype whose collectives carry sizes ({names}); the findings use the same fit. n_b is each "
            "run's <b>measured</b> bucket count (the harness's bucket_count; tensors are never split, so small "
            "caps give far fewer buckets than ⌈s/cap⌉). The dashed model line only joins the model's values at "
            f"the measured caps; it is not evaluated between them. Its optimum for equal buckets, b* = √(s·w·o) = "
            f"{opt:,.1f} MiB, is marked. {esc(_accuracy(curve))}</p>"
            "<table><thead><tr><th>cap (MiB)</th><th>buckets (measured)</th><th>⌈s/cap⌉ (idealised)</th>"
            f"<th>model (ms)</th><th>measured tail (ms)</th></tr></thead><tbody>{rows}</tbody></table>")


def render_sweep_page(group: Group, runs: list[Run] | None = None) -> str:
    from ddp_profile.plots import alpha_beta_figure, bucket_sweep_figure
    from ddp_profile.report import _compare, _group_source, _links, _ms_frame, figure_div, page, table

    comp = _compare(group.runs)
    src = _group_source(group)
    pooled, fit, members = pooled_fit(group, runs)
    curve, opt = sweep_model(group, fit)
    fig = bucket_sweep_figure(comp, curve, opt, source=src)
    fig.update_traces(selector={"name": MODEL_TRACE}, mode="lines+markers",
                      name="model n_b·o + s/(n_b·w) at the measured n_b (points joined)")
    ddp = [r for r in group.runs if r.meta.get("strategy") == "torch_ddp"]
    shown = fit.drop(columns=["grad_bytes_per_step", "b_star_bytes"]).assign(
        s_mib=fit["grad_bytes_per_step"] / 2**20, b_star_mib=fit["b_star_bytes"] / 2**20) if len(fit) else fit
    body = "\n".join([
        figure_div(fig, "sweep"), model_text(curve, opt, fit, members),
        "<p class='note'>torch_ddp (PyTorch DDP at its bucket cap) is shown as single points: its "
        "all-reduces carry no per-bucket NVTX ranges, so its message sizes are unknown and it is not in "
        "the fit.</p>" if ddp else "",
        figure_div(alpha_beta_figure(pooled, fit, source=src), "alphabeta") if len(pooled) else
        "<p class='note'>No collective sizes in these traces, so no α-β plot.</p>",
        table(shown, "α-β fit (t = o + bytes / w), every run with collective sizes pooled (the findings' fit)"),
        table(_ms_frame(comp.drop(columns=["page", "predicted_overhead_ns"], errors="ignore")), "Numbers (times in ms)"), _links(group.runs),
    ])
    return page(f"Bucket sweep: {group.title}", body, src)
