"""``load_trace``: nsys SQLite export(s) -> :class:`ddp_profile.trace.Trace` with fixed-schema frames.

Inputs are only read: plain files are opened ``mode=ro&immutable=1``; ``.xz`` / ``.gz`` files are
decompressed into memory and deserialized. Queries live in :mod:`ddp_profile.nsys.sql`; this module turns
their integer arrays into frames (names are resolved once per distinct id, never per row).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddp_profile import schema
from ddp_profile.errors import MissingDataError, TraceError
from ddp_profile.memory import map_arrays_of, map_large_arrays, python_strings, return_freed_memory
from ddp_profile.nsys import names, timebase
from ddp_profile.nsys import ranks as rank_rules
from ddp_profile.nsys.files import export_stem, find_exports
from ddp_profile.nsys.frames import (
    gpu_frame,
    host_waits_frame,
    kernel_arrays,
    kernel_frame,
    nvtx_frame,
    process_frame,
)
from ddp_profile.nsys.read import read_files
from ddp_profile.nsys.run_record import RANK_SUFFIX, find_run_json
from ddp_profile.safeio import shown_path
from ddp_profile.trace import Trace


def _clock(files: list[dict], warnings: list[str]) -> tuple[list[int], dict]:
    """Per-file offsets (ns) putting every file on the first-started file's session clock."""
    if len(files) == 1:
        return [0], {"method": "single-file", "offsets_ns": {shown_path(files[0]["path"]): 0}}
    utc = [f["utc_ns"] for f in files]
    if any(u is None for u in utc):
        warnings.append("some files lack TARGET_INFO_SESSION_START_TIME: their clocks were not aligned")
        return [0] * len(files), {"method": "none", "offsets_ns": {shown_path(f["path"]): 0 for f in files}}
    base = min(utc)
    offsets = [u - base for u in utc]
    if max(offsets) > timebase.MAX_CLOCK_OFFSET_NS:  # shifting by it would overflow int64 nanoseconds
        raise TraceError(
            f"session start times of {', '.join(f['path'].name for f in files)} are {max(offsets):,} ns "
            "apart: not one run's files; load one run's files together"
        )
    hosts = {f["host"] for f in files}
    method = "session-start (one host)" if len(hosts) == 1 else "session-start (several hosts)"
    return offsets, {
        "method": method,
        "offsets_ns": {shown_path(f["path"]): o for f, o in zip(files, offsets, strict=False)},
    }


def _check_duplicate_files(files: list[dict]) -> None:
    """The same capture passed twice (a copy under another name) would double the ranks: refused. Two files
    are one capture when session start, capture span and GPU activity (count, first starts, processes,
    devices, last ends) agree: per-rank files of one run differ at least in their processes."""
    seen: dict = {}
    for f in files:
        k = f["kernels"]
        start = k["start"]
        key = (
            f["utc_ns"],
            repr(f["span"]),
            len(start),
            int(start[:1024].sum()),
            int(k["pid"][:1024].sum()),
            int(k["device"][:1024].sum()),
            int(k["end"][-1024:].sum()),
        )
        if key in seen:
            raise TraceError(
                f"{seen[key]} and {f['path']} hold the same capture (same session start, time span "
                f"and {len(start)} GPU activities): the same export twice; load one of them"
            )
        seen[key] = f["path"]


def _named_as_ranks(files: list[dict]) -> bool:
    """Every file's name is one stem with a rank suffix (``run_rank0``, ``run_rank1``): the user's own words
    that they are one job's ranks."""
    stems = [export_stem(f["path"]) for f in files]
    return all(RANK_SUFFIX.search(s) for s in stems) and len({RANK_SUFFIX.sub("", s) for s in stems}) == 1


def _same_collectives(arr: dict[str, np.ndarray]) -> bool:
    """Every file ran NCCL kernels, and the same kinds in counts within a fifth of each other: ranks of one
    job run the same collectives, whose ends then align their clocks (``analysis.clocks``)."""
    labels = arr["labels"]
    nccl = np.array([names.is_nccl(str(x)) for x in labels], dtype=bool)
    if not nccl.any():
        return False
    files = np.unique(arr["file"])
    counts = []
    for f in files:
        codes = arr["code"][(arr["file"] == f)]
        codes = codes[nccl[codes]]
        counts.append(np.bincount(codes, minlength=len(labels)).astype(np.int64))
    lo, hi = np.min(counts, axis=0), np.max(counts, axis=0)
    return bool(lo.sum() > 0 and (hi - lo).sum() <= 0.2 * hi.sum())


