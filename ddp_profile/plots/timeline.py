"""The per-run timeline: one row per rank × stream, kernels coloured by class, NVTX phases as bands, the
comm tail marked; one training step at a time.

Why not one SVG bar per kernel: a 1 M-kernel run cannot be drawn as 1 M bars. Instead
:func:`timeline_steps` keeps, per step, every kernel as compact sorted arrays per (row, kind) ("tracks":
start deltas and durations in ns, name index; bucket, bytes, wait and transfer for NCCL), and the bars are
aggregated *for the visible window at pixel resolution*: sub-pixel kernels of one kind on one row merge
(:func:`~ddp_profile.plots.figure_parts.merge_small_bars`), kinds never merge, and every kind has its own lane
in the row, so a merged compute bar can never hide a memset or an NCCL kernel. :func:`figure_for_step`
does this in Python for the whole step (a plotly figure, for notebooks); the run page embeds the same data
packed as typed-array columns (:func:`encode_for_page`) and its canvas chart,
:data:`~ddp_profile.plots.timeline_js.TIMELINE_JS`, redoes the aggregation on every zoom, so zooming in
separates kernels down to single ones. A merged bar's tooltip says how many kernels of which kind it holds.
"""

from __future__ import annotations

import base64
import html

import numpy as np
import pandas as pd

from ddp_profile import schema
from ddp_profile.fmt import fmt_bytes, fmt_duration
from ddp_profile.plots import palette
from ddp_profile.plots.figure_parts import KIND_LABELS, merge_small_bars, titled
from ddp_profile.plots.palette import HOST_COLORS, KIND_COLORS, MEMSET_PATTERN, PHASE_COLORS, TAIL
from ddp_profile.plots.timeline_rows import timeline_rows

KINDS = ["compute", "nccl", "memcpy", "memset"]
PHASES = list(schema.PHASES)
HOST_KINDS = ["launch", "sync"]
# Fixed trace order (the JS fills traces by index): 4 kernel classes, 4 phases, the comm tail, then the
# main thread's launch and synchronisation calls (the CPU rows).
TRACE_NAMES = (
    [KIND_LABELS[k] for k in KINDS]
    + [f"NVTX {p}" for p in PHASES]
    + ["comm tail"]
    + ["CPU kernel launch", "CPU sync (host waits for GPU)"]
)
TAIL_K = len(KINDS) + len(PHASES)
HOST_K = TAIL_K + 1  # first CPU trace
PLURAL = (
    ["compute kernels", "NCCL kernels", "memcpys", "memsets"]
    + [""] * (HOST_K - len(KINDS))
    + ["launch calls", "sync calls"]
)
CALL_LABELS = {HOST_K: "kernel launch · CPU", HOST_K + 1: "sync, host waits for the GPU · CPU"}
# (offset, width) of each trace's lane within its row (rows are 1 apart, the axis is reversed: negative
# offsets are the upper part of the row). Kinds never share a lane, so no kind hides another.
LANES = [
    (-0.42, 0.42),
    (0.02, 0.22),
    (0.26, 0.08),
    (0.35, 0.08),
    (-0.42, 0.36),
    (-0.42, 0.36),
    (-0.42, 0.36),
    (-0.04, 0.24),
    (0.24, 0.2),
    (-0.42, 0.4),
    (0.02, 0.4),
]


def mergeable(k: int) -> bool:
    """Kernels and CPU calls merge below a pixel; NVTX phases and the comm tail never do."""
    return k < len(KINDS) or k >= HOST_K


HOVER = "%{hovertext}<extra></extra>"
# The figure's default plot width in pixels (the page uses the real width of the drawn plot).
PIXELS = 1200
NCCL_FIELDS = ("b", "by", "w", "t")  # bucket, bytes, wait_ns, transfer_ns (-1: unknown)


