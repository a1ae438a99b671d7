"""Whole training steps as one CUDA graph (``RunConfig.cuda_graph``, ``--cuda-graph``, ``-graph``).

Why. A step of thousands of small kernels can be bound by the host: each launch costs more host time than
the GPU spends on the kernel (``ddp-profile launches`` measures both per step), and DDP adds launches, copies
and its hooks' host work to every step, so a multi-GPU step waits for its host more than one GPU's does (the
findings' timing sets compare them). A CUDA graph replays the step's kernels, collectives included, from one
host call: host overhead leaves both runs alike, and what is left to compare is GPU work.

How (PyTorch's documented recipe for whole-network capture with DDP): everything runs on one side stream
(the caller enters :func:`graph_stream` before building and wrapping the model, so DDP's retained
gradient-accumulator nodes live on the stream that is captured); :data:`EAGER_WARMUP` eager steps first
(DDP needs more than ten before capture; the optimizer's state is created there), then the cached eager
memory is released and one step is captured reading static input tensors; each measured step copies its
batch into them and replays. The numerics are the eager step's, kernel for kernel; the optimizer is made
``capturable`` (its step counter on the GPU). Eager warm-up steps train too, so a graphed run's final loss
is that of EAGER_WARMUP more steps. Torch and the standard library only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch

from ddp_profile.harness.config import GRAPH_STRATEGIES

EAGER_WARMUP = 11
"""Eager steps before capture: DDP must run more than ten eager iterations before a full-backward capture."""
STRATEGIES = GRAPH_STRATEGIES
"""Strategies whose step can be captured (the config's one list): their host work between kernels (DDP's
reducer, overlap's per-gradient hooks and handle waits) only launches work and records stream waits, which a
capture keeps. The other strategies have not been tried under capture."""


@contextlib.contextmanager
def graph_stream(on: bool, device: torch.device) -> Iterator[torch.cuda.Stream | None]:
    """The side stream every step of a graphed run uses (None, and nothing entered, when ``on`` is False or
    off the GPU)."""
    if not on or device.type != "cuda":
        yield None
        return
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        yield stream
    torch.cuda.current_stream(device).wait_stream(stream)


def capture(step: Callable, zero_grad: Callable, batches: list, stream: torch.cuda.Stream):
    """Run EAGER_WARMUP eager steps on ``batches`` (cycled), then capture one step. ``step(x, y)`` runs
    forward, backward, gradient synchronisation and the optimizer and returns the loss; ``zero_grad()`` sets
    the gradients to None. Returns (graph, static_x, static_y, static_loss): copy a batch into static_x and
    static_y, then ``graph.replay()``; static_loss holds the replayed step's loss."""
    for i in range(EAGER_WARMUP):
        zero_grad()
        step(*batches[i % len(batches)])
    torch.cuda.synchronize()
    zero_grad()
    torch.cuda.empty_cache()  # the eager steps' cached activations would otherwise sit beside the graph's pool
    static_x, static_y = (t.clone() for t in batches[0])
    graph = torch.cuda.CUDAGraph()
    # thread-local capture: the NCCL watchdog thread's event queries must not invalidate this thread's capture
    with torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
        static_loss = step(static_x, static_y)
    return graph, static_x, static_y, static_loss


__all__ = ["EAGER_WARMUP", "STRATEGIES", "capture", "graph_stream"]
