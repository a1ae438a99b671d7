"""A run as Chrome trace-event JSON, which ui.perfetto.dev (and chrome://tracing) opens: one process per
rank, one thread (track) per CUDA stream, every kernel a complete event ("X") with its kind, and for NCCL
kernels collective, bucket, bytes, wait_ns and transfer_ns from the analysis; the NVTX steps and phases of
each rank on its "host (NVTX)" track. Timestamps are µs (floats, ns precision) since the trace start.

The library side of ``ddp-profile export --format perfetto``; the report writes the file beside a run page
when it is small (:func:`fits_in_report`), and the page links it (:func:`link_html`).
"""

from __future__ import annotations

import gzip
import json
from itertools import repeat
from pathlib import Path

import numpy as np
import pandas as pd

from ddp_profile.plots.timeline import labelled_phases
from ddp_profile.report.answer_text import phases_inferred
from ddp_profile.safeio import write_bytes_atomic

REPORT_LIMIT_BYTES = 20_000_000
BYTES_PER_KERNEL = 150  # a kernel event with its args, generously (NCCL events run to ~260, compute ~150)
HOST_TID = 0


def _us(ns, t0) -> np.ndarray:
    return np.round((np.asarray(ns, dtype=np.float64) - t0) / 1e3, 3)


def trace_events(trace, analysis) -> dict:
    """``{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}`` for a loaded trace and its
    analysis (``analysis`` may be None: kernels only, no NCCL wait/transfer, no NVTX phases)."""
    meta, cols, phase_events, other = _parts(trace, analysis)
    return {
        "traceEvents": meta + _kernel_events(cols) + phase_events,
        "displayTimeUnit": "ms",
        "otherData": other,
    }


def trace_json(trace, analysis) -> str:
    """``json.dumps(trace_events(trace, analysis), separators=(",", ":"), allow_nan=False)``, the same text,
    with the kernel events (all but a few of the events) written a column at a time rather than as one dict
    per kernel: the report writes this file for every run."""
    meta, cols, phase_events, other = _parts(trace, analysis)
    head = _dumps(meta)[1:-1]
    tail = _dumps(phase_events)[1:-1]
    body = ",".join(x for x in (head, _kernel_json(cols), tail) if x)
    return '{"traceEvents":[' + body + '],"displayTimeUnit":"ms","otherData":' + _dumps(other) + "}"


def _dumps(value) -> str:
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


def _parts(trace, analysis):
    """(metadata events, kernel columns, phase events, otherData) of :func:`trace_events`."""
    k = trace.kernels.dropna(subset=["rank", "start_ns", "end_ns"])
    phases = getattr(analysis, "phases", None)
    phases = (
        phases
        if phases is not None
        else pd.DataFrame(columns=["rank", "step", "phase", "start_ns", "end_ns"])
    )
    ph = phases.assign(
        hs=phases.get("host_start_ns", phases["start_ns"]).fillna(phases["start_ns"]),
        he=phases.get("host_end_ns", phases["end_ns"]).fillna(phases["end_ns"]),
    )
    ph = ph.dropna(subset=["rank", "hs", "he"])
    inferred = phases_inferred(analysis) if analysis is not None else False
    if len(ph):  # the user's own NVTX names, or "forward (inferred)" for inferred phases
        ph = labelled_phases(ph, getattr(trace, "nvtx", None), inferred)
    starts = [float(k["start_ns"].min())] if len(k) else []
    starts += [float(ph["hs"].min())] if len(ph) else []
    t0 = min(starts) if starts else 0.0
    events: list[dict] = []
    ranks = sorted(set(k["rank"].astype(int)) | set(ph["rank"].astype(int)))
    tids = {}
    for r in ranks:
        events.append(
            {"ph": "M", "pid": r, "tid": HOST_TID, "name": "process_name", "args": {"name": f"rank {r}"}}
        )
        events.append(
            {"ph": "M", "pid": r, "tid": HOST_TID, "name": "process_sort_index", "args": {"sort_index": r}}
        )
        host = "host (inferred steps and phases)" if inferred else "host (NVTX)"
        events.append({"ph": "M", "pid": r, "tid": HOST_TID, "name": "thread_name", "args": {"name": host}})
        mine = (
            k[k["rank"] == r][["device", "stream"]]
            .drop_duplicates()
            .astype("int64")
            .sort_values(["device", "stream"])
        )
        multi = mine["device"].nunique() > 1
        for i, (dev, stream) in enumerate(mine.itertuples(index=False), start=1):
            tids[(r, dev, stream)] = i
            name = (f"dev {dev} " if multi else "") + f"stream {stream}"
            events.append({"ph": "M", "pid": r, "tid": i, "name": "thread_name", "args": {"name": name}})
            events.append(
                {"ph": "M", "pid": r, "tid": i, "name": "thread_sort_index", "args": {"sort_index": i}}
            )
    cols = _kernel_columns(k, getattr(analysis, "collectives", None), tids, t0)
    other = {
        "generator": "ddp-profile",
        "time_origin_ns": int(t0),
        "note": "ts/dur in µs since time_origin_ns; pid = rank, one thread per CUDA stream",
    }
    return events, cols, _phase_events(ph, t0, inferred), other


