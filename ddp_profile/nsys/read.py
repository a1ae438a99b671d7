"""Reading nsys SQLite exports into integer arrays: the first stage of ``nsys.loader.load_trace``, without pandas.

Each export is read by :func:`read_file` into a dict of numpy arrays (GPU activities with their launch times
joined, NVTX rows, metadata); the loader turns those into the trace's frames. Nothing here imports pandas
(``tests/nsys/test_read.py`` checks it): the reading is numpy, SQLite and the Arrow driver only. Queries
live in :mod:`ddp_profile.nsys.sql`.
"""

from __future__ import annotations

import os
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from ddp_profile.activity_names import MEMSET, memcpy_name
from ddp_profile.errors import MissingDataError, TraceError
from ddp_profile.memory import return_freed_memory
from ddp_profile.nsys import columnar, payloads, sql, timebase
from ddp_profile.nsys import names as nccl_names
from ddp_profile.nsys.files import DECOMPRESS, open_export, short_error


def concat(parts: list[np.ndarray]) -> np.ndarray:
    """np.concatenate, but one part is returned as is (no copy: one export of one table is the usual case)."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


JOIN_CHUNK = 1 << 18
"""Activities whose launch is looked up at once (their int64 keys and positions are this long, not the trace)."""


def join_launches(
    pid: np.ndarray, corr: np.ndarray, launch: list[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """launch (start, tid) per activity, matched on (pid, correlationId); -1 where no API row matches.

    ``launch`` = [pid, correlationId, start, tid] columns (``sql.launches``); it is consumed (emptied) so
    the API rows' columns are freed as soon as the sorted key no longer needs them."""
    lpid, lcorr, lstart, ltid = launch
    launch.clear()
    n = len(pid)
    if len(lstart) == 0 or n == 0:
        return np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int32)
    # Keys (pid << 32 | correlationId's low 32 bits) built in place: this join set the load's memory peak.
    lkey = lpid.astype(np.int64)
    del lpid
    lkey <<= 32
    lkey |= low_32_bits(lcorr)
    del lcorr
    if not (lkey[1:] >= lkey[:-1]).all():  # else already in key order: one process's calls, numbered in order
        order = np.argsort(lkey, kind="stable")
        lkey.sort()  # in place: equal keys are equal values, so this is lkey[order] without a second key array
        lstart = lstart[
            order
        ]  # API rows permuted into key order once, so ``order`` is freed before the search
        ltid = ltid[order]
        del order
    out_ns = np.full(n, -1, dtype=np.int64)
    out_tid = np.full(n, -1, dtype=np.int32 if ltid.dtype == np.int32 else np.int64)  # int64: damaged tid
    step = (
        JOIN_CHUNK  # activities looked up a chunk at a time: their keys and positions are never full length
    )
    for a in range(0, n, step):
        key = pid[a : a + step].astype(np.int64)
        key <<= 32
        key |= low_32_bits(corr[a : a + step])
        pos = np.searchsorted(lkey, key)
        np.minimum(pos, len(lkey) - 1, out=pos)
        hit = lkey[pos] == key
        hit &= corr[a : a + step] > 0
        src = pos[hit]
        out_ns[a : a + step][hit] = lstart[src]
        out_tid[a : a + step][hit] = ltid[src]
    return out_ns, out_tid


