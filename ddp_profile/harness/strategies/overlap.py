"""`overlap`: one asynchronous all-reduce per parameter, launched from a post-accumulate-grad hook as soon
as that gradient is final, so communication runs while backward computes earlier layers' gradients.

The hook fires after all contributions to a parameter's .grad are summed, so a tied parameter (used twice
in forward) is reduced once, after both uses.
"""

from __future__ import annotations

import torch.distributed as dist

from ddp_profile.harness import nvtx_ranges
from ddp_profile.harness.strategies.base import Wrapper, comm_group, grad_params, nbytes, wait_phase


class Overlap(Wrapper):
    name = "overlap"

    def __init__(self, module) -> None:
        super().__init__(module)
        self._handles: list = []
        if self.world_size > 1:
            for index, p in enumerate(grad_params(module)):
                self.add_grad_hook(p, self._make_hook(index))

    def _make_hook(self, index: int):
        def hook(p) -> None:
            # Pre-divide so the sum is already the mean (gloo has no AVG op).
            p.grad.div_(self.world_size)
            with nvtx_ranges.collective(index, nbytes(p.grad)):
                self._handles.append(dist.all_reduce(p.grad, group=comm_group(), async_op=True))

        return hook

    def on_train_batch_start(self) -> None:
        self._handles.clear()

    def finish_gradient_synchronization(self) -> None:
        with wait_phase():
            for handle in self._handles:
                handle.wait()
        self._handles.clear()