def _kernel_columns(k: pd.DataFrame, collectives, tids: dict, t0: float) -> dict:
    """The kernel events' fields as columns (lists), rows in (rank, device, stream, start) order."""
    k = k.assign(
        rank=k["rank"].astype("int64"),
        device=k["device"].astype("int64"),
        stream=k["stream"].astype("int64"),
        start_ns=k["start_ns"].astype("int64"),
    )
    k = k.sort_values(["rank", "device", "stream", "start_ns"], kind="stable")
    c = None
    if collectives is not None and len(collectives):
        c = (
            collectives[["rank", "start_ns", "bucket", "bytes", "wait_ns", "transfer_ns", "step"]]
            .dropna(subset=["rank", "start_ns"])
            .astype({"rank": "int64", "start_ns": "int64"})
        )
        c = c.drop_duplicates(["rank", "start_ns"]).rename(columns={"bytes": "c_bytes"})
        k = k.merge(c, on=["rank", "start_ns"], how="left")
    ts = _us(k["start_ns"], t0).tolist()
    dur = np.maximum(_us(k["end_ns"], 0) - _us(k["start_ns"], 0), 0).round(3).tolist()
    tid = [tids[key] for key in zip(k["rank"], k["device"], k["stream"], strict=False)]
    names, kinds, ranks = (
        k["name"].astype("object").fillna("?").tolist(),
        k["kind"].astype("object").tolist(),
        k["rank"].tolist(),
    )
    nccl = (k["kind"] == "nccl").to_numpy()
    extra = {}
    if nccl.any():
        for col, key in (
            ("collective", "collective"),
            ("dtype", "dtype"),
            ("bucket", "bucket"),
            ("step", "step"),
            ("c_bytes", "bytes"),
            ("wait_ns", "wait_ns"),
            ("transfer_ns", "transfer_ns"),
        ):
            if col in k:
                extra[key] = k[col].astype("object").tolist()
        if "bytes" not in extra or "c_bytes" not in k:
            extra["bytes"] = k["bytes"].astype("object").tolist()
        else:
            own = k["bytes"].astype("object").tolist()
            extra["bytes"] = [v if not _missing(v) else o for v, o in zip(extra["bytes"], own, strict=False)]
    return {
        "ts": ts,
        "dur": dur,
        "tid": tid,
        "name": names,
        "kind": kinds,
        "pid": ranks,
        "nccl": nccl,
        "extra": extra,
    }


def _kernel_events(cols: dict) -> list[dict]:
    ts, dur, tid, names, kinds, ranks = (cols[c] for c in ("ts", "dur", "tid", "name", "kind", "pid"))
    nccl, extra = cols["nccl"], cols["extra"]
    out = []
    for i in range(len(ts)):
        args = {"kind": kinds[i]}
        if nccl[i]:
            args.update({key: _plain(vals[i]) for key, vals in extra.items() if not _missing(vals[i])})
        out.append(
            {
                "ph": "X",
                "pid": ranks[i],
                "tid": tid[i],
                "ts": ts[i],
                "dur": dur[i],
                "name": names[i],
                "cat": kinds[i],
                "args": args,
            }
        )
    return out


def _kernel_json(cols: dict) -> str:
    """:func:`_kernel_events` as JSON text (objects joined by commas), one column at a time: numbers by numpy's
    shortest round-trip formatting (Python's float repr), names and kinds one ``json.dumps`` per distinct value,
    the NCCL arguments only on NCCL rows, each present only where it has a value."""
    n = len(cols["ts"])
    if n == 0:
        return ""
    kind = _words(cols["kind"])
    parts = [
        repeat('{"ph":"X","pid":'),
        np.asarray(cols["pid"], dtype=np.int64).astype(str).tolist(),
        repeat(',"tid":'),
        np.asarray(cols["tid"], dtype=np.int64).astype(str).tolist(),
        repeat(',"ts":'),
        _floats(cols["ts"]),
        repeat(',"dur":'),
        _floats(cols["dur"]),
        repeat(',"name":'),
        _words(cols["name"]),
        repeat(',"cat":'),
        kind,
        repeat(',"args":{"kind":'),
        kind,
    ]
    nccl = np.asarray(cols["nccl"], dtype=bool)
    for key, vals in cols["extra"].items():
        toks = np.full(n, "", dtype=object)
        sel = np.flatnonzero(nccl)
        prefix = "," + _dumps(key) + ":"
        toks[sel] = [prefix + _dumps(_plain(vals[i])) if not _missing(vals[i]) else "" for i in sel]
        parts.append(toks.tolist())
    parts.append(repeat("}}"))
    return ",".join(map("".join, zip(*parts, strict=False)))  # the repeat() parts are endless


