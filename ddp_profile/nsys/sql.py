"""The only module that knows nsys table and column names: named queries over one SQLite export.

Schema facts relied on (checked on a real nsys 2025.3.2 export, schema 3.20.3, see tests/data/README.md):

* Tables with no data are absent from an export, and columns differ across nsys versions (2023.4 has no
  ``greenContextId``; NVTX payload columns vary), so every query is built from the columns present.
* ``globalPid`` / ``globalTid`` are serialized GlobalIds: pid = (globalPid >> 24) & 0xFFFFFF,
  tid = globalTid & 0xFFFFFF.
* Kernel, memcpy and memset rows name the CUDA call that launched them by ``correlationId``, which is unique
  only within a process: join on (pid, correlationId). NCCL kernels are launched through the driver API
  (``cuLaunchKernelEx``), whose rows are in CUPTI_ACTIVITY_KIND_RUNTIME too (eventClass 1).
* Kernel names are StringIds references (``shortName``: the base name; ``demangledName``: with templates).
* NVTX text is in ``text`` (non-registered strings) or, via ``textId``, in StringIds (registered strings,
  e.g. NCCL's ranges): ``COALESCE(text, StringIds.value)``. Domain names come from NvtxDomainCreate events
  (eventType 75, ``text`` = name) keyed by (process, domainId); domainId 0 is the default domain.
* Push/pop ranges are exported as single NvtxPushPopRange rows (eventType 59), start/end ranges as
  NvtxStartEndRange (60), marks as NvtxMark (34, ``end`` NULL).
* Timestamps are ns relative to the session start, whose wall-clock time is
  TARGET_INFO_SESSION_START_TIME.utcEpochNs.

Every function takes an open connection and returns plain Python / numpy values; callers never see SQL.
"""

from __future__ import annotations

import sqlite3

import numpy as np

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX = "NVTX_EVENTS"
STRINGS = "StringIds"
SCRUB_RECORD = "DDP_PROFILE_SCRUB"

# ENUM_NSYS_EVENT_TYPE ids (stable across 2023.4-2025.x; read from the enum table when present).
NVTX_MARK, NVTX_PUSHPOP, NVTX_STARTEND, NVTX_DOMAIN_CREATE = 34, 59, 60, 75
# ENUM_CUDA_MEMCPY_OPER labels (same ids in 2023.4-2025.x).
MEMCPY_KINDS = {
    1: "HtoD",
    2: "DtoH",
    3: "HtoA",
    4: "AtoH",
    5: "AtoA",
    6: "AtoD",
    7: "DtoA",
    8: "DtoD",
    9: "HtoH",
    10: "PtoP",
}
PID_SQL = "(({col} >> 24) & 16777215)"  # pid from a serialized GlobalId
TID_SQL = "({col} & 16777215)"  # tid from a serialized globalTid


def tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def columns(con: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in con.execute(f'PRAGMA table_info("{table}")')}


def not_null_columns(con: sqlite3.Connection, table: str) -> set[str]:
    """Columns the table declares NOT NULL (SQLite refuses a NULL there on every write)."""
    return {r[1] for r in con.execute(f'PRAGMA table_info("{table}")') if r[3]}


def or_default(col: str, default: str, not_null: set[str]) -> str:
    """``col``, or ``COALESCE(col, default)`` unless the table declares it NOT NULL: a COALESCE per value
    costs a measurable share of a kernel-table read, and only nullable columns can drop out of ``group_concat``."""
    return col if col in not_null else f"COALESCE({col}, {default})"


CHUNK_ROWS = 1 << 14  # rows per group_concat string (~0.3 MB of text per column): reader threads keep less


def _chunk(
    con: sqlite3.Connection, exprs: list[str], table: str, cond: str, lo: int, hi: int
) -> list[np.ndarray]:
    """Rows lo < rowid <= hi as one int64 array per expression: one scan, one ``group_concat`` per column."""
    texts = con.execute(
        f"SELECT {', '.join(f'group_concat({e})' for e in exprs)} FROM {table} "
        f"WHERE rowid > ? AND rowid <= ?{cond}",
        (lo, hi),
    ).fetchone()
    try:
        cols = [np.fromstring(t, dtype=np.int64, sep=",") if t else np.empty(0, np.int64) for t in texts]
    except (ValueError, TypeError) as exc:  # text, real or blob where nsys writes integers: a damaged export
        raise sqlite3.DataError(f"{table}: a non-integer value where nsys writes integers ({exc})") from exc
    if len({len(c) for c in cols}) > 1:
        raise sqlite3.DatabaseError(f"{table}: columns of rows {lo + 1}..{hi} differ in length")
    return cols