def _check_same_run(files: list[dict], arr: dict[str, np.ndarray], warnings: list[str]) -> None:
    """Files of one run overlap in time once aligned; disjoint spans mean different runs were mixed."""
    if len(files) < 2 or len(arr["file"]) == 0:
        return
    spans = (
        pd.DataFrame({"file": arr["file"], "start_ns": arr["start_ns"], "end_ns": arr["end_ns"]})
        .groupby("file")
        .agg({"start_ns": "min", "end_ns": "max"})
    )
    if spans["start_ns"].max() > spans["end_ns"].min():
        names = ", ".join(files[i]["path"].name for i in spans.index)
        if _named_as_ranks(files) and _same_collectives(arr):
            warnings.append(
                f"files do not overlap in time ({names}), but are named as one job's ranks and ran the same "
                "collectives: their session clocks disagree by more than the capture; the ranks are aligned on "
                "their collectives (see the clock note)"
            )
            return
        raise TraceError(
            f"files do not overlap in time ({names}): they come from different runs; "
            "load one run's files together"
        )


def _check_kernels(files: list[dict], kernels: pd.DataFrame, n_rows: int) -> None:
    """No GPU activity at all (``n_rows`` = 0), or activity ending before it starts (``kernels``: such rows),
    gives no honest numbers: say so rather than return a trace whose analysis is silently empty or negative."""
    if n_rows == 0:
        names = ", ".join(shown_path(f["path"]) for f in files)
        raise MissingDataError(
            f"{names}: no GPU kernels, copies or memsets were recorded; profile with "
            "`nsys profile -t cuda,nvtx` and check the capture range covers training steps"
        )
    bad = (kernels["end_ns"] < kernels["start_ns"]).to_numpy()
    if bad.any():
        first = kernels[bad].iloc[0]
        raise TraceError(
            f"{files[int(first['file'])]['path']}: {int(bad.sum())} GPU activity row(s) end before "
            f"they start (first: {str(first['name'])!r} at {int(first['start_ns'])} ns); the export is "
            "damaged: export it again from the .nsys-rep"
        )


def _check_nvtx(files: list[dict], nvtx: pd.DataFrame) -> None:
    """NVTX ranges ending before they start (a step of negative length) are damage, as for kernels."""
    if nvtx.empty:
        return
    end = nvtx["end_ns"]
    bad = (end.notna() & (end < nvtx["start_ns"])).to_numpy(dtype=bool)
    if bad.any():
        first = nvtx[bad].iloc[0]
        raise TraceError(
            f"{files[int(first['file'])]['path']}: {int(bad.sum())} NVTX range(s) end before they start "
            f"(first: {str(first['name'])[:80]!r} at {int(first['start_ns'])} ns); the export is damaged: "
            "export it again from the .nsys-rep"
        )


def _drop_duplicate_rows(kernels: pd.DataFrame, warnings: list[str]) -> pd.DataFrame:
    """Rows identical to the row before them once sorted (same rank, process, device, stream, start, end and
    name) are one activity recorded twice (a damaged or concatenated export): counted once, with a warning."""
    if len(kernels) < 2:
        return kernels
    same = np.ones(len(kernels) - 1, dtype=bool)
    for col in ("rank", "pid", "device", "stream", "start_ns", "end_ns"):
        a = kernels[col].to_numpy()
        same &= a[1:] == a[:-1]
        if not same.any():
            return kernels
    codes = kernels["name"].cat.codes.to_numpy()
    same &= codes[1:] == codes[:-1]
    if not same.any():
        return kernels
    dup = np.concatenate([[False], same])
    warnings.append(
        f"{int(dup.sum())} GPU activity row(s) are exact duplicates of another (same rank, stream, start, "
        "end and name): counted once"
    )
    return kernels.loc[~dup].reset_index(drop=True)


def _open_ranges_warning(nvtx: pd.DataFrame, warnings: list[str]) -> None:
    """Ranges still open when the capture stopped are normal (a step cut by the capture end): keep and warn."""
    if nvtx.empty:
        return
    open_ = nvtx["end_ns"].isna().to_numpy()
    if open_.any():
        warnings.append(
            f"{int(open_.sum())} NVTX range(s) were never closed (e.g. "
            f"{str(nvtx.loc[open_, 'name'].iloc[0])!r}): kept with end_ns missing; analyses that "
            "need an end skip them"
        )