def _floats(values: list) -> list[str]:
    """JSON numbers of finite floats, as json.dumps writes them (float.__repr__)."""
    return np.asarray(values, dtype=np.float64).astype(str).tolist()


def _words(values: list) -> list[str]:
    """json.dumps of each value, computed once per distinct value."""
    codes, uniques = pd.factorize(pd.Series(values, dtype=object), use_na_sentinel=False)
    words = np.array([_dumps(v) for v in uniques], dtype=object)
    return words[codes].tolist()


def _missing(v) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v))


def _plain(v):
    """JSON-friendly scalars: ints stay ints (bucket, bytes, ns)."""
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return int(v)
    return v.item() if hasattr(v, "item") else v


def _phase_events(ph: pd.DataFrame, t0: float, inferred: bool = False) -> list[dict]:
    """NVTX steps and phases (host ranges) on each rank's host track, outermost first so they nest; named
    by the user's NVTX range (phase in brackets) or, when inferred, "forward (inferred)" in category
    "inferred" instead of "nvtx"."""
    if not len(ph):
        return []
    ph = ph.assign(order=(ph["phase"] != "step").astype(int)).sort_values(["rank", "hs", "order"])
    ts, end = _us(ph["hs"], t0), _us(ph["he"], t0)
    out = []
    for i, row in enumerate(ph.itertuples(index=False)):
        label = getattr(row, "label", None)
        if row.phase == "step":
            name = f"step {int(row.step)}" + (" (inferred)" if inferred else "")
        else:
            name = str(label).removeprefix("NVTX ") if isinstance(label, str) else str(row.phase)
        args = {"step": int(row.step)} if not _missing(row.step) else {}
        out.append(
            {
                "ph": "X",
                "pid": int(row.rank),
                "tid": HOST_TID,
                "ts": float(ts[i]),
                "dur": float(max(end[i] - ts[i], 0.0)),
                "name": name,
                "cat": "inferred" if inferred else "nvtx",
                "args": args,
            }
        )
    return out


def to_bytes(events: dict, *, compress: bool = False) -> bytes:
    data = json.dumps(events, separators=(",", ":"), allow_nan=False).encode("utf-8")
    return gzip.compress(data, compresslevel=6, mtime=0) if compress else data


def write_perfetto(path: Path | str, trace, analysis, *, compress: bool | None = None) -> Path:
    """Write the trace-event JSON (:func:`trace_json`) atomically; gzipped when ``compress`` (default: when
    ``path`` ends .gz)."""
    path = Path(path)
    compress = path.suffix == ".gz" if compress is None else compress
    data = trace_json(trace, analysis).encode("utf-8")
    return write_bytes_atomic(path, gzip.compress(data, compresslevel=6, mtime=0) if compress else data)


def file_name(page: str) -> str:
    """``run-x.html`` -> ``run-x.perfetto.json.gz``: the file the report writes beside a run page. Gzipped
    (Perfetto's UI and trace processor read gzip): about 14x smaller, so the report stays small."""
    return (page[:-5] if page.endswith(".html") else page) + ".perfetto.json.gz"


def fits_in_report(trace, limit: int | None = None) -> bool:
    """Whether the run's JSON is small enough to write beside its page (estimated from the kernel count;
    ``limit`` defaults to :data:`REPORT_LIMIT_BYTES`)."""
    return len(trace.kernels) * BYTES_PER_KERNEL < (REPORT_LIMIT_BYTES if limit is None else limit)


def link_html(run, esc) -> str:
    """The run page's "Open in Perfetto" paragraph (``esc`` is the page's escaper)."""
    name = file_name(run.page)
    if fits_in_report(run.trace):
        phases = "phases per rank, inferred" if phases_inferred(run.analysis) else "NVTX phases per rank"
        return (
            f"<p>Open in Perfetto: download <a href='{esc(name)}' download>{esc(name)}</a> and drop it on "
            f"ui.perfetto.dev (every kernel, one track per rank × stream, {phases}; the file "
            "stays on your machine, Perfetto's UI runs in the browser).</p>"
        )
    return (
        "<p class='note'>Open in Perfetto: this run is too large to write its trace beside the page "
        f"(over {REPORT_LIMIT_BYTES // 1_000_000} MB); make it with <code>ddp-profile export --format perfetto "
        f"RUN -o {esc(name)}</code> and drop the file on ui.perfetto.dev.</p>"
    )
