"""Bucket-size sweep and the α-β (latency-bandwidth) fit of collective time vs message size."""

from __future__ import annotations

import html

import numpy as np
import pandas as pd

from ddp_profile.fmt import fmt_bytes
from ddp_profile.plots import palette
from ddp_profile.plots.figure_parts import titled


def bucket_sweep_figure(
    comparison: pd.DataFrame,
    model: pd.DataFrame | None = None,
    optimum_mb: float | None = None,
    *,
    source: str = "",
):
    """Two panels vs bucket size (COMPARISON_COLUMNS rows with bucket_mb, MiB): left, time per step;
    right, the measured comm tail and exposed comm with the fitted overhead model (``model`` columns:
    bucket_mb, predicted_ns) and its optimum b* as a vertical marker. torch_ddp rows are single
    markers. Log x axis: sweeps span decades. Separate panels because the step (hundreds of ms) would
    flatten the tail (often < 1 ms) on a shared axis."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    c = comparison.dropna(subset=["bucket_mb"]).sort_values("bucket_mb")
    strategy = c["strategy"].astype("object") if "strategy" in c else pd.Series("bucketed", index=c.index)
    others = c[strategy == "torch_ddp"]
    c = c[strategy != "torch_ddp"]
    x = c["bucket_mb"].astype(float).tolist()
    fig = make_subplots(
        rows=1,
        cols=2,
        horizontal_spacing=0.08,
        subplot_titles=["time per step (ms)", "comm tail, exposed comm and model overhead (ms)"],
    )
    series = [
        ("step_ns", "bucketed: time per step", 1, palette.COMPUTE),
        ("comm_tail_ns", "bucketed: comm tail", 2, palette.TAIL),
        ("exposed_comm_ns", "bucketed: exposed comm", 2, palette.NCCL_EXPOSED),
    ]
    for col, name, panel, color in series:
        fig.add_trace(
            go.Scatter(
                x=x,
                y=(c[col] / 1e6).round(3).tolist(),
                mode="lines+markers",
                name=name,
                line={"color": color},
                hovertemplate="%{x:g} MiB: %{y:.2f} ms<extra>" + name + "</extra>",
            ),
            row=1,
            col=panel,
        )
    for col, name, panel, symbol in (
        ("step_ns", "time per step", 1, "diamond"),
        ("comm_tail_ns", "comm tail", 2, "x"),
    ):
        if len(others):
            fig.add_trace(
                go.Scatter(
                    x=others["bucket_mb"].astype(float).tolist(),
                    y=(others[col] / 1e6).round(3).tolist(),
                    mode="markers",
                    name=f"torch_ddp: {name}",
                    marker={"symbol": symbol, "size": 11, "color": palette.COPY},
                ),
                row=1,
                col=panel,
            )
    if model is not None and len(model):
        m = model.sort_values("bucket_mb")
        fig.add_trace(
            go.Scatter(
                x=m["bucket_mb"].tolist(),
                y=(m["predicted_ns"] / 1e6).round(4).tolist(),
                mode="lines",
                name="model n_b·o + s/(n_b·w)",
                line={"dash": "dash", "color": palette.SKY},
            ),
            row=1,
            col=2,
        )
    if optimum_mb is not None and np.isfinite(optimum_mb) and optimum_mb > 0:
        # b* is a two-point line trace, not a shape: on a log x axis plotly.js draws a shape's x in data
        # units but autoranges it as a log10 exponent (b* = 243 MiB stretched the axis to 10^251, and
        # passing log10(b*) drew the line at 2.4 MiB). Checked in Chromium: tests/report/test_browser.py.
        ys = [v for tr in fig.data if tr.xaxis == "x2" for v in (tr.y or ()) if v is not None and v > 0]
        lo, hi = (min(ys), max(ys)) if ys else (1e-3, 1.0)
        label = f"b* = {optimum_mb:.3g} MiB"
        fig.add_trace(
            go.Scatter(
                x=[float(optimum_mb)] * 2,
                y=[lo, hi],
                mode="lines",
                name=label,
                line={"dash": "dot", "color": palette.WAIT},
                hovertemplate=label + "<extra>model optimum</extra>",
            ),
            row=1,
            col=2,
        )
    # Ticks only at the measured caps (x) and at whole decades (y, log), labelled in full ('0.3 ms', not a
    # bare minor '3' that reads as the next decade's label).
    caps = sorted({float(v) for v in comparison["bucket_mb"].dropna()})
    fig.update_xaxes(
        title_text="bucket cap (MiB, log scale)", type="log", tickvals=caps, ticktext=[f"{v:g}" for v in caps]
    )
    fig.update_yaxes(title_text="time (ms; axis zoomed, not from 0)", row=1, col=1)
    ys = [v for tr in fig.data if tr.yaxis == "y2" for v in (tr.y or ()) if v is not None and v > 0]
    if ys:
        lo, hi = min(ys), max(ys)
        ticks = [
            m * 10.0**e
            for e in range(int(np.floor(np.log10(lo))) - 1, int(np.ceil(np.log10(hi))) + 1)
            for m in (1, 2, 5)
            if lo / 2 <= m * 10.0**e <= hi * 2
        ]
        fig.update_yaxes(tickvals=ticks, ticktext=[f"{v:g} ms" for v in ticks], row=1, col=2)
    fig.update_yaxes(title_text="time (ms, log scale)", type="log", row=1, col=2)
    fig.update_layout(
        title=titled("Bucket-size sweep", source),
        template="plotly_white",
        colorway=palette.SERIES,
        height=460,
        margin={"l": 60, "r": 20, "t": 90, "b": 60},
        legend={"orientation": "h", "y": -0.25},
    )
    return fig


GL_POINTS = 2000


def alpha_beta_figure(collectives: pd.DataFrame, cost_model: pd.DataFrame, *, source: str = ""):
    """Collective duration vs bytes (points; transfer time where the analysis separated out waiting) and
    the fitted line t = o + bytes / w per collective type (COST_MODEL_COLUMNS: o_us, w_gb_per_s)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    col = collectives.dropna(subset=["bytes"])
    col = col[pd.to_numeric(col["bytes"], errors="coerce") > 0]
    # every collective is a point; past GL_POINTS they are drawn with WebGL (an SVG node per point takes
    # seconds to draw for the ~10^4 collectives of a long run)
    points = go.Scattergl if len(col) > GL_POINTS else go.Scatter
    for name, g in col.groupby("collective", dropna=False):
        t = pd.to_numeric(g["transfer_ns"], errors="coerce").fillna(pd.to_numeric(g["duration_ns"]))
        fig.add_trace(
            points(
                x=g["bytes"].astype(float).tolist(),
                y=(t / 1e3).round(3).tolist(),
                mode="markers",
                name=f"{html.escape(str(name), quote=False)} (measured)",
                marker={"size": 5, "opacity": 0.6},
            )
        )
    for row in cost_model.to_dict("records"):
        lo, hi = row.get("min_bytes"), row.get("max_bytes")
        if any(pd.isna(v) for v in (lo, hi, row.get("o_us"), row.get("w_gb_per_s"))) or hi <= 0:
            continue
        xs = np.geomspace(max(float(lo), 1.0), float(hi), 40)
        ys = float(row["o_us"]) + xs / (float(row["w_gb_per_s"]) * 1e3)  # GB/s = 1e3 bytes per µs
        r2 = row.get("r2")
        fig.add_trace(
            go.Scatter(
                x=xs.tolist(),
                y=ys.round(3).tolist(),
                mode="lines",
                name=(
                    f"{html.escape(str(row['collective']), quote=False)} fit: o={float(row['o_us']):.1f} µs, "
                    f"w={float(row['w_gb_per_s']):.0f} GB/s"
                    + ("" if pd.isna(r2) else f", R²={float(r2):.3f}")
                ),
            )
        )
    fig.update_layout(
        title=titled("α-β fit: collective time vs message size", source),
        template="plotly_white",
        colorway=palette.SERIES,
        height=420,
        margin={"l": 60, "r": 20, "t": 80, "b": 50},
        xaxis={
            "title": {"text": "message size (log scale)"},
            "type": "log",
            **size_ticks([v for tr in fig.data for v in (tr.x or ())]),
        },
        yaxis={
            "title": {"text": "time (µs)"},
            "type": "log",
            **log_ticks([v for tr in fig.data for v in (tr.y or ())]),
        },
    )
    return fig


