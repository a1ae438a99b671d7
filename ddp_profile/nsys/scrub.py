"""Remove from an nsys SQLite export what must not be shared, keep everything the analysis reads.

Why a separate, stdlib-only module: the profiling scripts run ``python -m ddp_profile.nsys.scrub IN -o OUT`` on the
GPU machine right after ``nsys export``, where only Python's standard library (plus torch) can be relied on.
So no pandas, numpy or sqlite-utils here.

What an export embeds (checked on nsys 2025.3 exports) and what happens to it:

* environment variables: ``META_DATA_CAPTURE`` rows whose name mentions ENV, every ``TARGET_INFO_SYSTEM_ENV``
  row, any ``KEY=VALUE`` value in META_DATA_* / TARGET_INFO_* tables, and any string anywhere holding a
  NUL/newline-separated environment block (2023.4 keeps these in StringIds) -> deleted / ``<env>``;
* absolute paths anywhere in a text column (StringIds, META_DATA_*, PROCESSES.name, the command line,
  ANALYSIS_FILE.filename, DIAGNOSTIC_EVENT.text, ...) -> their last component (a home folder -> ``<path>``);
* host names (META_DATA_EXPORT.EXPORT_HOST, META_DATA_CAPTURE.DEVICE_DISPLAY_NAME, TARGET_INFO_SYSTEM_ENV
  host rows) -> a stable pseudonym ``host-<8 hex>`` (the same host gives the same pseudonym, so the loader
  can still tell whether files share a clock); user names -> ``<user>``;
* token-like secrets (``hf_...``, ``ghp_...``, ``sk-...``, AWS keys) anywhere -> ``<secret>``;
* captured stdout/stderr: ``ProcessStreams`` rows are deleted and the StringIds they (and
  ``ANALYSIS_FILE.contentId``) point to are emptied;
* host processes with no CUDA or NVTX activity (kernel threads, daemons): their ``PROCESSES`` and
  ``ThreadNames`` rows are deleted.

The result is always VACUUMed, so deleted text does not survive in free pages. ``slim`` also drops tables
the analysis never reads. A ``DDP_PROFILE_SCRUB`` table records what was removed (``inspect`` shows it).
Output is written to a temporary file in the destination folder and moved into place with ``os.replace``;
the input is only ever read.
"""

from __future__ import annotations

import argparse
import gzip
import lzma
import os
import re
import shutil
import signal
import sqlite3
import sys
import tempfile
from pathlib import Path

import ddp_profile.nsys.rawio as rawio
from ddp_profile.errors import (
    SIGNALS_SEEN,
    OneLineParser,
    OutputError,
    Terminated,
    TraceError,
    UsageError,
    commit_output,
    run_main,
)
from ddp_profile.nsys.secrets import (
    ENV_ASSIGN_RE,
    HOME_RE,
    NOT_A_HOST,
    NOT_A_USER,
    PATH_RE,
    SECRET_FLAG_RE,
    Scrubber,
    pseudonym,
)
from ddp_profile.safeio import check_output_file, kind_of

_Scrubber = Scrubber  # the name tests patch
__all__ = ["pseudonym", "scrub_connection", "scrub_file", "main"]

RECORD_TABLE = "DDP_PROFILE_SCRUB"
COMPRESSED = {".xz": lzma.open, ".gz": gzip.open}

# Tables the analysis reads (ddp_profile.nsys.sql); --slim keeps only these (plus the ENUM_* tables).
ANALYSIS_TABLES = {
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "NVTX_EVENTS",
    "StringIds",
    "PROCESSES",
    "ThreadNames",
    "TARGET_INFO_GPU",
    "TARGET_INFO_CUDA_DEVICE",
    "TARGET_INFO_SESSION_START_TIME",
    "TARGET_INFO_CUDA_CONTEXT_INFO",
    "TARGET_INFO_CUDA_STREAM",
    "META_DATA_EXPORT",
    "META_DATA_CAPTURE",
    "ANALYSIS_DETAILS",
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
    RECORD_TABLE,
    # NCCL's message sizes in NVTX_EVENTS.binaryData are read through these (nsys.payloads)
    "NVTX_PAYLOAD_SCHEMAS",
    "NVTX_PAYLOAD_SCHEMA_ENTRIES",
    "NVTX_PAYLOAD_ENUMS",
    "NVTX_PAYLOAD_ENUM_ENTRIES",
}
# Tables whose rows tie a globalPid/globalTid to CUDA or NVTX activity: a process seen in none is unrelated.
ACTIVITY_PID_COLUMNS = [
    ("CUPTI_ACTIVITY_KIND_KERNEL", "globalPid"),
    ("CUPTI_ACTIVITY_KIND_MEMCPY", "globalPid"),
    ("CUPTI_ACTIVITY_KIND_MEMSET", "globalPid"),
    ("CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid"),
    ("NVTX_EVENTS", "globalTid"),
    ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "globalTid"),
]
TID_MASK = 0xFFFFFF  # globalTid = globalPid | tid (low 24 bits): Nsight Systems' serialized GlobalId


