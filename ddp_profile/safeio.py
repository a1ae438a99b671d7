"""Atomic text output, the one way the toolkit writes a file; the output checks made before anything is
written; and bounded reads of small side files (run JSONs).

Standard library only (besides the error family), because the training harness uses it on GPU hosts that
have no reporting dependencies. The text goes to a temporary file in the destination folder, which is
then renamed over the target (:func:`ddp_profile.errors.commit_output`): readers see the old file or the new
one, never half of one; any failure (including Ctrl-C) removes the temporary file, and a signal that ends the
command even after the rename puts the previous file back.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

from ddp_profile.errors import OutputError, TraceError, UsageError, commit_output

SIDE_FILE_LIMIT = 16 << 20
"""Largest side file (run JSON, program.json, hosts.txt) read; real ones are a few kB."""
INPUT_SCAN_LIMIT = 20000
"""Files of an input folder compared with an output path (a deeper tree is not walked further)."""


def shown_path(path: Path | str) -> str:
    """``path`` as text any encoder accepts: bytes of a non-UTF-8 file name (kept by Python as lone
    surrogates) are written as ``\\xff`` escapes."""
    return os.fsencode(path).decode("utf-8", errors="backslashreplace")


def kind_of(mode: int) -> str:
    """'a folder', 'a FIFO (named pipe)', 'a character device', ... for a non-regular file's ``st_mode``."""
    return (
        "a folder"
        if stat.S_ISDIR(mode)
        else "a FIFO (named pipe)"
        if stat.S_ISFIFO(mode)
        else "a character device"
        if stat.S_ISCHR(mode)
        else "a block device"
        if stat.S_ISBLK(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "not a regular file"
    )


def _input_ids(inputs: Iterable) -> dict[tuple[int, int], Path]:
    """(device, inode) of every input file: the paths given and, for folders, the files under them."""
    ids: dict[tuple[int, int], Path] = {}
    seen = 0
    for item in inputs:
        item = Path(item[0] if isinstance(item, tuple) else item)
        files = [item]
        with contextlib.suppress(OSError):
            if item.is_dir():
                files = []
                for root, _, names in os.walk(item):
                    files += [Path(root, n) for n in names]
                    if len(files) + seen > INPUT_SCAN_LIMIT:
                        break
        seen += len(files)
        for f in files:
            with contextlib.suppress(OSError, ValueError):
                st = os.stat(f)
                ids[(st.st_dev, st.st_ino)] = f
    return ids


def check_output_file(path: Path | str, inputs: Iterable = ()) -> Path:
    """Refuse (UsageError, exit 2) before anything is written: an output file that is one of ``inputs``
    (the same file through any link or name) or that exists as anything but a regular file (a folder, a
    device such as /dev/null, a FIFO: replacing it would destroy it or write where no file is meant)."""
    path = Path(path)
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return path
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(
            f"-o {path}: is {kind_of(st.st_mode)}, not a file; name a file to write (leave out -o to print)"
        )
    same = _input_ids(inputs).get((st.st_dev, st.st_ino))
    if same is not None:
        raise UsageError(
            f"-o {path}: is the input {same}; choose another output name (inputs are never overwritten)"
        )
    return path


def check_output_folder(path: Path | str, inputs: Iterable = (), flag: str = "-o") -> Path:
    """Refuse (UsageError) an output folder that exists as something else (a file, a device), or that is an
    input file."""
    path = Path(path)
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return path
    if not stat.S_ISDIR(st.st_mode):
        same = _input_ids(inputs).get((st.st_dev, st.st_ino))
        what = f"the input {same}" if same is not None else kind_of(st.st_mode)
        raise UsageError(f"{flag} {path}: is {what}, not a folder; name a folder to write into")
    return path


def read_side_json(path: Path | str, limit: int = SIDE_FILE_LIMIT):
    """The parsed JSON of a side file (:func:`read_side_file`), or None when it is absent; a file that is not
    a regular file, too large, not UTF-8, not JSON or nested deeper than the parser's recursion limit raises
    TraceError naming the file."""
    import json

    data = read_side_file(path, limit)
    if data is None:
        return None
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except RecursionError:
        raise TraceError(f"{path}: JSON nested too deeply to read") from None
    except ValueError as exc:
        raise TraceError(f"{path}: not valid JSON ({str(exc)[:120]})") from None


def read_side_file(path: Path | str, limit: int = SIDE_FILE_LIMIT) -> bytes | None:
    """The bytes of a small side file (run JSON, program.json, hosts.txt), or None when it is absent. Only a
    regular file is read (a FIFO would block forever, a link to /dev/zero never end), and at most ``limit``
    bytes: anything else raises TraceError naming the file."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise TraceError(f"{path}: is {kind_of(st.st_mode)}, not a regular file; not read")
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise TraceError(f"{path}: larger than {limit >> 20} MiB, too large for a side file; not read")
    return data


def write_text_atomic(path: Path | str, text: str, *, make_parents: bool = False) -> Path:
    """Text (UTF-8) version of :func:`write_bytes_atomic`."""
    return write_bytes_atomic(path, text.encode("utf-8"), make_parents=make_parents)


def write_record_atomic(path: Path | str, record, *, make_parents: bool = False) -> Path:
    """A run record (run JSON, timing summary) as compact JSON, one line and a newline, written atomically:
    committed records count against traces/'s 150 MB budget, and indentation made a quarter of their bytes."""
    return write_text_atomic(
        path, json.dumps(record, separators=(",", ":")) + "\n", make_parents=make_parents
    )


def write_bytes_atomic(path: Path | str, data: bytes, *, make_parents: bool = False) -> Path:
    """Write ``data`` to ``path`` atomically; mode 0644 (mkstemp makes 0600, and these outputs are
    meant to be shared). Missing folders are created only with ``make_parents`` (a user's mistyped ``-o``
    folder is an error, not a new folder). An OSError becomes :class:`OutputError` naming the path."""
    return write_chunks_atomic(path, [data], make_parents=make_parents)


def write_text_chunks_atomic(path: Path | str, chunks: Iterable[str], *, make_parents: bool = False) -> Path:
    """Text (UTF-8) written piece by piece as ``chunks`` yields it, atomically (:func:`write_chunks_atomic`):
    a large output is never held as one string."""
    return write_chunks_atomic(path, (c.encode("utf-8") for c in chunks), make_parents=make_parents)


def write_chunks_atomic(path: Path | str, chunks: Iterable[bytes], *, make_parents: bool = False) -> Path:
    """:func:`write_bytes_atomic` of the concatenation of ``chunks``, each written to the temporary file as it
    comes; an error while they are made (or written) leaves ``path`` as it was."""
    path = Path(path)
    check_output_file(path)  # never replace a device, FIFO or folder with a file
    tmp = None
    try:
        if make_parents:
            path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(fd, "wb") as fh:
            for data in chunks:
                fh.write(data)
        os.chmod(tmp, 0o644)
        commit_output(tmp, path)  # inside the CLI: put back as it was if a signal ends the command
        return path
    except BaseException as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if isinstance(exc, OSError):
            raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from exc
        raise
