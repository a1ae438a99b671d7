"""``load_api_calls``: a run's CUDA runtime and driver API calls, read on request.

Why not part of ``load_trace``: the loader already reads the launching call of every kernel (its start, for
``launch_ns``), but the whole table (ends, names, calls that launch nothing: synchronize, allocator, event
calls) is needed only to tell whether a step is launch-bound (``ddp_profile.analysis.launches``), and
``load_trace``'s time and memory are benchmarked. So this reader runs only when asked.

It reuses what ``load_trace`` decided for the same files, so the calls line up with the kernels and NVTX
ranges: the rank of each (file, pid) from ``trace.ranks`` and each file's clock offset from
``trace.meta["files"]``. Files are opened as the loader opens them (read-only; ``.xz``/``.gz`` in memory).

:func:`load_calls_and_waits` gives the calls and ``Trace.host_waits`` from one read of the table, for a
caller that needs both (the report). Each call also gets a ``kind`` from the fixed vocabulary :data:`CALL_KINDS`, so the analysis above sees
what a call does (launches work, waits for the GPU, copies) without knowing any CUDA API name.
"""  # noqa: E501

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from ddp_profile import schema
from ddp_profile.errors import DdpProfileError, MissingDataError, TraceError
from ddp_profile.memory import python_strings
from ddp_profile.nsys import sql
from ddp_profile.nsys.files import open_export, short_error
from ddp_profile.nsys.frames import api_name, host_waits_frame
from ddp_profile.nsys.loader import load_trace
from ddp_profile.safeio import shown_path
from ddp_profile.trace import Trace

CALL_KINDS = ("launch", "sync", "copy", "other")
"""The ``kind`` of a call in ``schema.API_CALL_COLUMNS``: the first of :data:`KIND_PATTERNS` its name
matches, else "other"."""
KIND_PATTERNS = (
    # Kernel launch calls: cudaLaunchKernel, cudaLaunchKernelExC, cuLaunchKernel(Ex), cooperative launches,
    # cudaGraphLaunch / cuGraphLaunch (a whole graph counts as one launch).
    ("launch", r"^cu(da)?(Launch(Cooperative)?Kernel|GraphLaunch)"),
    # Synchronize calls, where the host sits waiting for the GPU: cudaDeviceSynchronize,
    # cudaStreamSynchronize, cudaEventSynchronize, cuCtxSynchronize...
    ("sync", r"^cu(da)?\w*Synchronize$"),
    ("copy", r"^cu(da)?Memcpy"),  # cudaMemcpy, cudaMemcpyAsync, cuMemcpyDtoH...
)
"""(kind, regex on the function name without nsys's ``_vNNNN`` suffix, as :func:`api_name` gives it)."""


def call_kinds(names: Iterable[str]) -> pd.Categorical:
    """The :data:`CALL_KINDS` category of each call name (each distinct name tested once)."""
    codes, uniq = pd.factorize(np.asarray(list(names), dtype=object))
    rules = [(CALL_KINDS.index(kind), re.compile(rx)) for kind, rx in KIND_PATTERNS]
    other = CALL_KINDS.index("other")
    kind_of = np.array(
        [next((k for k, rx in rules if rx.search(str(u))), other) for u in uniq] + [other], dtype=np.int8
    )
    return pd.Categorical.from_codes(
        kind_of[np.where(codes < 0, len(uniq), codes)], categories=pd.Index(CALL_KINDS, dtype=object)
    )


def _read(path, waits: bool) -> tuple[dict[str, np.ndarray], pd.Categorical, list | None] | None:
    """One export's API calls (sql.api_calls columns), their names as a categorical and, with ``waits``, its
    host-wait rows (``sql.host_wait_calls``, picked from the same read); None if calls were not traced."""
    con = open_export(path)
    try:
        have = sql.tables(con)
        cols = sql.api_calls(con, have)
        if cols is None:
            return None
        rows = sql.host_wait_calls(con, have, calls=cols) if waits else None
        del cols["corr"]
        ids = cols.pop("name_id")
        inverse, uniq = pd.factorize(ids)  # names are few, calls many: resolve each distinct id once
        lookup = sql.strings(con, uniq)
        labels = [api_name(lookup[int(i)]) if int(i) in lookup else f"<string {i}>" for i in uniq]
        cats = sorted(set(labels))
        where = {c: j for j, c in enumerate(cats)}
        remap = np.array([where[lab] for lab in labels] or [0], dtype=np.int32)
        names = pd.Categorical.from_codes(
            remap[inverse] if len(uniq) else np.zeros(0, np.int32), categories=pd.Index(cats, dtype=object)
        )
        return cols, names, rows
    except (sqlite3.DatabaseError, TypeError, ValueError, OverflowError) as exc:
        raise TraceError(
            f"{path}: unreadable or damaged export ({short_error(exc)}); export it again from the .nsys-rep"
        ) from exc
    finally:
        con.close()