def _fits(col: np.ndarray, dtype: np.dtype) -> bool:
    if dtype == np.int64 or len(col) == 0:
        return True
    info = np.iinfo(dtype)
    return bool(col.min() >= info.min and col.max() <= info.max)


def int_columns(
    con: sqlite3.Connection,
    table: str,
    exprs: list[str],
    where: str = "",
    map_chunks=None,
    *,
    dtypes=None,
    columnar=None,
) -> list[np.ndarray]:
    """Integer columns of a table, one 1-D array per expression, of ``dtypes`` (default int64 each).

    Why not ``cursor.fetchall()``: it builds one Python tuple and int per value, slow and gigabytes large for
    millions of kernels. SQLite's ``group_concat`` instead formats a whole column in C and numpy parses it in
    C: faster than the plainest row read (``benchmarks/bench_analyzer.py`` times both) and no per-row objects. Each expression
    must be non-NULL (COALESCE it: group_concat skips NULLs, which would misalign columns). Rows are read
    in rowid ranges (every nsys table is a rowid table), all columns of a range in one scan, so they line
    up; each chunk's lengths are checked.

    Narrow ``dtypes`` (e.g. int32 for pids, devices, streams) halve those columns' memory; values are never
    truncated: a column whose chunk holds a value outside its dtype is widened to int64 on the spot.
    Chunks are small (``CHUNK_ROWS``) so their text and parsed int64 copies stay a few MB while the
    preallocated outputs are filled in place.

    ``map_chunks(fn, firsts)``, when given, runs ``fn(connection, first)`` for each chunk (e.g. on worker
    threads with their own read-only connections: SQLite scans release the GIL) and yields the results in
    order; chunks are independent rowid ranges, so the result is the same either way.

    ``columnar`` (a ``columnar.Reader`` of the file) runs the SELECT through Arrow ADBC instead; where it
    cannot (a damaged export), the rows are read as above (the same checks and errors).
    """  # noqa: E501
    dtypes = [np.dtype(d) for d in (dtypes or [np.int64] * len(exprs))]
    cond = f" AND ({where})" if where else ""
    # Two queries: SQLite answers a lone MIN(rowid) or MAX(rowid) from the rowid b-tree in O(log n), but
    # both in one SELECT scan the whole table.
    lo = con.execute(f"SELECT MIN(rowid) FROM {table}").fetchone()[0]
    hi = con.execute(f"SELECT MAX(rowid) FROM {table}").fetchone()[0]
    if lo is None:
        return [np.empty(0, dtype=d) for d in dtypes]
    # Filled in place (no second copy of the table); hi - lo + 1 bounds the row count without a COUNT scan.
    # Integer literals (a column this table lacks) are filled, not read.
    cap = hi - lo + 1
    read = [i for i, e in enumerate(exprs) if not e.lstrip("-").isdigit()]
    out = [np.empty(cap if i in read else 0, dtype=d) for i, d in enumerate(dtypes)]
    done = 0
    wanted = [exprs[i] for i in read]
    firsts = range(lo - 1, hi, CHUNK_ROWS) if read else range(0)
    got = (
        columnar.int_columns(
            f"SELECT {', '.join(wanted)} FROM {table}{cond.replace(' AND ', ' WHERE ', 1)} ORDER BY rowid",
            [dtypes[i] for i in read],
            cap,
        )
        if columnar is not None and read
        else None
    )
    if got is not None:  # filled from Arrow batches; the chunked read below is skipped
        out = [got[read.index(i)] if i in read else c for i, c in enumerate(out)]
        firsts, done = range(0), len(got[0])

    def one(c, first):
        return _chunk(c, wanted, table, cond, first, first + CHUNK_ROWS)

    parts = map_chunks(one, firsts) if map_chunks else (one(con, first) for first in firsts)
    for part in parts:
        for i, col in zip(read, part, strict=True):
            if not _fits(col, out[i].dtype):
                out[i] = out[i].astype(np.int64)
            out[i][done : done + len(col)] = col
        done += len(part[0])
        del part
    if not read:
        done = con.execute(f"SELECT COUNT(*) FROM {table} WHERE 1{cond}").fetchone()[0]
    for i, e in enumerate(exprs):
        if i not in read:
            value = int(e)
            out[i] = np.full(
                done, value, dtype=dtypes[i] if _fits(np.array([value]), dtypes[i]) else np.int64
            )
    # Filtered rows (or rowid gaps) leave spare capacity: give it back when it is worth it, by shrinking the
    # allocation in place (realloc; a large array's own mapping shrinks without a copy) rather than by a
    # copy, which held the full and the trimmed columns at once (the load's memory peak on real-shaped
    # exports, whose API table is read only in part).
    return [_trimmed(c, done) if i in read else c for i, c in enumerate(out)]