@python_strings()
def load_trace(paths, *, jobs: int = 1, progress=None, host_waits: bool = True) -> Trace:
    """Load one run from nsys SQLite export(s): one file holding all ranks, one file per rank, or a folder.

    ``jobs`` > 1 reads files in parallel threads (SQLite scans run with the GIL released, so per-rank files
    load concurrently); ``progress(message)`` is called as each file is read, ``progress=True`` draws a
    file-count bar on stderr (:class:`ddp_profile.nsys.progress.ProgressBar`). ``host_waits=False`` skips
    the scan for ``Trace.host_waits`` (left None) for a caller that reads the whole API table anyway
    (``nsys.api.load_calls_and_waits``).
    Raises TraceError (unreadable, not an export, contradictory ranks, mixed runs) or MissingDataError
    (no CUDA kernels). A trace without NVTX loads with an empty ``nvtx`` frame and a warning in ``meta``.
    """
    files_in = find_exports(paths)
    map_large_arrays()  # freed full-length arrays go back to the OS, not into the heap (nsys/memory.py)
    if progress is True:
        from ddp_profile.nsys.progress import ProgressBar

        progress = ProgressBar(len(files_in))
    files = read_files(files_in, jobs=jobs, progress=progress, host_waits=host_waits)
    warnings: list[str] = []
    _check_duplicate_files(files)
    for f in files:
        if f["kernels"].get("unnamed"):
            warnings.append(
                f"{f['path']}: {f['kernels']['unnamed']} kernel(s) have a name id missing from StringIds: "
                "counted as kind 'unknown' (neither compute nor NCCL); the export may be damaged"
            )
        if f["kernels"].get("no_pid"):
            warnings.append(
                f"{shown_path(f['path'])}: {f['kernels']['no_pid']} GPU activity row(s) have no process "
                "(NULL globalPid): they belong to no rank and are left out (by every command)"
            )
    graphs = sum(f.get("graph_launches") or 0 for f in files)
    if graphs:
        warnings.append(
            f"{graphs} CUDA graph launch(es) were traced as whole graphs (nsys's default "
            "--cuda-graph-trace=graph): the kernels inside them, NCCL's included, are not in the export, "
            "so their GPU time reads as idle; profile again with `nsys profile --cuda-graph-trace=node`"
        )
    clock_offsets, clock = _clock(files, warnings)
    offsets, raw_offsets = timebase.fold_shifts(
        clock_offsets, [f["kernels"]["shift"] for f in files], warnings
    )
    map_arrays_of(sum(len(f["kernels"]["start"]) for f in files))  # the frames' and analysis' temporaries
    arr = kernel_arrays(files, offsets)
    for f in files:  # concatenated into ``arr``: drop the per-file copies now
        f["kernels"] = None
    return_freed_memory()  # the reader threads' chunks and the per-file copies
    _check_kernels(files, kernel_frame(arr, np.flatnonzero(arr["end_ns"] < arr["start_ns"])), len(arr["pid"]))
    _check_same_run(files, arr, warnings)
    nvtx = nvtx_frame(files, offsets)
    no_nvtx_table = all(f["nvtx"] is None for f in files)
    for f in files:  # in the frame now: the raw rows and texts go before the kernel frame's build (the peak)
        f["nvtx"] = ()
    _check_nvtx(files, nvtx)
    _open_ranges_warning(nvtx, warnings)
    if no_nvtx_table:
        warnings.append(
            "no NVTX_EVENTS table: no NVTX ranges were recorded (profile with `nsys profile -t cuda,nvtx`); "
            "phase and step analysis is unavailable"
        )
    stems = [export_stem(f["path"]) for f in files]
    procs, source = rank_rules.assign_ranks(process_frame(arr, files), nvtx, stems)
    rank_of = {
        (int(f), int(p)): int(r) for f, p, r in zip(procs["file"], procs["pid"], procs["rank"], strict=False)
    }
    arr["rank"] = _map_ranks(arr["file"], arr["pid"], rank_of)
    return_freed_memory()  # the readers' freed chunks, before the frame build's copies (the load's peak)
    # Sorted by (rank, start_ns), stable: one lexsort, then each column taken once as the frame is built.
    kernels = kernel_frame(arr, _rank_time_order(arr["rank"], arr["start_ns"]), consume=True)
    del arr
    kernels = _drop_duplicate_rows(kernels, warnings)
    if not nvtx.empty:
        # one lookup per distinct (file, pid), not per range; <NA> for a process that ran no GPU work
        inv, uniq = pd.factorize(nvtx["file"].to_numpy(np.int64) * (1 << 32) + nvtx["pid"].to_numpy(np.int64))
        nvtx["rank"] = pd.array(
            [rank_of.get((int(k) >> 32, int(k) & 0xFFFFFFFF)) for k in uniq], dtype="Int64"
        ).take(inv)
        nvtx = nvtx.sort_values(["rank", "start_ns"], kind="stable", na_position="last")
    gpus = gpu_frame(files)
    gpu_name = {(str(g.file), int(g.device)): g.name for g in gpus.itertuples()}
    procs["host"] = [files[i]["host"] for i in procs["file"]]
    procs["file"] = [shown_path(files[i]["path"]) for i in procs["file"]]
    procs["gpu_name"] = [
        gpu_name.get((f, int(d))) for f, d in zip(procs["file"], procs["device"], strict=False)
    ]
    meta = {
        "nsys_version": ", ".join(sorted({str(f["nsys_version"]) for f in files})),
        "schema_version": ", ".join(sorted({str(f["schema_version"]) for f in files})),
        "files": [
            {
                "path": shown_path(f["path"]),
                "nsys_version": f["nsys_version"],
                "schema_version": f["schema_version"],
                "host": f["host"],
                "session_start_utc_ns": f["utc_ns"],
                "offset_ns": o,
                "scrubbed": bool(f["scrub"]),
                "capture_span_ns": f["span"],
            }
            for f, o in zip(files, raw_offsets, strict=False)
        ],
        "rank_source": source,
        "clock": clock,
        "scrubbed": all(f["scrub"] for f in files),
        # NCCL's channel count (gridX of its kernels), the largest over files; None without NCCL kernels
        "nccl_channels": max((c for f in files if (c := f.get("nccl_channels")) is not None), default=None),
        "warnings": warnings,
    }
    run = find_run_json(files_in, warnings)
    ranks = schema.select(procs, schema.RANK_COLUMNS)
    waits = (
        host_waits_frame(
            [(shown_path(f["path"]), f["host_waits"]) for f in files],
            ranks,  # ranks' file names
            {shown_path(f["path"]): o for f, o in zip(files, offsets, strict=False)},
        )
        if host_waits
        else None
    )
    trace = Trace(
        kernels=schema.select(kernels, schema.KERNEL_COLUMNS),
        nvtx=schema.select(nvtx, schema.NVTX_COLUMNS),
        gpus=gpus,
        ranks=ranks,
        meta=meta,
        run=run,
        paths=files_in,
        host_waits=waits,
    )
    del kernels, nvtx, files
    return_freed_memory()  # the unordered columns freed by the frame build, before the analysis' arrays
    return trace