def log_ticks(values) -> dict:
    """Log-axis ticks that never crowd: 1-2-5 steps over up to 3 decades, powers of 10 over up to 8, every
    other power beyond (plotly's own labels every digit 2-9 of a short log axis, which overlap at 420 px)."""
    v = np.asarray([float(x) for x in values if x is not None and np.isfinite(float(x)) and float(x) > 0])
    if not len(v):
        return {}
    lo, hi = int(np.floor(np.log10(v.min()))), int(np.ceil(np.log10(v.max())))
    span = hi - lo
    mult = (1, 2, 5) if span <= 3 else (1,)
    ticks = [m * 10.0**k for k in range(lo, hi + 1, 1 if span <= 8 else 2) for m in mult]
    return {"tickvals": ticks, "ticktext": [f"{t:g}" for t in ticks]}


def size_ticks(sizes) -> dict:
    """Log-axis ticks for byte counts in binary units, as every size of the report ('4.0 KiB', '1.0 MiB'):
    powers of 4 spanning ``sizes`` (plotly's own ticks read 1e9 bytes as '1B', which looks like one byte)."""
    v = np.asarray([float(x) for x in sizes if x is not None and float(x) > 0])
    if not len(v):
        return {}
    lo, hi = int(np.floor(np.log2(v.min()) / 2)), int(np.ceil(np.log2(v.max()) / 2))
    ticks = [4.0**k for k in range(lo, hi + 1)]
    return {"tickvals": ticks, "ticktext": [fmt_bytes(t) for t in ticks]}