def q(name: str) -> str:
    """An SQL identifier quoted (a table or column name may hold a double quote)."""
    return '"' + name.replace('"', '""') + '"'


def _tables(con: sqlite3.Connection) -> list[str]:
    return [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]


_TEXT_COLUMNS: dict[tuple[int, str], list[str]] = {}


def _text_columns(con: sqlite3.Connection, table: str) -> list[str]:
    """Every column that may hold text or a BLOB, whatever its declared type (CLOB, STRING, JSON, NUMERIC and
    even INTEGER columns hold text as readily as TEXT ones; SQLite does not enforce declared types): columns
    declared as text or BLOB, and others found holding some (one scan of the table for all of them; cached
    per connection while scrubbing)."""
    key = (id(con), table)
    if key in _TEXT_COLUMNS:
        return _TEXT_COLUMNS[key]
    out, others = [], []
    for c in con.execute(f"PRAGMA table_info({q(table)})").fetchall():
        declared = c[2].upper()
        if declared in ("", "TEXT", "BLOB") or any(t in declared for t in ("CHAR", "CLOB", "TEXT")):
            out.append(c[1])
        else:
            others.append(c[1])
    if others:
        found = con.execute(
            "SELECT "
            + ", ".join(f"max(typeof({q(c)}) IN ('text', 'blob'))" for c in others)
            + f" FROM {q(table)}"
        ).fetchone()
        out += [c for c, hit in zip(others, found, strict=True) if hit]
    _TEXT_COLUMNS[key] = out
    return out


def _meta_values(con: sqlite3.Connection, tables: set[str], table: str, name_sql: str) -> list[str]:
    if table not in tables:
        return []
    return [r[0] for r in con.execute(f"SELECT value FROM {q(table)} WHERE {name_sql}") if r[0]]


def _find_hosts_users(con: sqlite3.Connection, tables: set[str]) -> tuple[set[str], set[str]]:
    hosts = set(_meta_values(con, tables, "META_DATA_EXPORT", "name LIKE '%HOST%'"))
    hosts |= set(
        _meta_values(con, tables, "META_DATA_CAPTURE", "name LIKE '%HOST%' OR name = 'DEVICE_DISPLAY_NAME'")
    )
    hosts |= set(_meta_values(con, tables, "TARGET_INFO_SYSTEM_ENV", "name LIKE '%host%'"))
    hosts |= {h.split(".")[0] for h in hosts}
    hosts = {h.strip() for h in hosts if h.strip().lower() not in NOT_A_HOST and not h.startswith("host-")}
    users = set(_meta_values(con, tables, "META_DATA_EXPORT", "name LIKE '%USER%'"))
    users |= set(_meta_values(con, tables, "META_DATA_CAPTURE", "name LIKE '%USER%'"))
    for table in ("META_DATA_CAPTURE", "META_DATA_EXPORT", "TARGET_INFO_SYSTEM_ENV"):
        for value in _meta_values(con, tables, table, "1"):
            for m in PATH_RE.finditer(value):
                home = HOME_RE.match(m.group(0))
                if home:
                    users.add(home.group(1))
    users |= _users_in_paths(con, tables)
    users = {u.strip() for u in users if len(u.strip()) >= 2 and u.strip().lower() not in NOT_A_USER}
    return hosts, users


def _users_in_paths(con: sqlite3.Connection, tables: set[str]) -> set[str]:
    """User names from home folders in any text (``/home/<user>/...``), collected before the rewrite pass
    so the name is replaced everywhere it stands alone (``<user>-exp-7``), not only after its path was seen."""
    users: set[str] = set()
    for table in sorted(tables):
        if table == RECORD_TABLE or table.startswith("ENUM_"):
            continue
        for col in _text_columns(con, table):
            for (value,) in con.execute(
                f"SELECT DISTINCT {q(col)} FROM {q(table)} WHERE typeof({q(col)}) = 'text' "
                f"AND instr({q(col)}, '/') > 0"
            ):
                if isinstance(value, str):
                    for m in PATH_RE.finditer(value):
                        home = HOME_RE.match(m.group(0))
                        if home:
                            users.add(home.group(1))
    return users


