"""Scaling over world sizes: throughput against the ideal line, efficiency, comm share and Amdahl's serial
fraction, one line per strategy (frame: COMPARISON_COLUMNS plus ``samples_per_s``)."""

from __future__ import annotations

import html

import pandas as pd

from ddp_profile.plots import palette
from ddp_profile.plots.compare import run_label
from ddp_profile.plots.figure_parts import titled

COLORS = palette.SERIES


def _strategy(row) -> str:
    r = dict(row)
    r["world_size"] = None
    return html.escape(run_label(r), quote=False)


def scaling_figure(comparison: pd.DataFrame, *, source: str = ""):
    """Four panels vs number of GPUs: throughput (samples/s, or speedup when the batch is unknown) with the
    ideal n × 1-GPU line dashed, efficiency (%), comm share of the step (%), Amdahl serial fraction."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    c = comparison.copy()
    c["ws"] = pd.to_numeric(c["world_size"], errors="coerce")
    c["label"] = [_strategy(r) for r in c.to_dict("records")]
    have_tp = "samples_per_s" in c and c["samples_per_s"].notna().any()
    tp_col, tp_title = (
        ("samples_per_s", "throughput (samples/s)")
        if have_tp
        else ("speedup_vs_1gpu", "speedup vs 1 GPU (×)")
    )
    panels = [
        (tp_col, tp_title, 1.0),
        ("efficiency_pct", "efficiency vs 1 GPU (%)", 1.0),
        ("comm_pct", "comm share of step (%)", 1.0),
        ("serial_fraction", "Amdahl serial fraction", 1.0),
    ]
    fig = make_subplots(rows=1, cols=4, subplot_titles=[p[1] for p in panels], horizontal_spacing=0.07)
    for i, label in enumerate(dict.fromkeys(c["label"])):
        g = c[c["label"] == label].sort_values("ws")
        color = COLORS[i % len(COLORS)]
        for j, (col, title, scale) in enumerate(panels, start=1):
            y = pd.to_numeric(g[col], errors="coerce") * scale
            fig.add_trace(
                go.Scatter(
                    x=g["ws"].tolist(),
                    y=[None if pd.isna(v) else round(float(v), 4) for v in y],
                    mode="lines+markers",
                    name=label,
                    legendgroup=label,
                    showlegend=j == 1,
                    line={"color": color},
                    hovertemplate=f"{label}<br>%{{x}} GPUs: %{{y:.3g}}<extra>{title}</extra>",
                ),
                row=1,
                col=j,
            )
        one = g[g["ws"] == 1]
        if len(one) and pd.notna(one[tp_col].iloc[0]):
            t1 = float(one[tp_col].iloc[0])
            xs = g["ws"].tolist()
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=[round(t1 * n, 4) for n in xs],
                    mode="lines",
                    name=f"{label}: ideal (n × 1 GPU)",
                    legendgroup=label,
                    line={"color": color, "dash": "dash", "width": 1},
                ),
                row=1,
                col=1,
            )
    for j, (_col, title, _s) in enumerate(panels, start=1):
        fig.update_xaxes(
            title_text="GPUs", tickvals=sorted(c["ws"].dropna().astype(int).unique().tolist()), row=1, col=j
        )
        fig.update_yaxes(title_text=title, rangemode="tozero", row=1, col=j)
    fig.update_layout(
        title=titled("Scaling over GPUs (fixed per-GPU batch)", source),
        template="plotly_white",
        colorway=palette.SERIES,
        height=440,
        margin={"l": 60, "r": 20, "t": 90, "b": 60},
        legend={"orientation": "h", "y": -0.25},
    )
    return fig
