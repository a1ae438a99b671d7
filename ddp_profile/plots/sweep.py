"""Bucket-size sweep and the α-β (latency-bandwidth) fit of collective time vs message size."""

from __future__ import annotations

import html

import numpy as np
import pandas as pd

from ddp_profile.plots._common import titled


def bucket_sweep_figure(comparison: pd.DataFrame, model: pd.DataFrame | None = None,
                        optimum_mb: float | None = None, *, source: str = ""):
    """Time per step and comm tail vs bucket size (COMPARISON_COLUMNS rows with bucket_size_mb), the
    fitted overhead model as a line (``model`` columns: bucket_size_mb, predicted_ns) and its optimum as a
    vertical marker. Log x axis: sweeps are usually powers of two."""
    import plotly.graph_objects as go

    c = comparison.dropna(subset=["bucket_size_mb"]).sort_values("bucket_size_mb")
    x = c["bucket_size_mb"].astype(float).tolist()
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=x, y=(c["step_ns"] / 1e6).round(3).tolist(), mode="lines+markers",
                             name="time per step (measured)"))
    fig.add_trace(go.Scatter(x=x, y=(c["comm_tail_ns"] / 1e6).round(3).tolist(), mode="lines+markers",
                             name="comm tail (measured)"))
    if model is not None and len(model):
        m = model.sort_values("bucket_size_mb")
        fig.add_trace(go.Scatter(x=m["bucket_size_mb"].tolist(), y=(m["predicted_ns"] / 1e6).round(4).tolist(),
                                 mode="lines", name="overhead model (fitted α-β)", line={"dash": "dash"}))
    if optimum_mb is not None and np.isfinite(optimum_mb) and optimum_mb > 0:
        fig.add_vline(x=float(optimum_mb), line_dash="dot", line_color="#E45756",
                      annotation_text=f"model optimum {optimum_mb:.3g} MB")
    fig.update_layout(title=titled("Bucket-size sweep", source), template="plotly_white", height=420,
                      margin={"l": 60, "r": 20, "t": 80, "b": 50},
                      xaxis={"title": {"text": "bucket size (MB)"}, "type": "log"},
                      yaxis={"title": {"text": "time (ms)"}})
    return fig


def alpha_beta_figure(collectives: pd.DataFrame, cost_model: pd.DataFrame, *, source: str = ""):
    """Collective duration vs bytes (points; transfer time where the analysis separated out waiting) and
    the fitted line t = o + bytes / w per collective type (COST_MODEL_COLUMNS: o_us, w_gb_per_s)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    col = collectives.dropna(subset=["bytes"])
    col = col[pd.to_numeric(col["bytes"], errors="coerce") > 0]
    for name, g in col.groupby("collective", dropna=False):
        t = pd.to_numeric(g["transfer_ns"], errors="coerce").fillna(pd.to_numeric(g["duration_ns"]))
        fig.add_trace(go.Scatter(x=g["bytes"].astype(float).tolist(), y=(t / 1e3).round(3).tolist(),
                                 mode="markers", name=f"{html.escape(str(name), quote=False)} (measured)",
                                 marker={"size": 5, "opacity": 0.6}))
    for row in cost_model.to_dict("records"):
        lo, hi = row.get("min_bytes"), row.get("max_bytes")
        if any(pd.isna(v) for v in (lo, hi, row.get("o_us"), row.get("w_gb_per_s"))) or hi <= 0:
            continue
        xs = np.geomspace(max(float(lo), 1.0), float(hi), 40)
        ys = float(row["o_us"]) + xs / (float(row["w_gb_per_s"]) * 1e3)  # GB/s = 1e3 bytes per µs
        r2 = row.get("r2")
        fig.add_trace(go.Scatter(x=xs.tolist(), y=ys.round(3).tolist(), mode="lines", name=(
            f"{html.escape(str(row['collective']), quote=False)} fit: o={float(row['o_us']):.1f} µs, "
            f"w={float(row['w_gb_per_s']):.1f} GB/s" + ("" if pd.isna(r2) else f", R²={float(r2):.3f}"))))
    fig.update_layout(title=titled("α-β fit: collective time vs message size", source),
                      template="plotly_white", height=420, margin={"l": 60, "r": 20, "t": 80, "b": 50},
                      xaxis={"title": {"text": "message size (bytes)"}, "type": "log"},
                      yaxis={"title": {"text": "time (µs)"}, "type": "log"})
    return fig