def _windows(steps: pd.DataFrame, kernels: pd.DataFrame) -> list[tuple[str, int, int, list]]:
    """(label, start_ns, end_ns, step indices) per step, spanning all ranks; the whole trace if no steps."""
    if steps is not None and len(steps):
        g = steps.groupby("step").agg(start_ns=("start_ns", "min"), end_ns=("end_ns", "max"))
        return [(f"step {int(s)}", int(r.start_ns), int(r.end_ns), [int(s)]) for s, r in g.iterrows()]
    if len(kernels):
        return [("whole trace", int(kernels.start_ns.min()), int(kernels.end_ns.max()), [])]
    return [("empty trace", 0, 1, [])]


def _in_steps(kernels: pd.DataFrame, steps: pd.DataFrame | None) -> pd.DataFrame:
    """The kernels overlapping some step's window (every kernel without steps): the timeline draws step
    windows only, so a stream used only between steps (data loading, logging, evaluation) would be an empty
    row in every view. A kernel [s, e) overlaps a window [a, b) when a < e and b > s; with windows sorted by
    start, the last window starting before e and the latest end among it and those before it decide::

        windows  [a0---b0)   [a1------b1)
        kernel              [s--e)           overlaps: a1 < e, max(b0, b1) > s
        kernel          [s-e)                no: a1 >= e, b0 <= s
    """
    if steps is None or not len(steps) or not len(kernels):
        return kernels
    g = steps.groupby("step").agg(a=("start_ns", "min"), b=("end_ns", "max")).sort_values("a")
    a, b_max = g["a"].to_numpy(np.int64), np.maximum.accumulate(g["b"].to_numpy(np.int64))
    k = kernels.dropna(subset=["start_ns", "end_ns"])
    s, e = k["start_ns"].to_numpy(np.int64), k["end_ns"].to_numpy(np.int64)
    i = np.searchsorted(a, e, side="left") - 1
    return k[(i >= 0) & (b_max[np.maximum(i, 0)] > s)]


def _ints(values) -> np.ndarray:
    """Integers with -1 for missing."""
    return (
        pd.to_numeric(pd.Series(values), errors="coerce")
        .astype("float64")
        .fillna(-1)
        .round()
        .astype(np.int64)
        .to_numpy()
    )


def _prepare(kernels, collectives, rows):
    """Kernels with row, kind code, name index, and for NCCL kernels bucket, bytes, wait and transfer from
    the analysis's collectives (joined by rank + start_ns; the kernel's own bytes column fills gaps)."""
    k = kernels[["rank", "pid", "device", "stream", "start_ns", "end_ns", "name", "kind", "bytes"]]
    k = k.dropna(subset=["rank", "start_ns", "end_ns"])
    k = k.astype({c: "int64" for c in ("rank", "pid", "device", "stream", "start_ns", "end_ns")})
    k = k.merge(rows, on=["rank", "pid", "device", "stream"], how="inner")
    k["kc"] = k["kind"].map({kind: i for i, kind in enumerate(KINDS)}).fillna(0).astype(np.int64)
    none = pd.Series(np.nan, index=k.index)
    extra = {"b": none, "by": pd.to_numeric(k["bytes"], errors="coerce"), "w": none, "t": none}
    if collectives is not None and len(collectives):
        c = (
            collectives[["rank", "start_ns", "bucket", "bytes", "wait_ns", "transfer_ns"]]
            .dropna(subset=["rank", "start_ns"])
            .astype({"rank": "int64", "start_ns": "int64"})
        )
        c = c.drop_duplicates(["rank", "start_ns"]).rename(columns={"bytes": "c_bytes"})
        k = k.merge(c, on=["rank", "start_ns"], how="left")
        extra = {
            "b": k["bucket"],
            "by": pd.to_numeric(k["c_bytes"], errors="coerce").fillna(
                pd.to_numeric(k["bytes"], errors="coerce")
            ),
            "w": k["wait_ns"],
            "t": k["transfer_ns"],
        }
    for f in NCCL_FIELDS:
        k[f] = _ints(extra[f])
    codes, uniques = pd.factorize(k["name"])
    names = [html.escape(str(u), quote=False) for u in uniques]
    k["name_i"] = np.where(codes < 0, len(names), codes)
    names.append("?")
    order = np.lexsort((k["start_ns"].to_numpy(), k["row"].to_numpy(), k["kc"].to_numpy()))
    keep = ["row", "kc", "name_i", "start_ns", "end_ns", *NCCL_FIELDS]
    return pd.DataFrame({c: k[c].to_numpy()[order] for c in keep}), names


