"""A training loop the harness did not write: DDP + ZeroRedundancyOptimizer on a small causal transformer.

Stand-alone (torch only, no ddp_profile import), like a user's script. One user NVTX range per step,
`iteration <i>` (torch.cuda.nvtx), nothing finer. With --profile-from N it calls torch.cuda.profiler.start()
before step N and stop() after the last step; with 0 (default) it never calls the profiler API.
Rank 0 writes <out>/program.json: what ran and the per-rank step times (CUDA events on GPUs).

    torchrun --standalone --nproc_per_node=2 scripts/foreign/zero_loop.py --out DIR [--steps 10]
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
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP


class LM(nn.Module):
    def __init__(self, vocab, d_model, layers, heads):
        super().__init__()
        self.emb = nn.Embedding(vocab, d_model)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.0, batch_first=True, norm_first=True)
            for _ in range(layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, x):
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1], device=x.device)
        h = self.emb(x)
        for block in self.blocks:
            h = block(h, src_mask=mask, is_causal=True)
        return self.head(self.norm(h))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--profile-from", type=int, default=0, help="step that opens the cudaProfilerApi range (0: none)")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--d-model", type=int, default=1024)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--out", default=".")
    a = p.parse_args()

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    push = torch.cuda.nvtx.range_push if cuda else (lambda name: None)
    pop = torch.cuda.nvtx.range_pop if cuda else (lambda: None)

    torch.manual_seed(0)
    model = LM(a.vocab, a.d_model, a.layers, a.heads).to(device)
    params = sum(q.numel() for q in model.parameters())
    model = DDP(model, device_ids=[device.index] if cuda else None)
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-4)
    gen = torch.Generator(device=device).manual_seed(1 + rank)

    step_ms = []
    for i in range(a.steps):
        if cuda and a.profile_from and i == a.profile_from:
            torch.cuda.synchronize()
            dist.barrier()
            torch.cuda.profiler.start()
        tokens = torch.randint(0, a.vocab, (a.batch, a.seq + 1), device=device, generator=gen)
        if cuda:
            t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0.record()
        h0 = time.perf_counter()
        push(f"iteration {i}")
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), tokens[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        pop()
        if cuda:
            t1.record()
            torch.cuda.synchronize()
            step_ms.append(t0.elapsed_time(t1))
        else:
            step_ms.append((time.perf_counter() - h0) * 1e3)
    if cuda and a.profile_from and a.profile_from < a.steps:
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()

    gathered = [None] * world
    dist.all_gather_object(gathered, step_ms)
    if rank == 0:
        record = {
            "program": os.path.basename(__file__), "made_by": "foreign (not the ddp-profile harness)",
            "parallelism": "DDP (default 25 MB buckets) + ZeroRedundancyOptimizer(AdamW), fp32",
            "nvtx": "torch.cuda.nvtx range iteration <i> per step only (default domain)",
            "world_size": world, "steps": a.steps, "profile_from_step": a.profile_from or None,
            "params": params, "batch_per_rank": a.batch, "seq_len": a.seq,
            "model": {"d_model": a.d_model, "layers": a.layers, "heads": a.heads, "vocab": a.vocab},
            "gpu_name": torch.cuda.get_device_name(device) if cuda else "cpu",
            "torch_version": torch.__version__, "cuda_version": torch.version.cuda,
            "nccl_version": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
            "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "step_ms_per_rank": gathered, "final_loss": float(loss.detach()),
        }
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "program.json"), "w") as fh:
            json.dump(record, fh, indent=1)
        print(f"zero_loop: {params / 1e6:.0f}M params, {world} ranks, median step "
              f"{sorted(step_ms)[len(step_ms) // 2]:.1f} ms; wrote {a.out}/program.json", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
