"""A user's FSDP2 (``fully_shard``) GPT-2 training script whose gradient communication outlasts the backward.

Stand-alone: torch only, no NVTX from the program. Each transformer block is its own FSDP2 unit; the root
unit holds the embeddings and an untied output head (two vocab x n_embd matrices). The root's gradients are
complete only when the backward reaches the token embedding, its last kernel, so their reduce-scatter (the
largest of the step) runs after every backward compute kernel: a visible communication tail before the
optimizer. AdamW, fp32 with TF32 matmuls.

    torchrun --standalone --nproc_per_node=4 scripts/foreign/fsdp2_tail_loop.py --out DIR

``--profile-from W`` opens the capture at optimizer step W. Truth: ``<out>/truth.json`` as
scripts/foreign/jobkit.py describes, one row per optimizer step.
"""

import argparse
import math
import os

import jobkit
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10, help="optimizer steps in all (warm-up included)")
    p.add_argument("--profile-from", type=int, default=0, help="optimizer step that opens the capture (0: none)")
    jobkit.add_model_args(p, batch=8, seq_len=512)
    a = p.parse_args()

    cuda = torch.cuda.is_available() and not a.cpu
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    jobkit.setup_cuda(cuda, device)
    kw = jobkit.model_kwargs(a)
    torch.manual_seed(0)
    model = jobkit.GPT(**kw, tie=False).to(device)
    params = sum(q.numel() for q in model.parameters())
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    get = jobkit.batches(a, kw, rank, device, cuda)
    clock = jobkit.StepClock(cuda, a.profile_from)

    x, y = get()
    for i in range(a.steps):
        clock.begin(i)
        clock.fwd_start()
        loss = model(x, y)
        clock.fwd_end()
        x, y = get()
        loss.backward()
        clock.bwd_end()
        opt.step()
        opt.zero_grad(set_to_none=True)
        clock.end()
    clock.finish()
    final = float(loss.detach())
    assert math.isfinite(final)
    jobkit.write_truth(dist, clock, a, __file__,
                       "FSDP2 fully_shard per block + root (embeddings, untied head), AdamW, fp32 (TF32 matmuls)",
                       params, kw, device, cuda, {"final_loss": final})
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