def _string_refs(con: sqlite3.Connection, tables: set[str]) -> str:
    """SQL selecting every StringIds id still referenced (integer columns named ``*nameId``, ``*textId``,
    ``*Name``, ``contentId``, ... in any other table), so emptying unrelated strings never blanks a kernel
    name, NVTX text or thread name that something kept still points to."""
    parts = []
    for table in sorted(tables - {"StringIds"}):
        for _, col, ctype, *_ in con.execute(f"PRAGMA table_info({q(table)})"):
            low = col.lower()
            if "INT" in ctype.upper() and low.endswith(("nameid", "textid", "name", "contentid", "stringid")):
                parts.append(f"SELECT {q(col)} FROM {q(table)} WHERE {q(col)} IS NOT NULL")
    return " UNION ".join(parts)


def _secret_arguments(con: sqlite3.Connection) -> int:
    """The recorded command line is one row per argument (``PROCESS_0:ARGUMENT_3``): the argument after a
    secret-named flag given alone (``--token``, ``--hf-token``, ``--password``) is its value -> ``<secret>``."""
    args: dict[tuple[str, int], tuple[int, object]] = {}
    for rowid, name, value in con.execute(
        "SELECT rowid, name, value FROM META_DATA_CAPTURE WHERE name LIKE '%ARGUMENT%'"
    ):
        m = re.fullmatch(r"(.*)ARGUMENT_(\d+)", str(name))
        if m:
            args[(m.group(1), int(m.group(2)))] = (rowid, value)
    hit = [
        args[(p, i + 1)][0]
        for (p, i), (_, v) in args.items()
        if isinstance(v, str) and SECRET_FLAG_RE.match(v) and (p, i + 1) in args
    ]
    con.executemany("UPDATE META_DATA_CAPTURE SET value = '<secret>' WHERE rowid = ?", [(r,) for r in hit])
    return len(hit)


def _guarded(fn, interrupted: list):
    """``fn`` for ``create_function``: SQLite turns an exception in it into OperationalError, which would make
    Ctrl-C look like a damaged input (exit 3); the interrupt is noted so it can be raised again."""

    def call(value):
        try:
            return fn(value)
        except KeyboardInterrupt as exc:
            interrupted.append(exc)
            raise

    return call


def scrub_connection(con: sqlite3.Connection, *, slim: bool = False) -> dict[str, int]:
    """Scrub an open, writable export in place (the caller owns the copy). Returns counts of what changed.
    Ctrl-C inside a row function is raised as KeyboardInterrupt (not as SQLite's "function raised")."""
    interrupted: list = []
    _TEXT_COLUMNS.clear()
    try:
        return _scrub_connection(con, slim, interrupted)
    except sqlite3.DatabaseError:
        # The signal may also land between the function's entry and its try (then only the handler of
        # errors.run_main saw it): SQLite reports either as "user-defined function raised exception".
        if interrupted:
            raise interrupted[0] from None
        if SIGNALS_SEEN:
            raise (
                KeyboardInterrupt() if SIGNALS_SEEN[0] == signal.SIGINT else Terminated(SIGNALS_SEEN[0])
            ) from None
        raise
    finally:
        _TEXT_COLUMNS.clear()


