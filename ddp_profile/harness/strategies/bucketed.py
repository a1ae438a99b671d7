"""`bucketed`: gradients packed into fixed buckets; each bucket's all-reduce is launched asynchronously
as soon as the last of its gradients is ready (CS336's final version, PyTorch DDP's idea).

Packing follows PyTorch's rule: parameters in reverse registration order (roughly the order backward
produces their gradients), a bucket closes once its size reaches the cap, tensors are never split, and
tensors of different dtypes never share a bucket. A tensor larger than the cap gets a bucket of its own.

Each bucket owns one flat buffer allocated at wrap time; a gradient is copied into its slot the moment it
is ready, the full buffer is divided by the world size and all-reduced, and the averaged slots are
copied back into `.grad` in finish_gradient_synchronization().
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ddp_profile.harness import nvtx_ranges
from ddp_profile.harness.strategies.base import Wrapper, grad_params, layout_from_groups, wait_phase


def pack_buckets(sizes_bytes: list[int], cap_bytes: int, keys: list | None = None) -> list[list[int]]:
    """Indices (into `sizes_bytes`) grouped into buckets, PyTorch style.

    Walks indices from last to first; each index joins the open bucket of its key (e.g. dtype); a bucket
    closes as soon as its total reaches `cap_bytes`. Buckets are returned in closing order, then the
    still-open ones. Example, sizes [4, 4, 4, 10] with cap 8 -> [[3], [2, 1], [0]].
    """
    if cap_bytes <= 0:
        raise ValueError(f"bucket cap must be positive, got {cap_bytes}")
    keys = keys if keys is not None else [None] * len(sizes_bytes)
    closed: list[list[int]] = []
    open_buckets: dict = {}
    open_sizes: dict = {}
    for index in reversed(range(len(sizes_bytes))):
        key = keys[index]
        open_buckets.setdefault(key, []).append(index)
        open_sizes[key] = open_sizes.get(key, 0) + sizes_bytes[index]
        if open_sizes[key] >= cap_bytes:
            closed.append(open_buckets.pop(key))
            open_sizes.pop(key)
    return closed + [b for b in open_buckets.values() if b]


class _Bucket:
    def __init__(self, index: int, params: list) -> None:
        self.index = index
        self.params = params
        self.buffer = torch.zeros(sum(p.numel() for p in params), dtype=params[0].dtype, device=params[0].device)
        self.views = []
        offset = 0
        for p in params:
            self.views.append(self.buffer[offset : offset + p.numel()].view_as(p))
            offset += p.numel()
        self.nbytes = self.buffer.numel() * self.buffer.element_size()
        self.ready: set[int] = set()
        self.handle = None


class Bucketed(Wrapper):
    name = "bucketed"

    def __init__(self, module, bucket_size_mb: float = 25.0) -> None:
        super().__init__(module)
        self.bucket_size_mb = bucket_size_mb
        params = grad_params(module)
        groups = pack_buckets(
            [p.numel() * p.element_size() for p in params],
            int(bucket_size_mb * 1024 * 1024),
            keys=[(p.dtype, p.device) for p in params],
        )
        self.buckets = [_Bucket(i, [params[j] for j in group]) for i, group in enumerate(groups)]
        if self.world_size > 1:
            for bucket in self.buckets:
                for slot, p in enumerate(bucket.params):
                    p.register_post_accumulate_grad_hook(self._make_hook(bucket, slot))

    def _make_hook(self, bucket: _Bucket, slot: int):
        def hook(p) -> None:
            bucket.views[slot].copy_(p.grad)
            bucket.ready.add(slot)
            if len(bucket.ready) == len(bucket.params):
                self._launch(bucket)

        return hook

    def _launch(self, bucket: _Bucket) -> None:
        bucket.buffer.div_(self.world_size)  # pre-divide: gloo has no AVG op
        with nvtx_ranges.collective(bucket.index, bucket.nbytes):
            bucket.handle = dist.all_reduce(bucket.buffer, async_op=True)

    def on_train_batch_start(self) -> None:
        for bucket in self.buckets:
            bucket.ready.clear()
            bucket.handle = None

    def finish_gradient_synchronization(self) -> None:
        if self.world_size == 1:
            return
        with wait_phase():
            for bucket in self.buckets:
                if bucket.handle is None:
                    # Some member got no gradient this step (unused parameter): zero its slot so every
                    # rank still launches the same collective, then reduce what is there.
                    for slot, view in enumerate(bucket.views):
                        if slot not in bucket.ready:
                            view.zero_()
                    self._launch(bucket)
                bucket.handle.wait()
                grads = [p.grad for p in bucket.params if p.grad is not None]
                views = [v for p, v in zip(bucket.params, bucket.views, strict=True) if p.grad is not None]
                if grads:
                    torch._foreach_copy_(grads, views)
                bucket.handle = None
                bucket.ready.clear()

    def layout(self) -> dict:
        return layout_from_groups(self.module, [b.params for b in self.buckets])
