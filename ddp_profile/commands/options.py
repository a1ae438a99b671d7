"""Options several commands share, declared once (as sqlite-utils' ``output_options``): ``--jobs``,
``--export``, ``--dask`` / ``--scheduler`` (per-rank work on Dask), the step selection (``--step-pattern``,
``--phase``, ``--steps``: one :class:`~ddp_profile.analysis.identity.StepSelection`) and the progress bar a
command hands to ``load_trace``."""

from __future__ import annotations

import argparse
import re
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ddp_profile import nvtx_names as nn
from ddp_profile.errors import UsageError
from ddp_profile.nsys.progress import ProgressBar
from ddp_profile.schema import PHASES

if TYPE_CHECKING:
    from ddp_profile.analysis.identity import StepSelection

SLOW_S = 2.0  # a load with one job shows the bar only once it has taken this long

EXPORT_HELP = (
    "convert .nsys-rep inputs first with `nsys export --type sqlite` (needs nsys on PATH or NSYS=...); "
    "the export is written next to the report, never over an existing .sqlite"
)


def add_jobs_argument(parser: argparse.ArgumentParser) -> None:
    """``--jobs N`` for commands that load one run (``analyze``, ``inspect``)."""
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="per-rank export files read in parallel (default 1); a progress bar goes to stderr "
        f"when N > 1 or when loading takes over {SLOW_S:g} s",
    )


def add_export_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--export", action="store_true", help=EXPORT_HELP)


def input_paths(args: argparse.Namespace) -> list[Path]:
    """The command's PATHs, with .nsys-rep files converted first when --export is given."""
    paths = [Path(p) for p in args.paths]
    if args.export:
        from ddp_profile.nsys.export import export_reports

        paths = export_reports(paths)
    return paths


MAX_JOBS = 256


def check_jobs(jobs: int) -> None:
    """``--jobs`` must be 1..MAX_JOBS (0 or negative parse as ints but make no sense; a huge count would
    ask the OS for that many workers)."""
    if jobs < 1:
        raise UsageError(f"--jobs must be at least 1 (got {jobs})")
    if jobs > MAX_JOBS:
        raise UsageError(f"--jobs must be at most {MAX_JOBS} (got {str(jobs)[:20]})")


def cli_progress(paths, jobs: int, stream=None) -> ProgressBar:
    """The bar a command passes to ``load_trace(progress=...)``: drawn from the first file with ``jobs`` > 1,
    and with one job only once loading has taken :data:`SLOW_S` (a quick load prints nothing).
    Raises UsageError for ``jobs`` < 1."""
    from ddp_profile.nsys.files import find_exports

    check_jobs(jobs)
    return ProgressBar(len(find_exports(paths)), stream=stream, min_s=0.0 if jobs > 1 else SLOW_S)


def add_scheduler_arguments(parser: argparse.ArgumentParser) -> None:
    """``--dask`` and ``--scheduler ADDRESS`` for commands that analyse one run per rank (``analyze``)."""
    g = parser.add_argument_group("per-rank work on Dask (pip install 'ddp-profile[dask]')")
    g.add_argument(
        "--dask",
        action="store_true",
        help="load and analyse each per-rank file in a Dask worker process (a LocalCluster of --jobs "
        "workers); only small per-rank tables come back (same results)",
    )
    g.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        default=None,
        help="run the per-rank work on the Dask cluster at ADDRESS (e.g. tcp://host:8786; the files "
        "must be readable there at the same paths); 'local' = --dask",
    )


@contextmanager
def loaded_run(args: argparse.Namespace, paths):
    """The trace a command analyses: ``nsys.loader.load_trace`` (threads, ``--jobs``), or with ``--dask`` /
    ``--scheduler`` a :class:`ddp_profile.distributed.DistributedTrace` whose cluster is closed on exit.
    Raises UsageError (exit 2) when Dask is asked for but not installed."""
    scheduler = getattr(args, "scheduler", None) or ("local" if getattr(args, "dask", False) else None)
    progress = cli_progress(paths, args.jobs)
    if scheduler is None:
        from ddp_profile.nsys.loader import load_trace

        yield load_trace(paths, jobs=args.jobs, progress=progress)
        return
    from ddp_profile import distributed

    client = connect(scheduler, args.jobs)
    try:
        yield distributed.load_trace(paths, client=client, progress=progress)
    finally:
        distributed.close_client(client)


