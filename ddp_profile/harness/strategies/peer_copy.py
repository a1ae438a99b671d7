"""Two-rank all-reduce by peer copies plus one local add (``--peer-copy-allreduce`` with `bucketed`; the sharded
update's reduce-scatter and all-gather by peer copies are ``strategies/peer_shards.py``, which shares this
module's two-rank check and symmetric-memory rendezvous).

Why: with two GPUs, a sum needs no ring, and a copy engine moves the bytes without taking SMs from compute. Each rank pushes its
(pre-divided) bucket into a receive buffer on the other GPU, both wait until both pushes landed, and each
adds what it received to its own bucket: ``mine + theirs``, the same two addends as a two-rank NCCL or gloo
sum, so the result is the same (an fp sum of two values is commutative).

On GPUs (NCCL group) the receive buffers are PyTorch symmetric memory (``torch.distributed._symmetric_memory``:
``empty`` + ``rendezvous``, one allocation for all buckets, each bucket a slice at the same offset on both
ranks). The push is ``peer_view.copy_(wire)`` where ``peer_view`` maps the other GPU's slice into this
process: a same-dtype contiguous device copy, which ATen issues as ``cudaMemcpyAsync`` and the driver runs on
a copy engine over NVLink, not on SMs. The only kernels are the symmetric-memory barrier (one small block)
and the add. Everything runs on one side stream (high priority) that waits for the compute stream at launch;
``wait()`` makes the current stream wait for the add. The receive slice of a bucket is rewritten by the peer
one step later, so each step starts with one barrier on the side stream, which a rank passes only after its
previous step's adds (stream order): no rank pushes into a slice the other has not read yet.

On gloo (CPU tests) the same exchange is a send/receive pair (``dist.batch_isend_irecv``) into an ordinary
receive buffer, then the same add; tests/harness/test_levers.py checks the numerics there. The GPU transport
itself has no CPU test (symmetric memory needs CUDA).
"""  # noqa: E501

from __future__ import annotations

import torch
import torch.distributed as dist

from ddp_profile.errors import ConfigError


def two_rank_group(group, what: str) -> tuple:
    """(group, this rank in it, the peer's global rank) for a two-rank exchange; ``what`` names the lever in
    the error when the group has another size. None means the default group."""
    group = group if group is not None else dist.group.WORLD
    assert group is not None, f"{what} needs an initialised process group"
    world_size = dist.get_world_size(group)
    if world_size != 2:
        raise ConfigError(f"{what} needs exactly 2 ranks (peer copies plus one add), not {world_size}")
    rank = dist.get_rank(group)
    return group, rank, dist.get_global_rank(group, 1 - rank)


def symmetric_rendezvous(tensor: torch.Tensor, group):
    """The symmetric-memory handle of ``tensor`` (from ``symm_mem.empty``) over ``group``'s ranks; a group
    that is not NCCL's (gloo over GPU tensors) is a ConfigError, not a failure inside the rendezvous."""
    from torch.distributed import _symmetric_memory as symm_mem

    backend = str(dist.get_backend(group))
    if "nccl" not in backend:
        raise ConfigError(
            f"peer copies between GPUs need an NCCL process group, not {backend!r} (drop --backend)"
        )

    try:
        return symm_mem.rendezvous(tensor, group)
    except RuntimeError:  # builds that still need the group registered first
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            symm_mem.enable_symm_mem_for_group(group.group_name)
        return symm_mem.rendezvous(tensor, group)


class PeerCopyWork:
    """The exchange of one bucket; ``wait()`` leaves the sum in the bucket's wire tensor."""

    def __init__(self, finish) -> None:
        self._finish = finish

    def wait(self) -> bool:
        if self._finish is not None:
            self._finish()
            self._finish = None
        return True


class PeerCopyExchange:
    """Receive buffers for every bucket's wire tensor and the exchange itself (module docstring)."""

    def __init__(self, wires: list[torch.Tensor], group) -> None:
        self.group, self.rank, self.peer_global = two_rank_group(group, "peer_copy_allreduce")
        dtypes = {w.dtype for w in wires}
        if len(dtypes) != 1:
            raise ConfigError(
                f"peer_copy_allreduce needs one wire dtype for every bucket, got {sorted(map(str, dtypes))}"
            )
        self.peer = 1 - self.rank
        dtype, device = wires[0].dtype, wires[0].device
        total = sum(w.numel() for w in wires)
        self.offsets = []
        offset = 0
        for w in wires:
            self.offsets.append(offset)
            offset += w.numel()
        self.on_gpu = device.type == "cuda"
        self.handle = None
        self.stream = None
        if self.on_gpu:
            from torch.distributed import _symmetric_memory as symm_mem

            self.recv = symm_mem.empty(total, dtype=dtype, device=device)
            self.handle = symmetric_rendezvous(self.recv, self.group)
            self.peer_views = [
                self.handle.get_buffer(self.peer, (w.numel(),), dtype, off)
                for w, off in zip(wires, self.offsets, strict=True)
            ]
            self.stream = torch.cuda.Stream(device=device, priority=-1)
        else:
            self.recv = torch.empty(total, dtype=dtype, device=device)
            self.peer_views = []
        self.local = [self.recv[off : off + w.numel()] for w, off in zip(wires, self.offsets, strict=True)]
        self._step_started = False

    def start_step(self) -> None:
        self._step_started = False

    def launch(self, index: int, wire: torch.Tensor) -> PeerCopyWork:
        """Start the exchange of bucket ``index`` (``wire`` already pre-divided); the returned object's
        ``wait()`` leaves ``wire = wire + peer's wire``."""
        recv = self.local[index]
        if not self.on_gpu:
            ops = [
                dist.P2POp(dist.isend, wire, self.peer_global, self.group),
                dist.P2POp(dist.irecv, recv, self.peer_global, self.group),
            ]
            works = dist.batch_isend_irecv(ops)

            def finish() -> None:
                for work in works:
                    work.wait()
                wire.add_(recv)  # the one local add

            return PeerCopyWork(finish)
        assert self.stream is not None and self.handle is not None
        self.stream.wait_stream(torch.cuda.current_stream(wire.device))
        with torch.cuda.stream(self.stream):
            if not self._step_started:
                self.handle.barrier(channel=0)  # the peer has added last step's data: its slices are free
                self._step_started = True
            self.peer_views[index].copy_(wire)  # push on a copy engine (cudaMemcpyAsync, peer memory)
            self.handle.barrier(channel=0)  # both pushes of this bucket have landed
            wire.add_(recv)  # the one local add
            done = torch.cuda.Event()
            done.record(self.stream)

        def finish_gpu() -> None:
            torch.cuda.current_stream(wire.device).wait_event(done)

        return PeerCopyWork(finish_gpu)

    def layout(self) -> dict:
        return {
            "transport": "symmetric memory: cudaMemcpyAsync to the peer + one add"
            if self.on_gpu
            else "gloo send/recv + one add (CPU stand-in for the peer copy)",
            "recv_bytes": self.recv.numel() * self.recv.element_size(),
        }
