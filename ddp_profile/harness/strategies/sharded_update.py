"""Each rank updates one part of every parameter (``RunConfig.sharded_update``, ``--sharded-update``,
``-shardupd``; strategy `overlap` only): ZeRO stage 1 by reduce-scatter and all-gather, the optimizer run
from the gradient hooks while backward computes.

Why. The fused AdamW kernels are a sizeable share of a one-GPU step (the findings measure it: GPU time per
step by kernel family), and every DDP rank repeats that whole update. With two ranks each rank needs
to update only its half, and it can do so as soon as that parameter's mean gradient exists, while backward
still computes earlier layers.

How, per parameter whose element count divides by the world size (in the order the hooks fire, the same
on every rank):

1. reduce-scatter the gradient in place: rank r's part of ``.grad`` (the r-th of world-size equal slices
   of the flattened tensor) becomes the mean over ranks (NCCL's average, or divide first on groups without
   it, as ``overlap`` does);
2. on a side stream that waits for that collective, the part's own optimizer (made by the loop's
   optimizer factory over one ``nn.Parameter`` that views rank r's slice of the parameter) steps;
3. all-gather the parts in place, so every rank holds every updated part again: launched after the next
   parameter's reduce-scatter, so that the update does not stall the NCCL stream (:meth:`ShardedUpdate.launch`;
   an earlier version launched it right after the update: run JSONs made by it lack
   ``gather_after_next_reduce`` in their layout).

A parameter whose count does not divide is all-reduced whole and updated whole on every rank (the plain
data-parallel update). ``finish()`` makes the current stream wait for the side stream and every
all-gather, so the next forward sees the new parameters. Numerics: an element-wise optimizer (SGD, AdamW)
gives every element the value the unsharded update gives (the same mean gradient; a two-rank reduce-scatter
sums the same two addends as the all-reduce; with more ranks the same addends, to rounding), so a run trains
like ``overlap`` (tests/harness/test_sharded_update.py checks bitwise equality on 2 gloo ranks). Optimizer state exists for the owned parts only: 1/world size of it.

On the GPU the side stream is a high-priority CUDA stream (``high_priority=False``, ``--sharded-update-normal-priority``,
``-updnormal``: the compute stream's priority, so the update's kernels do not take SMs ahead of the backward's
GEMMs); off it (gloo tests) every call is synchronous. With ``peer_copy`` (``--peer-copy-allreduce``,
``-peercopy``, any number of ranks on one host) the split parameters' reduce-scatter and all-gather are
copy-engine pushes into the peers' memory plus adds, no NCCL kernel (``strategies/peer_shards.py``); whole
parameters stay NCCL all-reduces. Across hosts, or without symmetric memory, the NCCL collectives stay, with
a one-line note, and the layout's ``peer_copy_fallback`` says why.
Torch and the standard library only.

Known, not understood: once, one timed repeat of a sharded configuration started and never finished (the
runner killed the job for lack of progress; docs/campaigns.md records which set), while its other repeats
and the profiled runs ended normally.
"""  # noqa: E501

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn

from ddp_profile.harness import nvtx_ranges
from ddp_profile.harness.strategies.base import comm_group, merged_state, nbytes
from ddp_profile.harness.strategies.peer_shards import PeerShards, fallback_reason


class _Part:
    """One parameter's update: the slice of it this rank owns (the whole tensor when it cannot be split)."""

    def __init__(self, param: nn.Parameter, rank: int, world_size: int, factory: Callable) -> None:
        self.param = param
        self.split = world_size > 1 and param.numel() % world_size == 0
        if self.split:
            count = param.numel() // world_size
            self.lo, self.hi = rank * count, (rank + 1) * count
            self.owned = nn.Parameter(param.detach().view(-1)[self.lo : self.hi])  # shares the storage
        else:
            self.lo, self.hi = 0, param.numel()
            self.owned = param
        self.optimizer = factory([self.owned])


def reduce_scatter(output, tensor, op, group, async_op: bool):
    """``reduce_scatter_single`` where PyTorch has it (2.13: the older name warns), else ``reduce_scatter_tensor``."""
    fn = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    return fn(output, tensor, op=op, group=group, async_op=async_op)


def all_gather(output, tensor, group, async_op: bool):
    """``all_gather_single`` where PyTorch has it, else ``all_gather_into_tensor``."""
    fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return fn(output, tensor, group=group, async_op=async_op)