SCHEDULER_RE = re.compile(r"(?:(?:tcp|tls|ws|wss|ucx|inproc)://)?[\w.\-\[\]:]+:\d{1,5}/?")


def connect(scheduler: str, jobs: int):
    """A Dask client for ``--scheduler`` / ``--dask``; a malformed address is refused at once and an
    unreachable one within seconds (``distributed.SCHEDULER_TIMEOUT_S``), each as one line (UsageError)."""
    from ddp_profile import distributed
    from ddp_profile.errors import DdpProfileError

    if scheduler != "local" and not SCHEDULER_RE.fullmatch(scheduler):
        raise UsageError(f"--scheduler {scheduler[:80]!r}: not an address; give tcp://HOST:PORT (or 'local')")
    try:
        return distributed.make_client(scheduler, workers=jobs)
    except DdpProfileError:
        raise
    except Exception as exc:  # dask raises OSError (timeout), ValueError, even MemoryError for a bad peer
        why = " ".join(str(exc).split())[:160] or type(exc).__name__
        raise UsageError(
            f"--scheduler {scheduler[:80]}: cannot connect ({why}); check the address and that "
            "the scheduler is running"
        ) from exc


def regex(text: str) -> str:
    """argparse type: a regex that compiles (checked before any trace is read)."""
    try:
        re.compile(text)
    except (re.error, RecursionError, OverflowError, ValueError) as exc:
        raise argparse.ArgumentTypeError(f"{text[:60]!r} is not a valid regex ({exc})") from None
    return text


def steps_spec(text: str) -> str:
    """argparse type: ``all`` or a step slice (:func:`ddp_profile.analysis.identity.parse_steps`)."""
    from ddp_profile.errors import UsageError

    if text == "all":
        return text
    try:
        from ddp_profile.analysis.identity import parse_steps

        parse_steps(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc).split(": ", 1)[-1]) from None
    return text


STEPS_HELP = (
    "steps to keep by their label (the step numbers the output shows, the same on every rank): "
    "A:B keeps A <= step < B, A: and :B leave one end open, A keeps one step (default all); a "
    "selection with no step in it is an error naming the trace's steps"
)
STEP_PATTERN_HELP = (
    "regex for step NVTX range names (default: the project's 'step N' ranges, else "
    + nn.STEP_PATTERN_HELP
    + "; when no range matches, steps are inferred from the repeating "
    "kernel-launch sequence and numbered from 0 at the first step every rank ran)"
)


def add_step_selection(parser: argparse.ArgumentParser) -> None:
    """The step selection, declared once for every command that finds steps (``analyze``, ``launches``,
    ``report``, ``export``, ``inspect``): ``--step-pattern REGEX``, ``--phase NAME=REGEX`` (repeatable) and
    ``--steps A:B``; :func:`step_selection` makes them one value."""
    parser.add_argument("--step-pattern", metavar="REGEX", default=None, type=regex, help=STEP_PATTERN_HELP)
    parser.add_argument(
        "--phase",
        action="append",
        default=[],
        metavar="NAME=REGEX",
        type=phase_spec,
        help="override a phase regex: forward, backward, optimizer or grad_wait (repeatable)",
    )
    parser.add_argument("--steps", default="all", metavar="A:B", type=steps_spec, help=STEPS_HELP)


def step_selection(args: argparse.Namespace) -> StepSelection:
    """The parsed options of :func:`add_step_selection` as one :class:`StepSelection` (each ``--phase`` item
    already checked by :func:`phase_spec`; a later item for the same phase wins)."""
    from ddp_profile.analysis.identity import StepSelection  # here: pandas is imported only when steps are

    phases = dict(item.partition("=")[::2] for item in args.phase)
    return StepSelection(pattern=args.step_pattern, phases=tuple(phases.items()), steps=args.steps)


def phase_spec(text: str) -> str:
    """argparse type: ``NAME=REGEX`` with a known phase name and a valid regex."""
    name, sep, rx = text.partition("=")
    if not sep or name not in PHASES or not rx:
        raise argparse.ArgumentTypeError(
            f"{text[:60]!r}: use NAME=REGEX with NAME one of {', '.join(PHASES)}"
        )
    regex(rx)
    return text
