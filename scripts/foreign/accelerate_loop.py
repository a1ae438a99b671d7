"""A user's Hugging Face Accelerate training script with gradient accumulation, GPT-2 shaped.

Stand-alone: torch and accelerate only, no NVTX from the program. ``Accelerator(gradient_accumulation_steps=N)``
with ``accelerator.accumulate(model)``: DDP's gradient all-reduce runs on the last micro-batch of each
optimizer step only (``no_sync`` before it), and the prepared optimizer skips ``step()`` on the others.
AdamW, fp32 with TF32 matmuls.

    accelerate launch --multi_gpu --num_processes 4 scripts/foreign/accelerate_loop.py --accum 4 --out DIR

``--profile-from W`` calls ``torch.cuda.profiler.start()`` before optimizer step W and ``stop()`` after the
last. Truth: ``<out>/truth.json`` as scripts/foreign/jobkit.py describes; one row per optimizer step
(checked against the prepared optimizer's own count of the updates it ran), ``micro_steps`` = ``--accum``.
"""

import argparse
import math

import jobkit
import torch
import torch.distributed as dist
from accelerate import Accelerator
from accelerate import __version__ as accelerate_version


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--accum", type=int, default=4, help="micro-batches per optimizer step")
    p.add_argument("--steps", type=int, default=10, help="optimizer steps in all (warm-up included)")
    p.add_argument("--profile-from", type=int, default=0, help="optimizer step that opens the capture (0: none)")
    jobkit.add_model_args(p, batch=8, seq_len=512)
    a = p.parse_args()

    acc = Accelerator(gradient_accumulation_steps=a.accum, cpu=a.cpu)
    cuda = acc.device.type == "cuda"
    jobkit.setup_cuda(cuda, acc.device)
    kw = jobkit.model_kwargs(a)
    torch.manual_seed(0)
    model = jobkit.GPT(**kw)
    params = sum(q.numel() for q in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    model, opt = acc.prepare(model, opt)
    updates = []
    opt.optimizer.register_step_post_hook(lambda *_: updates.append(1))
    get = jobkit.batches(a, kw, acc.process_index, acc.device, cuda)
    clock = jobkit.StepClock(cuda, a.profile_from)

    x, y = get()
    for i in range(a.steps):
        clock.begin(i)
        for _ in range(a.accum):
            with acc.accumulate(model):
                clock.fwd_start()
                loss = model(x, y)
                clock.fwd_end()
                x, y = get()
                acc.backward(loss)
                clock.bwd_end()
                opt.step()  # a no-op until the accumulation boundary
                opt.zero_grad(set_to_none=True)
        clock.end()
        if len(updates) != i + 1:
            raise SystemExit(f"the optimizer updated {len(updates)} times after {i + 1} optimizer steps")
    clock.finish()
    final = float(loss.detach())
    assert math.isfinite(final)
    jobkit.write_truth(dist, clock, a, __file__,
                       f"Accelerate (DDP, default 25 MB buckets), gradient accumulation {a.accum} "
                       "(no_sync on all but the last micro-batch), AdamW, fp32 (TF32 matmuls)",
                       params, kw, acc.device, cuda,
                       {"accelerate_version": accelerate_version, "final_loss": final})
    acc.wait_for_everyone()
    acc.end_training()


if __name__ == "__main__":
    main()