def _trimmed(col: np.ndarray, n: int) -> np.ndarray:
    """The first ``n`` values of a freshly filled column (same values either way)."""
    if n >= 0.9 * len(col):
        return col[:n]
    try:
        col.resize((n,), refcheck=False)  # the array owns its buffer and no view of it exists yet
    except (ValueError, MemoryError):
        return col[:n].copy()
    return col


def metadata(con: sqlite3.Connection, have: set[str]) -> dict[str, str]:
    """META_DATA_EXPORT name -> value (EXPORT_PRODUCT_VERSION, EXPORT_SCHEMA_VERSION, EXPORT_HOST, ...)."""
    if "META_DATA_EXPORT" not in have:
        return {}
    return {n: v for n, v in con.execute("SELECT name, value FROM META_DATA_EXPORT")}


def capture_host(con: sqlite3.Connection, have: set[str]) -> str | None:
    """The profiled host's name: TARGET_INFO_SYSTEM_ENV host row, else DEVICE_DISPLAY_NAME, else EXPORT_HOST."""
    queries = [
        ("TARGET_INFO_SYSTEM_ENV", "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name LIKE '%host%name%'"),
        ("META_DATA_CAPTURE", "SELECT value FROM META_DATA_CAPTURE WHERE name = 'DEVICE_DISPLAY_NAME'"),
        ("META_DATA_EXPORT", "SELECT value FROM META_DATA_EXPORT WHERE name = 'EXPORT_HOST'"),
    ]
    for table, sql in queries:
        if table in have:
            row = con.execute(sql).fetchone()
            if row and row[0]:
                return row[0]
    return None


def session_start_utc_ns(con: sqlite3.Connection, have: set[str]) -> int | None:
    if "TARGET_INFO_SESSION_START_TIME" not in have:
        return None
    row = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
    return int(row[0]) if row and row[0] is not None else None


NCCL_CHANNEL_SAMPLE = 512
"""NCCL kernels whose grid is read for :func:`nccl_channels` (the first ones in the table: a prefix scan)."""


def nccl_channels(con: sqlite3.Connection, have: set[str]) -> int | None:
    """How many channels NCCL ran with: its device kernels launch one CTA per channel, so this is ``gridX``
    of NCCL kernels, the most common value over the first :data:`NCCL_CHANNEL_SAMPLE` of them (the
    ``LIMIT`` ends the scan early: NCCL kernels come from the first step on). None without NCCL kernels
    or without a ``gridX`` column."""
    cols = columns(con, KERNEL) if KERNEL in have else set()
    if STRINGS not in have or "gridX" not in cols or not cols & {"shortName", "demangledName"}:
        return None
    name_col = "shortName" if "shortName" in cols else "demangledName"  # as gpu_activities
    ids = [
        r[0]
        for r in con.execute(
            f"SELECT id FROM {STRINGS} WHERE value GLOB 'ncclDevKernel*' OR value GLOB 'ncclKernel*'"
        )
    ]
    if not ids:
        return None
    marks = ",".join("?" * len(ids))
    grids = [
        r[0]
        for r in con.execute(
            f"SELECT gridX FROM {KERNEL} WHERE {name_col} IN ({marks}) LIMIT {NCCL_CHANNEL_SAMPLE}", ids
        )
        if isinstance(r[0], int) and r[0] > 0
    ]
    if not grids:
        return None
    values, counts = np.unique(np.asarray(grids, dtype=np.int64), return_counts=True)
    return int(values[np.argmax(counts)])


