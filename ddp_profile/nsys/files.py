"""Which files are nsys exports, and opening one read-only: the only place that knows export suffixes.

Compressed exports (``.sqlite.xz``, ``.sqlite.gz``) are decompressed into memory; plain ones are opened with
``mode=ro&immutable=1``. Nothing here writes an input.
"""

from __future__ import annotations

import gzip
import lzma
import os
import sqlite3
import threading
import urllib.parse
from contextlib import contextmanager
from pathlib import Path

from ddp_profile.errors import TraceError
from ddp_profile.nsys import rawio, sql
from ddp_profile.safeio import kind_of

EXPORT_SUFFIXES = (".sqlite", ".sqlite.xz", ".sqlite.gz")
"""Files load_trace reads; run discovery in the report and the findings uses the same tuple."""

DECOMPRESS = {".xz": lzma.decompress, ".gz": gzip.decompress}


def find_exports(paths) -> list[Path]:
    """Expand ``paths`` (a path or list; folders give their ``*.sqlite[.xz|.gz]``) into export files."""
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    files: list[Path] = []
    for item in map(Path, items):
        if item.is_dir():
            found = sorted(p for p in item.iterdir() if p.name.endswith(EXPORT_SUFFIXES) and p.is_file())
            if not found:
                raise TraceError(
                    f"{item}: folder holds no *.sqlite / *.sqlite.xz / *.sqlite.gz exports; pass the run "
                    "folder with the exports (make them with `nsys export --type sqlite`, or --export)"
                )
            files.extend(found)
        else:
            files.append(item)
    if not files:
        raise TraceError("no trace files given")
    _check_same_stem(files)
    return files


def _check_same_stem(files: list[Path]) -> None:
    """``run.sqlite`` beside ``run.sqlite.xz`` (or one file given twice) is one export twice: its ranks would
    count twice, so it is refused (which copy is current is the user's call, not ours)."""
    seen: dict = {}
    for f in files:
        key = (f.resolve().parent, export_stem(f))
        if key in seen:
            raise TraceError(
                f"{seen[key]} and {f}: the same export twice (one name, "
                f"{'same file' if seen[key].resolve() == f.resolve() else 'other compression'}); "
                "keep or pass only one of them"
            )
        seen[key] = f


def check_header(path: Path, head: bytes, size: int) -> None:
    if head[:16] != rawio.SQLITE_MAGIC:
        raise TraceError(
            f"{path}: not an SQLite file (expected an nsys export: "
            "`nsys export --type sqlite -o X.sqlite X.nsys-rep`)"
        )
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    n_pages = int.from_bytes(head[28:32], "big")
    valid = head[92:96] == head[24:28]  # the header's page count is valid only when these match
    if valid and n_pages and page_size * n_pages > size:
        raise TraceError(
            f"{path}: truncated ({size} bytes, header says {page_size * n_pages}); copy it again"
        )


def short_error(exc: BaseException, limit: int = 200) -> str:
    """An exception's text fit for a one-line message: whitespace collapsed, cut to ``limit`` characters
    (SQLite quotes the offending value, which in a damaged export can be a whole column's text)."""
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[:limit] + "..."


_last_decompressed: dict[tuple, bytes] = {}
_last_lock = threading.Lock()
_reusing = 0  # how many reuse_decompressed() blocks are open


@contextmanager
def reuse_decompressed():
    """Within this block a compressed export opened again (same resolved path, size, modification time and
    decompression limit) is not decompressed again: the report opens each run's export twice (kernels, then
    the API table for the launch diagnosis) and xz decompression is most of a small run's load. The last
    file's bytes are kept (immutable; ``deserialize`` copies them) and dropped when the block ends, so a
    lone ``load_trace`` holds no second copy of its export."""
    global _reusing
    with _last_lock:
        _reusing += 1
    try:
        yield
    finally:
        with _last_lock:
            _reusing -= 1
            if not _reusing:
                _last_decompressed.clear()


def _decompressed(path: Path) -> bytes:
    """``rawio.read_decompressed(path)``, or the kept bytes (see :func:`reuse_decompressed`)."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, rawio.max_decompressed())
    with _last_lock:
        if key in _last_decompressed:
            return _last_decompressed[key]
    data = rawio.read_decompressed(path)
    with _last_lock:
        if _reusing:
            _last_decompressed.clear()
            _last_decompressed[key] = data
    return data


def open_export(path: Path) -> sqlite3.Connection:
    """Open one export read-only; compressed ones are decompressed into memory. Never writes ``path``."""
    name = path.name
    if name.endswith((".nsys-rep", ".qdrep", ".qdstrm")):
        out = name.rsplit(".", 1)[0] + ".sqlite"
        raise TraceError(
            f"{path}: an nsys report, not an SQLite export; run "
            f"`nsys export --type sqlite -o {out} {name}` and load {out} (or add --export where nsys is installed)"
        )
    if not path.is_file():
        if path.exists():  # a FIFO or device would block or never end; a folder is not an export either
            raise TraceError(
                f"{path}: is {kind_of(os.stat(path).st_mode)}, not an export file; pass the .sqlite file itself"
            )
        raise TraceError(f"{path}: no such file; check the path")
    try:
        if path.suffix in DECOMPRESS:
            data = _decompressed(path)  # header checked from the first bytes; expansion bounded
            check_header(path, data[:100], len(data))
            con = sqlite3.connect(":memory:", check_same_thread=False)
            con.deserialize(data)
        else:
            rawio.check_no_writer(path)  # immutable=1 would ignore a -wal and read a writer's pages unlocked
            with open(path, "rb") as f:
                check_header(path, f.read(100), path.stat().st_size)
            uri = (
                "file:" + urllib.parse.quote(os.fsencode(path.resolve())) + "?mode=ro&immutable=1"
            )  # bytes: any file name
            con = sqlite3.connect(uri, uri=True, check_same_thread=False)
        have = sql.tables(con)
    except (OSError, EOFError, lzma.LZMAError, gzip.BadGzipFile, sqlite3.DatabaseError) as exc:
        raise TraceError(
            f"{path}: cannot read as SQLite ({short_error(exc)}); check that it is readable and complete"
        ) from exc
    if not have & {sql.STRINGS, "META_DATA_EXPORT"}:
        con.close()
        raise TraceError(
            f"{path}: an SQLite file but not an nsys export (no StringIds / META_DATA_EXPORT); "
            "pass a file made by `nsys export --type sqlite`"
        )
    return con


def export_stem(path: Path) -> str:
    """'rank0.sqlite.xz' -> 'rank0': the run or rank name an export file carries."""
    return Path(path).name.split(".sqlite")[0]
