"""`ShardedOptimizer`: optimizer-state sharding (ZeRO stage 1), the CS336 assignment 2 §2.4 interface.

    optimizer = ShardedOptimizer(model.parameters(), torch.optim.AdamW, lr=1e-3)

Every parameter is owned by exactly one rank, chosen when the parameter is added (constructor or
`add_param_group`): within each added group, largest tensor first, each goes to the rank with the fewest
bytes so far (ties: lowest rank). Every rank holds all parameters and all (averaged) gradients, as with any
gradient strategy; only the owner keeps the wrapped optimizer's state for a parameter and updates it.
`step()` runs the wrapped optimizer over the owned parameters, then every owner sends its updated
parameters to the others: one broadcast per (owner, dtype) bucket, the owner's parameters flattened into
one buffer, so the number of collectives per step is about the world size, not the tensor count. Each
broadcast is wrapped in a `param_sync b<bucket> r<owner> <bytes>B` NVTX range (payload = bytes), inside the
loop's `optimizer` range. Buckets are sent one after another, so the extra memory is one owner's buffer.

Hyper-parameters live in this object's `param_groups` (what LR schedulers change) and are copied into the
wrapped optimizer's groups before each step. `zero_grad` is the base class's, over every parameter.
Tied parameters are one tensor: `Module.parameters()` yields them once, and duplicates inside a group are
dropped, so such a parameter has one owner and is updated and sent once.

Without a process group (or with one rank) it is the wrapped optimizer with extra bookkeeping.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from ddp_profile.harness import nvtx_ranges
from ddp_profile.harness.strategies.base import nbytes, world


def assign_owners(sizes: list[int], rank_bytes: list[int]) -> list[int]:
    """Owner rank for each tensor of `sizes` (bytes): largest first (ties keep their order), each to the
    rank with the fewest bytes so far (ties: lowest rank). Updates `rank_bytes` in place."""
    owners = [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda j: -sizes[j]):
        target = min(range(len(rank_bytes)), key=lambda r: (rank_bytes[r], r))
        owners[i] = target
        rank_bytes[target] += sizes[i]
    return owners


class ShardedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, optimizer_cls: type[torch.optim.Optimizer], **kwargs: Any) -> None:
        self.rank, self.world_size = world()
        self.optimizer_cls = optimizer_cls
        self.owner: dict[torch.Tensor, int] = {}  # parameter -> owning rank (keyed by identity)
        self.rank_bytes = [0] * self.world_size
        self._local_groups: list[dict] = []  # one per public group: its owned parameters + hyper-parameters
        self.local: torch.optim.Optimizer | None = None
        super().__init__(params, kwargs)  # calls add_param_group for each group
        self.local = optimizer_cls(self._local_groups, **kwargs)
        self._local_groups = self.local.param_groups
        self.state = self.local.state  # the owned shard's state: what optimizer_state_bytes measures

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        group = dict(param_group)
        params = group["params"]
        params = [params] if isinstance(params, torch.Tensor) else list(params)
        unique: list[torch.Tensor] = []
        seen: set[int] = set()
        for p in params:  # a tied parameter listed twice is one tensor: keep it once
            if id(p) not in seen:
                seen.add(id(p))
                unique.append(p)
        group["params"] = unique
        super().add_param_group(group)  # validates, fills defaults, rejects parameters already in a group
        public = self.param_groups[-1]
        for p, owner in zip(unique, assign_owners([nbytes(p) for p in unique], self.rank_bytes), strict=True):
            self.owner[p] = owner
        local = {k: v for k, v in public.items() if k != "params"}
        local["params"] = [p for p in unique if self.owner[p] == self.rank]
        if self.local is None:
            self._local_groups.append(local)
        else:
            self.local.add_param_group(local)

    def _sync_hyperparameters(self) -> None:
        assert self.local is not None  # set at the end of __init__; step() comes after
        for public, local in zip(self.param_groups, self.local.param_groups, strict=True):
            for key, value in public.items():
                if key != "params":
                    local[key] = value

    @torch.no_grad()
    def step(self, closure=None, **kwargs):
        self._sync_hyperparameters()
        assert self.local is not None  # set at the end of __init__
        loss = self.local.step(closure, **kwargs) if closure is not None else self.local.step(**kwargs)
        self.broadcast_parameters()
        return loss

    def owner_buckets(self) -> list[tuple[int, list[torch.Tensor]]]:
        """(owner rank, parameters) per broadcast, in a fixed order every rank agrees on: by owner, then by
        dtype and device in first-seen order, parameters in group order."""
        buckets: dict[tuple, list[torch.Tensor]] = {}
        for group in self.param_groups:
            for p in group["params"]:
                buckets.setdefault((self.owner[p], p.dtype, p.device), []).append(p)
        return [(key[0], buckets[key]) for key in sorted(buckets, key=lambda k: k[0])]

    @torch.no_grad()
    def broadcast_parameters(self) -> None:
        """Send each owner's parameters from the owner to every rank, one flat buffer per bucket."""
        if self.world_size == 1:
            return
        for index, (owner, params) in enumerate(self.owner_buckets()):
            if owner == self.rank:
                flat = torch.cat([p.detach().reshape(-1) for p in params])
            else:
                flat = torch.empty(
                    sum(p.numel() for p in params), dtype=params[0].dtype, device=params[0].device
                )
            with nvtx_ranges.param_sync(index, owner, nbytes(flat)):
                dist.broadcast(flat, src=owner)
            if owner != self.rank:
                offset = 0
                for p in params:
                    p.copy_(flat[offset : offset + p.numel()].view_as(p))
                    offset += p.numel()

    def layout(self) -> dict:
        """Owner buckets for the run JSON: owner rank and bytes per broadcast, bytes owned per rank."""
        buckets = self.owner_buckets()
        return {
            "param_sync_owners": [owner for owner, _ in buckets],
            "param_sync_bytes": [sum(nbytes(p) for p in params) for _, params in buckets],
            "owned_param_bytes_per_rank": list(self.rank_bytes),
        }


__all__ = ["ShardedOptimizer", "assign_owners"]
