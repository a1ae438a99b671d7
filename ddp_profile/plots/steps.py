"""Per-step stacked bars: where each rank's step time went (compute only, overlapped comm, exposed comm,
idle), one stacked bar per (step, rank)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddp_profile.fmt import fmt_ms
from ddp_profile.plots import palette
from ddp_profile.plots.figure_parts import SEGMENT_COLORS, titled

# Past this many (step, rank) bars the x axis is one level ("step 3 · r1"), whose labels plotly thins out.
MAX_TWO_LEVEL_BARS = 40
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
    flat = (
        len(s) > MAX_TWO_LEVEL_BARS
    )  # a two-level axis prints every label, overlapping past a few dozen bars
    xs = [f"{a} · {b}" for a, b in zip(*x, strict=True)] if flat else x
    fig = go.Figure()
    heights = np.zeros(len(s))
    for name, fn in SEGMENTS.items():
        y = (pd.to_numeric(fn(s), errors="coerce") / 1e6).round(4).tolist() if len(s) else []
        heights += np.nan_to_num(np.asarray(y, dtype=float))
        total = pd.to_numeric(s["step_ns"], errors="coerce").tolist() if len(s) else []
        fig.add_trace(
            go.Bar(
                name=name,
                x=xs,
                y=y,
                customdata=[[fmt_ms(v * 1e6), fmt_ms(t)] for v, t in zip(y, total, strict=True)],
                marker_color=SEGMENT_COLORS[name],
                hovertemplate=f"{name}: %{{customdata[0]}}<br>step time %{{customdata[1]}}<extra>%{{x}}</extra>",
            )
        )
    yaxis: dict = {"title": {"text": "time (ms)"}}
    cap = outlier_cap(heights)
    if cap is not None:  # one long step (the first, with warm-up) would flatten every other bar: cut it
        cut = np.flatnonzero(heights > cap)
        cut_x = [xs[i] for i in cut] if flat else [[x[0][i] for i in cut], [x[1][i] for i in cut]]
        fig.add_trace(
            go.Scatter(
                x=cut_x,
                y=[cap] * len(cut),
                mode="text",
                text=[f"↑{h:.3g}" for h in heights[cut]],
                textposition="bottom center",
                textfont={"size": 10},
                showlegend=False,
                hoverinfo="skip",
            )
        )
        yaxis = {"title": {"text": f"time (ms, cut at {cap:.3g})"}, "range": [0, cap]}
    fig.update_layout(
        title=titled("Per-step breakdown (per rank)", source),
        barmode="stack",
        template="plotly_white",
        colorway=palette.SERIES,
        height=380,
        margin={"l": 60, "r": 20, "t": 70, "b": 60},
        legend={"orientation": "h", "y": -0.25},
        xaxis={"title": {"text": "step · rank"}, **({"tickangle": -45, "automargin": True} if flat else {})},
        yaxis=yaxis,
    )
    return fig


def outlier_cap(heights) -> float | None:
    """A y-axis top that keeps the usual bars readable: 1.5 × the 90th percentile of the bar heights when the
    tallest bar is over 3 × the median one (else None: every bar fits as it is)::

        heights  12 12 12 12 12 12 12 12 12 12 330   median 12, 330 > 3 × 12  →  cap 1.5 × q90 = 18
    """
    h = np.asarray(heights, dtype=float)
    h = h[np.isfinite(h)]
    if len(h) < 3 or not h.max() > 3 * np.median(h) or not np.median(h) > 0:
        return None
    cap = 1.5 * float(np.quantile(h, 0.9))
    return cap if cap < h.max() else None


def exposed_comm_figure(steps: pd.DataFrame, *, source: str = ""):
    """Exposed communication and the comm tail per step, on their own (ms) scale: bars are the median over
    ranks, whiskers span the fastest to the slowest rank (the hover lists every rank). Exposed comm is NCCL
    time with no compute running; the tail runs from the end of backward to the end of the last collective."""
    import plotly.graph_objects as go

    from ddp_profile.plots.palette import IDLE, NCCL_EXPOSED, TAIL

    fig = go.Figure()
    s = steps.dropna(subset=["step"]) if len(steps) else steps
    for col, name, color in (
        ("exposed_comm_ns", "exposed comm", NCCL_EXPOSED),
        ("comm_tail_ns", "comm tail", TAIL),
    ):
        x, y, lo, hi, text = [], [], [], [], []
        for step, g in s.groupby("step") if len(s) else []:
            v = pd.to_numeric(g[col], errors="coerce") / 1e6
            if v.notna().any():
                med = float(v.median())
                x.append(f"step {int(step)}")
                y.append(round(med, 4))
                lo.append(round(med - float(v.min()), 4))
                hi.append(round(float(v.max()) - med, 4))
                text.append(
                    f"median {fmt_ms(med * 1e6)}<br>"
                    + "<br>".join(
                        f"rank {int(r)}: {fmt_ms(m * 1e6)}"
                        for r, m in zip(g["rank"], v, strict=False)
                        if pd.notna(m)
                    )
                )
        fig.add_trace(
            go.Bar(
                name=name,
                x=x,
                y=y,
                marker={"color": color},
                hovertext=text,
                error_y={"type": "data", "symmetric": False, "array": hi, "arrayminus": lo, "color": IDLE},
                hovertemplate=f"<b>{name}</b> · %{{x}}<br>%{{hovertext}}<extra></extra>",
            )
        )
    yaxis: dict = {"title": {"text": "time (ms)"}, "rangemode": "tozero"}
    tops = [(x, y + h) for tr in fig.data for x, y, h in zip(tr.x, tr.y, tr.error_y.array, strict=True)]
    cap = outlier_cap([t for _, t in tops])
    if cap is not None:  # a warm-up step's collectives would flatten every other bar: cut it, marked
        cut = [(x, t) for x, t in tops if t > cap]
        fig.add_trace(
            go.Scatter(
                x=[x for x, _ in cut],
                y=[cap] * len(cut),
                mode="text",
                text=[f"↑{t:.3g}" for _, t in cut],
                textposition="bottom center",
                textfont={"size": 10},
                showlegend=False,
                hoverinfo="skip",
            )
        )
        yaxis = {"title": {"text": f"time (ms, cut at {cap:.3g})"}, "range": [0, cap]}
    fig.update_layout(
        title=titled("Exposed communication and comm tail per step", source),
        barmode="group",
        template="plotly_white",
        colorway=palette.SERIES,
        height=340,
        margin={"l": 60, "r": 20, "t": 70, "b": 60},
        legend={"orientation": "h", "y": -0.25},
        xaxis={"title": {"text": "step"}},
        yaxis=yaxis,
    )
    return fig