@python_strings()
def load_api_calls(source) -> pd.DataFrame:
    """``schema.API_CALL_COLUMNS``, sorted by (rank, start_ns); ranks missing (last) for processes that ran
    no GPU work; ``kind`` from :func:`call_kinds`. ``source``: a loaded :class:`~ddp_profile.trace.Trace`
    (preferred: its ranks and clock are reused), or what ``load_trace`` accepts (then it is loaded first).

    Raises MissingDataError when a file has no CUDA API table (the API trace was off), since its ranks'
    launch counts would silently read 0."""
    trace = source if isinstance(source, Trace) else load_trace(source)
    return _load(trace, waits=False)[0]


@python_strings()
def load_calls_and_waits(trace: Trace) -> tuple[pd.DataFrame | str, pd.DataFrame]:
    """(:func:`load_api_calls`, or why the calls cannot be read: one sentence; :func:`load_host_waits`) of a
    loaded trace, from one read of each file's API table: for a caller that needs both (the report), which
    loads the trace with ``load_trace(..., host_waits=False)`` and so skips that function's own scan. Where
    the calls cannot be read (no API table, a damaged one), the waits are read alone, as ``load_trace`` would."""
    try:
        calls, waits = _load(trace, waits=True)
    except DdpProfileError as exc:
        return str(exc), load_host_waits(trace)
    assert waits is not None  # asked for
    return calls, waits


def _load(trace: Trace, waits: bool) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The API calls frame and, with ``waits``, the host-wait frame (``frames.host_waits_frame``)."""
    offsets = {f["path"]: int(f.get("offset_ns") or 0) for f in trace.meta.get("files", [])}
    ranks = trace.ranks
    frames, names, wait_rows = [], [], []
    for path in trace.paths:
        got = _read(path, waits)
        if got is None:
            raise MissingDataError(
                f"{path}: no {sql.RUNTIME} table (CUDA API calls were not traced); profile "
                "with `nsys profile -t cuda,nvtx ...`"
            )
        cols, name, rows = got
        wait_rows.append((shown_path(path), rows))
        mine = ranks[ranks["file"].astype(str) == shown_path(path)]
        rank_of = dict(zip(mine["pid"].astype(int), mine["rank"].astype(int), strict=True))
        inverse, pids = pd.factorize(cols["pid"])
        rank = pd.array([rank_of.get(int(p)) for p in pids] or [None], dtype="Int64")
        off = offsets.get(shown_path(path), 0)
        frames.append(
            pd.DataFrame(
                {
                    "rank": rank[inverse] if len(pids) else pd.array([], dtype="Int64"),
                    "pid": cols["pid"],
                    "tid": cols["tid"],
                    "start_ns": cols["start"] + off,
                    "end_ns": cols["end"] + off,
                }
            )
        )
        names.append(name)
        del cols, got
    waited = host_waits_frame(wait_rows, ranks, offsets) if waits else None
    if not frames:
        return schema.empty_frame(schema.API_CALL_COLUMNS), waited
    df = pd.concat(frames, ignore_index=True)
    del frames
    df["name"] = union_categoricals(names, sort_categories=True) if len(names) > 1 else names[0]
    kinds = call_kinds(df["name"].cat.categories)  # per distinct name, then by code (-1: missing -> other)
    by_code = np.append(kinds.codes, np.int8(CALL_KINDS.index("other"))).astype(np.int8)
    df["kind"] = pd.Categorical.from_codes(
        by_code[df["name"].cat.codes.to_numpy()], categories=pd.Index(CALL_KINDS, dtype=object)
    )
    df = df.sort_values(["rank", "start_ns"], kind="stable", na_position="last")
    return schema.select(df, schema.API_CALL_COLUMNS), waited


@python_strings()
def load_host_waits(trace) -> pd.DataFrame:
    """``schema.HOST_WAIT_COLUMNS``: the calls during which a host thread may wait for its GPU (synchronize
    calls, copies: ``sql.HOST_WAIT_FUNCTIONS``) on each process's main thread, of a loaded
    :class:`~ddp_profile.trace.Trace`, on its clock and with its ranks. ``load_trace`` reads them already
    (``Trace.host_waits``); this reads them again from the files (for a Trace built otherwise). Files
    without a CUDA API trace (or without call names) add no rows; the straggler's cause then names no call."""
    offsets = {f["path"]: int(f.get("offset_ns") or 0) for f in trace.meta.get("files", [])}
    per_file = []
    for path in trace.paths:
        con = open_export(path)
        try:
            # the file as the trace's ranks and meta name it (a non-UTF-8 name as ``\xff`` escapes: text every
            # string column takes)
            per_file.append((shown_path(path), sql.host_wait_calls(con, sql.tables(con))))
        except (sqlite3.DatabaseError, TypeError, ValueError, OverflowError) as exc:
            raise TraceError(
                f"{path}: unreadable or damaged export ({short_error(exc)}); export it again from "
                "the .nsys-rep"
            ) from exc
        finally:
            con.close()
    return host_waits_frame(per_file, trace.ranks, offsets)


def host_waits_of(trace) -> pd.DataFrame | None:
    """The trace's host-wait calls: ``Trace.host_waits`` as ``load_trace`` read them, else read from its
    files (:func:`load_host_waits`); None for a trace that is not a local Trace (one held on a Dask cluster:
    its files are read where its ranks live)."""
    if not isinstance(trace, Trace):
        return None
    got = getattr(trace, "host_waits", None)
    return got if got is not None else load_host_waits(trace)
