"""A training loop the harness did not write: plain DDP on an MLP, with no NVTX ranges at all.

Stand-alone (torch only, no ddp_profile import), like a user's script that was never annotated. Profiled
twice by the campaign: with `-t cuda` (kernels only, nothing tells where a step starts) and with
`-t cuda,nvtx --pytorch=autograd-nvtx` (nsys turns on torch.autograd.profiler.emit_nvtx: one NVTX range per
autograd operator, no step ranges). It never calls the profiler API (the whole run is recorded).
Rank 0 writes <out>/program.json: what ran and the per-rank step times (CUDA events on GPUs).

    torchrun --standalone --nproc_per_node=2 scripts/foreign/plain_loop.py --out DIR [--steps 10]
"""

import argparse
import datetime
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def mlp(width, depth):
    layers = []
    for _ in range(depth - 1):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, width))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--depth", type=int, default=8)
    p.add_argument("--out", default=".")
    a = p.parse_args()

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)

    torch.manual_seed(0)
    model = mlp(a.width, a.depth).to(device)
    params = sum(q.numel() for q in model.parameters())
    model = DDP(model, device_ids=[device.index] if cuda else None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device=device).manual_seed(1 + rank)

    step_ms = []
    for _ in range(a.steps):
        x = torch.randn(a.batch, a.width, device=device, generator=gen)
        y = torch.randn(a.batch, a.width, device=device, generator=gen)
        if cuda:
            t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0.record()
        h0 = time.perf_counter()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cuda:
            t1.record()
            torch.cuda.synchronize()
            step_ms.append(t0.elapsed_time(t1))
        else:
            step_ms.append((time.perf_counter() - h0) * 1e3)

    gathered = [None] * world
    dist.all_gather_object(gathered, step_ms)
    if rank == 0:
        record = {
            "program": os.path.basename(__file__), "made_by": "foreign (not the ddp-profile harness)",
            "parallelism": "DDP (default 25 MB buckets), fp32, AdamW",
            "nvtx": "none from the program (nsys --pytorch=autograd-nvtx adds per-operator ranges when used)",
            "world_size": world, "steps": a.steps, "profile_from_step": None,
            "params": params, "batch_per_rank": a.batch,
            "model": {"mlp_width": a.width, "mlp_depth": a.depth},
            "gpu_name": torch.cuda.get_device_name(device) if cuda else "cpu",
            "torch_version": torch.__version__, "cuda_version": torch.version.cuda,
            "nccl_version": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
            "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "step_ms_per_rank": gathered, "final_loss": float(loss.detach()),
        }
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "program.json"), "w") as fh:
            json.dump(record, fh, indent=1)
        print(f"plain_loop: {params / 1e6:.0f}M params, {world} ranks, median step "
              f"{sorted(step_ms)[len(step_ms) // 2]:.1f} ms; wrote {a.out}/program.json", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
