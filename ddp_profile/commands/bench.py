"""`ddp-profile bench`: the training harness's command line (see ``ddp_profile.harness.bench``)."""

from __future__ import annotations

import argparse

from ddp_profile.harness.bench import __doc__ as HARNESS_DOC
from ddp_profile.harness.bench import add_arguments, run


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "bench",
        help="run the NVTX-annotated training harness once (torchrun or --nproc)",
        description=HARNESS_DOC,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p)
    p.set_defaults(func=run)
