"""Findings-specific figures (plotly, imported lazily): the naive-vs-overlap timeline reuses the report's
overlap picture; the scaling figure is throughput relative to 1 GPU with the ideal line."""

from __future__ import annotations

import pandas as pd


def timeline_figure(runs: list, source: str):
    """Rank 0, middle profiled step of each run, on one time axis (``runs``: RunData)."""
    from ddp_profile.plots import overlap_picture
    from ddp_profile.report.compare import one_step_kernels
    from ddp_profile.report.runs import Run

    frames = [one_step_kernels(Run(r.name, r.trace, r.analysis, r.meta), r.label) for r in runs]
    return overlap_picture(pd.concat(frames, ignore_index=True), source=source)


def scaling_figure(df: pd.DataFrame, source: str):
    """Throughput ÷ 1-GPU throughput per (model, strategy) vs GPUs, plus y = n."""
    import plotly.graph_objects as go

    from ddp_profile.plots.figure_parts import titled

    fig = go.Figure()
    for (m, st), g in df.groupby(["model", "strategy"]):
        one = g[g["GPUs"] == 1]
        if not len(one):
            continue
        g = g.sort_values("GPUs")
        fig.add_trace(
            go.Scatter(
                x=g["GPUs"],
                y=g["_thr"] / float(one["_thr"].iloc[0]),
                mode="lines+markers",
                name=f"{m} · {st}",
            )
        )
    n = sorted(df["GPUs"].unique())
    fig.add_trace(
        go.Scatter(x=n, y=n, mode="lines", name="ideal (linear)", line={"dash": "dash", "color": "#888"})
    )
    fig.update_layout(
        title=titled("Throughput vs GPUs (relative to 1 GPU)", source),
        template="plotly_white",
        height=420,
        xaxis={"title": {"text": "GPUs"}, "tickvals": n},
        yaxis={"title": {"text": "throughput ÷ 1-GPU throughput"}},
    )
    return fig