def _scrub_connection(con: sqlite3.Connection, slim: bool, interrupted: list) -> dict[str, int]:
    tables = set(_tables(con))
    if not tables & {"StringIds", "META_DATA_EXPORT", "CUPTI_ACTIVITY_KIND_KERNEL"}:
        raise TraceError("not an nsys SQLite export (no StringIds / META_DATA_EXPORT table)")
    hosts, users = _find_hosts_users(con, tables)
    counts: dict[str, int] = {}

    def run(key: str, sql: str, table: str) -> None:
        if table in tables:
            counts[key] = counts.get(key, 0) + con.execute(sql).rowcount

    run("env_rows", "DELETE FROM META_DATA_CAPTURE WHERE name LIKE '%ENV%'", "META_DATA_CAPTURE")
    run("env_rows", "DELETE FROM TARGET_INFO_SYSTEM_ENV", "TARGET_INFO_SYSTEM_ENV")
    # The working folder is a path in full (its last component is usually a private project name).
    run(
        "working_dir",
        "UPDATE META_DATA_CAPTURE SET value = '<path>' WHERE name LIKE '%WORKING_DIR%'",
        "META_DATA_CAPTURE",
    )
    con.create_function(
        "_ddp_env",
        1,
        _guarded(lambda v: int(isinstance(v, str) and bool(ENV_ASSIGN_RE.match(v))), interrupted),
    )
    for table in sorted(t for t in tables if t.startswith(("META_DATA_", "TARGET_INFO_"))):
        for col in _text_columns(con, table):
            run("env_values", f"UPDATE {q(table)} SET {q(col)} = '<env>' WHERE _ddp_env({q(col)})", table)
    if "META_DATA_CAPTURE" in tables:
        counts["secret_args"] = _secret_arguments(con)

    # Captured program output: the strings first (they are found through ProcessStreams), then the rows.
    if "StringIds" in tables:
        sources = []
        if "ProcessStreams" in tables:
            sources.append("SELECT contentId FROM ProcessStreams")
        if "ANALYSIS_FILE" in tables:
            sources.append("SELECT contentId FROM ANALYSIS_FILE WHERE contentId IS NOT NULL")
        if sources:
            run(
                "output_strings",
                f"UPDATE StringIds SET value = '' WHERE value != '' AND id IN ({' UNION '.join(sources)})",
                "StringIds",
            )
    run("output_streams", "DELETE FROM ProcessStreams", "ProcessStreams")

    # Unrelated host processes: no kernel, copy, API call or NVTX event belongs to them.
    active = [
        f"SELECT DISTINCT {q(c)} - ({q(c)} & {TID_MASK}) FROM {q(t)}"
        for t, c in ACTIVITY_PID_COLUMNS
        if t in tables
    ]
    if active:
        con.execute("CREATE TEMP TABLE _ddp_active(globalPid INTEGER PRIMARY KEY)")
        con.execute(f"INSERT OR IGNORE INTO _ddp_active {' UNION '.join(active)}")
        # Their names also live on in StringIds (thread names by nameId; process names as unreferenced
        # strings, seen in a real 2025.3 export): collected before the rows go, emptied after.
        gone = f"globalTid - (globalTid & {TID_MASK}) NOT IN (SELECT globalPid FROM _ddp_active)"
        con.execute("CREATE TEMP TABLE _ddp_gone(id INTEGER, name TEXT)")
        if "ThreadNames" in tables:
            con.execute(f"INSERT INTO _ddp_gone SELECT nameId, NULL FROM ThreadNames WHERE {gone}")
        if "PROCESSES" in tables and "name" in _text_columns(con, "PROCESSES"):
            con.execute(
                "INSERT INTO _ddp_gone SELECT NULL, name FROM PROCESSES WHERE globalPid NOT IN "
                "(SELECT globalPid FROM _ddp_active)"
            )
        run(
            "processes",
            "DELETE FROM PROCESSES WHERE globalPid NOT IN (SELECT globalPid FROM _ddp_active)",
            "PROCESSES",
        )
        run("thread_names", f"DELETE FROM ThreadNames WHERE {gone}", "ThreadNames")
        if "StringIds" in tables:
            refs = _string_refs(con, tables)
            run(
                "process_strings",
                "UPDATE StringIds SET value = '' WHERE value != '' AND (id IN (SELECT id FROM "
                "_ddp_gone) OR value IN (SELECT name FROM _ddp_gone))"
                f"{f' AND id NOT IN ({refs})' if refs else ''}",
                "StringIds",
            )

    # Paths, host and user names, secrets: every text column of every table.
    scrubber = _Scrubber(hosts, users)
    con.create_function("_ddp_dirty", 1, _guarded(scrubber.dirty, interrupted))
    con.create_function("_ddp_text", 1, _guarded(scrubber.text, interrupted))
    for table in sorted(tables):
        if table == RECORD_TABLE or table.startswith("ENUM_"):
            continue
        for col in _text_columns(con, table):
            con.execute(
                f"UPDATE {q(table)} SET {q(col)} = _ddp_text({q(col)}) "
                f"WHERE typeof({q(col)}) IN ('text', 'blob') AND _ddp_dirty({q(col)})"
            )
    for key in ("paths", "hosts", "users", "secrets", "env_blocks"):
        counts[key] = scrubber.counts[key] // 2  # dirty() and text() each count one replacement
    counts["host_names"] = len(hosts)

    if slim:
        for table in sorted(tables - ANALYSIS_TABLES):
            if not table.startswith("ENUM_"):
                con.execute(f"DROP TABLE {q(table)}")
                counts["tables_dropped"] = counts.get("tables_dropped", 0) + 1
    _record(con, counts, hosts, slim)
    return counts


