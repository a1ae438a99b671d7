"""Per-run results of `ddp-profile report`, kept in the report folder (``<report>/.cache/``) so that a second
report of unchanged runs loads each run's (trace, analysis, launch diagnosis) instead of reading and
analysing its exports again.

An entry's name is a digest of everything the result depends on, so an entry is never stale:

* the tool: its version, the entry format, the Python / numpy / pandas / pyarrow versions and the bytes
  of every module of the ``ddp_profile`` package (a changed analysis recomputes even without a version bump);
* the analysis options (the report's ``--steps``);
* the run: its resolved location, and the resolved path of each file the loader may read, marked as one of
  the run's exports or as a side file of their folders (run JSON, ``program.json``, other runs' exports),
  with each file's content digest (BLAKE2b), not its date (within one process a file is read once while its
  size and modification time stay the same). Two exports in one folder are two runs: two entries, never one.

Entries are data only (:mod:`ddp_profile.report.cache_entry`: tagged JSON and zstd-compressed Arrow IPC
frames in a zip archive, never pickle): reading one runs nothing it holds, so a report folder received from
someone else cannot make the next report into it execute code. An entry that fails validation (damaged,
planted, of another format or key) is recomputed, with one line on stderr saying so.

Entries are written atomically (:func:`ddp_profile.safeio.write_bytes_atomic`) into a staging folder beside
the report, and the entries this report used are linked into the new report folder as it is built; entries of
runs no longer reported are dropped with the old folder. The cache is bounded: when this report's entries
exceed :data:`LIMIT_BYTES`, the oldest (by modification time) are left out of the new folder, and their runs
are analysed again next time.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

from ddp_profile.errors import OutputError, TraceError, one_line
from ddp_profile.nsys.files import find_exports
from ddp_profile.report import cache_entry
from ddp_profile.safeio import write_bytes_atomic

CACHE_DIR = ".cache"
ENTRY_SUFFIX = ".zip"
LIMIT_BYTES = 256 << 20
"""Most bytes of entries one report folder keeps (the oldest beyond it are dropped)."""
PACKAGE = Path(__file__).resolve().parents[1]


def _file_digest(path: Path) -> bytes:
    """BLAKE2b of a file's bytes, computed once per process for an unchanged file (same size and
    modification time): the whole report's key and each run's key read the same exports."""
    st = path.stat()
    return _digest_of(str(path), st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=4096)
def _digest_of(path: str, size: int, mtime_ns: int) -> bytes:
    h = hashlib.blake2b(digest_size=20)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.digest()


@lru_cache(maxsize=1)
def tool_digest() -> bytes:
    """The version, the entry format, the libraries an entry's frames go through, and the package's source."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    from ddp_profile import __version__

    h = hashlib.blake2b(digest_size=20)
    h.update(
        f"{__version__}|{cache_entry.FORMAT}|{platform.python_version()}|{np.__version__}|{pd.__version__}|"
        f"{pa.__version__}".encode()
    )
    for src in sorted(PACKAGE.rglob("*.py")):
        h.update(str(src.relative_to(PACKAGE)).encode() + b"\0" + _file_digest(src))
    return h.digest()


def input_files(path: Path) -> list[Path]:
    """Every file one run's load may read: its exports and every file in the folders holding them."""
    exports = find_exports([path])
    folders = {p.resolve().parent for p in exports} | ({path.resolve()} if path.is_dir() else set())
    files = {p.resolve() for p in exports}
    for folder in folders:
        files.update(q for q in folder.iterdir() if q.is_file())
    return sorted(files)


def run_key(path: Path, options: str = "") -> str:
    """The cache entry name of one run location analysed with ``options`` (the step selection's text; see
    the module docstring). The run itself is part of the key: its location, which files are its exports and
    which are only side files of their folders; two exports of one folder are two runs with two entries."""
    path = Path(path)
    exports = {p.resolve() for p in find_exports([path])}
    h = hashlib.blake2b(tool_digest(), digest_size=20)
    h.update(options.encode() + b"\0")
    h.update(b"run\0" + os.fsencode(path.resolve()) + (b"/" if path.is_dir() else b"") + b"\0")
    for f in input_files(path):
        h.update((b"export\0" if f in exports else b"side\0") + os.fsencode(f) + b"\0" + _file_digest(f))
    return h.hexdigest()


