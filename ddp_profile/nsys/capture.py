"""When an export's capture ran, in UTC: what groups a folder's exports into jobs (per-rank files of one job
overlap in time; two jobs run one after the other do not)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ddp_profile.nsys import sql
from ddp_profile.nsys.files import open_export


def kernel_time_range(con: sqlite3.Connection, have: set[str]) -> tuple[int, int] | None:
    """(earliest start, latest end) of the kernels, or None without any."""
    if sql.KERNEL not in have:
        return None
    row = con.execute(f"SELECT MIN(start), MAX(end) FROM {sql.KERNEL}").fetchone()
    return (int(row[0]), int(row[1])) if row and row[0] is not None else None


def capture_window(path: Path) -> tuple[int, int] | None:
    """(start, end) of an export's capture in UTC nanoseconds: the session's start (TARGET_INFO_SESSION_START_TIME)
    plus the capture's span (ANALYSIS_DETAILS, else its kernels' first start and last end); None when the
    export does not record its session start."""
    con = open_export(path)
    try:
        have = sql.tables(con)
        start = sql.session_start_utc_ns(con, have)
        span = sql.time_span(con, have) or kernel_time_range(con, have)
    finally:
        con.close()
    if start is None or span is None:
        return None
    return start + span[0], start + span[1]