def _track(
    k: int,
    row: int,
    start: np.ndarray,
    end: np.ndarray,
    name_i: np.ndarray,
    w0: int,
    extra: dict | None = None,
) -> dict:
    """One (trace, row) track: starts as deltas (the first relative to the window start), durations, names;
    all integers (ns)."""
    start = start.astype(np.int64) - w0
    t = {
        "k": int(k),
        "r": int(row),
        "s": np.diff(start, prepend=0).tolist(),
        "d": np.maximum(end.astype(np.int64) - w0 - start, 0).tolist(),
        "n": name_i.astype(int).tolist(),
    }
    if extra:
        t.update({f: v.tolist() for f, v in extra.items()})
    return t


def timeline_steps(
    kernels: pd.DataFrame,
    phases: pd.DataFrame,
    steps: pd.DataFrame,
    collectives: pd.DataFrame | None = None,
    *,
    host_calls: pd.DataFrame | None = None,
    nvtx: pd.DataFrame | None = None,
    inferred: bool = False,
) -> dict:
    """Compact timeline data for every step: ``{"rows", "names", "phase_source", "steps": [{"label", "step",
    "span_ms", "t0_ns", "tracks": [{k, r, s, d, n[, b, by, w, t]}]}]}``: every kernel overlapping the step, per
    (trace, row), sorted by start; ``t0_ns``: the step window's start after the first step's (the page's
    all-steps view lays steps end to end with it). ``names`` are HTML-escaped (plotly hover text is
    pseudo-HTML, so escaping keeps a kernel called ``<b>`` literal).

    ``host_calls`` (``analysis.host_calls``): each rank's main-thread launch and sync calls, drawn on a CPU
    row. ``nvtx``: the trace's NVTX ranges; a phase band is labelled with the user's own range name (e.g.
    ``model.forward``) when its host range is one of them. ``inferred``: the phases were inferred from the
    launching threads, not NVTX (bands and rows say "inferred")."""
    cpu = host_calls if host_calls is not None and len(host_calls) else None
    cpu_ranks = set(cpu["rank"].astype(int)) if cpu is not None else set()
    labels, rows, row_rank, row_fold = timeline_rows(_in_steps(kernels, steps), phases, cpu_ranks, inferred)
    k, names = _prepare(kernels, collectives, rows)
    names_extra: dict[str, int] = {}

    def name_index(text):
        if text not in names_extra:
            names_extra[text] = len(names) + len(names_extra)
        return names_extra[text]

    k_start, k_end = k["start_ns"].to_numpy(np.int64), k["end_ns"].to_numpy(np.int64)
    by_start = np.argsort(k_start, kind="stable")
    sorted_start = k_start[by_start]
    max_dur = int((k_end - k_start).max()) if len(k) else 0
    key = (k["kc"].to_numpy() * (len(labels) + 1) + k["row"].to_numpy()).astype(np.int64)
    cols = {c: k[c].to_numpy() for c in ("row", "kc", "name_i", *NCCL_FIELDS)}
    # The NVTX row's key is (rank, -1, -1, -1), the CPU row's (rank, -2, -2, -2): stream -1 alone is a legal
    # CUDA stream id (seen in exports)
    nvtx_row = rows[(rows["stream"] == -1) & (rows["pid"] == -1) & (rows["device"] == -1)].set_index("rank")[
        "row"
    ]
    cpu_row = rows[(rows["stream"] == -2) & (rows["pid"] == -2) & (rows["device"] == -2)].set_index("rank")[
        "row"
    ]
    marks = _marks(labelled_phases(phases, nvtx, inferred), steps, nvtx_row, name_index)  # phases and tails
    m_key = marks["k"] * (len(labels) + 1) + marks["row"]
    calls = _calls(cpu, cpu_row, name_index)
    c_key = calls["k"] * (len(labels) + 1) + calls["row"]
    c_by_start = np.argsort(calls["s"], kind="stable")
    c_sorted = calls["s"][c_by_start]
    c_max = int((calls["e"] - calls["s"]).max()) if len(calls["s"]) else 0
    out = []
    windows = _windows(steps, k)
    first_w0 = windows[0][1] if windows else 0
    for label, w0, w1, step_ids in windows:
        lo, hi = np.searchsorted(sorted_start, [w0 - max_dur, w1])
        idx = by_start[lo:hi]
        idx = np.sort(idx[k_end[idx] > w0])  # back in (kind, row, start) order
        tracks = []
        for a, b in _runs(key[idx]):
            sel = idx[a:b]
            kc = int(cols["kc"][sel[0]])
            extra = {f: cols[f][sel] for f in NCCL_FIELDS} if KINDS[kc] == "nccl" else None
            tracks.append(
                _track(kc, cols["row"][sel[0]], k_start[sel], k_end[sel], cols["name_i"][sel], w0, extra)
            )
        lo, hi = np.searchsorted(c_sorted, [w0 - c_max, w1])
        ci = c_by_start[lo:hi]
        ci = np.sort(ci[calls["e"][ci] > w0])  # (trace, row, start) order
        for a, b in _runs(c_key[ci]):
            sel = ci[a:b]
            tracks.append(
                _track(
                    calls["k"][sel[0]],
                    calls["row"][sel[0]],
                    calls["s"][sel],
                    calls["e"][sel],
                    calls["n"][sel],
                    w0,
                )
            )
        in_step = (
            (marks["s"] < w1)
            & (marks["e"] > w0)
            & ((marks["k"] != TAIL_K) | np.isin(marks["step"], step_ids))
        )
        m = np.flatnonzero(in_step)
        for a, b in _runs(m_key[m]):
            sel = m[a:b]
            tracks.append(
                _track(
                    marks["k"][sel[0]],
                    marks["row"][sel[0]],
                    marks["s"][sel],
                    marks["e"][sel],
                    marks["n"][sel],
                    w0,
                )
            )
        out.append(
            {
                "label": label,
                "step": step_ids[0] if step_ids else None,
                "span_ms": round((w1 - w0) / 1e6, 6),
                "t0_ns": int(w0 - first_w0),
                "tracks": tracks,
            }
        )
    return {
        "rows": labels,
        "row_rank": row_rank,
        "row_fold": row_fold,
        "names": names + list(names_extra),
        "phase_source": "inferred" if inferred else "NVTX",
        "steps": out,
    }


