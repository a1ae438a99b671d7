"""`overlap`: one asynchronous all-reduce per parameter, launched from a post-accumulate-grad hook as soon
as that gradient is final, so communication runs while backward computes earlier layers' gradients.

The hook fires after all contributions to a parameter's .grad are summed, so a tied parameter (used twice
in forward) is reduced once, after both uses.

Each gradient is reduced in place in ``.grad``: no bucket, so no copy in or out. By default it is divided by
the world size first (gloo has no AVG op), one read and write of every gradient. ``reduce_avg=True``
(``RunConfig.reduce_avg``, ``--reduce-avg``, ``-avg``) leaves the scaling to NCCL's average
(``ReduceOp.AVG``), which scales each input by 1/world size as it reads it; the numbers are stock DDP's
(scale, then sum). Groups without AVG divide first; ``layout()["reduce_op"]`` names the one that ran.

With ``sharded_update`` (``--sharded-update``) each gradient is reduce-scattered instead, and each rank updates
its part of the parameter from the same hook and all-gathers it (``strategies/sharded_update.py``); the
strategy then owns the optimizer (``self.optimizer``), made by ``optimizer_factory`` once per part.
"""

from __future__ import annotations

import torch.distributed as dist

from ddp_profile.harness import nvtx_ranges
from ddp_profile.harness.strategies.base import Wrapper, comm_group, grad_params, nbytes, wait_phase
from ddp_profile.harness.strategies.sharded_update import ShardedUpdate


def averages_in_nccl(reduce_avg: bool, group) -> bool:
    """Whether gradients are averaged by the all-reduce itself: asked for, and the group is NCCL's."""
    return reduce_avg and "nccl" in str(dist.get_backend(group))


class Overlap(Wrapper):
    name = "overlap"

    def __init__(
        self,
        module,
        reduce_avg: bool = False,
        optimizer_factory=None,
        peer_copy: bool = False,
        update_high_priority: bool = True,
    ) -> None:
        super().__init__(module)
        self._handles: list = []
        self.reduce_avg = reduce_avg
        self.nccl_avg = False
        params = grad_params(module)
        self.optimizer: ShardedUpdate | None = None
        if optimizer_factory is not None:
            self.optimizer = ShardedUpdate(
                params,
                optimizer_factory,
                self.rank,
                self.world_size,
                peer_copy=peer_copy,
                high_priority=update_high_priority,
            )
        if self.world_size > 1:
            self.nccl_avg = averages_in_nccl(reduce_avg, comm_group())
            for index, p in enumerate(params):
                self.add_grad_hook(p, self._make_hook(index))

    def _make_hook(self, index: int):
        op = dist.ReduceOp.AVG if self.nccl_avg else dist.ReduceOp.SUM

        def hook(p) -> None:
            if not self.nccl_avg:  # pre-divide so the sum is already the mean
                p.grad.div_(self.world_size)
            if self.optimizer is not None:
                self.optimizer.launch(index, op)
                return
            with nvtx_ranges.collective(index, nbytes(p.grad)):
                self._handles.append(dist.all_reduce(p.grad, op=op, group=comm_group(), async_op=True))

        return hook

    def on_train_batch_start(self) -> None:
        self._handles.clear()

    def finish_gradient_synchronization(self) -> None:
        with wait_phase():
            for handle in self._handles:
                handle.wait()
            if self.optimizer is not None and self.world_size > 1:
                self.optimizer.finish()
        self._handles.clear()

    def layout(self) -> dict:
        out = super().layout()
        out["reduce_avg"] = bool(self.reduce_avg)
        out["sharded_update"] = self.optimizer.layout() if self.optimizer is not None else None
        out["reduce_op"] = ("avg" if self.nccl_avg else "divide, then sum") if self.world_size > 1 else None
        return out
