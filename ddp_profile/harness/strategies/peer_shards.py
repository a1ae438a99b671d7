"""The sharded update's reduce-scatter and all-gather by peer copies (``--sharded-update
--peer-copy-allreduce``, any number of ranks on one NVLink host): no NCCL kernel for a split parameter.

The copy-engine lever of ``strategies/peer_copy.py``, applied to ``strategies/sharded_update.py``. With N ranks
each split parameter has N equal parts (slices of the flattened tensor); rank r owns part r. Per parameter, in
hook order:

- reduce-scatter: each rank pushes its gradient's part j into a receive slot on rank j's GPU, for every other
  rank j (N - 1 pushes, to peers r+1, r+2, ... in turn so that not every rank writes to the same GPU first).
  Each rank has N - 1 slots per parameter, slot k holding the part sent by rank (r + 1 + k) mod N. After all
  pushes have landed, a rank adds the received copies to its own part in rank order of their senders (then
  scales the sum for an average): with two ranks ``mine + theirs``, the two addends of a two-rank sum;
- all-gather: after its update, each rank pushes its owned part straight into every peer's copy of the
  parameter (N - 1 pushes). The pushes ride with the next parameter's reduce-scatter (one barrier for both),
  the last ones with ``flush()``, the order the NCCL version launches its all-gathers in.

On GPUs (NCCL group) every split parameter lives in one PyTorch symmetric-memory allocation (the parameter's
``.data`` is re-pointed into it at construction, its values copied), followed by the receive slots; the
peers' slices are mapped into this process (``get_buffer``). A push is ``peer_view.copy_(local)``, a
same-dtype contiguous device copy: ATen issues ``cudaMemcpyAsync``, which the driver runs on a copy engine
over NVLink, not on SMs. Then one symmetric-memory barrier over all ranks (a one-block kernel) and the adds.
Everything runs on the caller's current stream (the sharded update's side stream), so a rank's N - 1 pushes
run one after the other.

Why no other synchronisation is needed: a rank pushes into a peer's slot only after the barrier of the
previous parameter, which the peer passes only after its side stream has waited for its compute stream at
that parameter's hook and finished the previous step's adds of that slot; every use of a parameter in
backward is launched before its gradient hook fires; a rank's next forward waits for its side stream,
whose last barrier follows every peer's last push.

Numerics: each part is summed by its owner alone, and every rank receives the owner's result, so all ranks hold
the same parameters. With two ranks the sum is the one a two-rank NCCL or gloo sum computes (an fp sum of
two values is commutative): bitwise equal. With more ranks the addends are the same but their order may
differ from a ring's, so sums agree to rounding (bf16 or fp32), not bitwise.

Where peer copies cannot run (:func:`fallback_reason`: ranks on more than one host, or no symmetric memory in
this PyTorch), the sharded update keeps NCCL's reduce-scatter and all-gather and says so in one line.

On gloo (CPU tests) the pushes are send/receive pairs (``dist.batch_isend_irecv``) into the same slots, the
same adds follow; tests/harness/test_sharded_update.py checks the numerics against plain ``overlap`` on 2
ranks (bitwise) and 3 and 4 ranks (the exact sums of integer-valued gradients, and training to rounding). The
GPU transport has no CPU test (symmetric memory needs CUDA); the same test file checks, from the committed
journals of the timing sets that ran it on GPUs, that every repeat ended on stock DDP's final losses, and the
timing script's smoke mode (``python -m ddp_profile.harness.peer_smoke``) compares it with NCCL on the GPUs.
"""  # noqa: E501

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch import nn

from ddp_profile.errors import ConfigError
from ddp_profile.harness.strategies.peer_copy import symmetric_rendezvous

BARRIER_TIMEOUT_MS = 120_000
"""A barrier whose peer never arrives (ranks that fired different hooks) traps the GPU with a message after
this long instead of spinning for ever (the symmetric-memory barrier's default, 0, never times out)."""