def labelled_phases(phases: pd.DataFrame, nvtx: pd.DataFrame | None, inferred: bool) -> pd.DataFrame:
    """The phase rows with a ``label``: "forward (inferred)" for inferred phases; the user's NVTX range name
    with its phase, e.g. "model.forward (forward)", when the phase's host range is an NVTX range of that rank
    named otherwise; else "NVTX forward"."""
    if not len(phases):
        return phases.assign(label=pd.Series(dtype=object))
    if inferred:
        return phases.assign(label=phases["phase"].astype(str) + " (inferred)")
    label = "NVTX " + phases["phase"].astype(str)
    if nvtx is not None and len(nvtx) and {"host_start_ns", "host_end_ns"} <= set(phases.columns):
        n = nvtx[["rank", "start_ns", "end_ns", "name"]].dropna(subset=["rank", "start_ns", "end_ns"])
        n = n.astype({"rank": "int64", "start_ns": "int64", "end_ns": "int64"}).drop_duplicates(
            ["rank", "start_ns", "end_ns"]
        )
        p = phases[["rank", "host_start_ns", "host_end_ns"]].apply(pd.to_numeric, errors="coerce")
        p = p.fillna(-1).astype("int64").reset_index(drop=True)
        got = (
            p.merge(
                n,
                left_on=["rank", "host_start_ns", "host_end_ns"],
                right_on=["rank", "start_ns", "end_ns"],
                how="left",
            )["name"]
            .astype(object)
            .to_numpy()
        )
        phase = phases["phase"].astype(str).to_numpy()
        label = pd.Series(
            [
                f"{nm} ({ph})" if isinstance(nm, str) and nm != ph else f"NVTX {ph}"
                for nm, ph in zip(got, phase, strict=True)
            ],
            index=phases.index,
        )
    return phases.assign(label=label)