def scrub_record(con: sqlite3.Connection, have: set[str]) -> list[tuple]:
    if SCRUB_RECORD not in have:
        return []
    return con.execute(f"SELECT item, count, note FROM {SCRUB_RECORD}").fetchall()


def strings(con: sqlite3.Connection, ids: np.ndarray) -> dict[int, str]:
    """StringIds values for the given ids (one query; ids are few: names are deduplicated by nsys)."""
    wanted = np.unique(ids[ids >= 0])
    if len(wanted) == 0:
        return {}
    con.execute("CREATE TEMP TABLE IF NOT EXISTS _ddp_ids(id INTEGER PRIMARY KEY)")
    con.execute("DELETE FROM _ddp_ids")
    con.executemany("INSERT INTO _ddp_ids VALUES (?)", ((int(i),) for i in wanted))
    return dict(
        con.execute(
            f"SELECT s.id, CAST(s.value AS TEXT) FROM {STRINGS} s JOIN _ddp_ids USING (id) "
            "WHERE s.value IS NOT NULL"
        )
    )


def gpu_activities(
    con: sqlite3.Connection, table: str, map_chunks=None, columnar=None
) -> dict[str, np.ndarray | None]:
    """Columns pid, device, stream, start, end, name_id, corr, bytes of one activity table (narrow dtypes
    where values are small: int16 device/stream, int32 pid/name_id/corr/bytes; see ``int_columns``).

    Kernels: name_id = shortName (the base name; demangledName where shortName is absent), bytes = None
    (no byte count). Memcpy: name_id = copyKind; memset: name_id = -1; bytes = the size. Missing values are -1.
    """
    cols, nn = columns(con, table), not_null_columns(con, table)
    if table == KERNEL:
        name_id = or_default("shortName" if "shortName" in cols else "demangledName", "-1", nn)
        nbytes = None
    elif table == MEMCPY:  # copyKind references ENUM_CUDA_MEMCPY_OPER (MEMCPY_KINDS below)
        name_id, nbytes = (
            (or_default("copyKind", "-1", nn) if "copyKind" in cols else "-1"),
            or_default("bytes", "-1", nn),
        )
    else:
        name_id, nbytes = "-1", or_default("bytes", "-1", nn)
    corr = or_default("correlationId", "-1", nn) if "correlationId" in cols else "-1"
    names = ["pid", "device", "stream", "start", "end", "name_id", "corr"]
    exprs = [
        PID_SQL.format(col=or_default("globalPid", "0", nn)),
        or_default("deviceId", "-1", nn),
        or_default("streamId", "-1", nn),
        "start",
        or_default("end", "start", nn),
        name_id,
        corr,
    ]
    i32, i64 = np.int32, np.int64
    i16 = np.int16  # devices and streams are small numbers; a byte count rarely passes 2 GiB (else: widened)
    dtypes = [i32, i16, i16, i64, i64, i32, i32]
    if nbytes:
        names, exprs, dtypes = names + ["bytes"], exprs + [nbytes], dtypes + [i32]
    out: dict[str, np.ndarray | None] = dict(
        zip(
            names,
            int_columns(con, table, exprs, map_chunks=map_chunks, dtypes=dtypes, columnar=columnar),
            strict=True,
        )
    )
    out.setdefault("bytes", None)
    return out


# CUDA API functions that put work on the GPU (kernels, graphs, copies, memsets): the only API rows whose
# start becomes a kernel's ``launch_ns``. GLOB patterns over StringIds (names carry a version suffix, e.g.
# ``cudaLaunchKernel_v7000``). On the committed real traces every kernel, memcpy and memset row matched a
# call of cudaLaunchKernel, cudaLaunchKernelExC, cuLaunchKernel(Ex), cudaMemcpyAsync or cudaMemsetAsync.
LAUNCH_FUNCTIONS = (
    "cudaLaunch*",
    "cuLaunch*",
    "cudaGraphLaunch*",
    "cuGraphLaunch*",
    "cudaMemcpy*",
    "cuMemcpy*",
    "cudaMemset*",
    "cuMemset*",
)


