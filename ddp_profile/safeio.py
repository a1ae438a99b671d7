"""Atomic text output, the one way the toolkit writes a file.

Standard library only (besides the error family), because the training harness uses it on GPU hosts that
have no reporting dependencies. The text goes to a temporary file in the destination folder, which is
then renamed over the target: readers see the old file or the new one, never half of one, and any failure
(including Ctrl-C) removes the temporary file.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from ddp_profile.errors import OutputError


def write_text_atomic(path: Path | str, text: str, *, make_parents: bool = False) -> Path:
    """Text (UTF-8) version of :func:`write_bytes_atomic`."""
    return write_bytes_atomic(path, text.encode("utf-8"), make_parents=make_parents)


def write_bytes_atomic(path: Path | str, data: bytes, *, make_parents: bool = False) -> Path:
    """Write ``data`` to ``path`` atomically; mode 0644 (mkstemp makes 0600, and these outputs are
    meant to be shared). Missing folders are created only with ``make_parents`` (a user's mistyped ``-o``
    folder is an error, not a new folder). An OSError becomes :class:`OutputError` naming the path."""
    path = Path(path)
    tmp = None
    try:
        if make_parents:
            path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        return path
    except BaseException as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if isinstance(exc, OSError):
            raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from exc
        raise