def _map_ranks(file: np.ndarray, pid: np.ndarray, rank_of: dict) -> np.ndarray:
    """Vectorised (file, pid) -> rank: one lookup per distinct process, not per row. The column is int16 when
    every rank fits (the kernels frame keeps it so, see schema.KERNEL_COLUMNS), else int32 or int64."""
    if len(pid) and file.min() == file.max():  # one file: its pids alone are the keys (no int64 key column)
        keys, table = pid, {p: r for (f, p), r in rank_of.items() if f == int(file[0])}
    else:
        keys = file.astype(np.int64) * (1 << 32) + pid
        table = {f * (1 << 32) + p: r for (f, p), r in rank_of.items()}
    inv, uniq = pd.factorize(keys)  # (file << 32 | pid) or nsys globalPids: large keys, hashed
    del keys
    ranks = np.array([table[int(k)] for k in uniq], dtype=np.int64)
    lo, hi = (int(ranks.min()), int(ranks.max())) if len(ranks) else (0, 0)
    dtype = next(d for d in (np.int16, np.int32, np.int64) if np.iinfo(d).min <= lo and hi <= np.iinfo(d).max)
    return ranks.astype(dtype)[inv]


def _rank_time_order(rank: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Row order by (rank, start), stable: ``np.lexsort((start, rank))`` at a fraction of its cost and memory
    on millions of rows. One stable sort by rank (a radix sort when ranks fit 16 bits), then each rank's
    rows (original order) sorted stably by start: ties by start keep the original order, as lexsort's.
    Exports are nearly time-ordered per process, so most ranks' rows are already sorted and left as they
    are; the temporaries are one rank's rows long, not the trace's (a full-length time sort set the load's
    memory peak)."""
    n = len(rank)
    if n < 2:
        return np.arange(n)
    lo_r, hi_r = int(rank.min()), int(rank.max())
    narrow = lo_r >= np.iinfo(np.int16).min and hi_r <= np.iinfo(np.int16).max
    order = np.argsort(rank.astype(np.int16, copy=False) if narrow else rank, kind="stable")
    if hi_r - lo_r <= 1 << 16:
        counts = np.bincount((rank - lo_r).astype(np.intp, copy=False), minlength=hi_r - lo_r + 1)
    else:
        counts = np.unique(rank, return_counts=True)[1]
    ends = np.cumsum(counts)
    for a, b in zip(ends - counts, ends, strict=True):
        if b - a < 2:
            continue
        seg = order[a:b]
        st = start[seg]
        if not (st[1:] >= st[:-1]).all():
            order[a:b] = seg[np.argsort(st, kind="stable")]
    return order