def _calls(cpu: pd.DataFrame | None, cpu_row: pd.Series, name_index) -> dict:
    """The CPU rows' calls as arrays sorted by (trace, row, start): k, row, s, e, n."""
    cols = ["k", "row", "s", "e", "n"]
    if cpu is None or not len(cpu):
        return {c: np.zeros(0, np.int64) for c in cols}
    c = cpu[cpu["rank"].astype(int).isin(cpu_row.index)]
    codes, uniq = pd.factorize(c["name"].astype(object))
    idx = np.array([name_index(html.escape(str(u), quote=False)) for u in uniq] + [name_index("?")], np.int64)
    m = pd.DataFrame(
        {
            "k": np.where(c["kind"].to_numpy() == "sync", HOST_K + 1, HOST_K),
            "row": cpu_row.loc[c["rank"].astype(int)].to_numpy(),
            "s": c["start_ns"].to_numpy(np.int64),
            "e": c["end_ns"].to_numpy(np.int64),
            "n": idx[np.where(codes < 0, len(uniq), codes)],
        }
    ).astype("int64")
    m = m.sort_values(["k", "row", "s"], kind="stable")
    return {col: m[col].to_numpy() for col in cols}


# ---- the page's form of the data: per track, each integer column as base64 of a little-endian typed array ----


def pack_column(values) -> str:
    """'h:' + base64 of uint16, 'i:' of int32 or 'f:' of float64 (exact below 2**53), the narrowest that
    holds every value; the browser reads it as a typed array without parsing numbers."""
    a = np.asarray(values, dtype=np.int64)
    lo, hi = (int(a.min()), int(a.max())) if a.size else (0, 0)
    code, dtype = (
        ("h", "<u2")
        if lo >= 0 and hi < 2**16
        else ("i", "<i4")
        if -(2**31) <= lo and hi < 2**31
        else ("f", "<f8")
    )
    return code + ":" + base64.b64encode(a.astype(dtype).tobytes()).decode("ascii")


def unpack_column(text: str) -> list[int]:
    dtype = {"h": "<u2", "i": "<i4", "f": "<f8"}[text[0]]
    return np.frombuffer(base64.b64decode(text[2:]), dtype=dtype).astype(np.int64).tolist()


COLUMNS = ("s", "d", "n", *NCCL_FIELDS)


def encode_for_page(data: dict) -> dict:
    """:func:`timeline_steps` data with every track column packed by :func:`pack_column` (what the run page
    embeds: a third of the JSON's parse work is gone and a step is decoded only when it is shown)."""
    steps = [
        dict(
            st,
            tracks=[{f: pack_column(v) if f in COLUMNS else v for f, v in t.items()} for t in st["tracks"]],
        )
        for st in data["steps"]
    ]
    return dict(data, steps=steps)


