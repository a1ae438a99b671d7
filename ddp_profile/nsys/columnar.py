"""Columnar reads of an export through the Arrow ADBC SQLite driver (``adbc-driver-sqlite``), when installed.

SQLite hands the driver each row's values in C and the driver builds Arrow columns from them: no Python
object per value, and no text formatting and parsing as in the ``group_concat`` read of
:func:`ddp_profile.nsys.sql.int_columns`, which stays the fallback (the scrubber and the GPU machines have only
the standard library, and ``DDP_PROFILE_READER=sqlite3`` forces it). The file is opened with the same
read-only URI as :func:`ddp_profile.nsys.files.open_export` (``mode=ro&immutable=1``): it is never written.

The sqlite3 path's reader threads live here too (:class:`ChunkReaders`). This module runs queries it is
given; it knows no nsys table (``sql.py`` builds every query). A result
the driver cannot give as non-null integers (a damaged export: text, reals or NULLs where nsys writes
integers) is reported as ``None``, and the caller reads the same rows through ``sqlite3``, whose checks
name the problem.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

BATCH_ROWS = 1 << 16
"""Rows per Arrow batch (the driver's default is 1,024; per-batch overhead then dominates a table of millions
of rows). Batches are copied into preallocated numpy columns as they arrive, so one batch is the most held
twice."""

_lock = threading.Lock()
_driver: Any = None  # the dbapi module once imported; False when unavailable


def _dbapi():
    """The ADBC SQLite dbapi module, or None when not installed or switched off (``DDP_PROFILE_READER``)."""
    global _driver
    if os.environ.get("DDP_PROFILE_READER", "").lower() == "sqlite3":
        return None
    with _lock:
        if _driver is None:
            try:
                import adbc_driver_sqlite.dbapi as dbapi
            except ImportError:
                _driver = False
            else:
                _driver = dbapi
    return _driver or None


def available() -> bool:
    """Whether columnar reads will be used (the driver imports, and no environment switch turns it off)."""
    return _dbapi() is not None


class Reader:
    """Read-only ADBC connections to one plain (uncompressed) export; one per thread that reads."""

    def __init__(self, path: Path):
        # the file name's bytes, percent-quoted (any name, also one that is not UTF-8), as files.open_export does
        self.uri = "file:" + urllib.parse.quote(os.fsencode(Path(path).resolve())) + "?mode=ro&immutable=1"
        self.local = threading.local()
        self.cons: list = []

    def _con(self):
        con = getattr(self.local, "con", None)
        if con is None:
            con = self.local.con = _dbapi().connect(self.uri)
            with _lock:
                self.cons.append(con)
        return con

    def int_columns(self, query: str, dtypes: list[np.dtype], cap: int) -> list[np.ndarray] | None:
        """The query's columns as 1-D arrays of ``dtypes`` (a column whose values do not fit its dtype is
        widened to int64), at most ``cap`` rows; None when the driver fails or a column is not non-null
        integers (the caller then reads through ``sqlite3``)."""
        dbapi = _dbapi()
        import pyarrow as pa

        out = [np.empty(cap, dtype=d) for d in dtypes]
        done = 0
        try:
            cur = self._con().cursor()
            try:
                cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)})
                cur.execute(query)
                for batch in cur.fetch_record_batch():
                    n = batch.num_rows
                    if done + n > cap or batch.num_columns != len(out):
                        return None
                    for i, col in enumerate(batch.columns):
                        if col.null_count or not pa.types.is_integer(col.type):
                            return None
                        values = col.to_numpy(zero_copy_only=False)
                        if not _fits(values, out[i].dtype):
                            out[i] = out[i].astype(np.int64)
                        out[i][done:done + n] = values
                    done += n
            finally:
                cur.close()
        except (dbapi.Error, pa.ArrowException):
            return None
        return [c[:done] if done >= 0.9 * cap else c[:done].copy() for c in out]

    def close(self) -> None:
        with _lock:
            cons, self.cons = self.cons, []
        for con in cons:
            con.close()


class ChunkReaders:
    """Worker threads, each with its own read-only connection to one export, reading row chunks in
    parallel (``sql.int_columns(map_chunks=...)``). SQLite runs the scans with the GIL released (numpy's
    parsing of each chunk does not), so reads overlap: on the 2-vCPU benchmark VM a 10M-kernel export read
    in ~9.7 s instead of ~12.3 s (mean of 3). Plain files only: an export decompressed into memory has a
    single connection."""

    def __init__(self, path: Path, workers: int):
        self.path, self.local = path, threading.local()
        self.cons: list[sqlite3.Connection] = []
        self.pool = ThreadPoolExecutor(max_workers=workers)

    def _con(self) -> sqlite3.Connection:
        from ddp_profile.nsys.files import open_export

        con = getattr(self.local, "con", None)
        if con is None:
            con = self.local.con = open_export(self.path)
            self.cons.append(con)
        return con

    def map(self, fn, items):
        return self.pool.map(lambda item: fn(self._con(), item), items)

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        for con in self.cons:
            con.close()


def _fits(col: np.ndarray, dtype: np.dtype) -> bool:
    if dtype == np.int64 or len(col) == 0:
        return True
    info = np.iinfo(dtype)
    return bool(col.min() >= info.min and col.max() <= info.max)
