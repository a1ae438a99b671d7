"""`torch_ddp`: PyTorch's DistributedDataParallel with `bucket_cap_mb`, as the reference implementation.

Stock by default. Stock DDP launches its all-reduces from C++, so a trace of it has NCCL kernels but no
NVTX bytes; the analysis takes their sizes from DDP's own logged bucket sizes in the run JSON instead
(`layout()["ddp_bucket_bytes"]`: DDP fires buckets strictly in index order, so the k-th all-reduce of a
step is bucket k).

``nvtx_hook=True`` (``RunConfig.ddp_nvtx_hook``, ``--ddp-nvtx-hook``) registers a DDP communication hook
(`_nvtx_allreduce_hook`) that does what the stock path does (scale the flat bucket by 1/world size, sum it
over the group asynchronously, hand the bucket back through a Future) and wraps the launch in the same
`allreduce b<bucket> <bytes>B` range as the project's own strategies. Gradients are bitwise the stock ones
(tests/harness/test_strategies.py checks this at world size 3, where 1/3 is inexact), but the GPU work is not:
with any hook registered the reducer copies gradients into the bucket unscaled (a plain copy per
gradient) and the hook scales the bucket in place (one more read+write of it), where stock DDP fuses the
scaling into its copy. Traces of XL fp32 on 2 x H200 showed more memcpy and longer NCCL kernels with the
hook; ``scripts/ddp_hook_ab.sh`` measures the difference on one machine. So the reference stays stock.

Buffers are broadcast once at wrap time like every other strategy (broadcast_buffers=False, plus one
explicit buffer broadcast, because DDP's constructor then syncs parameters only), not before each forward.
`layout()` reports the project's packing of the same cap, plus the sizes DDP logs (`ddp_bucket_bytes`: the
rebuilt buckets once a step has run, in bucket-index order, i.e. the sizes the NVTX ranges carry).

``gradient_as_bucket_view=True`` (``RunConfig.grad_views``, ``--grad-views``) is DDP's own option: after the
first copy into the bucket, ``.grad`` points at the bucket slot, so DDP skips its copy-back after the
all-reduce (with the loop's ``zero_grad(set_to_none=True)`` it still copies each fresh gradient in, scaled).

``comm_hook="bf16"`` (``RunConfig.ddp_comm_hook``, ``--ddp-comm-hook bf16``) registers PyTorch's own
``default_hooks.bf16_compress_hook``: per bucket, cast to bf16, divide by the world size, all-reduce the bf16
copy (half the bytes), copy the result back into the fp32 bucket. Parameters, gradients and the optimizer
stay fp32. DDP refuses that hook by its function name unless the build has CUDA and NCCL 2.10+
(``DistributedDataParallel._check_comm_hook``), a check of the build, not of the group. On an NCCL group the
hook itself is registered; on any other group (gloo: CPU tests) `_bf16_compress_hook_on_gloo`, which only
calls that same function, so the CPU tests run PyTorch's code path (gloo all-reduces bf16). ``layout()``
names the function registered (``comm_hook_fn``) and the bytes each all-reduce moves (``reduce_bytes``).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from ddp_profile.harness import nvtx_ranges
from ddp_profile.harness.strategies.base import (
    Wrapper,
    comm_group,
    grad_params,
    layout_from_groups,
    nbytes,
    world,
)
from ddp_profile.harness.strategies.bucketed import pack_buckets


def _nvtx_allreduce_hook(group, bucket):
    """DDP comm hook: mean of the bucket (a dist.GradBucket) over `group` (None = the default group), as a
    Future of the bucket's tensor; the launch is NVTX-annotated.

    Unannotated on purpose: DDP checks that the argument is named `bucket` and that any annotation is the
    class itself, and `from __future__ import annotations` would turn annotations into strings.

    Scaling by the reciprocal before the sum is what stock DDP does (it multiplies each gradient by
    1/world size as it copies it into the bucket), so results match it bit for bit, and pre-scaling keeps
    low-precision sums from overflowing. The range covers the launch only, like the other strategies'.
    """
    group = group if group is not None else dist.group.WORLD
    buffer = bucket.buffer()
    buffer.mul_(1.0 / dist.get_world_size(group))
    with nvtx_ranges.collective(bucket.index(), nbytes(buffer)):
        work = dist.all_reduce(buffer, group=group, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


def _bf16_compress_hook_on_gloo(process_group, bucket):
    """PyTorch's bf16_compress_hook under another name, for groups other than NCCL (module docstring)."""
    return default_hooks.bf16_compress_hook(process_group, bucket)


