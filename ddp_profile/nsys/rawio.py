"""Raw access to export files, shared by the loader (nsys/files.py) and the stdlib-only scrubber.

Standard library only (the scrubber runs on GPU machines). Two guards:

* :func:`check_no_writer`: a plain ``.sqlite`` with a non-empty rollback journal (``X-journal``) or a non-empty
  write-ahead log (``X-wal``) beside it is being written, or was left with committed changes outside the
  main file. Reading the main file alone (``immutable=1``, or copying its bytes) would give stale or
  uncommitted state, so it is refused with a line saying what to do. The loader never takes locks and never
  writes sidecar files, so refusing is the one way to never read a writer's uncommitted pages.
* :func:`read_decompressed`: ``.xz`` / ``.gz`` exports are decompressed as a stream; the first 100 bytes
  are checked for the SQLite header before anything else is expanded, and the expansion stops at
  :func:`max_decompressed` bytes (``DDP_PROFILE_MAX_DECOMPRESSED``; default half the machine's memory, at
  most 32G) with a clear error, so a small file that expands to terabytes cannot fill memory. A header whose
  database size (page size x page count) is beyond the limit is refused before expanding anything.
"""

from __future__ import annotations

import gzip
import io
import lzma
import os
import re
from collections.abc import Callable
from pathlib import Path

from ddp_profile.errors import TraceError, UsageError

SQLITE_MAGIC = b"SQLite format 3\x00"
OPENERS: dict[str, Callable[..., io.BufferedIOBase]] = {".xz": lzma.open, ".gz": gzip.open}
LIMIT_ENV = "DDP_PROFILE_MAX_DECOMPRESSED"
DEFAULT_LIMIT = 32 << 30
CHUNK = 16 << 20


def check_no_writer(path: Path) -> None:
    """Refuse a plain export with a hot ``-journal`` or a non-empty ``-wal`` beside it (see module doc)."""
    path = Path(path).resolve()  # through a symlink: the writer's -wal sits beside the real file
    if path.suffix in OPENERS:
        return
    journal = path.with_name(path.name + "-journal")
    wal = path.with_name(path.name + "-wal")
    try:  # a non-empty journal: a writer is inside a transaction (its header is synced only when pages spill)
        hot = journal.stat().st_size > 0
    except OSError:
        hot = False
    if hot:
        raise TraceError(
            f"{path}: a rollback journal ({journal.name}) is beside it: a program is writing it (or "
            "crashed while writing); not read, to never see uncommitted data. Wait for the writer "
            f"to finish (a journal left by a crash is rolled back by opening it once with `sqlite3 {path.name} 'PRAGMA integrity_check'`)"  # noqa: E501
        )
    try:
        wal_size = wal.stat().st_size
    except OSError:
        wal_size = 0
    if wal_size > 0:
        raise TraceError(
            f"{path}: a write-ahead log ({wal.name}, {wal_size} bytes) is beside it: committed "
            "changes may still be only in the log, or a writer is active; not read. Once no program "
            f"has it open run `sqlite3 {path.name} 'PRAGMA wal_checkpoint(TRUNCATE)'` (or copy it "
            f"with `sqlite3 {path.name} '.backup copy.sqlite'`)"
        )


def default_limit() -> int:
    """Half the machine's physical memory, at most :data:`DEFAULT_LIMIT` (the export is expanded in memory)."""
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return DEFAULT_LIMIT
    return min(DEFAULT_LIMIT, max(memory // 2, 1 << 30)) if memory > 0 else DEFAULT_LIMIT


def max_decompressed() -> int:
    """The decompression bound in bytes: ``DDP_PROFILE_MAX_DECOMPRESSED`` (``5000000000``, ``64G``, ``512M``),
    else :func:`default_limit`."""
    raw = os.environ.get(LIMIT_ENV, "").strip()
    if not raw:
        return default_limit()
    m = re.fullmatch(r"(\d{1,15})\s*([KMGT]?)i?B?", raw, re.I)
    if not m or int(m.group(1)) == 0:
        raise UsageError(f"{LIMIT_ENV}={raw[:40]!r}: give a size in bytes such as 64G or 500M")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30, "T": 40}[m.group(2).upper()]


def header_size(head: bytes) -> int | None:
    """The database size an SQLite header states (page size x page count), or None when it is not valid."""
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    n_pages = int.from_bytes(head[28:32], "big")
    return page_size * n_pages if head[92:96] == head[24:28] and n_pages else None


def _too_big(path: Path, limit: int, stated: int | None = None) -> TraceError:
    what = f"its header states {stated:,} bytes, over" if stated else "expands to more than"
    return TraceError(
        f"{path}: {what} {limit:,} bytes, the decompression limit; if this export "
        f"really is that large, raise it with {LIMIT_ENV}=<size> (e.g. 64G) or decompress it "
        "yourself (`xz -dk` / `gunzip -k`) and pass the .sqlite"
    )


def copy_decompressed(path: Path, fout, limit: int | None = None) -> int:
    """Decompress ``path`` into the binary file ``fout``: the SQLite header is checked from the first
    100 bytes, and more than ``limit`` bytes is an error. Returns the bytes written."""
    limit = max_decompressed() if limit is None else limit
    with OPENERS[path.suffix](path, "rb") as fin:
        head = fin.read(100)
        if head[:16] != SQLITE_MAGIC:
            raise TraceError(
                f"{path}: does not decompress to an SQLite file (expected an nsys export: "
                "`nsys export --type sqlite -o X.sqlite X.nsys-rep`)"
            )
        stated = header_size(head)
        if len(head) > limit or (stated is not None and stated > limit):
            raise _too_big(path, limit, stated)
        fout.write(head)
        total = len(head)
        while True:
            chunk = fin.read(min(CHUNK, limit - total + 1))
            if not chunk:
                return total
            total += len(chunk)
            if total > limit:
                raise _too_big(path, limit)
            fout.write(chunk)


def read_decompressed(path: Path, limit: int | None = None) -> bytes:
    """The decompressed bytes of ``path`` (``.xz``/``.gz``), checked and bounded as :func:`copy_decompressed`."""
    buf = io.BytesIO()
    try:
        copy_decompressed(path, buf, limit)
        return buf.getvalue()
    except MemoryError:
        raise TraceError(
            f"{path}: not enough memory to decompress it; set {LIMIT_ENV} lower to fail sooner, "
            "or decompress it yourself (`xz -dk` / `gunzip -k`) and pass the .sqlite"
        ) from None