def launch_name_ids(con: sqlite3.Connection, have: set[str]) -> list[int] | None:
    """StringIds ids of the :data:`LAUNCH_FUNCTIONS` names, or None when the runtime table has no ``nameId``
    (or there is no StringIds table): then calls cannot be told apart by name and all are read."""
    if STRINGS not in have or "nameId" not in columns(con, RUNTIME):
        return None
    globs = " OR ".join("value GLOB ?" for _ in LAUNCH_FUNCTIONS)
    return [
        int(i)
        for (i,) in con.execute(f"SELECT id FROM {STRINGS} WHERE {globs}", LAUNCH_FUNCTIONS)
        if type(i) is int
    ]


def launches(con: sqlite3.Connection, have: set[str], map_chunks=None, columnar=None) -> list[np.ndarray]:
    """Columns (pid, correlation_id, start, tid) of the CUDA runtime/driver API calls that launch GPU work
    (:data:`LAUNCH_FUNCTIONS`, selected by name id in SQL: real exports carry 2-4 API rows per kernel, most
    of them event, stream-capture and name queries that launch nothing) and carry a correlationId (pid and
    tid int32: both are 24-bit fields of globalTid; correlation ids int32, widened if one needs it). Exports
    without API names: every call with a correlationId.

    The scan of the whole table is most of the cost, so the row filter tests the name first (it drops
    most of real exports' rows) and ``correlationId != 0`` also drops NULLs; pid and tid are cut from
    one ``globalTid`` column in numpy rather than read as two (faster on the benchmark's real-shaped exports
    than four columns behind the correlationId test)."""
    i32, i64 = np.int32, np.int64
    if RUNTIME not in have:
        return [np.empty(0, dtype=d) for d in (i32, i32, i64, i32)]
    where = "correlationId != 0"
    ids = launch_name_ids(con, have)
    if ids is not None:
        if not ids:
            return [np.empty(0, dtype=d) for d in (i32, i32, i64, i32)]
        where = f"nameId IN ({', '.join(map(str, ids))}) AND {where}"  # integers only (checked above)
    gtid, corr, start = int_columns(
        con,
        RUNTIME,
        ["COALESCE(globalTid, 0)", "correlationId", "start"],
        where=where,
        map_chunks=map_chunks,
        dtypes=[i64, i32, i64],
        columnar=columnar,
    )
    pid, tid = _pid_tid(gtid)
    return [pid, corr, start, tid]


def _pid_tid(gtid: np.ndarray, chunk: int = 1 << 18) -> tuple[np.ndarray, np.ndarray]:
    """pid and tid (int32) of serialized globalTids (PID_SQL and TID_SQL, in numpy), in the globalTid
    column's own buffer: each value becomes (pid << 32) | tid in place, a chunk at a time, and the two int32
    halves are returned as views (little-endian: tid is the low half). No second full-length column, so
    reading one globalTid costs no more memory than the two int32 columns it replaces."""
    if gtid.dtype != np.int64 or not gtid.flags.c_contiguous or np.little_endian is False:
        return ((gtid >> 24) & 0xFFFFFF).astype(np.int32), (gtid & 0xFFFFFF).astype(np.int32)
    for lo in range(0, len(gtid), chunk):
        g = gtid[lo : lo + chunk]
        g[:] = (((g >> 24) & 0xFFFFFF) << 32) | (g & 0xFFFFFF)
    halves = gtid.view(np.int32)
    return halves[1::2], halves[0::2]


