"""A user's ``torch.compile``d GPT-2 training script with DDP (nanoGPT's way: compile, then wrap in DDP).

Stand-alone: torch only, no NVTX from the program. ``--mode reduce-overhead`` runs the compiled graphs as
CUDA graphs (Inductor's CUDA-graph trees; profile with ``--cuda-graph-trace=node`` to see their kernels);
``--mode default`` does not. DDP's graph-break optimizer splits the compiled model at bucket boundaries.
AdamW outside the graphs, fp32 with TF32 matmuls.

    torchrun --standalone --nproc_per_node=4 scripts/foreign/compiled_loop.py --mode reduce-overhead --out DIR

The first iterations compile (and, in reduce-overhead mode, record the graphs); ``--profile-from W``
opens the capture at optimizer step W (from 1 on the capture holds the recording step, from 3 on only
replays). Truth: ``<out>/truth.json`` as scripts/foreign/jobkit.py describes, one row per optimizer step.
"""

import argparse
import faulthandler
import math
import os
import signal
import time

import jobkit
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["default", "reduce-overhead"], default="reduce-overhead")
    p.add_argument("--steps", type=int, default=10, help="optimizer steps in all (compilation included)")
    p.add_argument("--profile-from", type=int, default=0, help="optimizer step that opens the capture (0: none)")
    jobkit.add_model_args(p, batch=4, seq_len=256)
    a = p.parse_args()

    faulthandler.register(signal.SIGTERM, chain=True)  # a run its launcher kills shows where it stood
    cuda = torch.cuda.is_available() and not a.cpu
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    jobkit.setup_cuda(cuda, device)
    kw = jobkit.model_kwargs(a)
    torch.manual_seed(0)
    gpt = jobkit.GPT(**kw).to(device)
    params = sum(q.numel() for q in gpt.parameters())
    model = DDP(torch.compile(gpt, mode=a.mode), device_ids=[device.index] if cuda else None)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    get = jobkit.batches(a, kw, rank, device, cuda)
    clock = jobkit.StepClock(cuda, a.profile_from)

    x, y = get()
    t_start = time.perf_counter()
    for i in range(a.steps):
        clock.begin(i)
        if a.mode == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()
        clock.fwd_start()
        loss = model(x, y)
        clock.fwd_end()
        x, y = get()
        loss.backward()
        clock.bwd_end()
        opt.step()
        opt.zero_grad(set_to_none=True)
        clock.end()
        if rank == 0:
            print(f"iteration {i} launched at {time.perf_counter() - t_start:.1f} s", flush=True)
    clock.finish()
    final = float(loss.detach())
    assert math.isfinite(final)
    jobkit.write_truth(dist, clock, a, __file__,
                       f"DDP (default 25 MB buckets) over torch.compile(mode={a.mode!r}), AdamW, fp32 (TF32 matmuls)",
                       params, kw, device, cuda, {"final_loss": final})
    jobkit.host_barrier()  # no collective after the capture: see jobkit.write_truth
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
