"""`naive`: after backward, one blocking all-reduce per parameter gradient (CS336's first version).

No overlap with compute, and one collective per tensor: the latency-bound worst case that the other
strategies are measured against.
"""

from __future__ import annotations

import torch.distributed as dist

from ddp_profile.harness import nvtx_ranges
from ddp_profile.harness.strategies.base import Wrapper, comm_group, grad_params, nbytes, wait_phase


class Naive(Wrapper):
    name = "naive"

    def finish_gradient_synchronization(self) -> None:
        if self.world_size == 1:
            return
        with wait_phase():
            for index, p in enumerate(grad_params(self.module)):
                if p.grad is None:
                    continue
                with nvtx_ranges.collective(index, nbytes(p.grad)):
                    dist.all_reduce(p.grad, group=comm_group())
                p.grad.div_(self.world_size)
