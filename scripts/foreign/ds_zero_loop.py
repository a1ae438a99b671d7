"""A user's DeepSpeed ZeRO training script (stage 1, 2 or 3) with gradient accumulation, GPT-2 shaped.

Stand-alone: torch and deepspeed only, no NVTX from the program. DeepSpeed reduces gradients after every
micro-batch (no ``no_sync``), so one optimizer step holds ``--accum`` gradient-reduction cycles. The
optimizer is torch's AdamW (``"torch_adam": true``: nothing compiled), ``overlap_comm`` on, gradient
clipping at 1.0, fp32 with TF32 matmuls; the output head is untied from the embedding (ZeRO-3 partitions
each parameter once).

Started either way, with the same options:

    torchrun --standalone --nproc_per_node=4 scripts/foreign/ds_zero_loop.py --stage 2 --out DIR
    deepspeed --num_gpus 4 scripts/foreign/ds_zero_loop.py --stage 3 --out DIR

``--profile-from W`` calls ``torch.cuda.profiler.start()`` before optimizer step W and ``stop()`` after the
last (for ``nsys profile --capture-range=cudaProfilerApi``). Truth: ``<out>/truth.json`` as
scripts/foreign/jobkit.py describes; one row per optimizer step (checked against DeepSpeed's own
``global_steps``), ``micro_steps`` = ``--accum``.
"""

import argparse
import math
import os

import deepspeed
import jobkit
import torch
import torch.distributed as dist


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--stage", type=int, choices=[1, 2, 3], default=2)
    p.add_argument("--accum", type=int, default=2, help="micro-batches per optimizer step")
    p.add_argument("--steps", type=int, default=10, help="optimizer steps in all (warm-up included)")
    p.add_argument("--profile-from", type=int, default=0, help="optimizer step that opens the capture (0: none)")
    p.add_argument("--local_rank", "--local-rank", type=int, default=-1, help="set by the deepspeed launcher")
    jobkit.add_model_args(p, batch=8, seq_len=512)
    a = p.parse_args()

    cuda = torch.cuda.is_available() and not a.cpu
    local = int(os.environ.get("LOCAL_RANK", max(a.local_rank, 0)))
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    jobkit.setup_cuda(cuda, device)
    deepspeed.init_distributed(dist_backend="nccl" if cuda else "gloo")
    rank = dist.get_rank()

    kw = jobkit.model_kwargs(a)
    torch.manual_seed(0)
    model = jobkit.GPT(**kw, tie=False)
    params = sum(q.numel() for q in model.parameters())
    config = {
        "train_micro_batch_size_per_gpu": a.batch,
        "gradient_accumulation_steps": a.accum,
        "gradient_clipping": 1.0,
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "weight_decay": 0.1, "torch_adam": True}},
        "zero_optimization": {"stage": a.stage, "overlap_comm": True, "contiguous_gradients": True},
        "steps_per_print": 10 ** 9,
    }
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    get = jobkit.batches(a, kw, rank, engine.device, cuda)
    clock = jobkit.StepClock(cuda, a.profile_from)

    x, y = get()
    for i in range(a.steps):
        clock.begin(i)
        for _ in range(a.accum):
            clock.fwd_start()
            loss = engine(x, y)
            clock.fwd_end()
            x, y = get()  # the next batch's copy overlaps this backward
            engine.backward(loss)
            clock.bwd_end()
            engine.step()  # updates only at the accumulation boundary
        clock.end()
        if engine.global_steps != i + 1:
            raise SystemExit(f"DeepSpeed counted {engine.global_steps} optimizer steps after {i + 1}")
    clock.finish()
    final = float(loss.detach())
    assert math.isfinite(final)
    jobkit.write_truth(dist, clock, a, __file__,
                       f"DeepSpeed ZeRO-{a.stage} (overlap_comm, contiguous_gradients), gradient accumulation "
                       f"{a.accum}, torch AdamW, clipping 1.0, fp32 (TF32 matmuls)",
                       params, kw, device, cuda,
                       {"deepspeed_version": deepspeed.__version__, "final_loss": final,
                        "launcher": "deepspeed" if a.local_rank >= 0 and "TORCHELASTIC_RUN_ID" not in os.environ
                        else "torchrun"})
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
