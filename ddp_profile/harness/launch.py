"""Process start-up for the harness: read torchrun's environment, or spawn N local gloo processes.

Ports are never hard-coded: torchrun chooses its own (MASTER_PORT), and local spawning asks the OS for a
free one. Local spawning is for development and tests on a CPU machine; GPU runs go through torchrun.
"""

from __future__ import annotations

import faulthandler
import os
import socket
import sys
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class ProcessInfo:
    """Where this process sits in the job."""

    rank: int
    world_size: int
    local_rank: int


STACK_DUMP_ENV = "DDP_PROFILE_STACK_DUMP_S"
"""Seconds after which every rank prints all its threads' Python stacks (and again each period): see
:func:`arm_stack_dump`. Unset or empty: off."""


def arm_stack_dump(environ: dict | None = None) -> float | None:
    """With ``DDP_PROFILE_STACK_DUMP_S=N`` (N > 0 seconds) in the environment, print every thread's Python stack
    to stderr N seconds from now and every N seconds after (``faulthandler.dump_traceback_later``: a watchdog
    thread, so it prints even while the main thread waits inside a CUDA or NCCL call, where no Python signal
    handler runs). For a rank that never ends, the log then says where it waits. Returns N, or None when off;
    a value that is not a positive number is ignored with a note on stderr."""
    env = os.environ if environ is None else environ
    raw = str(env.get(STACK_DUMP_ENV, "")).strip()
    if not raw:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds < 1e6:
        print(
            f"note: {STACK_DUMP_ENV}={raw[:30]!r} is not a number of seconds; no stack dumps",
            file=sys.stderr,
            flush=True,
        )
        return None
    faulthandler.dump_traceback_later(seconds, repeat=True, file=sys.stderr)
    return seconds


