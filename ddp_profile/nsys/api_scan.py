"""The reads of the CUDA API table (CUPTI_ACTIVITY_KIND_RUNTIME) that ``load_trace`` makes: the calls that
launch GPU work (``sql.launches``) and the calls the host may wait for the GPU in (:func:`host_wait_calls`).
The table is an export's largest (2-4 rows per kernel) and a scan of it is most of either read's cost, so
with columnar reads both come from one scan (:func:`launches_and_waits`); each read alone stays the path for
exports read through ``sqlite3`` and where the one scan cannot be made (see there). Schema facts as in
``sql``'s docstring (pid and tid from ``globalTid``; ``nameId`` references StringIds).
"""

from __future__ import annotations

import sqlite3

import numpy as np

from ddp_profile.nsys import sql
from ddp_profile.nsys.sql import MEMCPY, PID_SQL, RUNTIME, STRINGS, TID_SQL, columns

# CUDA API calls the host may wait for the GPU in (GLOBs): syncs, copies to the host (.item(): DtoH copy + sync)
HOST_WAIT_FUNCTIONS = {"sync": ("cu*Synchronize*",), "copy": ("cudaMemcpy*", "cuMemcpy*")}
COPY_TO_HOST = (2, 4, 12)  # MEMCPY copyKind DtoH, AtoH, unified DtoH

WaitRow = tuple[int, int, int, int, str, str]


def _wait_names(con: sqlite3.Connection, have: set[str]) -> dict[int, tuple[str, str]] | None:
    """{name id: (name, kind)} of the HOST_WAIT_FUNCTIONS, or None without an API table or call names."""
    if RUNTIME not in have or STRINGS not in have or "nameId" not in columns(con, RUNTIME):
        return None
    kind_of: dict[int, tuple[str, str]] = {}
    for kind, globs in HOST_WAIT_FUNCTIONS.items():
        got = con.execute(f"SELECT id, CAST(value AS TEXT) FROM {STRINGS} WHERE "
                          + " OR ".join("value GLOB ?" for _ in globs), globs)
        kind_of.update({i: (str(v), kind) for i, v in got if type(i) is int and i not in kind_of})
    return kind_of


def _kept(rows, kind_of: dict[int, tuple[str, str]], con: sqlite3.Connection, have: set[str]) -> list[WaitRow]:
    """Rows (pid, tid, start, end, name id, correlationId) as :func:`host_wait_calls` returns them: damaged
    rows (non-integers) skipped, a copy only when its MEMCPY row (same pid, correlationId) is a COPY_TO_HOST
    kind, where the export has that table."""
    ok = MEMCPY in have and {"correlationId", "globalPid", "copyKind"} <= columns(con, MEMCPY)  # else all kept
    to_host = set(con.execute(f"SELECT {PID_SQL.format(col='globalPid')}, correlationId FROM {MEMCPY} "
                              f"WHERE copyKind IN {COPY_TO_HOST}").fetchall()) if ok else None
    return [(p, t, s, e, *kind_of[n]) for p, t, s, e, n, c in rows
            if all(type(x) is int for x in (p, t, s, e)) and n in kind_of
            and (to_host is None or kind_of[n][1] != "copy" or (p, c) in to_host)]


def host_wait_calls(con: sqlite3.Connection, have: set[str]) -> list[WaitRow] | None:
    """Rows (pid, tid, start, end, name, kind) of the :data:`HOST_WAIT_FUNCTIONS` calls on a process's main
    thread (tid = pid; names as StringIds store them), or None without an API table or names. A copy counts
    only when its MEMCPY row (same pid, correlationId) is a COPY_TO_HOST kind, where the export has that table.
    One scan of the API table (0.07 s for 455k calls on traces/campaign/C/fsdp_xl_fp32_4xh100)."""
    kind_of = _wait_names(con, have)
    if not kind_of:
        return kind_of if kind_of is None else []
    pid, tid = PID_SQL.format(col="COALESCE(globalTid, 0)"), TID_SQL.format(col="COALESCE(globalTid, 0)")
    corr = "correlationId" if "correlationId" in columns(con, RUNTIME) else "-1"
    rows = con.execute(f"SELECT {pid}, {tid}, start, COALESCE(end, start), nameId, {corr} FROM {RUNTIME} "
                       f"WHERE nameId IN ({', '.join(map(str, kind_of))}) AND {tid} = {pid}").fetchall()  # integers only
    return _kept(rows, kind_of, con, have)


def launches_and_waits(con: sqlite3.Connection, have: set[str], columnar=None
                       ) -> tuple[list[np.ndarray], list[WaitRow] | None]:
    """``(sql.launches(con, have, columnar=columnar), host_wait_calls(con, have))`` from one scan of the API
    table through ``columnar`` (a ``columnar.Reader``): the rows of either set of names, with the columns of
    both (globalTid, correlationId, start, end, nameId), split in numpy. The two reads are made instead
    without ``columnar``, without call names or correlation ids, and where the driver cannot give every value
    as an integer (a NULL or damaged value: the two reads then apply their own rules to it)."""
    ids = sql.launch_name_ids(con, have) if RUNTIME in have else None
    kind_of = _wait_names(con, have)
    if columnar is None or not ids or not kind_of or "correlationId" not in columns(con, RUNTIME):
        return sql.launches(con, have, columnar=columnar), host_wait_calls(con, have)
    lo = con.execute(f"SELECT MIN(rowid) FROM {RUNTIME}").fetchone()[0]  # two queries: each O(log n)
    hi = con.execute(f"SELECT MAX(rowid) FROM {RUNTIME}").fetchone()[0]
    wanted = sorted(set(ids) | set(kind_of))  # integers only (checked where read)
    got = columnar.int_columns(
        f"SELECT COALESCE(globalTid, 0), correlationId, start, COALESCE(end, start), nameId FROM {RUNTIME} "
        f"WHERE nameId IN ({', '.join(map(str, wanted))}) ORDER BY rowid",
        [np.dtype(d) for d in (np.int64, np.int32, np.int64, np.int64, np.int32)], hi - lo + 1) if lo is not None else None
    if got is None:
        return sql.launches(con, have, columnar=columnar), host_wait_calls(con, have)
    gtid, corr, start, end, name = got
    pid = ((gtid >> 24) & 0xFFFFFF).astype(np.int32)
    tid = (gtid & 0xFFFFFF).astype(np.int32)
    del gtid
    wait = np.isin(name, list(kind_of)) & (tid == pid)
    rows = zip(*(a[wait].tolist() for a in (pid, tid, start, end, name, corr)), strict=True)
    waits = _kept(rows, kind_of, con, have)
    del end
    launch = np.isin(name, ids) & (corr != 0)
    del name
    if launch.all():
        return [pid, corr, start, tid], waits
    return [pid[launch], corr[launch], start[launch], tid[launch]], waits
