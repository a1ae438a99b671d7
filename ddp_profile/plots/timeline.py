"""The per-run timeline: one row per rank × stream, kernels coloured by class, NVTX phases as bands, the
comm tail marked; one training step at a time.

Why per step: a 1 M-kernel run cannot be drawn as 1 M SVG bars. :func:`timeline_steps` cuts the run into
steps, merges sub-pixel kernels per row (:func:`~ddp_profile.plots._common.merge_small_bars`), and returns
compact arrays for *every* step; :func:`figure_for_step` draws one of them. The report embeds the arrays once
and swaps a step in with :data:`STEP_SWITCH_JS`, which mirrors :func:`_customdata` exactly.
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd

from ddp_profile.plots._common import (
    KIND_COLORS,
    KIND_LABELS,
    PHASE_COLORS,
    fmt_bytes,
    merge_small_bars,
    titled,
)

KINDS = ["compute", "nccl", "memcpy", "memset"]
PHASES = ["forward", "backward", "optimizer", "grad_wait"]
# Fixed trace order (the JS swaps arrays by index): 4 kernel classes, 4 phases, the comm tail.
TRACE_NAMES = [KIND_LABELS[k] for k in KINDS] + [f"NVTX {p}" for p in PHASES] + ["comm tail"]
HOVER = "%{customdata[0]}<br>%{customdata[1]}<br>bucket %{customdata[2]} · %{customdata[3]}<extra></extra>"
# Bars narrower than span / PIXELS on a row are merged with their sub-pixel neighbours.
PIXELS = 2000


def _windows(steps: pd.DataFrame, kernels: pd.DataFrame) -> list[tuple[str, int, int, list]]:
    """(label, start_ns, end_ns, step indices) per step, spanning all ranks; the whole trace if no steps."""
    if steps is not None and len(steps):
        g = steps.groupby("step").agg(start_ns=("start_ns", "min"), end_ns=("end_ns", "max"))
        return [(f"step {int(s)}", int(r.start_ns), int(r.end_ns), [int(s)]) for s, r in g.iterrows()]
    if len(kernels):
        return [("whole trace", int(kernels.start_ns.min()), int(kernels.end_ns.max()), [])]
    return [("empty trace", 0, 1, [])]


def _rows(kernels: pd.DataFrame, phases: pd.DataFrame) -> tuple[list[str], pd.DataFrame]:
    """Row labels (per rank: an NVTX row, then its streams) and a frame mapping (rank, pid, device, stream)
    to a row index; stream -1 marks the NVTX row."""
    ranks = sorted(set(kernels["rank"].dropna().astype(int)) | set(phases["rank"].dropna().astype(int)))
    streams = kernels[["rank", "pid", "device", "stream"]].drop_duplicates().dropna(subset=["rank"])
    streams = streams.astype("int64").sort_values(["rank", "device", "stream", "pid"])
    labels, keys = [], []
    for r in ranks:
        labels.append(f"rank {r} · NVTX")
        keys.append((r, -1, -1, -1))
        mine = streams[streams["rank"] == r]
        multi = mine["device"].nunique() > 1
        for row in mine.itertuples(index=False):
            labels.append(f"rank {r} · " + (f"dev {row.device} " if multi else "") + f"stream {row.stream}")
            keys.append((r, row.pid, row.device, row.stream))
    table = pd.DataFrame(keys, columns=["rank", "pid", "device", "stream"]).astype("int64")
    table["row"] = np.arange(len(table))
    return labels, table


def _prepare(kernels, collectives, rows):
    """Kernels with row index, name index, bucket and bytes (NCCL kernels take them from the collectives)."""
    k = kernels.dropna(subset=["rank", "start_ns", "end_ns"]).copy()
    for c in ("rank", "pid", "device", "stream"):
        k[c] = k[c].astype("int64")
    k = k.merge(rows, on=["rank", "pid", "device", "stream"], how="inner")
    k["bytes_v"] = pd.to_numeric(k["bytes"], errors="coerce")
    k["bucket_v"] = np.nan
    if collectives is not None and len(collectives):
        c = collectives[["pid", "device", "stream", "start_ns", "bucket", "bytes"]].dropna(
            subset=["pid", "device", "stream", "start_ns"]).astype({"pid": "int64", "device": "int64",
                                                                  "stream": "int64", "start_ns": "int64"})
        c = c.drop_duplicates(["pid", "device", "stream", "start_ns"]).rename(
            columns={"bucket": "c_bucket", "bytes": "c_bytes"})
        k["start_ns"] = k["start_ns"].astype("int64")
        k = k.merge(c, on=["pid", "device", "stream", "start_ns"], how="left")
        k["bucket_v"] = pd.to_numeric(k["c_bucket"], errors="coerce")
        k["bytes_v"] = k["bytes_v"].fillna(pd.to_numeric(k["c_bytes"], errors="coerce"))
    codes, uniques = pd.factorize(k["name"].astype("string").fillna("?"))
    k["name_i"] = codes
    return k.sort_values(["row", "start_ns"]), [html.escape(str(u), quote=False) for u in uniques]


def _bars(row, start, end, name_i, bucket, nbytes, w0, min_ns) -> dict:
    """Merge sub-pixel bars and encode one trace's arrays (times in ms from the window start)."""
    order = np.lexsort((start, row))
    row, start, end = row[order], start[order], end[order]
    name_i, bucket, nbytes = name_i[order], bucket[order], nbytes[order]
    gid = merge_small_bars(row, start, end, min_ns)
    if len(gid) == 0:
        return {k: [] for k in ("base", "x", "y", "n", "b", "by", "c")}
    first = np.flatnonzero(np.r_[True, gid[1:] != gid[:-1]])
    count = np.diff(np.r_[first, len(gid)])
    g_end = np.maximum.reduceat(end, first)
    g_bytes = np.add.reduceat(np.nan_to_num(nbytes, nan=0.0), first)
    has_bytes = np.add.reduceat((~np.isnan(nbytes)).astype(np.int64), first) > 0
    g_bucket = np.where(count == 1, np.nan_to_num(bucket[first], nan=-1), -1)
    return {
        "base": np.round((start[first] - w0) / 1e6, 5).tolist(),
        "x": np.round((g_end - start[first]) / 1e6, 5).tolist(),
        "y": row[first].astype(int).tolist(),
        "n": name_i[first].astype(int).tolist(),
        "b": g_bucket.astype(int).tolist(),
        "by": np.where(has_bytes, g_bytes, -1).astype(np.int64).tolist(),
        "c": count.astype(int).tolist(),
    }


