"""The sharded update's reduce-scatter and all-gather by peer copies (``--sharded-update
--peer-copy-allreduce``, 2 ranks): no NCCL kernel for a split parameter.

The copy-engine lever of ``strategies/peer_copy.py``, applied to ``strategies/sharded_update.py``. With two ranks each split parameter
has two halves; rank r owns half r. Per parameter, in hook order:

- reduce-scatter: each rank pushes its gradient's *other* half (the peer's) into a receive slot on the
  peer's GPU, and after both pushes have landed adds the received copy to its own half (then halves the
  sum for an average): ``mine + theirs``, the two addends of a two-rank sum;
- all-gather: after its update, each rank pushes its owned half straight into the peer's copy of the
  parameter. The push rides with the next parameter's reduce-scatter (one barrier for both), the last one
  with ``flush()``, the order the NCCL version launches its all-gathers in.

On GPUs (NCCL group) every split parameter lives in one PyTorch symmetric-memory allocation (the parameter's
``.data`` is re-pointed into it at construction, its values copied), followed by the receive slots; the
peer's slices are mapped into this process (``get_buffer``). A push is ``peer_view.copy_(local)``, a
same-dtype contiguous device copy: ATen issues ``cudaMemcpyAsync``, which the driver runs on a copy engine
over NVLink, not on SMs. Then one symmetric-memory barrier (a one-block kernel) and the add. Everything runs
on the caller's current stream (the sharded update's side stream).

Why no other synchronisation is needed: a rank pushes into a peer's slot only after the barrier of the
previous parameter, which the peer passes only after its side stream has waited for its compute stream at
that parameter's hook and finished the previous step's adds of that slot; every use of a parameter in
backward is launched before its gradient hook fires; the peer's next forward waits for its side stream,
whose last barrier follows this rank's last push.

On gloo (CPU tests) the pushes are send/receive pairs (``dist.batch_isend_irecv``), the same adds follow;
tests/harness/test_sharded_update.py checks the numerics bitwise against plain ``overlap``. The GPU transport
has no CPU test (symmetric memory needs CUDA); the same test file checks, from the committed journals of the
timing sets that ran it on GPUs, that every repeat ended on stock DDP's final losses.
"""  # noqa: E501

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from ddp_profile.errors import ConfigError
from ddp_profile.harness.strategies.peer_copy import symmetric_rendezvous, two_rank_group

BARRIER_TIMEOUT_MS = 120_000
"""A barrier whose peer never arrives (ranks that fired different hooks) traps the GPU with a message after
this long instead of spinning for ever (the symmetric-memory barrier's default, 0, never times out)."""


class _Slot:
    """One split parameter: its flat view, its two halves' ranges and its receive slot."""

    def __init__(self, param: nn.Parameter, rank: int) -> None:
        self.param = param
        self.half = param.numel() // 2
        self.mine = slice(rank * self.half, (rank + 1) * self.half)
        self.theirs = slice((1 - rank) * self.half, (2 - rank) * self.half)

    def flat(self) -> torch.Tensor:
        return self.param.detach().view(-1)


