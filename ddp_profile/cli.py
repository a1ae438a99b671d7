"""Thin command-line front end: parse arguments, call the library, print or write. No analysis here.

Each sub-command lives in ``ddp_profile/commands/<name>.py`` and defines ``register(subparsers)`` that adds
its parser and sets ``func`` (a callable taking the parsed args and returning an exit code).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from ddp_profile import __version__
from ddp_profile.errors import DdpProfileError

# Order here is the order of `ddp-profile --help`.
COMMANDS = ["inspect", "scrub", "analyze", "launches", "report", "findings", "bench"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ddp-profile",
        description="Where multi-GPU step time goes, measured from Nsight Systems SQLite exports.",
    )
    parser.add_argument("--version", action="version", version=f"ddp-profile {__version__}")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks for errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"ddp_profile.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"ddp_profile.commands.{name}":
                continue  # command not built yet
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except DdpProfileError as exc:
        if args.debug:
            raise
        print(f"ddp-profile {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"ddp-profile {args.command}: interrupted; no partial output was written", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