def timeline_steps(kernels: pd.DataFrame, phases: pd.DataFrame, steps: pd.DataFrame,
                   collectives: pd.DataFrame | None = None, *, pixels: int = PIXELS) -> dict:
    """Compact timeline data for every step: ``{"rows", "names", "steps": [{"label", "step", "span_ms",
    "traces": [9 × {base, x, y, n, b, by, c}]}]}``. ``names`` are HTML-escaped (plotly hover text is
    pseudo-HTML, so escaping keeps a kernel called ``<b>`` literal)."""
    labels, rows = _rows(kernels, phases)
    k, names = _prepare(kernels, collectives, rows)
    names_extra = {}

    def name_index(text):
        if text not in names_extra:
            names_extra[text] = len(names) + len(names_extra)
        return names_extra[text]

    k_start, k_end = k["start_ns"].to_numpy(np.float64), k["end_ns"].to_numpy(np.float64)
    by_start = np.argsort(k_start, kind="stable")
    sorted_start = k_start[by_start]
    max_dur = float((k_end - k_start).max()) if len(k) else 0.0
    nvtx_row = rows[rows["stream"] == -1].set_index("rank")["row"]
    ph = phases[phases["phase"].isin(PHASES)].dropna(subset=["start_ns", "end_ns"]) if len(phases) else phases
    out = []
    for label, w0, w1, step_ids in _windows(steps, k):
        min_ns = max((w1 - w0) / pixels, 1.0)
        lo, hi = np.searchsorted(sorted_start, [w0 - max_dur, w1])
        idx = by_start[lo:hi]
        idx = idx[k_end[idx] > w0]
        sub = k.iloc[idx]
        traces = []
        for kind in KINDS:
            s = sub[sub["kind"] == kind]
            traces.append(_bars(s["row"].to_numpy(), s["start_ns"].to_numpy(np.float64),
                                s["end_ns"].to_numpy(np.float64), s["name_i"].to_numpy(),
                                s["bucket_v"].to_numpy(np.float64), s["bytes_v"].to_numpy(np.float64),
                                w0, min_ns))
        for phase in PHASES:
            p = ph[(ph["phase"] == phase) & (ph["start_ns"] < w1) & (ph["end_ns"] > w0)] if len(ph) else ph
            p = p[p["rank"].isin(nvtx_row.index)] if len(p) else p
            n = len(p)
            traces.append(_bars(nvtx_row.loc[p["rank"]].to_numpy() if n else np.zeros(0, int),
                                p["start_ns"].to_numpy(np.float64), p["end_ns"].to_numpy(np.float64),
                                np.full(n, name_index(f"NVTX {phase}")), np.full(n, np.nan),
                                np.full(n, np.nan), w0, 0.0))
        tail = _tail_rows(steps, step_ids, nvtx_row)
        traces.append(_bars(tail["row"].to_numpy(), tail["s"].to_numpy(np.float64),
                            tail["e"].to_numpy(np.float64), np.full(len(tail), name_index("comm tail")),
                            np.full(len(tail), np.nan), np.full(len(tail), np.nan), w0, 0.0))
        out.append({"label": label, "step": step_ids[0] if step_ids else None,
                    "span_ms": round((w1 - w0) / 1e6, 4), "traces": traces})
    return {"rows": labels, "names": names + list(names_extra), "steps": out}


