"""Per-step stacked bars: where each rank's step time went (compute only, overlapped comm, exposed comm,
idle), one stacked bar per (step, rank)."""

from __future__ import annotations

import pandas as pd

from ddp_profile.plots._common import SEGMENT_COLORS, titled

# segment -> how it is computed from STEP_METRIC_COLUMNS (ns). compute only + overlapped comm = compute;
# overlapped + exposed = comm; idle = time with no kernel at all. Copies hidden under either are not shown.
SEGMENTS = {
    "compute only": lambda s: s["compute_ns"] - s["overlap_ns"],
    "overlapped comm": lambda s: s["overlap_ns"],
    "exposed comm": lambda s: s["exposed_comm_ns"],
    "idle": lambda s: s["idle_ns"],
}


def step_breakdown(steps: pd.DataFrame, *, source: str = ""):
    """Stacked bars from a STEP_METRIC_COLUMNS frame; x is (step, rank) on a two-level axis, y in ms."""
    import plotly.graph_objects as go

    s = steps.sort_values(["step", "rank"]) if len(steps) else steps
    x = [[f"step {int(v)}" for v in s["step"]], [f"r{int(v)}" for v in s["rank"]]] if len(s) else [[], []]
    fig = go.Figure()
    for name, fn in SEGMENTS.items():
        y = (pd.to_numeric(fn(s), errors="coerce") / 1e6).round(4).tolist() if len(s) else []
        total = (pd.to_numeric(s["step_ns"], errors="coerce") / 1e6).round(3).tolist() if len(s) else []
        fig.add_trace(go.Bar(name=name, x=x, y=y, customdata=total, marker_color=SEGMENT_COLORS[name],
                             hovertemplate=f"{name}: %{{y:.3f}} ms<br>step time %{{customdata:.3f}} ms"
                                           "<extra>%{x}</extra>"))
    fig.update_layout(
        title=titled("Per-step breakdown (per rank)", source), barmode="stack", template="plotly_white",
        height=380, margin={"l": 60, "r": 20, "t": 70, "b": 60}, legend={"orientation": "h", "y": -0.25},
        xaxis={"title": {"text": "step · rank"}}, yaxis={"title": {"text": "time (ms)"}},
    )
    return fig
