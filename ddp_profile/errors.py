"""One exception family. Every user mistake raises a subclass of :class:`DdpProfileError` whose message
names the file, table or column involved and says what to do; the CLI prints it as one line on stderr and
exits with the class's ``exit_code``. Anything else escaping is a bug and shows a traceback.

Exit codes (documented in the README):
    0  success
    1  internal error (a bug: please report it with --debug output)
    2  usage error (bad arguments, bad config values)
    3  input error (missing, unreadable or invalid trace file)
    4  trace lacks data the command needs (e.g. no CUDA kernels, no NVTX)
    5  output error (cannot write the output)
    130 interrupted (Ctrl-C); no partial output is left behind, and every output the command had replaced
        already is put back as it was (:func:`commit_output`)
    143 terminated (SIGTERM: ``kill``, ``timeout``, a batch scheduler), 129 hung up (SIGHUP): cleaned up as Ctrl-C
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable
from typing import Any


class DdpProfileError(Exception):
    """Base class of every error the toolkit raises on purpose."""

    exit_code = 1


class UsageError(DdpProfileError):
    """Bad arguments or configuration values."""

    exit_code = 2


class ConfigError(UsageError):
    """A run configuration failed validation."""


class TraceError(DdpProfileError):
    """A trace file is missing, unreadable or not an nsys SQLite export."""

    exit_code = 3


class MissingDataError(DdpProfileError):
    """The export lacks a table or column a command needs (name the nsys option that records it)."""

    exit_code = 4


class OutputError(DdpProfileError):
    """An output could not be written."""

    exit_code = 5


def one_line(text: str, limit: int = 2000) -> str:
    """``text`` fit for one line on a terminal: control characters (newlines, escapes in a file name) are
    written as escapes, and an overlong text is cut."""
    out = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))
    return out if len(out) <= limit else out[:limit] + "..."


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where Ctrl-C's KeyboardInterrupt would be, so every cleanup that handles
    Ctrl-C (temporary files and folders) runs for them too; the exit code is 128 + ``signum``."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO}
"""A write to stdout (or any output not wrapped in OutputError) failing with these is exit 5, one line."""

SIGNALS_SEEN: list[int] = []
"""Signals received while :func:`run_main` ran (a row function inside SQLite can swallow the exception
raised for one; code that must tell an interrupt from a failure checks here too)."""


def _on_signal(signum: int, frame) -> None:
    if SIGNALS_SEEN:  # a second signal while the first one's cleanup runs: let the cleanup finish
        return
    if _JOURNAL.settled:  # the command's outputs are final: it ends as it would have, the signal noted
        SIGNALS_SEEN.append(signum)
        return
    SIGNALS_SEEN.append(signum)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(signum)


def quiet_worker_signals() -> None:
    """A pool worker's initializer: SIGTERM and SIGHUP end it at once (the default action) and SIGINT is left
    to the parent, which cleans up and ends its workers. Without it a forked worker inherits the parent's
    handlers and prints a traceback from inside multiprocessing when a signal reaches the process group."""
    for name, action in (("SIGTERM", signal.SIG_DFL), ("SIGHUP", signal.SIG_DFL), ("SIGINT", signal.SIG_IGN)):
        if hasattr(signal, name):
            with contextlib.suppress(OSError, ValueError):
                signal.signal(getattr(signal, name), action)


@contextlib.contextmanager
def signals_as_interrupts():
    """SIGINT, SIGTERM and SIGHUP raise (Terminated is a KeyboardInterrupt) while inside; the previous
    handlers come back on exit. Only in the main thread (signal handlers can be set nowhere else)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    names = [s for s in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, s)]
    old = {}
    for name in names:
        num = getattr(signal, name)
        with contextlib.suppress(OSError, ValueError):
            old[num] = signal.signal(num, _on_signal)
    try:
        yield
    finally:
        for num, handler in old.items():
            with contextlib.suppress(OSError, ValueError, TypeError):
                signal.signal(num, handler)


# ---- outputs replaced while run_main runs: put back when it is interrupted --------------------------------


