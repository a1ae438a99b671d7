"""Cross-run figures: strategies side by side, and the 'does it overlap?' picture (one step of each run on
one time axis, aligned at step start)."""

from __future__ import annotations

import html

import numpy as np
import pandas as pd

from ddp_profile.fmt import fmt_ms
from ddp_profile.plots import palette
from ddp_profile.plots.figure_parts import KIND_COLORS, KIND_LABELS, merge_small_bars, titled

# panel title -> (COMPARISON_COLUMNS column, scale to display unit)
PANELS = {
    "time per step (ms)": ("step_ns", 1e-6),
    "exposed comm (ms)": ("exposed_comm_ns", 1e-6),
    "comm tail (ms)": ("comm_tail_ns", 1e-6),
    "efficiency vs 1 GPU (%)": ("efficiency_pct", 1.0),
}


def run_label(row) -> str:
    """'bucketed 25 MiB ×2' — short, unique enough within one comparison."""
    label = str(row.get("strategy") or row.get("run"))
    mb = row.get("bucket_mb")
    if mb is not None and not pd.isna(mb) and str(row.get("strategy")) in ("bucketed", "torch_ddp"):
        label += f" {float(mb):g} MiB"
    variant = row.get("variant")
    if isinstance(variant, str) and variant:
        label += f" ({variant})"
    ws = row.get("world_size")
    if ws is not None and not pd.isna(ws):
        label += f" ×{int(ws)}"
    return label