def nvtx_event_types(con: sqlite3.Connection, have: set[str]) -> dict[str, int]:
    """NVTX event type ids by name (ENUM_NSYS_EVENT_TYPE when exported, else the documented constants)."""
    ids = {
        "NvtxMark": NVTX_MARK,
        "NvtxPushPopRange": NVTX_PUSHPOP,
        "NvtxStartEndRange": NVTX_STARTEND,
        "NvtxDomainCreate": NVTX_DOMAIN_CREATE,
    }
    if "ENUM_NSYS_EVENT_TYPE" in have:
        found = dict(
            con.execute(
                f"SELECT name, id FROM ENUM_NSYS_EVENT_TYPE WHERE name IN ({','.join(repr(n) for n in ids)})"
            )
        )
        # These ids are pasted into later queries: only integers are taken (a damaged or hostile enum table
        # must neither break nor inject SQL); anything else keeps the documented constant.
        ids.update({n: i for n, i in found.items() if type(i) is int})
    return ids


def nvtx_ranges(con: sqlite3.Connection, have: set[str], columnar=None) -> tuple[np.ndarray, np.ndarray]:
    """NVTX ranges and marks, ordered by start (ties in table order): int rows (pid, tid, domain_id, start,
    end, payload, category, has_end, has_payload, has_category, event_type) and their texts
    (``COALESCE(text, StringIds.value)``, an object array; None where neither is present).

    Marks get end = start. Missing values are flagged by the has_* columns (their value column holds 0).
    The integer columns are read through :func:`int_columns` (no Python object per value); texts are not
    joined per row: registered strings (``textId``) are few and looked up once each, and only rows that
    carry their own ``text`` fetch it (far less work than a join per row).
    """
    cols = columns(con, NVTX)
    types = nvtx_event_types(con, have)
    wanted = ", ".join(str(types[n]) for n in ("NvtxMark", "NvtxPushPopRange", "NvtxStartEndRange"))
    payload_cols = [c for c in ("int64Value", "uint64Value", "int32Value", "uint32Value") if c in cols]
    payload = f"COALESCE({', '.join(payload_cols)}, NULL)" if payload_cols else "NULL"
    domain = "COALESCE(domainId, 0)" if "domainId" in cols else "0"
    category = "category" if "category" in cols else "NULL"
    # A textId that is not an integer cannot name a StringIds row (as in a join on it): no text.
    text_id = (
        "CASE WHEN typeof(textId) = 'integer' THEN textId ELSE -1 END"
        if "textId" in cols and STRINGS in have
        else "-1"
    )
    exprs = [
        PID_SQL.format(col="globalTid"),
        TID_SQL.format(col="globalTid"),
        domain,
        "start",
        "COALESCE(end, start)",
        f"COALESCE({payload}, 0)",
        f"COALESCE({category}, 0)",
        f"end IS NOT NULL OR eventType = {types['NvtxMark']}",
        f"{payload} IS NOT NULL",
        f"{category} IS NOT NULL",
        "eventType",
        text_id,
        "rowid",
    ]
    # A NULL where nsys writes an integer drops out of group_concat: int_columns then finds columns of
    # unequal length and raises (a damaged export), as the row read did.
    got = int_columns(con, NVTX, exprs, where=f"eventType IN ({wanted})", columnar=columnar)
    if len(got[0]) == 0:
        return np.empty((0, 11), dtype=np.int64), np.empty(0, dtype=object)
    order = np.argsort(got[3], kind="stable")
    ints = np.stack([c[order] for c in got[:11]], axis=1)
    ids, rowid = got[11][order], got[12][order]
    del got
    texts = np.full(len(order), None, dtype=object)
    if "text" in cols:  # rows with their own (non-registered) text
        own = con.execute(
            f"SELECT rowid, text FROM {NVTX} WHERE eventType IN ({wanted}) AND text IS NOT NULL "
            "ORDER BY rowid"
        ).fetchall()
        if own:
            own_ids = np.fromiter((r[0] for r in own), dtype=np.int64, count=len(own))
            at = np.searchsorted(own_ids, rowid)
            np.minimum(at, len(own_ids) - 1, out=at)
            has = own_ids[at] == rowid
            values = np.empty(len(own), dtype=object)
            values[:] = [r[1] for r in own]
            texts[has] = values[at[has]]
            ids = np.where(has, -1, ids)
    registered = np.unique(ids[ids >= 0])
    if len(registered):
        marks = ",".join("?" * min(len(registered), 500))
        found: dict[int, object] = {}
        for a in range(0, len(registered), 500):
            part = [int(i) for i in registered[a : a + 500]]
            found.update(
                con.execute(
                    f"SELECT id, value FROM {STRINGS} WHERE id IN ({marks[: 2 * len(part) - 1]})", part
                ).fetchall()
            )
        lookup = np.empty(len(registered), dtype=object)
        lookup[:] = [found.get(int(i)) for i in registered]
        sel = ids >= 0
        texts[sel] = lookup[np.searchsorted(registered, ids[sel])]
    return ints, texts