def decode_page_data(data: dict) -> dict:
    """The inverse of :func:`encode_for_page` (tests, tools reading a page back)."""
    steps = [
        dict(
            st,
            tracks=[{f: unpack_column(v) if f in COLUMNS else v for f, v in t.items()} for t in st["tracks"]],
        )
        for st in data["steps"]
    ]
    return dict(data, steps=steps)


def page_config(data: dict, source: str) -> dict:
    """What the page's canvas timeline (:data:`~ddp_profile.plots.timeline_js.TIMELINE_JS`) needs beside the
    data: per trace its name, colour, lane, opacity and hatching (the same as :func:`figure_for_step`)."""
    colors = trace_colors()
    return {
        "source": source,
        "xtitle": "time since step start (ms)",
        "traces": [
            {
                "name": name,
                "color": colors[i],
                "lane": list(LANES[i]),
                "opacity": 0.8 if len(KINDS) <= i < HOST_K else 0.95,
                "hatch": name == KIND_LABELS["memset"],
            }
            for i, name in enumerate(trace_names(data))
        ],
    }


def trace_names(data: dict) -> list[str]:
    """The legend's names: phases say "inferred" when they were inferred rather than read from NVTX."""
    src = data.get("phase_source", "NVTX")
    return [
        f"{p} (inferred)" if src == "inferred" and n == f"NVTX {p}" else n
        for n, p in zip(TRACE_NAMES, KINDS + PHASES + [""] * 3, strict=True)
    ]


def trace_colors() -> list[str]:
    return (
        [KIND_COLORS[k] for k in KINDS]
        + [PHASE_COLORS[p] for p in PHASES]
        + [TAIL, HOST_COLORS["launch"], HOST_COLORS["sync"]]
    )


def _runs(keys: np.ndarray):
    """(start, stop) of each run of equal consecutive keys."""
    if not len(keys):
        return []
    first = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    return list(zip(first.tolist(), np.r_[first[1:], len(keys)].tolist(), strict=False))


def _marks(phases, steps, nvtx_row, name_index) -> dict:
    """NVTX phases (traces 4-7) and comm tails (trace 8) of every rank as arrays sorted by (trace, row,
    start): k, row, s, e, n (name index), step (tails only; -1 otherwise)."""
    parts = []
    ph = phases[phases["phase"].isin(PHASES)].dropna(subset=["start_ns", "end_ns"]) if len(phases) else phases
    ph = ph[ph["rank"].isin(nvtx_row.index)] if len(ph) else ph
    for j, phase in enumerate(PHASES):
        p = ph[ph["phase"] == phase] if len(ph) else ph
        if len(p):
            labels = p["label"] if "label" in p else pd.Series(f"NVTX {phase}", index=p.index)
            parts.append(
                pd.DataFrame(
                    {
                        "k": len(KINDS) + j,
                        "row": nvtx_row.loc[p["rank"]].to_numpy(),
                        "s": p["start_ns"].to_numpy(np.int64),
                        "e": p["end_ns"].to_numpy(np.int64),
                        "n": [name_index(html.escape(str(x), quote=False)) for x in labels],
                        "step": -1,
                    }
                )
            )
    tail = _tail_rows(steps, None, nvtx_row)
    if len(tail):
        parts.append(tail.assign(k=TAIL_K, n=name_index("comm tail")))
    cols = ["k", "row", "s", "e", "n", "step"]
    if not parts:
        return {c: np.zeros(0, np.int64) for c in cols}
    m = (
        pd.concat(parts, ignore_index=True)[cols]
        .astype("int64")
        .sort_values(["k", "row", "s"], kind="stable")
    )
    return {c: m[c].to_numpy() for c in cols}