def _record(con: sqlite3.Connection, counts: dict[str, int], hosts: set[str], slim: bool) -> None:
    con.execute(f"CREATE TABLE IF NOT EXISTS {RECORD_TABLE} (item TEXT NOT NULL, count INTEGER, note TEXT)")
    notes = {"host_names": ", ".join(sorted({pseudonym(h) for h in hosts})) or None}
    rows = [(k, v, notes.get(k)) for k, v in sorted(counts.items())]
    rows.append(("slim", int(slim), "tables the analysis never reads were dropped" if slim else None))
    con.executemany(f"INSERT INTO {RECORD_TABLE} VALUES (?, ?, ?)", rows)


def _copy_input(src: Path, dst: Path) -> None:
    """Copy (decompressing .xz/.gz) the input to ``dst`` and check it is an SQLite file."""
    opener = COMPRESSED.get(src.suffix)
    try:
        fin = open(src, "rb")
        fin.close()
    except OSError as exc:
        raise TraceError(f"{src}: cannot read ({exc.strerror or exc}); check its permissions") from exc
    try:
        with open(dst, "wb") as fout:
            if (
                opener
            ):  # header checked from the first bytes, expansion bounded (DDP_PROFILE_MAX_DECOMPRESSED)
                rawio.copy_decompressed(src, fout)
            else:
                with open(src, "rb") as fin:
                    shutil.copyfileobj(fin, fout, 16 << 20)
    except (EOFError, lzma.LZMAError, gzip.BadGzipFile) as exc:  # other OSErrors: writing failed (disk full)
        raise TraceError(f"{src}: cannot read ({exc}); copy it again") from exc
    with open(dst, "rb") as f:
        if f.read(16) != rawio.SQLITE_MAGIC:
            raise TraceError(
                f"{src}: not an SQLite file; export the report with "
                f"`nsys export --type sqlite -o X.sqlite X.nsys-rep`"
            )


def scrub_file(
    src: str | os.PathLike, dst: str | os.PathLike, *, slim: bool = False, compress: str | None = None
) -> dict[str, int]:
    """Scrub ``src`` into ``dst`` (``dst`` may equal ``src`` for in-place). Atomic; ``src`` is only read.

    ``compress="xz"`` writes an xz-compressed file (give ``dst`` the ``.xz`` suffix yourself or not: it is
    added when missing). Returns the counts also stored in the ``DDP_PROFILE_SCRUB`` table.
    """
    src, dst = Path(src), Path(dst)
    if not src.is_file():
        if src.exists():
            raise TraceError(f"{src}: is {kind_of(os.stat(src).st_mode)}, not an export file")
        raise TraceError(f"{src}: no such file")
    if src.suffix in (".nsys-rep", ".qdstrm"):
        raise TraceError(
            f"{src}: a report, not an SQLite export; run `nsys export --type sqlite -o "
            f"{src.with_suffix('.sqlite').name} {src.name}` first"
        )
    if compress not in (None, "xz"):
        raise UsageError(f"--compress {compress}: only 'xz' is supported")
    dst = final_name(dst, compress)
    compress = (
        dst.suffix[1:] if dst.suffix in COMPRESSED else None
    )  # the name decides: never plain under .xz/.gz
    rawio.check_no_writer(src)
    folder = dst.parent if str(dst.parent) else Path(".")
    if not folder.is_dir():
        raise OutputError(f"{dst}: folder {folder} does not exist")
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise OutputError(
            f"{dst}: cannot write in {folder} ({exc.strerror or exc}); choose another -o"
        ) from exc
    os.close(fd)
    tmp = Path(tmp_name)
    final_tmp = tmp
    try:
        _copy_input(src, tmp)
        con = sqlite3.connect(tmp, isolation_level=None)
        try:
            con.execute("PRAGMA journal_mode=OFF")  # a private temp copy: atomicity comes from os.replace
            con.execute("PRAGMA synchronous=OFF")
            con.execute("BEGIN")
            try:
                counts = scrub_connection(con, slim=slim)
            except sqlite3.DatabaseError as exc:
                raise TraceError(f"{src}: not a readable nsys SQLite export ({exc})") from exc
            except TraceError as exc:  # name the file the user gave, not the temporary copy
                raise TraceError(f"{src}: {exc}; pass a file made by `nsys export --type sqlite`") from exc
            con.execute("COMMIT")
            con.execute("VACUUM")  # deleted text must not survive in free pages
        finally:
            con.close()
        if compress:
            fd, xz_name = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".tmp", dir=folder)
            os.close(fd)
            final_tmp = Path(xz_name)
            opener = (
                (lambda f: lzma.open(f, "wb", preset=6))
                if compress == "xz"
                else (lambda f: gzip.open(f, "wb"))
            )
            with open(tmp, "rb") as fin, opener(final_tmp) as fout:
                shutil.copyfileobj(fin, fout, 16 << 20)
            tmp.unlink()
        os.chmod(final_tmp, 0o644)
        commit_output(final_tmp, dst)  # under the CLI, put back as it was if a signal ends the command
    except BaseException as exc:
        for p in {tmp, final_tmp}:
            p.unlink(missing_ok=True)
        full = isinstance(exc, sqlite3.OperationalError) and "full" in str(exc)  # VACUUM on a full disk
        if (
            isinstance(exc, OSError) or full
        ):  # the input was read already: the output failed (disk full, rights)
            # sqlite3's OperationalError has no strerror (an OSError's may be None): fall back to the message
            reason = getattr(exc, "strerror", None) or exc
            raise OutputError(
                f"{dst}: cannot write the scrubbed copy ({reason}); nothing was written"
            ) from exc
        raise
    return counts


