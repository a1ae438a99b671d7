"""Strategy registry: `create(name, module, bucket_mb=...)` wraps a model in the named strategy.

Every strategy implements the protocol in `base.Strategy`; the training loop knows nothing else about them.
`ShardedOptimizer` (optimizer-state sharding, composable with every gradient strategy) lives here too.
"""

from __future__ import annotations

from torch import nn

from ddp_profile.errors import ConfigError
from ddp_profile.harness.strategies.base import (
    Strategy,
    Wrapper,
    broadcast_state,
    comm_group,
    solo,
    use_group,
    world,
)
from ddp_profile.harness.strategies.bucketed import Bucketed, pack_buckets
from ddp_profile.harness.strategies.flat import Flat
from ddp_profile.harness.strategies.fsdp import FSDP
from ddp_profile.harness.strategies.naive import Naive
from ddp_profile.harness.strategies.none import NoSync
from ddp_profile.harness.strategies.overlap import Overlap
from ddp_profile.harness.strategies.sharded_optimizer import ShardedOptimizer
from ddp_profile.harness.strategies.torch_ddp import TorchDDP

REGISTRY = {
    "none": lambda m, mb, **kw: NoSync(m),
    "naive": lambda m, mb, **kw: Naive(m),
    "flat": lambda m, mb, **kw: Flat(m),
    "overlap": lambda m, mb, reduce_avg=False, optimizer_factory=None, peer_copy_allreduce=False, sharded_update_normal_priority=False, **kw: (  # noqa: E501
        Overlap(
            m,
            reduce_avg=reduce_avg,
            optimizer_factory=optimizer_factory,
            peer_copy=peer_copy_allreduce,
            update_high_priority=not sharded_update_normal_priority,
        )
    ),
    "bucketed": lambda m, mb, first_bucket_mb=0.0, grad_views=False, grad_reduce_dtype="", optimizer_factory=None, peer_copy_allreduce=False, **kw: (  # noqa: E501
        Bucketed(
            m,
            bucket_size_mb=mb,
            first_bucket_mb=first_bucket_mb,
            grad_views=grad_views,
            reduce_dtype=grad_reduce_dtype,
            optimizer_factory=optimizer_factory,
            peer_copy=peer_copy_allreduce,
        )
    ),
    "torch_ddp": lambda m, mb, ddp_nvtx_hook=False, grad_views=False, ddp_comm_hook="", **kw: TorchDDP(
        m,
        bucket_cap_mb=mb,
        nvtx_hook=ddp_nvtx_hook,
        gradient_as_bucket_view=grad_views,
        comm_hook=ddp_comm_hook,
    ),
    "fsdp": lambda m, mb, fsdp_reshard=True, fsdp_param_dtype="fp32", **kw: FSDP(
        m, reshard_after_forward=fsdp_reshard, param_dtype=fsdp_param_dtype
    ),
}


def create(
    name: str, module: nn.Module, bucket_mb: float = 25.0, ddp_nvtx_hook: bool = False, **options
) -> Wrapper:
    """Wrap `module` in strategy `name` (broadcasting rank 0's state); bucket_mb is used by the bucketed ones,
    ddp_nvtx_hook by torch_ddp (see ``strategies/torch_ddp.py``), fsdp_reshard / fsdp_param_dtype by fsdp
    (``strategies/fsdp.py``); optimizer_factory and the levers (by their RunConfig names; ``levers.strategy_kwargs``
    gives those of a configuration) by the strategies that have them. Options a strategy lacks are ignored (RunConfig's validation rejects
    them there)."""  # noqa: E501
    try:
        factory = REGISTRY[name]
    except KeyError:
        raise ConfigError(f"strategy {name!r} is unknown; choose one of {', '.join(REGISTRY)}") from None
    return factory(module, bucket_mb, ddp_nvtx_hook=ddp_nvtx_hook, **options)


__all__ = [
    "FSDP",
    "REGISTRY",
    "ShardedOptimizer",
    "Strategy",
    "Wrapper",
    "broadcast_state",
    "comm_group",
    "create",
    "pack_buckets",
    "solo",
    "use_group",
    "world",
]
