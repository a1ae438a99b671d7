"""`bucketed`: gradients packed into fixed buckets; each bucket's all-reduce is launched asynchronously
as soon as the last of its gradients is ready (CS336's final version, PyTorch DDP's idea).

Packing follows PyTorch's rule: parameters in reverse registration order (roughly the order backward
produces their gradients), a bucket closes once its size reaches the cap, tensors are never split, and
tensors of different dtypes never share a bucket. A tensor larger than the cap gets a bucket of its own.

Each bucket owns one flat buffer allocated at wrap time; a gradient is copied into its slot the moment it
is ready, the full buffer is divided by the world size and all-reduced, and the averaged slots are
copied back into `.grad` in finish_gradient_synchronization().

Levers (RunConfig fields; all off by default, so the default is the reference implementation above):

- ``first_bucket_mb``: the first bucket of each dtype closes at this smaller cap (PyTorch's
  ``bucket_size_limits=[first, cap]`` rule), so the first all-reduce starts after fewer layers.
- ``grad_views``: after its copy into the bucket, ``p.grad`` is re-pointed at its bucket slot (DDP's
  ``gradient_as_bucket_view``), so the averaged values are already in ``.grad``: no copy-back. A gradient
  that autograd accumulated into the slot in place (zero_grad without set_to_none) is not copied at all.
- ``reduce_dtype`` (``grad_reduce_dtype``): the pre-divided fp32 bucket is cast into a preallocated bf16
  buffer, that is summed, and cast back: half the bytes on the wire, one bf16 rounding of each rank's
  mean share plus bf16 partial sums; parameters, gradients and optimizer state stay fp32.
- ``optimizer_factory`` (``overlap_optimizer``): one optimizer per bucket over that bucket's parameters,
  stepped in finish_gradient_synchronization() as each bucket's reduction completes (waits in launch
  order), so with NCCL the step of early buckets runs on the compute stream while later buckets are
  still being reduced. Per-parameter optimizers (SGD, AdamW) give the same result as one optimizer over
  all parameters; ``self.optimizer`` stands in for it in the loop (its step() is then a no-op).
- ``peer_copy`` (``peer_copy_allreduce``, 2 ranks only): instead of ``dist.all_reduce``, each bucket's wire
  tensor is pushed into a receive buffer on the other rank and added to the local one
  (``strategies/peer_copy.py``: a copy-engine transfer through symmetric memory on GPUs, send/recv on gloo).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ddp_profile.harness import nvtx_ranges
from ddp_profile.harness.strategies.base import (
    Wrapper,
    comm_group,
    grad_params,
    layout_from_groups,
    merged_state,
    wait_phase,
)
from ddp_profile.harness.strategies.peer_copy import PeerCopyExchange, PeerCopyWork


def pack_buckets(
    sizes_bytes: list[int], cap_bytes: int, keys: list | None = None, first_cap_bytes: int | None = None
) -> list[list[int]]:
    """Indices (into `sizes_bytes`) grouped into buckets, PyTorch style.

    Walks indices from last to first; each index joins the open bucket of its key (e.g. dtype); a bucket
    closes as soon as its total reaches the cap: `first_cap_bytes` for the first bucket of each key when
    given, `cap_bytes` after that (PyTorch's `bucket_size_limits=[first, cap]`). Buckets are returned in
    closing order, then the still-open ones. Example, sizes [4, 4, 4, 10] with cap 8 -> [[3], [2, 1], [0]].
    """
    if cap_bytes <= 0 or (first_cap_bytes is not None and first_cap_bytes <= 0):
        raise ValueError(f"bucket caps must be positive, got {cap_bytes} and {first_cap_bytes}")
    keys = keys if keys is not None else [None] * len(sizes_bytes)
    closed: list[list[int]] = []
    open_buckets: dict = {}
    open_sizes: dict = {}
    closed_per_key: dict = {}
    for index in reversed(range(len(sizes_bytes))):
        key = keys[index]
        open_buckets.setdefault(key, []).append(index)
        open_sizes[key] = open_sizes.get(key, 0) + sizes_bytes[index]
        cap = first_cap_bytes if first_cap_bytes is not None and not closed_per_key.get(key) else cap_bytes
        if open_sizes[key] >= cap:
            closed.append(open_buckets.pop(key))
            open_sizes.pop(key)
            closed_per_key[key] = closed_per_key.get(key, 0) + 1
    return closed + [b for b in open_buckets.values() if b]


REDUCE_DTYPES = {"": None, "bf16": torch.bfloat16}


class BucketOptimizers:
    """The loop's optimizer when each bucket has its own: zero_grad() clears every bucket's parameters;
    step() does nothing, because finish_gradient_synchronization() already stepped each bucket."""

    def __init__(self, optimizers: list) -> None:
        self.optimizers = optimizers

    def zero_grad(self, set_to_none: bool = True) -> None:
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        pass

    @property
    def state(self) -> dict:
        """Every bucket optimizer's state, keyed by parameter (what the run JSON's state bytes count)."""
        return merged_state(self.optimizers)


class _Bucket:
    def __init__(self, index: int, params: list, reduce_dtype: torch.dtype | None = None) -> None:
        self.index = index
        self.params = params
        self.buffer = torch.zeros(
            sum(p.numel() for p in params), dtype=params[0].dtype, device=params[0].device
        )
        self.views = []
        offset = 0
        for p in params:
            self.views.append(self.buffer[offset : offset + p.numel()].view_as(p))
            offset += p.numel()
        self.nbytes = self.buffer.numel() * self.buffer.element_size()
        self.comm = None  # the low-precision copy that is all-reduced, when reduce_dtype differs
        if reduce_dtype is not None and reduce_dtype != self.buffer.dtype:
            self.comm = torch.empty(self.buffer.numel(), dtype=reduce_dtype, device=self.buffer.device)
        self.wire_nbytes = self.wire.numel() * self.wire.element_size()
        self.optimizer: torch.optim.Optimizer | None = None
        self.ready: set[int] = set()
        self.handle: dist.Work | PeerCopyWork | None = None

    @property
    def wire(self) -> torch.Tensor:
        """The tensor that is summed over ranks: the low-precision copy, else the buffer itself."""
        return self.comm if self.comm is not None else self.buffer


class Bucketed(Wrapper):
    name = "bucketed"

    def __init__(
        self,
        module,
        bucket_size_mb: float = 25.0,
        first_bucket_mb: float = 0.0,
        grad_views: bool = False,
        reduce_dtype: str = "",
        optimizer_factory=None,
        peer_copy: bool = False,
    ) -> None:
        super().__init__(module)
        self.bucket_size_mb = bucket_size_mb
        self.first_bucket_mb = first_bucket_mb
        self.grad_views = grad_views
        self.reduce_dtype = reduce_dtype
        params = grad_params(module)
        groups = pack_buckets(
            [p.numel() * p.element_size() for p in params],
            int(bucket_size_mb * 1024 * 1024),
            keys=[(p.dtype, p.device) for p in params],
            first_cap_bytes=int(first_bucket_mb * 1024 * 1024) if first_bucket_mb else None,
        )
        self.buckets = [
            _Bucket(i, [params[j] for j in group], REDUCE_DTYPES[reduce_dtype])
            for i, group in enumerate(groups)
        ]
        self._launched: list[_Bucket] = []
        self.optimizer: BucketOptimizers | None = None
        if optimizer_factory is not None:
            for bucket in self.buckets:
                bucket.optimizer = optimizer_factory(bucket.params)
            self.optimizer = BucketOptimizers([b.optimizer for b in self.buckets])
        self.exchange: PeerCopyExchange | None = None
        if peer_copy and self.world_size > 1:
            self.exchange = PeerCopyExchange([b.wire for b in self.buckets], comm_group())
        if self.world_size > 1:
            for bucket in self.buckets:
                for slot, p in enumerate(bucket.params):
                    self.add_grad_hook(p, self._make_hook(bucket, slot))

    def _make_hook(self, bucket: _Bucket, slot: int):
        view = bucket.views[slot]

        def hook(p) -> None:
            if not (self.grad_views and p.grad.data_ptr() == view.data_ptr()):
                view.copy_(p.grad)
                if self.grad_views:
                    p.grad = view  # from now on .grad is the bucket slot: no copy-back
            bucket.ready.add(slot)
            if len(bucket.ready) == len(bucket.params):
                self._launch(bucket)

        return hook

    def _launch(self, bucket: _Bucket) -> None:
        bucket.buffer.div_(self.world_size)  # pre-divide: gloo has no AVG op, and bf16 sums stay in range
        if bucket.comm is not None:
            bucket.comm.copy_(bucket.buffer)
        with nvtx_ranges.collective(bucket.index, bucket.wire_nbytes):
            if self.exchange is not None:
                bucket.handle = self.exchange.launch(bucket.index, bucket.wire)
            else:
                bucket.handle = dist.all_reduce(bucket.wire, group=comm_group(), async_op=True)
        self._launched.append(bucket)

    def on_train_batch_start(self) -> None:
        if self.exchange is not None:
            self.exchange.start_step()
        self._launched.clear()
        for bucket in self.buckets:
            bucket.ready.clear()
            bucket.handle = None

    def _step_buckets(self, buckets) -> None:
        for bucket in buckets:
            if bucket.optimizer is not None:
                bucket.optimizer.step()

    def finish_gradient_synchronization(self) -> None:
        if self.world_size == 1:
            self._step_buckets(self.buckets)
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
            for bucket in list(self._launched):  # launch order: the first finished is waited on first
                assert bucket.handle is not None  # _launch() set it (async_op=True returns a Work)
                bucket.handle.wait()
                if bucket.comm is not None:
                    bucket.buffer.copy_(bucket.comm)
                pairs = [
                    (p.grad, v)
                    for p, v in zip(bucket.params, bucket.views, strict=True)
                    if p.grad is not None and p.grad.data_ptr() != v.data_ptr()
                ]
                if pairs:
                    torch._foreach_copy_([g for g, _ in pairs], [v for _, v in pairs])
                self._step_buckets([bucket])
                bucket.handle = None
                bucket.ready.clear()
            self._launched.clear()

    def layout(self) -> dict:
        out = layout_from_groups(self.module, [b.params for b in self.buckets])
        out.update(
            first_bucket_mb=self.first_bucket_mb,
            grad_views=self.grad_views,
            reduce_dtype=self.reduce_dtype or None,
            overlap_optimizer=self.optimizer is not None,
            reduce_bytes=[b.wire_nbytes for b in self.buckets],
            peer_copy_allreduce=self.exchange is not None,
        )
        if self.exchange is not None:
            out["peer_copy"] = self.exchange.layout()
        return out