def output_path(src: Path, out: Path | None, n_inputs: int, in_place: bool) -> Path:
    """Where ``src``'s scrubbed copy goes: itself (in place), into folder ``out``, or file ``out``."""
    if in_place:
        return src
    if out is None:
        raise UsageError("give -o OUT (file or folder) or --in-place")
    if out.is_dir() or n_inputs > 1:
        if not out.is_dir():
            raise UsageError(f"-o {out}: with several inputs, OUT must be an existing folder")
        name = src.name[: -len(src.suffix)] if src.suffix in COMPRESSED else src.name
        return out / name
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The scrub options, shared by ``python -m ddp_profile.nsys.scrub`` and ``ddp-profile scrub``."""
    parser.add_argument(
        "inputs", nargs="+", type=Path, metavar="IN", help="nsys SQLite export(s) (.sqlite[.xz|.gz])"
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "-o", "--output", type=Path, metavar="OUT", help="output file, or folder for several inputs"
    )
    where.add_argument(
        "--in-place", action="store_true", help="replace each input (atomically) by its scrubbed copy"
    )
    parser.add_argument("--slim", action="store_true", help="also drop tables the analysis never reads")
    parser.add_argument("--compress", choices=["xz"], help="write OUT.xz (lzma) instead of a plain .sqlite")


def final_name(dst: Path, compress: str | None) -> Path:
    """The name the scrubbed copy gets: ``--compress xz`` adds ``.xz`` when missing."""
    return dst.with_name(dst.name + ".xz") if compress == "xz" and dst.suffix != ".xz" else dst


def plan(args: argparse.Namespace) -> list[tuple[Path, Path]]:
    """(input, output) pairs, checked before anything is written: an output that is an input (without
    --in-place), or two inputs mapping to one output (``a/run.sqlite b/run.sqlite -o DIR``), is refused."""
    inputs = list(args.inputs)
    pairs: list[tuple[Path, Path]] = []
    seen: dict[Path, Path] = {}
    for src in inputs:
        dst = final_name(output_path(src, args.output, len(inputs), args.in_place), args.compress)
        if dst.resolve() == src.resolve() and not args.in_place:
            raise UsageError(f"-o {dst} is the input itself; use --in-place to replace it")
        if not args.in_place:  # the same file through a hard link, a device, a FIFO, a folder
            check_output_file(dst, inputs)
        key = dst.resolve()
        if key in seen:
            raise UsageError(
                f"{seen[key]} and {src} would both be written to {dst}; nothing was written: "
                "scrub them into different folders (or rename one)"
            )
        seen[key] = src
        pairs.append((src, dst))
    return pairs


def run_args(args: argparse.Namespace, out=sys.stdout) -> int:
    for src, dst in plan(args):
        counts = scrub_file(src, dst, slim=args.slim, compress=args.compress)
        summary = ", ".join(f"{k}={v}" for k, v in sorted(counts.items()) if v)
        print(f"scrubbed {src} -> {dst} ({summary or 'nothing to remove'})", file=out)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m ddp_profile.nsys.scrub", description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    return run_main("ddp_profile.nsys.scrub", run_args, args, restore_on_signal=True)


if __name__ == "__main__":
    raise SystemExit(main())
