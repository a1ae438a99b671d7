"""Strategy registry: `create(name, module, bucket_mb=...)` wraps a model in the named strategy.

Every strategy implements the protocol in `base.Strategy`; the training loop knows nothing else about them.
"""

from __future__ import annotations

from torch import nn

from ddp_profile.errors import ConfigError
from ddp_profile.strategies.base import Strategy, Wrapper, broadcast_state, world
from ddp_profile.strategies.bucketed import Bucketed, pack_buckets
from ddp_profile.strategies.flat import Flat
from ddp_profile.strategies.naive import Naive
from ddp_profile.strategies.none import NoSync
from ddp_profile.strategies.overlap import Overlap
from ddp_profile.strategies.torch_ddp import TorchDDP

REGISTRY = {
    "none": lambda m, mb: NoSync(m),
    "naive": lambda m, mb: Naive(m),
    "flat": lambda m, mb: Flat(m),
    "overlap": lambda m, mb: Overlap(m),
    "bucketed": lambda m, mb: Bucketed(m, bucket_size_mb=mb),
    "torch_ddp": lambda m, mb: TorchDDP(m, bucket_cap_mb=mb),
}


def create(name: str, module: nn.Module, bucket_mb: float = 25.0) -> Wrapper:
    """Wrap `module` in strategy `name` (broadcasting rank 0's state); bucket_mb is used by the bucketed ones."""
    try:
        factory = REGISTRY[name]
    except KeyError:
        raise ConfigError(f"strategy {name!r} is unknown; choose one of {', '.join(REGISTRY)}") from None
    return factory(module, bucket_mb)


__all__ = ["REGISTRY", "Strategy", "Wrapper", "broadcast_state", "create", "pack_buckets", "world"]