class RunCache:
    """The cache of one report: entries of the previous report folder (``out_dir``) are read; new ones
    go to a staging folder beside it; :meth:`carry_into` links the used ones into the new folder."""

    def __init__(self, out_dir: Path, marker: str, options: str = ""):
        out_dir = Path(out_dir).resolve()
        self.out_dir, self.options = out_dir, options
        # only a folder that is ours (the report's marker) is read: never someone else's files
        self.old = out_dir / CACHE_DIR if (out_dir / marker).is_file() else None
        self.staging: Path | None = None
        self.used: dict[str, Path] = {}

    def get(self, key: str):
        """The cached result for ``key``, or None (absent, or failing validation: then recomputed, with a line
        on stderr)."""
        for folder in (self.staging, self.old):
            entry = folder / f"{key}{ENTRY_SUFFIX}" if folder is not None else None
            if entry is not None and entry.is_file():
                try:
                    result = _load(entry)
                except (OSError, cache_entry.EntryError) as exc:  # a cache miss, never an error of the report
                    print(
                        one_line(
                            f"report: cache entry {entry.name} not used ({exc}); analysing that run again"
                        ),
                        file=sys.stderr,
                        flush=True,
                    )
                    continue
                self.used[key] = entry
                return result
        return None

    def entry_path(self, key: str) -> Path:
        """Where a new entry for ``key`` is written (the staging folder, made on first use)."""
        if self.staging is None:
            try:
                self.out_dir.parent.mkdir(parents=True, exist_ok=True)
                self.staging = Path(
                    tempfile.mkdtemp(prefix=f".{self.out_dir.name}.cache-", dir=self.out_dir.parent)
                )
            except OSError as exc:  # e.g. a regular file where a parent folder should be: one line, exit 5
                raise OutputError(
                    f"{self.out_dir}: cannot write the report there "
                    f"({exc.strerror or exc}: {exc.filename or self.out_dir.parent})"
                ) from exc
        return self.staging / f"{key}{ENTRY_SUFFIX}"

    def record(self, key: str, entry: Path) -> None:
        """Note a new entry (written by :func:`store`, perhaps in a worker process) as used."""
        if entry.is_file():
            self.used[key] = entry

    def carry_into(self, folder: Path) -> None:
        """Link (else copy) the entries used by this report into ``folder/.cache``, newest first, up to
        :data:`LIMIT_BYTES` (the oldest beyond it are left out)."""
        if not self.used:
            return
        dest = folder / CACHE_DIR
        dest.mkdir(exist_ok=True)
        total = 0
        for entry in sorted(self.used.values(), key=lambda e: e.stat().st_mtime_ns, reverse=True):
            total += entry.stat().st_size
            if total > LIMIT_BYTES:
                continue
            try:
                os.link(entry, dest / entry.name)
            except OSError:
                shutil.copyfile(entry, dest / entry.name)

    def close(self) -> None:
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)
            self.staging = None


def _key_of(entry: Path) -> str:
    return entry.name[: -len(ENTRY_SUFFIX)]


def _load(entry: Path):
    """(trace, analysis, launch diagnosis or why there is none, host calls) from ``entry``, checked to be
    that shape (EntryError otherwise)."""
    result = cache_entry.loads(Path(entry).read_bytes(), _key_of(entry))
    import pandas as pd

    from ddp_profile.analysis import Analysis
    from ddp_profile.analysis.launches import LaunchAnalysis
    from ddp_profile.trace import Trace

    if not (
        isinstance(result, tuple)
        and len(result) == 4
        and isinstance(result[0], Trace)
        and isinstance(result[1], Analysis)
        and isinstance(result[2], (LaunchAnalysis, str, type(None)))
        and isinstance(result[3], (pd.DataFrame, type(None)))
    ):
        raise cache_entry.EntryError("not a run's (trace, analysis, launches, host calls)")
    return result


def read_entry(entry: Path):
    """The result a worker of this report just stored in ``entry`` (data only: :func:`cache_entry.loads`);
    TraceError when it cannot be read back (that run fails with the reason; the report goes on)."""
    try:
        return _load(entry)
    except (OSError, cache_entry.EntryError) as exc:
        raise TraceError(f"its cache entry {entry.name} could not be read back ({exc})") from None


def store(entry: Path, result) -> None:
    """Write one result atomically (a reader never sees half an entry); OutputError when it cannot be
    written or holds something the cache does not store."""
    try:
        data = cache_entry.dumps(result, _key_of(entry))
    except cache_entry.EntryError as exc:
        raise OutputError(f"{entry.name}: {exc}") from None
    write_bytes_atomic(entry, data)


# ---- the whole report: unchanged inputs and tool -> the previous folder is kept as it is --------------------

REPORT_RECORD = "report.json"


def report_key(paths: list, locations: list, out_dir: Path, options: dict) -> str:
    """Digest of a whole report's inputs: the tool, the options, the output folder, every file under the
    input paths and every file each run's load may read (:func:`input_files`)."""
    files: set[Path] = set()
    for p in paths:
        p = Path(p).resolve()
        files.update(q.resolve() for q in p.rglob("*") if q.is_file()) if p.is_dir() else files.add(p)
    for loc in locations:
        files.update(input_files(Path(loc)))
    h = hashlib.blake2b(tool_digest(), digest_size=20)
    h.update(
        json.dumps(
            [str(Path(out_dir).resolve()), [str(x) for x in locations], options], sort_keys=True, default=str
        ).encode()
    )
    for f in sorted(files):
        h.update(os.fsencode(f) + b"\0" + _file_digest(f))
    return h.hexdigest()


def _manifest(folder: Path) -> dict[str, str]:
    """Every file of a report folder but its hidden ones (the cache, the report marker): relative path ->
    content digest."""
    return {
        str(f.relative_to(folder)): _file_digest(f).hex()
        for f in sorted(folder.rglob("*"))
        if f.is_file() and not f.relative_to(folder).parts[0].startswith(".")
    }


def write_record(folder: Path, key: str, failures: list[str], sizes: dict) -> None:
    """Record, in a finished report folder, what it was made from and what it holds (checked on reuse)."""
    (folder / CACHE_DIR).mkdir(exist_ok=True)
    record = {"key": key, "failures": list(failures), "sizes": sizes, "files": _manifest(folder)}
    write_bytes_atomic(folder / CACHE_DIR / REPORT_RECORD, json.dumps(record).encode())


def unchanged_report(out_dir: Path, marker: str, key: str) -> tuple[dict, list[str]] | None:
    """(page sizes, failures) of the report in ``out_dir`` when it was made from the same inputs and tool
    (``key``) and its files are still the ones it wrote; else None (the report is built again)."""
    out_dir = Path(out_dir).resolve()
    try:
        if not (out_dir / marker).is_file():
            return None
        record = json.loads((out_dir / CACHE_DIR / REPORT_RECORD).read_text())
        if record.get("key") != key or record.get("files") != _manifest(out_dir):
            return None
        return dict(record["sizes"]), list(record["failures"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