def nvtx_domains(con: sqlite3.Connection, have: set[str]) -> dict[tuple[int, int], str]:
    """(pid, domainId) -> domain name, from NvtxDomainCreate events. Domain 0 (the default) is not listed."""
    cols = columns(con, NVTX)
    if "domainId" not in cols:
        return {}
    types = nvtx_event_types(con, have)
    text = "text" if "text" in cols else "NULL"
    if "textId" in cols and STRINGS in have:
        text = f"COALESCE({text}, (SELECT value FROM {STRINGS} WHERE id = textId))"
    sql = (
        f"SELECT {PID_SQL.format(col='globalTid')}, domainId, {text} FROM {NVTX} "
        f"WHERE eventType = {types['NvtxDomainCreate']}"
    )
    return {(int(p), int(d)): (t or "") for p, d, t in con.execute(sql)}


def gpus(con: sqlite3.Connection, have: set[str]) -> list[tuple]:
    """(device, name, sm_count, memory_bytes, bus_location) per GPU. device is the CUDA device ordinal:
    ``cuDevice`` where exported (it matches kernels' deviceId), else ``id``."""
    if "TARGET_INFO_GPU" not in have:
        return []
    cols = columns(con, "TARGET_INFO_GPU")
    dev = "cuDevice" if "cuDevice" in cols else "id"
    # Only well-typed values pass (a damaged row must not break the frame): integers stay, others -> NULL.
    ints = {c: f"CASE WHEN typeof({c}) = 'integer' THEN {c} END" for c in ("smCount", "totalMemory")}
    pick = [
        ints.get(c, f"CAST({c} AS TEXT)") if c in cols else "NULL"
        for c in ("name", "smCount", "totalMemory", "busLocation")
    ]
    return con.execute(
        f"SELECT {dev}, {', '.join(pick)} FROM TARGET_INFO_GPU WHERE typeof({dev}) = 'integer' ORDER BY {dev}"
    ).fetchall()


def nvtx_time_range(con: sqlite3.Connection, have: set[str]) -> tuple[int, int] | None:
    """(earliest start, latest start or end) of the NVTX events, or None without any."""
    if NVTX not in have:
        return None
    row = con.execute(f"SELECT MIN(start), MAX(MAX(start, COALESCE(end, start))) FROM {NVTX}").fetchone()
    return (int(row[0]), int(row[1])) if row and row[0] is not None else None


def time_span(con: sqlite3.Connection, have: set[str]) -> tuple[int, int] | None:
    """(start, end) of the capture from ANALYSIS_DETAILS, when exported."""
    if "ANALYSIS_DETAILS" not in have:
        return None
    row = con.execute("SELECT MIN(startTime), MAX(stopTime) FROM ANALYSIS_DETAILS").fetchone()
    return (int(row[0]), int(row[1])) if row and row[0] is not None else None


def api_calls(con: sqlite3.Connection, have: set[str]) -> dict[str, np.ndarray] | None:
    """Every CUDA runtime and driver API call: columns pid, tid, corr (int32), start, end, name_id (int64);
    None when the export has no CUPTI_ACTIVITY_KIND_RUNTIME table (CUDA API tracing was off). As
    :func:`launches` reads this table, but all rows, with end and name: calls that launch nothing (synchronize,
    allocator, event calls) tell host time apart from launch time. ``nameId`` references StringIds (with a
    version suffix, e.g. ``cudaLaunchKernel_v7000``); -1 where missing. Read on request (``nsys.api``)."""
    if RUNTIME not in have:
        return None
    cols = columns(con, RUNTIME)
    name_id, corr = (
        "COALESCE(nameId, -1)" if "nameId" in cols else "-1",
        "COALESCE(correlationId, -1)" if "correlationId" in cols else "-1",
    )
    exprs = [
        PID_SQL.format(col="COALESCE(globalTid, 0)"),
        TID_SQL.format(col="COALESCE(globalTid, 0)"),
        corr,
        "start",
        "COALESCE(end, start)",
        name_id,
    ]
    i32, i64 = np.int32, np.int64
    names = ["pid", "tid", "corr", "start", "end", "name_id"]
    return dict(
        zip(names, int_columns(con, RUNTIME, exprs, dtypes=[i32, i32, i32, i64, i64, i64]), strict=True)
    )