def fallback_reason(world_size: int, on_gpu: bool, environ: dict | None = None) -> str | None:
    """Why peer copies cannot carry the sharded update's exchanges in this job (None: they can). Ranks on more
    than one host (torchrun's ``LOCAL_WORLD_SIZE`` differs from the world size: no NVLink between hosts), or,
    on GPUs, a PyTorch without symmetric memory. Off the GPU (gloo tests) only the host count matters."""
    env = os.environ if environ is None else environ
    local = env.get("LOCAL_WORLD_SIZE", "")
    if local.strip().isdigit() and int(local) != world_size:
        return f"ranks span more than one host ({local} of {world_size} ranks on this one)"
    if on_gpu:
        try:
            from torch.distributed import _symmetric_memory as symm_mem

            symm_mem.empty  # noqa: B018  (present in every build that has symmetric memory)
        except (ImportError, AttributeError):
            return f"this PyTorch ({torch.__version__}) has no symmetric memory"
    return None


class _Slot:
    """One split parameter: its flat view, the parts' ranges (part j is rank j's) and the receive slots."""

    def __init__(self, param: nn.Parameter, rank: int, world_size: int) -> None:
        self.param = param
        self.count = param.numel() // world_size
        self.rank, self.world_size = rank, world_size
        self.mine = self.part(rank)

    def part(self, j: int) -> slice:
        return slice(j * self.count, (j + 1) * self.count)

    def flat(self) -> torch.Tensor:
        return self.param.detach().view(-1)