def _tail_rows(steps, step_ids, nvtx_row) -> pd.DataFrame:
    """Comm tail of each rank in the step: from the end of backward to the end of the last collective."""
    if steps is None or not len(steps) or not step_ids:
        return pd.DataFrame({"row": [], "s": [], "e": []})
    st = steps[steps["step"].isin(step_ids)].dropna(subset=["backward_end_ns", "comm_tail_ns"])
    st = st[(st["comm_tail_ns"] > 0) & st["rank"].isin(nvtx_row.index)]
    return pd.DataFrame({"row": nvtx_row.loc[st["rank"]].to_numpy(),
                         "s": st["backward_end_ns"].to_numpy(np.float64),
                         "e": (st["backward_end_ns"] + st["comm_tail_ns"]).to_numpy(np.float64)})


def _customdata(names: list[str], t: dict) -> list[list[str]]:
    """Hover fields per bar; STEP_SWITCH_JS's ddpCustom() builds the same strings in the browser."""
    out = []
    for x, n, b, by, c in zip(t["x"], t["n"], t["b"], t["by"], t["c"], strict=False):
        dur = f"{x * 1000:.1f} µs" if c == 1 else f"{c} kernels merged · span {x * 1000:.1f} µs"
        out.append([names[n], dur, "–" if b < 0 else str(b), fmt_bytes(by)])
    return out


def figure_for_step(data: dict, index: int = 0, source: str = ""):
    """Draw step ``index`` of :func:`timeline_steps` data: horizontal bars (no shapes), overlaid."""
    import plotly.graph_objects as go

    st = data["steps"][index]
    colors = [KIND_COLORS[k] for k in KINDS] + [PHASE_COLORS[p] for p in PHASES] + ["#222222"]
    fig = go.Figure()
    for i, (name, t) in enumerate(zip(TRACE_NAMES, st["traces"], strict=False)):
        tail = i == len(TRACE_NAMES) - 1
        fig.add_trace(go.Bar(
            orientation="h", name=name, base=t["base"], x=t["x"], y=t["y"], customdata=_customdata(
                data["names"], t), hovertemplate=HOVER, marker={"color": colors[i], "line": {"width": 0}},
            width=0.3 if tail else (0.8 if i < len(KINDS) else 0.6), offset=0.1 if tail else None,
            opacity=0.9))
    n = len(data["rows"])
    fig.update_layout(
        title=titled(f"Timeline · {st['label']}", source), barmode="overlay", bargap=0,
        height=max(260, 130 + 26 * n), hovermode="closest", legend={"orientation": "h", "y": -0.3},
        margin={"l": 150, "r": 20, "t": 70, "b": 40}, template="plotly_white",
        xaxis={"title": {"text": "time since step start (ms)"}, "zeroline": False},
        yaxis={"title": {"text": "rank · stream"}, "tickvals": list(range(n)), "ticktext": data["rows"],
               "autorange": "reversed", "fixedrange": True},
    )
    return fig


def timeline_figure(kernels: pd.DataFrame, phases: pd.DataFrame, steps: pd.DataFrame,
                    collectives: pd.DataFrame | None = None, *, step: int | None = None, source: str = ""):
    """Notebook entry point: the timeline of one step (default: the first profiled step)."""
    data = timeline_steps(kernels, phases, steps, collectives)
    index = 0
    if step is not None:
        found = [i for i, s in enumerate(data["steps"]) if s["step"] == step]
        if not found:
            raise ValueError(f"step {step} not in the trace (have {[s['step'] for s in data['steps']]})")
        index = found[0]
    return figure_for_step(data, index, source)


# Mirrors _customdata and figure_for_step's per-step arrays; the page calls ddpShowStep(div, data, i).
STEP_SWITCH_JS = """
function ddpBytes(n){if(n<0)return'\\u2013';var u=['B','KiB','MiB','GiB'],i=0;
 while(n>=1024&&i<3){n/=1024;i++;}return i===0?n.toFixed(0)+' B':n.toFixed(1)+' '+u[i];}
function ddpCustom(names,t){var out=new Array(t.x.length);for(var j=0;j<t.x.length;j++){
 var us=(t.x[j]*1000).toFixed(1);var d=t.c[j]===1?us+' \\u00b5s':t.c[j]+' kernels merged \\u00b7 span '+us+' \\u00b5s';
 out[j]=[names[t.n[j]],d,t.b[j]<0?'\\u2013':String(t.b[j]),ddpBytes(t.by[j])];}return out;}
function ddpShowStep(div,data,i,titleHead){var st=data.steps[i],u={x:[],base:[],y:[],customdata:[]},idx=[];
 st.traces.forEach(function(t,k){u.x.push(t.x);u.base.push(t.base);u.y.push(t.y);
  u.customdata.push(ddpCustom(data.names,t));idx.push(k);});
 var lay={'xaxis.autorange':true};
 if(div.layout&&div.layout.title){lay['title.text']=div.layout.title.text.replace(/Timeline \\u00b7 [^<]*/,'Timeline \\u00b7 '+st.label);}
 return Plotly.update(div,u,lay,idx);}
"""