COMM_HOOKS = {"bf16": (default_hooks.bf16_compress_hook, _bf16_compress_hook_on_gloo, torch.bfloat16)}
"""--ddp-comm-hook value -> (hook on NCCL, the same hook under another name elsewhere, all-reduce dtype)."""


class TorchDDP(Wrapper):
    name = "torch_ddp"

    def __init__(
        self,
        module: nn.Module,
        bucket_cap_mb: float = 25.0,
        nvtx_hook: bool = False,
        gradient_as_bucket_view: bool = False,
        comm_hook: str = "",
    ) -> None:
        nn.Module.__init__(self)  # DDP does its own wrap-time broadcast of parameters and buffers
        self.rank, self.world_size = world()
        self.bucket_cap_mb = bucket_cap_mb
        self.nvtx_hook = nvtx_hook
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.comm_hook = comm_hook
        self.comm_hook_fn: str | None = None
        self.module = module
        self.ddp = None
        if self.world_size > 1:
            # With broadcast_buffers=False DDP's constructor syncs parameters only; send buffers here.
            with torch.no_grad():
                for buffer in module.buffers():
                    dist.broadcast(buffer.data, src=0, group=comm_group())
            device_ids = None
            first = next(module.parameters())
            if first.is_cuda:
                device_ids = [first.device.index]
            self.ddp = nn.parallel.DistributedDataParallel(
                module,
                device_ids=device_ids,
                bucket_cap_mb=bucket_cap_mb,
                broadcast_buffers=False,
                gradient_as_bucket_view=gradient_as_bucket_view,
                process_group=comm_group(),
            )
            if nvtx_hook:
                self.ddp.register_comm_hook(self.ddp.process_group, _nvtx_allreduce_hook)
            elif comm_hook:
                on_nccl, elsewhere, _ = COMM_HOOKS[comm_hook]
                hook = on_nccl if "nccl" in str(dist.get_backend(self.ddp.process_group)) else elsewhere
                self.ddp.register_comm_hook(self.ddp.process_group, hook)
                self.comm_hook_fn = f"{hook.__module__}.{hook.__name__}"

    def forward(self, *args, **kwargs):
        return (self.ddp or self.module)(*args, **kwargs)

    def layout(self) -> dict:
        params = grad_params(self.module)
        groups = pack_buckets([p.numel() * p.element_size() for p in params], int(self.bucket_cap_mb * 2**20))
        planned = layout_from_groups(self.module, [[params[j] for j in g] for g in groups])
        planned["source"] = "planned (project packing at the same cap)"
        planned["nvtx_hook"] = bool(self.nvtx_hook and self.ddp is not None)
        planned["gradient_as_bucket_view"] = bool(self.gradient_as_bucket_view)
        planned["comm_hook"] = self.comm_hook or None
        planned["comm_hook_fn"] = self.comm_hook_fn
        if self.ddp is not None:
            try:
                data = self.ddp._get_ddp_logging_data()
                # After the first step DDP logs the rebuilt buckets, the ones every later step uses.
                logged = data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes", "")
                sizes = [int(s) for s in str(logged).split(",") if s.strip()]
                if sizes:
                    planned["ddp_bucket_bytes"] = sizes
                    planned["ddp_buckets"] = len(sizes)
                    if self.comm_hook_fn is not None:  # the hook all-reduces a copy in its own dtype
                        itemsize = torch.empty(0, dtype=COMM_HOOKS[self.comm_hook][2]).element_size()
                        planned["reduce_dtype"] = self.comm_hook
                        planned["reduce_bytes"] = [s * itemsize // params[0].element_size() for s in sizes]
            except (AttributeError, RuntimeError, ValueError):
                pass
        return planned
