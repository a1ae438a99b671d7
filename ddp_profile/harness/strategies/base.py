"""The protocol every gradient-synchronisation strategy implements, and the helpers they share.

A strategy wraps a model; the loop calls, per step:

    strategy.on_train_batch_start()          # reset per-step state (hooks' handles, bucket counters)
    loss = loss_fn(strategy(x), y)           # forward through strategy.module
    loss.backward()                          # overlapping strategies launch collectives from hooks here
    strategy.finish_gradient_synchronization()   # returns when every grad holds the mean over ranks
    optimizer.step()

With NCCL, "returns" means the averaged values are ordered before any later work on the current CUDA
stream (Work.wait() makes the stream wait, not the host); with gloo it is a host-side wait.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Protocol, runtime_checkable

import torch
import torch.distributed as dist
from torch import nn

from ddp_profile import nvtx_names as names
from ddp_profile.harness import nvtx_ranges


@runtime_checkable
class Strategy(Protocol):
    module: nn.Module

    def __call__(self, *args, **kwargs): ...

    def on_train_batch_start(self) -> None: ...

    def finish_gradient_synchronization(self) -> None: ...

    def layout(self) -> dict: ...


# Set by solo() / use_group() for the code inside them (one training process, one thread).
_SCOPE: dict = {"solo": False, "group": None}


def world() -> tuple[int, int]:
    """(rank, world_size), or (0, 1) when no process group is initialised or inside :func:`solo`."""
    if not _SCOPE["solo"] and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def comm_group():
    """The process group the strategies' collectives use: None (the default group) unless inside
    :func:`use_group`."""
    return _SCOPE["group"]


@contextlib.contextmanager
def solo() -> Iterator[None]:
    """Inside, this process trains alone: :func:`world` is (0, 1), so strategies and the loop launch no
    collective although a process group exists (the 1-GPU configuration of an interleaved timing run,
    ddp_profile.harness.repeats, on one GPU of the job while the other ranks wait)."""
    before = _SCOPE["solo"]
    _SCOPE["solo"] = True
    try:
        yield
    finally:
        _SCOPE["solo"] = before


@contextlib.contextmanager
def use_group(group) -> Iterator[None]:
    """Inside, the strategies' collectives go to ``group`` (a process group over every rank, e.g. one made
    with other NCCL options by ``dist.new_group``) instead of the default group."""
    before = _SCOPE["group"]
    _SCOPE["group"] = group
    try:
        yield
    finally:
        _SCOPE["group"] = before


def broadcast_state(module: nn.Module) -> None:
    """Copy rank 0's parameters and buffers (trainable, frozen and tied alike) to every rank.

    `parameters()`/`buffers()` yield each shared tensor once, so tied weights are sent once.
    """
    _, world_size = world()
    if world_size == 1:
        return
    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            dist.broadcast(tensor.data, src=0, group=comm_group())


def grad_params(module: nn.Module) -> list[nn.Parameter]:
    """Unique parameters that take part in gradient averaging, in registration order."""
    return [p for p in module.parameters() if p.requires_grad]


def merged_state(optimizers) -> dict:
    """The state of several optimizers over disjoint parameters, as one optimizer's ``state`` (keyed by
    parameter): what the run JSON's optimizer-state bytes count for per-bucket or per-part optimizers."""
    merged: dict = {}
    for optimizer in optimizers:
        merged.update(optimizer.state)
    return merged


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class Wrapper(nn.Module):
    """Common base: holds `.module`, forwards calls, does the wrap-time broadcast.

    Subclasses override the two step hooks. `layout()` describes how gradients are grouped into
    collectives, for the run JSON.
    """

    name = "base"

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module
        self.rank, self.world_size = world()
        broadcast_state(module)

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def add_grad_hook(self, param: nn.Parameter, hook) -> None:
        """``param.register_post_accumulate_grad_hook(hook)``, remembered for :meth:`remove_hooks`."""
        if "_grad_hooks" not in self.__dict__:
            self.__dict__["_grad_hooks"] = []
        self.__dict__["_grad_hooks"].append(param.register_post_accumulate_grad_hook(hook))

    def remove_hooks(self) -> None:
        """Remove the gradient hooks this strategy registered. A hook kept on a parameter holds the strategy
        (its closure) through autograd's C++ side, which Python's garbage collector cannot see: without this,
        a wrapped model, its buckets and optimizer stay alive after the run (ddp_profile.harness.repeats runs
        many in one process; train.run calls this at its end)."""
        for handle in self.__dict__.pop("_grad_hooks", []):
            handle.remove()

    def on_train_batch_start(self) -> None:
        pass

    def finish_gradient_synchronization(self) -> None:
        pass

    def layout(self) -> dict:
        """Collective groups: {"buckets": count, "bucket_bytes": [...], "bucket_params": [[names]]}."""
        params = grad_params(self.module)
        return layout_from_groups(self.module, [[p] for p in params])


def layout_from_groups(module: nn.Module, groups: list[list[nn.Parameter]]) -> dict:
    index_to_name = {id(p): n for n, p in module.named_parameters()}
    return {
        "buckets": len(groups),
        "bucket_bytes": [sum(nbytes(p) for p in g) for g in groups],
        "bucket_params": [[index_to_name.get(id(p), "?") for p in g] for g in groups],
    }


def wait_phase():
    """The NVTX range the loop's analysis calls the gradient-synchronisation wait."""
    return nvtx_ranges.phase(names.GRAD_WAIT)
