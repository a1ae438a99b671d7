"""Thin command-line front end: parse arguments, call the library, print or write. No analysis here.

Each sub-command lives in ``ddp_profile/commands/<name>.py`` and defines ``register(subparsers)`` that adds
its parser and sets ``func`` (a callable taking the parsed args and returning an exit code).
"""

from __future__ import annotations

import argparse

from ddp_profile import __version__
from ddp_profile.commands import analyze, bench, export, findings, inspect, launches, report, scrub
from ddp_profile.errors import OneLineParser, run_main

# Order here is the order of `ddp-profile --help`.
COMMANDS = {"inspect": inspect, "scrub": scrub, "analyze": analyze, "launches": launches, "report": report,
            "export": export, "findings": findings, "bench": bench}


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="ddp-profile",
        description="Where multi-GPU step time goes, measured from Nsight Systems SQLite exports.",
    )
    parser.add_argument("--version", action="version", version=f"ddp-profile {__version__}")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks for errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMANDS.values():
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version (0) or a bad argument (2, one line already printed)
        return exc.code if isinstance(exc.code, int) else 2
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return run_main(f"ddp-profile {args.command}", args.func, args, debug=args.debug)


if __name__ == "__main__":
    raise SystemExit(main())
