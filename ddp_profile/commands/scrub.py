"""`ddp-profile scrub IN... [-o OUT | --in-place] [--slim] [--compress xz]`: make exports safe to share."""

from __future__ import annotations

from ddp_profile.nsys import scrub


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "scrub",
        help="remove env vars, paths, host/user names, program output and unrelated processes from exports",
        description="Remove from nsys SQLite exports what must not be shared (environment, absolute paths, host and "
        "user names, captured stdout/stderr, unrelated host processes); everything the analysis reads stays. "
        "Outputs are written atomically; inputs are only read.",
    )
    scrub.add_arguments(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    return scrub.run_args(args)