def torchrun_env(environ: dict | None = None) -> ProcessInfo | None:
    """ProcessInfo from torchrun's RANK / WORLD_SIZE / LOCAL_RANK variables, or None outside torchrun."""
    env = os.environ if environ is None else environ
    if not all(k in env for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")):
        return None
    return ProcessInfo(int(env["RANK"]), int(env["WORLD_SIZE"]), int(env["LOCAL_RANK"]))


def free_port() -> int:
    """A TCP port the OS says is free right now on the loopback interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def default_backend(backend: str = "") -> str:
    return backend or ("nccl" if torch.cuda.is_available() else "gloo")


def device_for(backend: str, local_rank: int) -> torch.device:
    """cuda:<local_rank> for NCCL runs, the CPU for gloo runs (gloo here means 'develop on the CPU')."""
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


# NCCL variables that set what the levers set; any present wins over (or adds to) the group's config,
# so the run JSON records them.
NCCL_TUNING_ENV = (
    "NCCL_MAX_NCHANNELS",
    "NCCL_MIN_NCHANNELS",
    "NCCL_MAX_CTAS",
    "NCCL_MIN_CTAS",
    "TORCH_NCCL_HIGH_PRIORITY",
    "NCCL_NVLS_ENABLE",
    "NCCL_ALGO",
    "NCCL_PROTO",
)

_COMM_SETUP: dict = {}


def nccl_options(
    channels: int = 0, high_priority: bool = False, environ: dict | None = None, min_ctas: int = 0
):
    """(ProcessGroupNCCL.Options or None, description) for the levers `--nccl-channels`,
    `--nccl-high-priority` and `--nccl-min-ctas`.

    Preferred: the group's own NCCL config (`opts.config.max_ctas = N`, NCCL's ncclConfig_t.maxCTAs: at most
    N CTAs, one per channel, per collective; `opts.config.min_ctas = M`, ncclConfig_t.minCTAs: at least M) and
    `Options(is_high_priority_stream=True)`. Where the build lacks them, the environment fallbacks
    NCCL_MAX_NCHANNELS / NCCL_MIN_CTAS / TORCH_NCCL_HIGH_PRIORITY=1 are set (before the group exists). The
    description says which mechanism took effect.
    """
    env = os.environ if environ is None else environ
    desc: dict = {
        "nccl_channels": channels or None,
        "nccl_high_priority": high_priority,
        "channels_mechanism": None,
        "high_priority_mechanism": None,
    }
    if min_ctas:  # only then, so records of runs without the lever keep their keys
        desc.update({"nccl_min_ctas": min_ctas, "min_ctas_mechanism": None})
    if not channels and not high_priority and not min_ctas:
        return None, desc
    options_cls = getattr(getattr(dist, "ProcessGroupNCCL", None), "Options", None)
    opts = None
    if options_cls is not None:
        opts = options_cls(is_high_priority_stream=high_priority)
        if high_priority:
            desc["high_priority_mechanism"] = "pg_options.is_high_priority_stream"
    elif high_priority:
        env["TORCH_NCCL_HIGH_PRIORITY"] = "1"
        desc["high_priority_mechanism"] = "env TORCH_NCCL_HIGH_PRIORITY=1"
    for value, field, variable, key in (
        (channels, "max_ctas", "NCCL_MAX_NCHANNELS", "channels_mechanism"),
        (min_ctas, "min_ctas", "NCCL_MIN_CTAS", "min_ctas_mechanism"),
    ):
        if not value:
            continue
        try:
            if opts is None:  # no Options class in this build: the same fallback as a config-less one
                raise AttributeError("ProcessGroupNCCL.Options")
            setattr(opts.config, field, value)
            desc[key] = f"pg_options.config.{field}"
        except AttributeError:
            env[variable] = str(value)
            desc[key] = f"env {variable}"
    return opts, desc


def _read_back(device: torch.device, group=None) -> dict:
    """What the live NCCL backend of ``group`` (default: the default group) says it was built with
    (private API: {} where it moved)."""
    try:
        pg = group if group is not None else dist.distributed_c10d._get_default_group()
        options = pg._get_backend(device).options
        # the stubs type `.options` as the base Backend.Options; NCCL's is ProcessGroupNCCL.Options
        out: dict[str, bool | int] = {"is_high_priority_stream": bool(options.is_high_priority_stream)}  # type: ignore[attr-defined,union-attr]
        config = getattr(options, "config", None)
        if config is not None:
            out["max_ctas"] = int(config.max_ctas)
            out["min_ctas"] = int(config.min_ctas)
        return out
    except (AttributeError, RuntimeError, TypeError):
        return {}


def init_process_group(
    info: ProcessInfo,
    backend: str,
    nccl_channels: int = 0,
    nccl_high_priority: bool = False,
    nccl_min_ctas: int = 0,
) -> dict:
    """Initialise the default group from MASTER_ADDR/MASTER_PORT (set by torchrun or spawn_local).

    Returns (and keeps for `comm_setup()`) what the NCCL levers did; on gloo they are ignored, with a note.
    """
    kwargs: dict[str, Any] = {}  # device_id (torch.device) and pg_options (ProcessGroupNCCL.Options)
    desc: dict = {
        "backend": backend,
        "nccl_channels": nccl_channels or None,
        "nccl_high_priority": nccl_high_priority,
        **({"nccl_min_ctas": nccl_min_ctas} if nccl_min_ctas else {}),
    }
    if backend == "nccl":
        kwargs["device_id"] = torch.device("cuda", info.local_rank)
        opts, desc = nccl_options(nccl_channels, nccl_high_priority, min_ctas=nccl_min_ctas)
        desc["backend"] = backend
        if opts is not None:
            kwargs["pg_options"] = opts
    elif nccl_channels or nccl_high_priority or nccl_min_ctas:
        desc["note"] = f"ignored: backend {backend} has no NCCL channels or streams"
    dist.init_process_group(backend=backend, rank=info.rank, world_size=info.world_size, **kwargs)
    if backend == "nccl":
        desc["read_back"] = _read_back(kwargs["device_id"])
    desc["nccl_env"] = {k: os.environ[k] for k in NCCL_TUNING_ENV if k in os.environ}
    _COMM_SETUP.clear()
    _COMM_SETUP.update(desc)
    return desc


def new_lever_group(
    backend: str,
    device: torch.device,
    nccl_channels: int = 0,
    nccl_high_priority: bool = False,
    nccl_min_ctas: int = 0,
):
    """(group, description): a new process group over every rank with the NCCL levers applied through its
    options, as init_process_group applies them to the default group, for configurations that differ in
    their levers inside one job (ddp_profile.harness.repeats). Every rank must call it, in the same order.
    On gloo the levers are ignored, with a note."""
    desc: dict = {
        "backend": backend,
        "nccl_channels": nccl_channels or None,
        "nccl_high_priority": nccl_high_priority,
        "channels_mechanism": None,
        "high_priority_mechanism": None,
        "group": "own group (new_group)",
    }
    if nccl_min_ctas:
        desc.update({"nccl_min_ctas": nccl_min_ctas, "min_ctas_mechanism": None})
    if backend != "nccl":
        if nccl_channels or nccl_high_priority or nccl_min_ctas:
            desc["note"] = f"ignored: backend {backend} has no NCCL channels or streams"
        return dist.new_group(backend=backend), desc
    opts, levers = nccl_options(nccl_channels, nccl_high_priority, min_ctas=nccl_min_ctas)
    desc.update(levers)
    group = dist.new_group(backend="nccl", pg_options=opts)
    desc["read_back"] = _read_back(device, group)
    desc["nccl_env"] = {k: os.environ[k] for k in NCCL_TUNING_ENV if k in os.environ}
    return group, desc


def comm_setup(nccl_channels: int = 0, nccl_high_priority: bool = False, nccl_min_ctas: int = 0) -> dict:
    """The NCCL levers' record for the run JSON: what init_process_group applied, else why nothing was."""
    if _COMM_SETUP.get("backend") == "nccl":
        return dict(_COMM_SETUP)
    backend = _COMM_SETUP.get("backend")
    desc = {
        "backend": backend,
        "nccl_channels": nccl_channels or None,
        "nccl_high_priority": nccl_high_priority,
        "channels_mechanism": None,
        "high_priority_mechanism": None,
    }
    if nccl_min_ctas:
        desc.update({"nccl_min_ctas": nccl_min_ctas, "min_ctas_mechanism": None})
    if nccl_channels or nccl_high_priority or nccl_min_ctas:
        where = f"backend {backend}" if backend else "a single process (no process group)"
        desc["note"] = f"ignored: {where} has no NCCL channels or streams"
    return desc


def _spawned(rank: int, world_size: int, fn, args: tuple) -> None:
    info = ProcessInfo(rank, world_size, rank)
    init_process_group(info, "gloo")
    try:
        fn(info, *args)
        dist.barrier()  # no rank tears the group down while a peer is still inside a collective
    finally:
        dist.destroy_process_group()


def spawn_local(nproc: int, fn, *args) -> None:
    """Run `fn(ProcessInfo, *args)` in `nproc` fresh processes joined by a gloo group on a free port.

    `fn` must be a module-level function (it is pickled). Raises if any process fails.
    """
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(free_port())
    torch.multiprocessing.spawn(_spawned, args=(nproc, fn, args), nprocs=nproc, join=True)