def _tail_rows(steps, step_ids, nvtx_row) -> pd.DataFrame:
    """Comm tail of each rank and step (all steps when ``step_ids`` is None): from the end of backward to
    the end of the last collective."""
    if steps is None or not len(steps):
        return pd.DataFrame({"row": [], "s": [], "e": [], "step": []})
    st = steps if step_ids is None else steps[steps["step"].isin(step_ids)]
    st = st.dropna(subset=["backward_end_ns", "comm_tail_ns"])
    st = st[(st["comm_tail_ns"] > 0) & st["rank"].isin(nvtx_row.index)]
    return pd.DataFrame(
        {
            "row": nvtx_row.loc[st["rank"]].to_numpy(),
            "s": st["backward_end_ns"].to_numpy(np.int64),
            "e": (st["backward_end_ns"] + st["comm_tail_ns"]).to_numpy(np.int64),
            "step": st["step"].to_numpy(np.int64),
        }
    )


def _hover(
    data: dict, st: dict, t: dict, a: int, b: int, start: np.ndarray, end: np.ndarray, dur: np.ndarray
) -> str:
    """The tooltip of the bar holding kernels a..b-1 of track t; TIMELINE_JS's ddpHover() builds the same."""
    k, row, c = t["k"], data["rows"][t["r"]], b - a
    where = f"start {fmt_duration(start[a])}"
    if not mergeable(k):  # NVTX phase or comm tail: never merged
        head = f"<b>{data['names'][t['n'][a]]}</b>" + (f" · {st['label']}" if k == TAIL_K else "")
        tail = "<br>end of backward → end of the last collective" if k == TAIL_K else ""
        return f"{head}<br>{row}<br>{where} · duration {fmt_duration(dur[a])}{tail}"
    what = CALL_LABELS[k] if k >= HOST_K else KIND_LABELS[KINDS[k]]
    if c == 1:
        text = (
            f"<b>{data['names'][t['n'][a]]}</b><br>{what} · {row}<br>"
            f"{where} · duration {fmt_duration(dur[a])}"
        )
    else:
        span = float(np.max(end[a:b]) - start[a])
        text = (
            f"<b>{c} {PLURAL[k]} merged</b> (zoom in to separate)<br>{row}<br>{where} · span "
            f"{fmt_duration(span)} · busy {fmt_duration(float(dur[a:b].sum()))}<br>"
            f"first: {data['names'][t['n'][a]]}"
        )
    if "b" in t:
        bk, by = np.array(t["b"][a:b]), np.array(t["by"][a:b])
        w, tr = np.array(t["w"][a:b]), np.array(t["t"][a:b])
        known = bk[bk >= 0]
        # unknown bucket or size: left out, never a '–' or a dangling separator
        parts = []
        if len(known):
            bucket = str(known.min()) if known.min() == known.max() else f"{known.min()}–{known.max()}"
            parts.append(f"bucket{'s' if c > 1 else ''} {bucket}")
        if (by >= 0).any():
            parts.append(fmt_bytes(by[by >= 0].sum()))
        if parts:
            text += "<br>" + " · ".join(parts)
        if (w >= 0).any():
            text += f"<br>wait {fmt_duration(float(w[w >= 0].sum()))} · transfer {fmt_duration(float(tr[tr >= 0].sum()))}"  # noqa: E501
    return text