class PeerShards:
    """Receive slots and symmetric parameters for the split parameters (``{index: parameter}``, index as the
    sharded update numbers its parts) and the two exchanges (module docstring)."""

    def __init__(self, params: dict[int, nn.Parameter], group) -> None:
        self.group, self.rank, self.peer_global = two_rank_group(group, "peer copies for the sharded update")
        dtypes = {p.dtype for p in params.values()}
        if len(dtypes) > 1:
            raise ConfigError(f"peer copies need one parameter dtype, got {sorted(map(str, dtypes))}")
        self.slots = {index: _Slot(p, self.rank) for index, p in params.items()}
        first = next(iter(params.values()), None)
        self.on_gpu = first is not None and first.is_cuda
        total = sum(p.numel() for p in params.values())
        dtype = first.dtype if first is not None else torch.float32
        device = first.device if first is not None else torch.device("cpu")
        self.handle = None
        self.peer_recv: dict[int, torch.Tensor] = {}
        self.peer_param: dict[int, torch.Tensor] = {}
        if self.on_gpu:
            from torch.distributed import _symmetric_memory as symm_mem

            buffer = symm_mem.empty(total + total // 2, dtype=dtype, device=device)
            self.handle = symmetric_rendezvous(buffer, self.group)
            recv_region = buffer[total:]
        else:
            buffer, recv_region = None, torch.empty(total // 2, dtype=dtype, device=device)
        self.recv: dict[int, torch.Tensor] = {}
        offset = recv_offset = 0
        peer = 1 - self.rank
        for index, slot in self.slots.items():
            n = slot.param.numel()
            if buffer is not None and self.handle is not None:
                home = buffer[offset : offset + n]
                home.copy_(slot.flat())
                slot.param.data = home.view_as(
                    slot.param
                )  # the peer writes this rank's copy of its half here
                self.peer_param[index] = self.handle.get_buffer(
                    peer, (slot.half,), dtype, offset + slot.mine.start
                )
                self.peer_recv[index] = self.handle.get_buffer(peer, (slot.half,), dtype, total + recv_offset)
            self.recv[index] = recv_region[recv_offset : recv_offset + slot.half]
            offset += n
            recv_offset += slot.half

    def reduce(self, index: int, grad: torch.Tensor, scale: float, gather: int | None) -> torch.Tensor:
        """Leave ``(mine + theirs) * scale`` in this rank's half of ``grad`` (the flat gradient of part
        ``index``) and return that half; first push part ``gather``'s updated half to the peer (None: none)."""
        slot = self.slots[index]
        mine = grad[slot.mine]
        self._exchange(
            [(grad[slot.theirs], index, "recv")] + ([] if gather is None else [self._gather_push(gather)])
        )
        mine.add_(self.recv[index])
        if scale != 1.0:
            mine.mul_(scale)
        return mine

    def flush(self, gather: int | None) -> None:
        """Push part ``gather``'s updated half to the peer and wait until both pushes have landed."""
        if gather is not None:
            self._exchange([self._gather_push(gather)])

    def _gather_push(self, index: int) -> tuple[torch.Tensor, int, str]:
        return (self.slots[index].flat()[self.slots[index].mine], index, "param")

    def _exchange(self, pushes: list[tuple[torch.Tensor, int, str]]) -> None:
        """Send every (local tensor, part, target) to the peer's receive slot or parameter copy; on return (GPU:
        in stream order) both ranks' pushes have landed."""
        if self.on_gpu:
            assert self.handle is not None
            for local, index, target in pushes:
                (self.peer_recv if target == "recv" else self.peer_param)[index].copy_(local)
            self.handle.barrier(channel=0, timeout_ms=BARRIER_TIMEOUT_MS)
        else:
            ops = []
            for tag, (local, index, target) in enumerate(pushes):
                slot = self.slots[index]
                into = self.recv[index] if target == "recv" else slot.flat()[slot.theirs]
                ops += [
                    dist.P2POp(dist.isend, local.contiguous(), self.peer_global, self.group, tag),
                    dist.P2POp(dist.irecv, into, self.peer_global, self.group, tag),
                ]
            for work in dist.batch_isend_irecv(ops):
                work.wait()

    def layout(self) -> dict:
        recv_bytes = sum(r.numel() * r.element_size() for r in self.recv.values())
        param_bytes = sum(s.param.numel() * s.param.element_size() for s in self.slots.values())
        return {
            "transport": "symmetric memory: copy-engine push to the peer + one add"
            if self.on_gpu
            else "gloo send/recv + one add (CPU stand-in for the peer copy)",
            "parts": len(self.slots),
            "recv_bytes": recv_bytes,
            # outside PyTorch's caching allocator: the run JSON's peak_memory_* do not count these bytes
            "symmetric_bytes": param_bytes + recv_bytes if self.on_gpu else 0,
        }


__all__ = ["BARRIER_TIMEOUT_MS", "PeerShards"]