# CUDA API calls the host may wait for the GPU in (GLOBs), the first matching kind wins: "event" waits for one
# recorded point (work launched after it may still run: the GPU's queue is not emptied), "sync" for a stream's or
# the device's whole queue, "copy" a copy to the host (.item(): DtoH copy + stream sync).
HOST_WAIT_FUNCTIONS = {
    "event": ("cu*EventSynchronize*",),
    "sync": ("cu*Synchronize*",),
    "copy": ("cudaMemcpy*", "cuMemcpy*"),
}
COPY_TO_HOST = (2, 4, 12)  # MEMCPY copyKind DtoH, AtoH, unified DtoH


def host_wait_calls(con: sqlite3.Connection, have: set[str], calls: dict | None = None) -> list[tuple] | None:
    """Rows (pid, tid, start, end, name, kind) of the :data:`HOST_WAIT_FUNCTIONS` calls on a process's main
    thread (tid = pid; names as StringIds store them), or None without an API table or names. A copy counts
    only if its MEMCPY row (same pid, correlationId), where exported, is a COPY_TO_HOST kind. One scan of the
    API table (0.07 s for 455k calls, campaign/C/fsdp_xl_fp32_4xh100); none with ``calls`` (:func:`api_calls`)."""
    if RUNTIME not in have or STRINGS not in have or "nameId" not in columns(con, RUNTIME):
        return None
    kind_of: dict[int, tuple[str, str]] = {}  # name id -> (name, kind)
    for kind, globs in HOST_WAIT_FUNCTIONS.items():
        got = con.execute(
            f"SELECT id, CAST(value AS TEXT) FROM {STRINGS} WHERE "
            + " OR ".join("value GLOB ?" for _ in globs),
            globs,
        )
        kind_of.update({i: (str(v), kind) for i, v in got if type(i) is int and i not in kind_of})
    if not kind_of:
        return []
    if calls is None:
        pid, tid = PID_SQL.format(col="COALESCE(globalTid, 0)"), TID_SQL.format(col="COALESCE(globalTid, 0)")
        corr = "correlationId" if "correlationId" in columns(con, RUNTIME) else "-1"
        rows = con.execute(
            f"SELECT {pid}, {tid}, start, COALESCE(end, start), nameId, {corr} FROM {RUNTIME} "
            f"WHERE nameId IN ({', '.join(map(str, kind_of))}) AND {tid} = {pid}"
        ).fetchall()
    else:  # the same rows, picked from the columns already read
        pick = np.isin(calls["name_id"], list(kind_of)) & (calls["tid"] == calls["pid"])
        picked = [calls[c][pick].tolist() for c in ("pid", "tid", "start", "end", "name_id", "corr")]
        rows = list(zip(*picked, strict=True))
    ok = MEMCPY in have and {"correlationId", "globalPid", "copyKind"} <= columns(
        con, MEMCPY
    )  # else all kept
    to_host = (
        set(
            con.execute(
                f"SELECT {PID_SQL.format(col='globalPid')}, correlationId FROM {MEMCPY} "
                f"WHERE copyKind IN {COPY_TO_HOST}"
            ).fetchall()
        )
        if ok
        else None
    )
    return [
        (p, t, s, e, *kind_of[n])
        for p, t, s, e, n, c in rows  # damaged rows (non-integers) skipped
        if all(type(x) is int for x in (p, t, s, e))
        and n in kind_of
        and (to_host is None or kind_of[n][1] != "copy" or (p, c) in to_host)
    ]