class ShardedUpdate:
    """The loop's optimizer for ``overlap`` with ``sharded_update``: the strategy's hooks step each part, so
    ``step()`` does nothing (on one rank it steps every part); ``zero_grad`` clears the parameters' and the
    parts' gradients; ``state`` is the parts' optimizer state (what the run JSON's state bytes count)."""

    def __init__(
        self,
        params: list[nn.Parameter],
        factory: Callable,
        rank: int,
        world_size: int,
        peer_copy: bool = False,
        high_priority: bool = True,
    ) -> None:
        self.world_size = world_size
        self.high_priority = high_priority
        self.exchange: PeerShards | None = None
        self.peer_copy_fallback: str | None = None
        if peer_copy and world_size > 1:
            self.peer_copy_fallback = fallback_reason(world_size, bool(params) and params[0].is_cuda)
            if self.peer_copy_fallback is not None:
                if rank == 0:
                    print(
                        f"note: peer copies off, the sharded update uses NCCL: {self.peer_copy_fallback}",
                        file=sys.stderr,
                        flush=True,
                    )
            else:  # before the parts: it moves the split parameters into symmetric memory
                self.exchange = PeerShards(
                    {i: p for i, p in enumerate(params) if p.numel() % world_size == 0}, comm_group()
                )
        self.parts = [_Part(p, rank, world_size, factory) for p in params]
        self.stream: torch.cuda.Stream | None = None
        if world_size > 1 and params and params[0].is_cuda:
            self.stream = torch.cuda.Stream(params[0].device, priority=-1 if high_priority else 0)
        self._gathers: list = []
        self._pending: int | None = (
            None  # the split parameter whose parts are updated but not yet all-gathered
        )

    def side_stream(self):
        """The context the optimizer and the all-gather launch run in: the side stream on the GPU."""
        return torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for part in self.parts:
            for tensor in (part.param, part.owned):
                if tensor.grad is None:
                    continue
                if set_to_none:
                    tensor.grad = None
                elif tensor is part.param:
                    tensor.grad.zero_()

    def step(self) -> None:
        if self.world_size == 1:
            for part in self.parts:
                part.optimizer.step()

    @property
    def state(self) -> dict:
        return merged_state(part.optimizer for part in self.parts)

    def launch(self, index: int, op) -> None:
        """Reduce parameter ``index``'s gradient (pre-divided unless ``op`` is AVG) and update this rank's part;
        all-gather the previous split parameter's parts. Called from the parameter's post-accumulate hook.

        The all-gather of a part waits for its update, so launched right after it, it would hold the one NCCL
        stream idle until the update ends, and every later reduce-scatter behind it. Launched after the next
        reduce-scatter instead (order RS(k), AG(k-1), RS(k+1), AG(k), ...), the update runs while that
        reduce-scatter does; the last one is launched by :meth:`finish`."""
        part = self.parts[index]
        grad = part.param.grad
        assert grad is not None  # the post-accumulate hook fires once the gradient exists
        flat = grad.view(-1)
        if self.exchange is not None and part.split:
            self._launch_peer_copy(
                part, index, flat, 1.0 / self.world_size if op == dist.ReduceOp.AVG else 1.0
            )
            return
        with nvtx_ranges.collective(index, nbytes(grad)):
            if part.split:
                work = reduce_scatter(flat[part.lo : part.hi], flat, op, comm_group(), async_op=True)
            else:
                work = dist.all_reduce(grad, op=op, group=comm_group(), async_op=True)
        with self.side_stream(), torch.no_grad():
            if part.split:
                self._gather_pending()
            work.wait()
            if part.split:
                part.owned.grad = flat[part.lo : part.hi]
            part.optimizer.step()
        if part.split:
            self._pending = index

    def _launch_peer_copy(self, part: _Part, index: int, flat: torch.Tensor, scale: float) -> None:
        """Reduce-scatter by peer copies (pushing the previous part's update along), then update, all on the
        side stream once it has caught up with the compute stream (``strategies/peer_shards.py``)."""
        assert self.exchange is not None
        if self.stream is not None:
            self.stream.wait_stream(torch.cuda.current_stream(self.stream.device))
        with self.side_stream(), torch.no_grad():
            with nvtx_ranges.collective(index, nbytes(flat)):
                part.owned.grad = self.exchange.reduce(index, flat, scale, self._pending)
            part.optimizer.step()
        self._pending = index

    def _gather_pending(self) -> None:
        """All-gather the parts of the split parameter updated last (from the side stream, after its update)."""
        if self._pending is None:
            return
        part = self.parts[self._pending]
        with nvtx_ranges.param_sync(self._pending, dist.get_rank(comm_group()), nbytes(part.owned)):
            self._gathers.append(
                all_gather(part.param.detach().view(-1), part.owned.detach(), comm_group(), async_op=True)
            )
        self._pending = None

    def finish(self) -> None:
        """Launch the last all-gather, then order every update and all-gather of this step before later work on
        the current stream."""
        with self.side_stream():
            if self.exchange is not None:
                self.exchange.flush(self._pending)
                self._pending = None
            else:
                self._gather_pending()
        if self.stream is not None:
            torch.cuda.current_stream(self.stream.device).wait_stream(self.stream)
        for work in self._gathers:
            work.wait()
        self._gathers.clear()

    def layout(self) -> dict:
        split = [p for p in self.parts if p.split]
        return {
            "sharded_update": True,
            "gather_after_next_reduce": True,
            "split_params": len(split),
            "whole_params": len(self.parts) - len(split),
            "owned_param_bytes": sum(nbytes(p.owned) for p in self.parts),
            "side_stream_priority": "high" if self.high_priority else "normal",
            "peer_copy": self.exchange.layout() if self.exchange is not None else None,
            "peer_copy_fallback": self.peer_copy_fallback,
        }


__all__ = ["ShardedUpdate", "all_gather", "reduce_scatter"]
