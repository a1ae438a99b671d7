"""Thin command-line front end: parse arguments, call the library, print or write. No analysis here.

Each sub-command lives in ``ddp_profile/commands/<name>.py`` and defines ``register(subparsers)`` that adds
its parser and sets ``func`` (a callable taking the parsed args and returning an exit code).
"""

from __future__ import annotations

import argparse
import importlib

from ddp_profile import __version__
from ddp_profile.errors import OneLineParser, run_main

# Order here is the order of `ddp-profile --help`: name -> module in ddp_profile/commands/.
COMMANDS = {
    name: f"ddp_profile.commands.{name}"
    for name in ("inspect", "scrub", "analyze", "launches", "report", "export", "findings", "bench")
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser; with ``only`` (a sub-command name), one whose only sub-command is that one: the
    other commands' modules (the scrubber, the training harness's options) are then never imported, which
    process start pays for (``python -X importtime -m ddp_profile analyze ...``)."""
    parser = OneLineParser(
        prog="ddp-profile",
        description="Where multi-GPU step time goes, measured from Nsight Systems SQLite exports.",
    )
    parser.add_argument("--version", action="version", version=f"ddp-profile {__version__}")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks for errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in COMMANDS.items():
        if only is None or name == only:
            importlib.import_module(module).register(sub)
    return parser


def _command_in(argv: list[str]) -> str | None:
    """The sub-command named by ``argv`` (its first word that is not an option), when it is one of ours."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return first if first in COMMANDS else None


def main(argv: list[str] | None = None) -> int:
    import sys

    args_in = sys.argv[1:] if argv is None else argv
    # `--help` / `--version` before the command, or no known command: the full parser (it lists them all)
    only = _command_in(args_in) if args_in and not args_in[0].startswith("-") else None
    parser = build_parser(only)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version (0) or a bad argument (2, one line already printed)
        return exc.code if isinstance(exc.code, int) else 2
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    # every command but bench (the harness: an interrupted campaign keeps the runs it finished) puts its
    # previous outputs back when a signal ends it
    return run_main(
        f"ddp-profile {args.command}",
        args.func,
        args,
        debug=args.debug,
        restore_on_signal=args.command != "bench",
    )


if __name__ == "__main__":
    raise SystemExit(main())
