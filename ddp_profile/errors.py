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
    130 interrupted (Ctrl-C); no partial output is left behind
"""

from __future__ import annotations

import argparse
import sys
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


def run_main(prog: str, func: Callable[[Any], int | None], args: Any, debug: bool = False) -> int:
    """Call ``func(args)`` and turn the outcome into an exit code: the one error translation.

    A :class:`DdpProfileError` becomes one line on stderr and its ``exit_code`` (a traceback with
    ``debug``); Ctrl-C becomes 130 with a line saying nothing partial was written; a closed pipe (``| head``)
    is a success. Standard library only, so the harness and the scrubber use it on GPU machines too.
    """
    try:
        return int(func(args) or 0)
    except DdpProfileError as exc:
        if debug:
            raise
        print(f"{prog}: error: {one_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; no partial output was written", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line on stderr (``prog: error: ...``) and exit 2, like every
    other error (argparse's default prints the usage block first). Sub-command parsers inherit the class;
    ``ddp-profile`` and ``python -m ddp_profile.nsys.scrub`` both use it."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")