class PeerShards:
    """Receive slots and symmetric parameters for the split parameters (``{index: parameter}``, index as the
    sharded update numbers its parts) and the two exchanges (module docstring)."""

    def __init__(self, params: dict[int, nn.Parameter], group) -> None:
        self.group = group if group is not None else dist.group.WORLD
        assert self.group is not None, "peer copies for the sharded update need an initialised process group"
        self.world_size = dist.get_world_size(self.group)
        if self.world_size < 2:
            raise ConfigError(
                f"peer copies for the sharded update need at least 2 ranks, not {self.world_size}"
            )
        self.rank = dist.get_rank(self.group)
        n = self.world_size
        self.peers = [(self.rank + k) % n for k in range(1, n)]  # push order: the next rank first
        self.peer_global = {j: dist.get_global_rank(self.group, j) for j in self.peers}
        dtypes = {p.dtype for p in params.values()}
        if len(dtypes) > 1:
            raise ConfigError(f"peer copies need one parameter dtype, got {sorted(map(str, dtypes))}")
        self.slots = {index: _Slot(p, self.rank, n) for index, p in params.items()}
        first = next(iter(params.values()), None)
        self.on_gpu = first is not None and first.is_cuda
        total = sum(p.numel() for p in params.values())
        recv_total = sum(slot.count for slot in self.slots.values()) * (n - 1)
        dtype = first.dtype if first is not None else torch.float32
        device = first.device if first is not None else torch.device("cpu")
        self.handle = None
        # (index, peer rank) -> that peer's receive slot for this rank's push / that peer's copy of this rank's part
        self.peer_recv: dict[tuple[int, int], torch.Tensor] = {}
        self.peer_param: dict[tuple[int, int], torch.Tensor] = {}
        if self.on_gpu:
            from torch.distributed import _symmetric_memory as symm_mem

            buffer = symm_mem.empty(total + recv_total, dtype=dtype, device=device)
            self.handle = symmetric_rendezvous(buffer, self.group)
            recv_region = buffer[total:]
        else:
            buffer, recv_region = None, torch.empty(recv_total, dtype=dtype, device=device)
        # index -> this rank's N - 1 receive slots, one row per sender (row k: rank (rank + 1 + k) mod N)
        self.recv: dict[int, torch.Tensor] = {}
        offset = recv_offset = 0
        for index, slot in self.slots.items():
            numel, count = slot.param.numel(), slot.count
            if buffer is not None and self.handle is not None:
                home = buffer[offset : offset + numel]
                home.copy_(slot.flat())
                slot.param.data = home.view_as(
                    slot.param
                )  # the peers write this rank's copies of their parts here
                for j in self.peers:
                    self.peer_param[(index, j)] = self.handle.get_buffer(
                        j, (count,), dtype, offset + slot.mine.start
                    )
                    row = self.row(sender=self.rank, receiver=j)
                    self.peer_recv[(index, j)] = self.handle.get_buffer(
                        j, (count,), dtype, total + recv_offset + row * count
                    )
            self.recv[index] = recv_region[recv_offset : recv_offset + (n - 1) * count].view(n - 1, count)
            offset += numel
            recv_offset += (n - 1) * count
        # the order a part's sum takes its received addends in: senders in rank order
        self.add_order = [self.row(sender=s, receiver=self.rank) for s in range(n) if s != self.rank]

    def row(self, sender: int, receiver: int) -> int:
        """The receive slot (row) of ``receiver``'s slots that ``sender``'s pushes land in."""
        return (sender - receiver - 1) % self.world_size

    def reduce(self, index: int, grad: torch.Tensor, scale: float, gather: int | None) -> torch.Tensor:
        """Leave the sum over ranks of this rank's part of ``grad`` (the flat gradient of part ``index``), times
        ``scale``, in that part and return it; first push part ``gather``'s updated part to the peers (None:
        none)."""
        slot = self.slots[index]
        mine = grad[slot.mine]
        pushes = [(grad[slot.part(j)], index, "recv", j) for j in self.peers]
        if gather is not None:
            pushes += self._gather_pushes(gather)
        self._exchange(pushes)
        recv = self.recv[index]
        for row in self.add_order:
            mine.add_(recv[row])
        if scale != 1.0:
            mine.mul_(scale)
        return mine

    def flush(self, gather: int | None) -> None:
        """Push part ``gather``'s updated part to the peers and wait until every rank's pushes have landed."""
        if gather is not None:
            self._exchange(self._gather_pushes(gather))

    def _gather_pushes(self, index: int) -> list[tuple[torch.Tensor, int, str, int]]:
        slot = self.slots[index]
        return [(slot.flat()[slot.mine], index, "param", j) for j in self.peers]

    def _exchange(self, pushes: list[tuple[torch.Tensor, int, str, int]]) -> None:
        """Send every (local tensor, part, target, peer) to that peer's receive slot or parameter copy, and take
        the peers' matching pushes; on return (GPU: in stream order) every rank's pushes have landed."""
        if self.on_gpu:
            assert self.handle is not None
            for local, index, target, j in pushes:
                (self.peer_recv if target == "recv" else self.peer_param)[(index, j)].copy_(local)
            self.handle.barrier(channel=0, timeout_ms=BARRIER_TIMEOUT_MS)
            return
        # gloo: every push this rank sends to peer j, peer j sends one back to it (same part, same target), so
        # the receives mirror the sends; the tag numbers the (part, target) pair in the list
        ops = []
        tags: dict[tuple[int, str], int] = {}
        for local, index, target, j in pushes:
            tag = tags.setdefault((index, target), len(tags))
            slot = self.slots[index]
            into = (
                self.recv[index][self.row(sender=j, receiver=self.rank)]
                if target == "recv"
                else slot.flat()[slot.part(j)]
            )
            ops += [
                dist.P2POp(dist.isend, local.contiguous(), self.peer_global[j], self.group, tag),
                dist.P2POp(dist.irecv, into, self.peer_global[j], self.group, tag),
            ]
        for work in dist.batch_isend_irecv(ops):
            work.wait()

    def layout(self) -> dict:
        recv_bytes = sum(r.numel() * r.element_size() for r in self.recv.values())
        param_bytes = sum(s.param.numel() * s.param.element_size() for s in self.slots.values())
        adds = "one add" if self.world_size == 2 else f"{self.world_size - 1} adds"
        return {
            "transport": f"symmetric memory: copy-engine push to the peer + {adds}"
            if self.on_gpu
            else f"gloo send/recv + {adds} (CPU stand-in for the peer copy)",
            "ranks": self.world_size,
            "parts": len(self.slots),
            "recv_bytes": recv_bytes,
            # outside PyTorch's caching allocator: the run JSON's peak_memory_* do not count these bytes
            "symmetric_bytes": param_bytes + recv_bytes if self.on_gpu else 0,
        }


__all__ = ["BARRIER_TIMEOUT_MS", "PeerShards", "fallback_reason"]
