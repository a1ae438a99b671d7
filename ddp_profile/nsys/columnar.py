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
_driver: Any = None  # the driver's modules once imported (_Driver); False when unavailable


class _Driver:
    """The driver's low-level modules: ``adbc_driver_manager`` (database, connection, statement handles),
    ``adbc_driver_sqlite`` (the SQLite driver's library) and ``pyarrow`` (the result stream's reader).
    Not their DB-API layer (``adbc_driver_sqlite.dbapi``): that one imports pandas and ``pyarrow.dataset``,
    which a read does not need (``nsys/read.py`` imports no pandas)."""

    def __init__(self) -> None:
        import adbc_driver_manager
        import adbc_driver_sqlite
        import pyarrow

        if not hasattr(pyarrow.RecordBatchReader, "from_stream"):  # pyarrow < 15
            raise ImportError("pyarrow.RecordBatchReader.from_stream is missing")
        self.manager, self.sqlite, self.pa = adbc_driver_manager, adbc_driver_sqlite, pyarrow
        self.errors = (adbc_driver_manager.Error, pyarrow.ArrowException)


def _loaded() -> _Driver | None:
    """The driver, or None when not installed or switched off (``DDP_PROFILE_READER=sqlite3``)."""
    global _driver
    if os.environ.get("DDP_PROFILE_READER", "").lower() == "sqlite3":
        return None
    with _lock:
        if _driver is None:
            try:
                _driver = _Driver()
            except ImportError:
                _driver = False
    return _driver or None


def available() -> bool:
    """Whether columnar reads will be used (the driver imports, and no environment switch turns it off)."""
    return _loaded() is not None


class _Connection:
    """One read-only ADBC connection (database and connection handles, closed together)."""

    def __init__(self, driver: _Driver, uri: str) -> None:
        self.driver = driver
        self.database = driver.sqlite.connect(uri)
        try:
            self.connection = driver.manager.AdbcConnection(self.database)
        except BaseException:
            self.database.close()
            raise

    def batches(self, query: str):
        """The query's record batches, as the driver builds them (``BATCH_ROWS`` rows each)."""
        statement = self.driver.manager.AdbcStatement(self.connection)
        try:
            statement.set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)})
            statement.set_sql_query(query)
            stream, _ = statement.execute_query()
            yield from self.driver.pa.RecordBatchReader.from_stream(stream)
        finally:
            statement.close()

    def close(self) -> None:
        self.connection.close()
        self.database.close()


class Reader:
    """Read-only ADBC connections to one plain (uncompressed) export; one per thread that reads."""

    def __init__(self, path: Path):
        # the file name's bytes, percent-quoted (any name, also one that is not UTF-8), as files.open_export does
        self.uri = "file:" + urllib.parse.quote(os.fsencode(Path(path).resolve())) + "?mode=ro&immutable=1"
        self.local = threading.local()
        self.cons: list = []

    def _con(self, driver: _Driver) -> _Connection:
        con = getattr(self.local, "con", None)
        if con is None:
            con = self.local.con = _Connection(driver, self.uri)
            with _lock:
                self.cons.append(con)
        return con

    def int_columns(self, query: str, dtypes: list[np.dtype], cap: int) -> list[np.ndarray] | None:
        """The query's columns as 1-D arrays of ``dtypes`` (a column whose values do not fit its dtype is
        widened to int64), at most ``cap`` rows; None when the driver fails or a column is not non-null
        integers (the caller then reads through ``sqlite3``)."""
        driver = _loaded()
        if driver is None:  # switched off since the Reader was made
            return None
        pa = driver.pa
        out = [np.empty(cap, dtype=d) for d in dtypes]
        done = 0
        try:
            for batch in self._con(driver).batches(query):
                n = batch.num_rows
                if done + n > cap or batch.num_columns != len(out):
                    return None
                for i, col in enumerate(batch.columns):
                    if col.null_count or not pa.types.is_integer(col.type):
                        return None
                    values = _values(col, pa.types.is_signed_integer(col.type))
                    if not _fits(values, out[i].dtype):
                        out[i] = out[i].astype(np.int64)
                    out[i][done : done + n] = values
                done += n
        except driver.errors:
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
    parsing of each chunk does not), so reads overlap (``benchmarks/bench_analyzer.py`` times the load).
    Plain files only: an export decompressed into memory has a
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


def _values(col, signed: bool) -> np.ndarray:
    """An Arrow integer column without nulls as a numpy view of its data buffer (``Array.to_numpy`` would
    import pandas, which the read is meant to run beside, not wait for)."""
    width = col.type.bit_width // 8
    kind = "i" if signed else "u"
    return np.frombuffer(
        col.buffers()[1], dtype=np.dtype(f"{kind}{width}"), count=len(col), offset=col.offset * width
    )


def _fits(col: np.ndarray, dtype: np.dtype) -> bool:
    if dtype == np.int64 or len(col) == 0:
        return True
    info = np.iinfo(dtype)
    return bool(col.min() >= info.min and col.max() <= info.max)
