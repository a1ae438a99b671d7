"""Compatibility face: the strategies moved to ``ddp_profile.harness.strategies``.

``from ddp_profile.strategies import ShardedOptimizer`` (the CS336 interface) keeps working.
"""

from ddp_profile.harness.strategies import *  # noqa: F403
from ddp_profile.harness.strategies import __all__  # noqa: F401