def factorize_ids(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes, distinct ids ascending) of ``ids``, as ``pd.factorize`` up to the order of the distinct ids (the
    loader sorts the labels later, ``frames.global_codes``): StringIds ids are small non-negative integers, so
    one lookup table of max(id) + 1 entries replaces the hashing; other ids (a
    damaged export's) are sorted (``np.unique``)."""
    if len(ids) == 0 or ids.min() < 0 or ids.max() >= 1 << 24:
        uniques, inverse = np.unique(ids, return_inverse=True)
        return inverse.astype(np.int32 if len(uniques) < 1 << 31 else np.int64), uniques
    seen = np.zeros(int(ids.max()) + 1, dtype=bool)
    seen[ids] = True
    uniques = np.flatnonzero(seen)
    lut = np.zeros(len(seen), dtype=np.int32)
    lut[uniques] = np.arange(len(uniques), dtype=np.int32)
    return lut[ids], uniques


def low_32_bits(values: np.ndarray) -> np.ndarray:
    """The low 32 bits of integer ids as non-negative values (an int32 column is viewed, not copied)."""
    return values.view(np.uint32) if values.dtype == np.int32 else values & 0xFFFFFFFF


def on_own_connection(path: Path, fn, *args, **kwargs):
    """``fn(con, *args, **kwargs)`` on a connection of its own (it runs on a thread beside the reads of the
    activity tables and NVTX)."""
    con = open_export(path)
    try:
        return fn(con, *args, **kwargs)
    finally:
        con.close()


def read_kernels(
    con: sqlite3.Connection, have: set[str], map_chunks=None, reader=None, pending=None
) -> dict[str, Any]:
    """GPU activity columns, names and launch times of one export. ``pending``: a future of ``sql.launches``
    (the launching API rows read on a second thread while the activity tables are read and named here: each
    read releases the GIL in the driver), else they are read here after them."""
    parts: list[dict[str, Any]] = []
    kinds: list[np.ndarray] = []
    labels: list[str] = []
    for table, code in ((sql.KERNEL, 0), (sql.MEMCPY, 2), (sql.MEMSET, 3)):  # codes index KINDS
        if table in have:
            got: dict[str, Any] = sql.gpu_activities(con, table, map_chunks, columnar=reader)
            parts.append(got)
            kinds.append(np.full(len(got["start"]), code, dtype=np.int8))
    if not parts:  # unreachable from read_file (it requires the kernel table); kept total
        parts = [
            {c: np.empty(0, np.int64) for c in ("pid", "device", "stream", "start", "end", "name_id", "corr")}
            | {"bytes": None}
        ]
    kind = concat(kinds) if kinds else np.empty(0, dtype=np.int8)
    cols: dict[str, Any] = {}
    for c in ("pid", "device", "stream", "start", "end", "name_id", "corr"):
        cols[c] = concat([p[c] for p in parts])
    if all(p["bytes"] is None for p in parts):
        cols["bytes"] = None  # kernels only: no byte count (the frame's column is all <NA>)
    else:
        wide = np.result_type(*[p["bytes"] for p in parts if p["bytes"] is not None])  # int32 unless widened
        cols["bytes"] = concat(
            [p["bytes"] if p["bytes"] is not None else np.full(len(p["start"]), -1, wide) for p in parts]
        )
    del parts
    # Names: kernels by StringIds, memcpy by copy kind, memset fixed. Codes index into ``labels``.
    ids = cols.pop("name_id")
    only_kernels = not kinds or (len(kinds) == 1 and sql.KERNEL in have)  # one table read: the kernels'
    is_kernel = None if only_kernels else kind == 0
    inverse, kernel_ids = factorize_ids(ids if only_kernels else ids[is_kernel])
    lookup = sql.strings(con, kernel_ids)
    labels = [lookup.get(int(i), f"<string {i}>") for i in kernel_ids]
    unnamed = np.array([int(i) not in lookup for i in kernel_ids], dtype=bool)
    code_type = np.int16 if len(kernel_ids) < 30000 else np.int32  # codes index ``labels``
    nccl = np.array([nccl_names.is_nccl(n) for n in labels], dtype=bool)
    # per label: a name missing from StringIds is neither compute nor NCCL, but "unknown" (code 4)
    kind_of_label = np.where(unnamed, 4, np.where(nccl, 1, 0)).astype(np.int8)
    n_unnamed = int(unnamed[inverse].sum()) if unnamed.any() else 0
    if only_kernels:  # no masks: every row is a kernel
        codes = inverse.astype(code_type)
        kind = kind_of_label[inverse]
    else:
        codes = np.empty(len(ids), dtype=code_type)
        codes[is_kernel] = inverse
        if len(inverse):
            kind[is_kernel] = kind_of_label[inverse]
    del inverse
    for k, fixed in () if only_kernels else ((2, None), (3, MEMSET)):
        sel = kind == k
        if not sel.any():
            continue
        if fixed:
            labels.append(fixed)
            codes[sel] = len(labels) - 1
        else:
            copy_kinds, inv = np.unique(ids[sel], return_inverse=True)
            base = len(labels)
            labels += [memcpy_name(sql.MEMCPY_KINDS.get(int(c), "Unknown")) for c in copy_kinds]
            codes[sel] = base + inv
    del ids, is_kernel
    cols, kind, codes, n_no_pid = timebase.drop_no_process(cols, kind, codes)
    launch = pending.result() if pending is not None else sql.launches(con, have, map_chunks)
    shift = timebase.rebase(cols, launch, sql.nvtx_time_range(con, have))
    return_freed_memory()  # the reader threads' freed chunks, before the join's sorted copies (the load's peak)
    launch_ns, launch_tid = join_launches(cols["pid"], cols["corr"], launch)
    return {
        **cols,
        "kind": kind,
        "code": codes,
        "labels": labels,
        "launch_ns": launch_ns,
        "launch_tid": launch_tid,
        "unnamed": n_unnamed,
        "no_pid": n_no_pid,
        "shift": shift,
    }


READ_THREADS = min(4, os.cpu_count() or 1)  # threads reading one export's large tables
PARALLEL_READ_BYTES = 16 << 20  # files smaller than this are read on the calling thread


GRAPH_TRACE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
"""Whole-graph executions, one row per CUDA graph launch (nsys's default ``--cuda-graph-trace=graph``)."""


def graph_launches(con: sqlite3.Connection, have: set[str]) -> int:
    """CUDA graph launches recorded as whole graphs: their kernels, and NCCL's inside them, are absent from the
    kernel table. 0 without that table (graphs traced node by node, or none)."""
    if GRAPH_TRACE not in have:
        return 0
    return int(con.execute(f"SELECT count(*) FROM {GRAPH_TRACE}").fetchone()[0])


def read_file(index: int, path: Path, threads: int = READ_THREADS, host_waits: bool = True) -> dict[str, Any]:
    con = open_export(path)
    # Reader threads pay off on large files only: for a small one (thousands of per-rank files) starting the
    # threads and their connections cost more than the reads (the chunks, and so the result, are the same).
    readers = (
        columnar.ChunkReaders(path, threads)
        if threads > 1 and path.suffix not in DECOMPRESS and path.stat().st_size >= PARALLEL_READ_BYTES
        else None
    )
    # Columnar reads (Arrow ADBC, when installed) of plain files; else, and where a read fails, sqlite3.
    arrow = columnar.Reader(path) if path.suffix not in DECOMPRESS and columnar.available() else None
    # With columnar reads, the two scans of the CUDA API table (the launching calls, then the host-wait calls)
    # run on a second thread while this one reads NVTX and the activity tables: about the same time each way
    # on the benchmark's exports (one scan of the API table with the columns of both costs more than the two:
    # its wider IN list and two more columns per launch row). NVTX comes first, so this thread is not idle
    # waiting for the launches it needs before NVTX would be read.
    pool = ThreadPoolExecutor(max_workers=1) if arrow is not None else None
    try:
        have = sql.tables(con)
        if sql.KERNEL not in have:
            raise MissingDataError(
                f"{path}: no CUPTI_ACTIVITY_KIND_KERNEL table (no CUDA kernels recorded); "
                "profile with `nsys profile -t cuda,nvtx ...`"
            )
        meta = sql.metadata(con, have)
        launches = waits = None
        if pool is not None:
            launches = pool.submit(on_own_connection, path, sql.launches, have, columnar=arrow)
            waits = pool.submit(on_own_connection, path, sql.host_wait_calls, have) if host_waits else None
        nvtx = sql.nvtx_ranges(con, have, columnar=arrow) if sql.NVTX in have else None
        out: dict[str, Any] = {
            "index": index,
            "path": path,
            "kernels": read_kernels(con, have, readers and readers.map, arrow, launches),
            "nsys_version": meta.get("EXPORT_PRODUCT_VERSION"),
            "schema_version": meta.get("EXPORT_SCHEMA_VERSION"),
            "host": sql.capture_host(con, have),
            "utc_ns": sql.session_start_utc_ns(con, have),
            "nccl_channels": sql.nccl_channels(con, have),
            "graph_launches": graph_launches(con, have),
            "scrub": sql.scrub_record(con, have),
            "gpus": sql.gpus(con, have),
            "span": sql.time_span(con, have),
            "nvtx": None,
            "domains": {},
        }
        if nvtx is not None:
            payloads.attach(
                nvtx[0], payloads.message_sizes(con, have)
            )  # NCCL's message sizes, where exported
            out["nvtx"] = nvtx
            shift = out["kernels"]["shift"]
            if shift and len(out["nvtx"][0]):  # the file's NVTX times move with its GPU times
                ints = out["nvtx"][0]
                ints[:, 3] -= shift
                ints[:, 4] -= shift
            out["domains"] = sql.nvtx_domains(con, have)
        # a few rows per step (one filtered API scan)
        out["host_waits"] = (
            (waits.result() if waits is not None else sql.host_wait_calls(con, have)) if host_waits else None
        )
        return out
    except (sqlite3.DatabaseError, TypeError, ValueError, OverflowError) as exc:
        # DatabaseError: SQLite could not read it (incl. text that is not UTF-8); the others: a value of the
        # wrong type where nsys writes another (this function only converts the file's own data).
        raise TraceError(
            f"{path}: unreadable or damaged export ({short_error(exc)}); export it again from the .nsys-rep"
        ) from exc
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        if readers:
            readers.close()
        if arrow is not None:
            arrow.close()
        con.close()


def read_files(files_in: list[Path], *, jobs: int = 1, progress=None, host_waits: bool = True) -> list[dict]:
    """:func:`read_file` of every export, ``jobs`` files at once (threads: SQLite scans and the Arrow driver
    release the GIL, so per-rank files load concurrently), each reading its large tables on
    ``READ_THREADS // jobs`` threads; ``progress(message)`` after each file."""
    per_file = max(1, READ_THREADS // max(1, min(jobs, len(files_in))))

    def read(item):
        result = read_file(item[0], item[1], threads=per_file, host_waits=host_waits)
        if progress:
            progress(f"read {item[1]}")
        return result

    if jobs > 1 and len(files_in) > 1:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            return list(pool.map(read, enumerate(files_in)))
    return [read(item) for item in enumerate(files_in)]
