"""`torch_ddp`: PyTorch's DistributedDataParallel with `bucket_cap_mb`, as the reference implementation.

Left as stock as possible (no comm hook, so no per-bucket NVTX range): it is the yardstick. Buffers are
broadcast once at wrap time like every other strategy (broadcast_buffers=False, plus one explicit buffer
broadcast, because DDP's constructor then syncs parameters only), not before each forward.
DDP's own buckets are rebuilt after the first step in gradient-ready order; `layout()` reports the sizes
DDP logs, falling back to the project's packing of the same cap.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from ddp_profile.strategies.base import Wrapper, grad_params, layout_from_groups, world
from ddp_profile.strategies.bucketed import pack_buckets


class TorchDDP(Wrapper):
    name = "torch_ddp"

    def __init__(self, module: nn.Module, bucket_cap_mb: float = 25.0) -> None:
        nn.Module.__init__(self)  # DDP does its own wrap-time broadcast of parameters and buffers
        self.rank, self.world_size = world()
        self.bucket_cap_mb = bucket_cap_mb
        self.module = module
        self.ddp = None
        if self.world_size > 1:
            # With broadcast_buffers=False DDP's constructor syncs parameters only; send buffers here.
            with torch.no_grad():
                for buffer in module.buffers():
                    dist.broadcast(buffer.data, src=0)
            device_ids = None
            first = next(module.parameters())
            if first.is_cuda:
                device_ids = [first.device.index]
            self.ddp = nn.parallel.DistributedDataParallel(
                module, device_ids=device_ids, bucket_cap_mb=bucket_cap_mb, broadcast_buffers=False
            )

    def forward(self, *args, **kwargs):
        return (self.ddp or self.module)(*args, **kwargs)

    def layout(self) -> dict:
        params = grad_params(self.module)
        groups = pack_buckets([p.numel() * p.element_size() for p in params], int(self.bucket_cap_mb * 2**20))
        planned = layout_from_groups(self.module, [[params[j] for j in g] for g in groups])
        planned["source"] = "planned (project packing at the same cap)"
        if self.ddp is not None:
            try:
                data = self.ddp._get_ddp_logging_data()
                sizes = [int(s) for s in str(data.get("bucket_sizes", "")).split(",") if s.strip()]
                if sizes:
                    planned["ddp_bucket_bytes"] = sizes
                    planned["ddp_buckets"] = len(sizes)
            except (AttributeError, RuntimeError, ValueError):
                pass
        return planned