def bars_for_window(data: dict, index: int, lo_ns: float, hi_ns: float, min_ns: float) -> list[dict]:
    """The 9 traces' bars ({base, x, y, hovertext}, times in ms from the step start) for kernels overlapping
    [lo_ns, hi_ns] of step ``index``, merging sub-``min_ns`` kernels per track (never across kinds, never
    phases or the tail). Bars are drawn at least ``min_ns`` wide (one pixel), the tooltip says the truth."""
    st = data["steps"][index]
    out: list[dict[str, list]] = [{"base": [], "x": [], "y": [], "hovertext": []} for _ in TRACE_NAMES]
    for t in st["tracks"]:
        start = np.cumsum(np.asarray(t["s"], dtype=np.int64)).astype(np.float64)
        dur = np.asarray(t["d"], dtype=np.float64)
        end = start + dur
        keep = np.flatnonzero((end >= lo_ns) & (start <= hi_ns))
        if not len(keep):
            continue
        mn = min_ns if mergeable(t["k"]) else 0.0
        sl = slice(keep[0], keep[-1] + 1)
        gid = merge_small_bars(np.zeros(sl.stop - sl.start, np.int64), start[sl], end[sl], mn)
        first = np.flatnonzero(np.r_[True, gid[1:] != gid[:-1]]) + sl.start
        stops = np.r_[first[1:], sl.stop]
        o = out[t["k"]]
        for a, b in zip(first, stops, strict=False):
            span = float(np.max(end[a:b]) - start[a])
            o["base"].append(round(start[a] / 1e6, 6))
            o["x"].append(round(max(span, mn) / 1e6, 6))
            o["y"].append(t["r"])
            o["hovertext"].append(_hover(data, st, t, a, b, start, end, dur))
    return out


def figure_for_step(data: dict, index: int = 0, source: str = "", *, pixels: int = PIXELS):
    """Draw step ``index`` of :func:`timeline_steps` data as a plotly figure (notebooks), aggregated for
    ``pixels`` of width."""
    import plotly.graph_objects as go

    st = data["steps"][index]
    span = max(st["span_ms"] * 1e6, 1.0)
    drawn = bars_for_window(data, index, -np.inf, np.inf, span / pixels)
    # folded streams draw on their rank's shared row (the page can unfold them; a static figure cannot)
    fold = data.get("row_fold") or [-1] * len(data["rows"])
    shown = [r for r, f in enumerate(fold) if f < 0]
    pos = {r: p for p, r in enumerate(shown)}
    for b in drawn:
        b["y"] = [pos[fold[y]] if fold[y] >= 0 else pos[y] for y in b["y"]]
    colors = trace_colors()
    fig = go.Figure()
    for i, (name, b) in enumerate(zip(trace_names(data), drawn, strict=False)):
        marker = {"color": colors[i], "line": {"width": 0}}
        if name == KIND_LABELS["memset"]:
            marker["pattern"] = MEMSET_PATTERN
        fig.add_trace(
            go.Bar(
                orientation="h",
                name=name,
                base=b["base"],
                x=b["x"],
                y=b["y"],
                hovertext=b["hovertext"],
                hovertemplate=HOVER,
                marker=marker,
                offset=LANES[i][0],
                width=LANES[i][1],
                opacity=0.8 if len(KINDS) <= i < HOST_K else 0.95,
            )
        )
    n = len(shown)
    fig.update_layout(
        title=titled(f"Timeline · {st['label']}", source),
        barmode="overlay",
        bargap=0,
        height=max(320, 170 + 44 * n),
        hovermode="closest",
        legend={"orientation": "h", "y": -0.3},
        margin={"l": 150, "r": 20, "t": 70, "b": 40},
        template="plotly_white",
        colorway=palette.SERIES,
        xaxis={"title": {"text": "time since step start (ms)"}, "zeroline": False},
        yaxis={
            "title": {"text": "rank · stream"},
            "tickvals": list(range(n)),
            "ticktext": [data["rows"][r] for r in shown],
            "autorange": "reversed",
            "fixedrange": True,
        },
    )
    return fig


def timeline_figure(
    kernels: pd.DataFrame,
    phases: pd.DataFrame,
    steps: pd.DataFrame,
    collectives: pd.DataFrame | None = None,
    *,
    step: int | None = None,
    source: str = "",
):
    """Notebook entry point: the timeline of one step (default: the first profiled step)."""
    data = timeline_steps(kernels, phases, steps, collectives)
    index = 0
    if step is not None:
        found = [i for i, s in enumerate(data["steps"]) if s["step"] == step]
        if not found:
            raise ValueError(f"step {step} not in the trace (have {[s['step'] for s in data['steps']]})")
        index = found[0]
    return figure_for_step(data, index, source)
