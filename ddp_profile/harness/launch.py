"""Process start-up for the harness: read torchrun's environment, or spawn N local gloo processes.

Ports are never hard-coded: torchrun chooses its own (MASTER_PORT), and local spawning asks the OS for a
free one. Local spawning is for development and tests on a CPU machine; GPU runs go through torchrun.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class ProcessInfo:
    """Where this process sits in the job."""

    rank: int
    world_size: int
    local_rank: int


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


def init_process_group(info: ProcessInfo, backend: str) -> None:
    """Initialise the default group from MASTER_ADDR/MASTER_PORT (set by torchrun or spawn_local)."""
    kwargs = {}
    if backend == "nccl":
        kwargs["device_id"] = torch.device("cuda", info.local_rank)
    dist.init_process_group(backend=backend, rank=info.rank, world_size=info.world_size, **kwargs)


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