def strategy_bars(comparison: pd.DataFrame, *, source: str = ""):
    """Four panels of bars, one bar per run (COMPARISON_COLUMNS): step time, exposed comm, tail,
    efficiency vs 1 GPU. Missing values (e.g. no 1-GPU baseline) are left as gaps, not zeros."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    labels = [html.escape(run_label(r), quote=False) for r in comparison.to_dict("records")]
    fig = make_subplots(rows=1, cols=len(PANELS), subplot_titles=list(PANELS))
    for i, (_title, (col, scale)) in enumerate(PANELS.items(), start=1):
        y = (pd.to_numeric(comparison[col], errors="coerce") * scale).round(3)
        fig.add_trace(
            go.Bar(
                x=labels,
                y=[None if pd.isna(v) else v for v in y],
                name=_title,
                showlegend=False,
                marker_color=palette.COMPUTE,
                hovertemplate="%{x}: %{y}<extra></extra>",
            ),
            row=1,
            col=i,
        )
        fig.update_yaxes(title_text=_title, row=1, col=i)
        fig.update_xaxes(title_text="run", row=1, col=i)
    fig.update_layout(
        title=titled("Strategies side by side", source),
        template="plotly_white",
        colorway=palette.SERIES,
        height=420,
        margin={"l": 60, "r": 20, "t": 90, "b": 90},
    )
    return fig


def overlap_picture(kernels: pd.DataFrame, *, source: str = "", pixels: int = 2000):
    """One step per run on one time axis. ``kernels`` columns: run (label), kind, start_ns, end_ns, name,
    with times already relative to that run's step start. Rows: run × (compute stream / comm stream) so
    hidden communication shows as orange under blue."""
    import plotly.graph_objects as go

    k = kernels.copy()
    k["lane"] = np.where(k["kind"] == "nccl", "comm", "compute")
    runs = list(dict.fromkeys(k["run"]))
    lanes = [(r, lane) for r in runs for lane in ("compute", "comm")]
    row_of = {key: i for i, key in enumerate(lanes)}
    k["row"] = [row_of[(r, lane)] for r, lane in zip(k["run"], k["lane"], strict=False)]
    span = float(k["end_ns"].max() - k["start_ns"].min()) if len(k) else 1.0
    fig = go.Figure()
    for kind in ("compute", "nccl", "memcpy", "memset"):
        s = k[k["kind"] == kind].sort_values(["row", "start_ns"])
        row, st, en = s["row"].to_numpy(), s["start_ns"].to_numpy(float), s["end_ns"].to_numpy(float)
        gid = merge_small_bars(row, st, en, max(span / pixels, 1.0))
        first = np.flatnonzero(np.r_[True, gid[1:] != gid[:-1]]) if len(gid) else np.zeros(0, int)
        end = np.maximum.reduceat(en, first) if len(first) else en
        count = np.diff(np.r_[first, len(gid)]) if len(first) else first
        names = s["name"].astype(str).to_numpy()[first] if len(first) else []
        text = [
            html.escape(n, quote=False)
            if c == 1
            else f"{c} kernels merged, first {html.escape(n, quote=False)}"
            for n, c in zip(names, count, strict=False)
        ]
        marker = {"color": KIND_COLORS[kind], "line": {"width": 0}}
        if kind == "memset":  # memset shares the copy colour: hatched, as on the timeline
            marker["pattern"] = palette.MEMSET_PATTERN
        fig.add_trace(
            go.Bar(
                orientation="h",
                name=KIND_LABELS[kind],
                base=(st[first] / 1e6).round(5),
                x=((end - st[first]) / 1e6).round(5),
                y=row[first],
                hovertext=[f"{t}<br>{fmt_ms(e - b)}" for t, b, e in zip(text, st[first], end, strict=True)],
                hovertemplate="%{hovertext}<extra></extra>",
                width=0.8,
                marker=marker,
            )
        )
    fig.update_layout(
        title=titled("Does it overlap? One step per strategy, aligned at step start", source),
        barmode="overlay",
        template="plotly_white",
        colorway=palette.SERIES,
        height=max(260, 130 + 34 * len(lanes)),
        margin={"l": 190, "r": 20, "t": 80, "b": 40},
        legend={"orientation": "h", "y": -0.3},
        xaxis={"title": {"text": "time since step start (ms)"}},
        yaxis={
            "title": {"text": "run · lane (rank 0)"},
            "tickvals": list(range(len(lanes))),
            "ticktext": [f"{html.escape(str(r), quote=False)} · {lane}" for r, lane in lanes],
            "autorange": "reversed",
            "fixedrange": True,
        },
    )
    return fig


def ranked_step_bars(comparison: pd.DataFrame, *, source: str = "", time_label: str | None = None):
    """Runs ranked by median time per step, drawn as the difference to the fastest (ms), with each run's
    step-time range (min–max over ranks and steps, columns step_min_ns / step_max_ns) as error bars, so
    a 354 ms vs 395 ms difference is visible and the spread says whether the order is established.
    ``time_label`` names the time when the columns hold another one (e.g. 'un-profiled step time': medians
    and ranges over the runs without the profiler)."""
    import plotly.graph_objects as go

    c = comparison[comparison["step_ns"].notna()].sort_values("step_ns")
    best = float(c["step_ns"].iloc[0]) if len(c) else 0.0
    labels = [html.escape(run_label(r), quote=False) for r in c.to_dict("records")]
    d = ((c["step_ns"] - best) / 1e6).round(3)
    lo = ((c["step_ns"] - c.get("step_min_ns", c["step_ns"])) / 1e6).round(3)
    hi = ((c.get("step_max_ns", c["step_ns"]) - c["step_ns"]) / 1e6).round(3)
    text = [fmt_ms(v) for v in c["step_ns"]]
    labels = [f"{lbl} · {t}" for lbl, t in zip(labels, text, strict=True)]  # absolute time beside the name
    fig = go.Figure(
        go.Bar(
            orientation="h",
            y=labels,
            x=d.tolist(),
            text=text,
            textposition="none",
            marker_color=palette.COMPUTE,
            error_x={
                "type": "data",
                "symmetric": False,
                "array": hi.tolist(),
                "arrayminus": lo.tolist(),
                "color": "#555",
            },
            customdata=[fmt_ms(v * 1e6) for v in d],
            hovertemplate="%{y}: %{text} (+%{customdata} vs fastest)<extra></extra>",
        )
    )
    what = (
        "Time per step, ranked: difference to the fastest (whiskers: min–max over ranks and steps)"
        if time_label in (None, "step time", "profiled (trace) step time")
        else f"Time per step ({html.escape(time_label, quote=False)}), ranked: difference to the fastest "
        "(whiskers: min–max over every timed step)"
    )
    fig.update_layout(
        title=titled(what, source),
        template="plotly_white",
        height=max(260, 120 + 36 * len(c)),
        margin={"l": 230, "r": 30, "t": 90, "b": 50},
        xaxis={"title": {"text": "ms slower than the fastest run (median step)"}},
        yaxis={"autorange": "reversed", "automargin": True},
    )
    return fig