class _Journal:
    """The outputs (files or folders) one :func:`run_main` replaced or created, each with its previous version
    kept aside (a hard link for a file, the moved folder), so that an interrupt at any moment, even after the
    last output was written, leaves every previous output byte-identical."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.entries: list[tuple[str, str | None]] = []
        self.settled = False

    def begin(self) -> None:
        self.pid, self.entries, self.settled = os.getpid(), [], False

    def active(self) -> bool:
        return self.pid == os.getpid() and not self.settled

    def finish(self, keep_new: bool) -> None:
        """Keep the new outputs and drop the previous ones (``keep_new``), or put the previous ones back; once."""
        self.settled = True
        entries, self.entries = self.entries, []
        for path, aside in reversed(entries):
            with contextlib.suppress(OSError):
                if not keep_new:
                    _put_back(path, aside)
            if aside is not None:
                shutil.rmtree(aside, ignore_errors=True)
        self.pid = None


_JOURNAL = _Journal()


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def _put_back(path: str, aside: str | None) -> None:
    if aside is None:  # nothing was there: what the command made goes
        _remove(path)
        return
    previous = os.path.join(aside, "previous")
    if not os.path.lexists(previous):
        return  # interrupted before the previous version was set aside: it is still in place
    if os.path.lexists(path) and os.path.samestat(os.lstat(path), os.lstat(previous)):
        return  # set aside (linked) but not replaced yet
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    os.replace(previous, path)


def commit_output(tmp: str | os.PathLike, path: str | os.PathLike) -> None:
    """Move a finished output (file or folder) ``tmp`` to ``path``, replacing what is there: the last step of
    every output the toolkit writes. A folder replaces a folder (moved aside first, removed after). Inside
    :func:`run_main` the previous version is kept aside in a hidden folder beside ``path`` until the command
    ends: dropped when it ends normally, put back when a signal ends it, so exit 130, 143 or 129 always means
    that every previous output is byte-identical."""
    tmp, path = os.fspath(tmp), os.fspath(path)
    journal = _JOURNAL.active()
    is_dir = os.path.isdir(path) and not os.path.islink(path)
    if not journal and not is_dir:
        os.replace(tmp, path)
        return
    aside = None
    if os.path.lexists(path):
        folder, name = os.path.split(os.path.abspath(path))
        aside = tempfile.mkdtemp(prefix=f".{name}.previous-", dir=folder)
        previous = os.path.join(aside, "previous")
        if journal:
            _JOURNAL.entries.append((path, aside))
        if is_dir:
            os.replace(path, previous)  # a folder cannot be linked: moved aside, then the new one moved in
        else:
            try:  # a link: readers see the old file or the new one, never none
                os.link(path, previous, follow_symlinks=False)
            except OSError:
                shutil.copyfile(path, previous, follow_symlinks=False)
    elif journal:
        _JOURNAL.entries.append((path, None))
    try:
        os.replace(tmp, path)
    except OSError:
        if journal:
            _JOURNAL.entries.pop()
        if aside is not None:
            _put_back(path, aside)
            shutil.rmtree(aside, ignore_errors=True)
        raise
    if not journal and aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def interrupted_code(exc: BaseException) -> int:
    """128 + the signal number: 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP."""
    return 128 + int(getattr(exc, "signum", signal.SIGINT))


def _flush_stdout() -> None:
    """Flush stdout inside the error translation: a full disk (``> /dev/full``) is an output error with one
    line, not a traceback at interpreter exit."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        with contextlib.suppress(OSError, ValueError):  # nothing more may reach the broken stream
            sys.stdout = open(os.devnull, "w")
        raise OutputError(
            f"cannot write to standard output ({exc.strerror or exc}); pass -o FILE or free space"
        ) from exc


def run_main(
    prog: str,
    func: Callable[[Any], int | None],
    args: Any,
    debug: bool = False,
    restore_on_signal: bool = False,
) -> int:
    """Call ``func(args)`` and turn the outcome into an exit code: the one error translation.

    A :class:`DdpProfileError` becomes one line on stderr and its ``exit_code`` (a traceback with
    ``debug``); Ctrl-C, SIGTERM and SIGHUP become 130, 143 and 129 with a line saying nothing partial was
    written (the same cleanup runs for each); a closed pipe (``| head``) is a success; text that the terminal's
    encoding cannot show (a non-UTF-8 file name) is escaped, not a crash. With ``restore_on_signal``, every
    output the command replaced or created (:func:`commit_output`) is put back as it was when a signal ends
    it; the training harness leaves it off (a campaign interrupted late keeps the runs it finished). Standard
    library only, so the harness and the scrubber use it on GPU machines too.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
    del SIGNALS_SEEN[:]
    if restore_on_signal:
        _JOURNAL.begin()
    try:
        with signals_as_interrupts():
            try:
                code = int(func(args) or 0)
                _flush_stdout()
                _JOURNAL.settled = True  # from here a signal is noted, not raised: the outputs are final
            except BaseException as exc:  # a second signal waits (see _on_signal) while outputs are put back
                _JOURNAL.finish(
                    keep_new=not isinstance(exc, KeyboardInterrupt)
                )  # an error keeps what it wrote
                raise
            _JOURNAL.finish(keep_new=True)
            return code
    except DdpProfileError as exc:
        _JOURNAL.finish(keep_new=True)
        if debug:
            raise
        print(f"{prog}: error: {one_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        _JOURNAL.finish(keep_new=False)  # already done unless the signal came before the inner handler ran
        what = {130: "interrupted", 143: "terminated (SIGTERM)", 129: "hung up (SIGHUP)"}
        code = interrupted_code(exc)
        kept = " and every previous output is unchanged" if restore_on_signal else ""
        print(
            f"{prog}: {what.get(code, f'signal {code - 128}')}; no partial output was written{kept}",
            file=sys.stderr,
        )
        return code
    except BrokenPipeError:
        with contextlib.suppress(OSError, ValueError):
            sys.stdout = open(os.devnull, "w")
        return 0
    except OSError as exc:
        if exc.errno not in FULL_ERRNOS:
            raise
        with contextlib.suppress(OSError, ValueError):  # stdout may be the full device: nothing more to it
            sys.stdout = open(os.devnull, "w")
        print(
            f"{prog}: error: cannot write the output ({exc.strerror}); free space or pass -o FILE elsewhere",
            file=sys.stderr,
        )
        return OutputError.exit_code
    finally:
        _JOURNAL.finish(keep_new=True)  # (a no-op unless an unexpected exception passed every handler)
        _JOURNAL.settled = False  # our handlers are gone: signals act as they did before


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line on stderr (``prog: error: ...``) and exit 2, like every
    other error (argparse's default prints the usage block first). Sub-command parsers inherit the class;
    ``ddp-profile`` and ``python -m ddp_profile.nsys.scrub`` both use it."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")
