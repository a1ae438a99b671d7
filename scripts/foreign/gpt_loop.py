"""A minimal GPT-2-style training script, written as a user would write one (nanoGPT's shape), with DDP.

Stand-alone: torch only, no ddp_profile import and no NVTX ranges. A small causal transformer learns
random tokens with AdamW. What real jobs do and the harness never does:

- ``--accum N``: gradient accumulation; all but the last micro-step run under ``model.no_sync()``.
- rank 0 calls ``loss.item()`` after every iteration to log it (``--item none`` turns that off), so
  rank 0's host waits for its GPU each iteration while rank 1 runs ahead.
- ``--eval-first``: rank 0 alone evaluates (``--eval-iters`` batches, no grad) before iteration 0.
- ``--log-every N``: after every N-th iteration every rank evaluates one batch, all-reduces the loss
  and reads it with ``.item()`` (GPU and host work between two iterations).
- ``--compile``: ``torch.compile`` on the model before DDP wraps it (as nanoGPT does).
- ``--find-unused``: DDP with ``find_unused_parameters=True``; an auxiliary head is used on even
  iterations only.
- Batches are made on the host and copied with ``pin_memory().to(device, non_blocking=True)``; the next
  batch is fetched right after each forward, as nanoGPT prefetches.

    torchrun --standalone --nproc_per_node=2 scripts/foreign/gpt_loop.py --out DIR [--accum 4] \
        [--eval-first] [--log-every 4] [--compile] [--find-unused] [--steps 10] [--cpu]

Ground truth: rank 0 gathers every rank's record and writes ``<out>/truth.json``:

- ``iterations[r][k]`` for rank r, iteration k (the same k is the same optimizer step on every rank):
  ``iter_ms`` CUDA-event time from an event recorded right before the first micro-step's forward to
  one recorded after ``optimizer.step()`` and ``zero_grad()``; ``micro_steps``; per micro-step
  ``forward_ms`` (event before forward to event after the loss) and ``backward_ms`` (event after the
  loss to event after ``loss.backward()`` returns: on the last micro-step this includes waiting for
  DDP's gradient all-reduces, which ``backward()`` makes the compute stream wait for);
  ``optimizer_ms`` (after the last backward to the end event); ``host_sync_ms`` host wall time of the
  main thread inside synchronising calls after the iteration's work was launched (the ``.item()`` of
  rank 0's logging, the log-every ``.item()``); ``host_ms`` host wall time from the start event's
  record to the end event's record (launching); ``start_unix_ns`` ``time.time_ns()`` when the start
  event was recorded; ``gpu_start_ms`` CUDA-event time of this iteration's start after iteration 0's
  start on the same rank.
- ``extra_work``: one row per piece of periodic or one-off work outside the iterations: ``rank``,
  ``kind`` (``eval_before_first`` or ``log_eval``), ``after_iteration`` (-1 = before iteration 0),
  ``gpu_ms`` (CUDA events around it), ``host_ms`` and ``host_sync_ms``.
- ``iter_ms_per_rank``, ``median_iter_ms_per_rank``: the same iteration times, arranged for tests.
- What ran: program, options, parallelism, params, model shape, world_size, gpu_name, torch, CUDA and
  NCCL versions, date. ``timing_source`` is ``cuda_events`` (``host_perf_counter`` with ``--cpu``,
  where every time is host wall time).
"""

import argparse
import contextlib
import datetime
import json
import math
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


class SelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln1 = nn.LayerNorm(n_embd)
        self.attn = SelfAttention(n_embd, n_head)
        self.ln2 = nn.LayerNorm(n_embd)
        self.fc = nn.Linear(n_embd, 4 * n_embd)
        self.out = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, seq_len, n_layer, n_embd, n_head, aux_head=False):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(seq_len, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying, as GPT-2 does
        # A head trained only on some iterations: with DDP it needs find_unused_parameters=True.
        self.aux = nn.Linear(n_embd, 1) if aux_head else None
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets, use_aux=False):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        logits = self.lm_head(x)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))
        if use_aux and self.aux is not None:
            loss = loss + 0.01 * self.aux(x).pow(2).mean()
        return logits, loss


class Clock:
    """CUDA events on a GPU, host perf_counter on the CPU; read only at the end (no syncs in the loop)."""

    def __init__(self, cuda):
        self.cuda = cuda

    def mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def ms(self, a, b):
        return a.elapsed_time(b) if self.cuda else (b - a) * 1e3


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--item", choices=["rank0", "none"], default="rank0")
    p.add_argument("--eval-first", action="store_true")
    p.add_argument("--eval-iters", type=int, default=10)
    p.add_argument("--log-every", type=int, default=0)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--find-unused", action="store_true")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=512)
    p.add_argument("--n-head", type=int, default=8)
    p.add_argument("--cpu", action="store_true", help="gloo on CPU (smoke test)")
    p.add_argument("--out", default=".")
    a = p.parse_args()

    cuda = torch.cuda.is_available() and not a.cpu
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    torch.manual_seed(0)
    gpt = GPT(a.vocab, a.seq_len, a.n_layer, a.n_embd, a.n_head, aux_head=a.find_unused).to(device)
    params = sum(q.numel() for q in gpt.parameters())
    model = torch.compile(gpt) if a.compile else gpt
    model = DDP(model, device_ids=[device.index] if cuda else None, find_unused_parameters=a.find_unused)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    clock = Clock(cuda)

    gen = torch.Generator().manual_seed(1 + rank)

    def get_batch():
        xy = torch.randint(a.vocab, (a.batch, a.seq_len + 1), generator=gen)
        if cuda:
            xy = xy.pin_memory().to(device, non_blocking=True)
        return xy[:, :-1], xy[:, 1:]

    def evaluate(n):
        """Loss of the un-wrapped, un-compiled model over n batches (no grad, no DDP collectives)."""
        gpt.eval()
        with torch.no_grad():
            losses = torch.stack([gpt(*get_batch())[1] for _ in range(n)])
        gpt.train()
        return losses.mean()

    extra = []

    def timed_extra(kind, after, fn):
        g0, h0 = clock.mark(), time.perf_counter()
        value = fn()
        g1 = clock.mark()
        s0 = time.perf_counter()
        value = value.item()
        s1 = time.perf_counter()
        extra.append({"rank": rank, "kind": kind, "after_iteration": after, "gpu": (g0, g1),
                      "host_ms": (s1 - h0) * 1e3, "host_sync_ms": (s1 - s0) * 1e3})
        return value

    if a.eval_first and rank == 0:
        val = timed_extra("eval_before_first", -1, lambda: evaluate(a.eval_iters))
        print(f"rank 0: val loss {val:.4f} before iteration 0", flush=True)

    iters = []
    x, y = get_batch()
    for it in range(a.steps):
        use_aux = a.find_unused and it % 2 == 0
        row = {"start": clock.mark(), "start_unix_ns": time.time_ns(), "micro": []}
        h0 = time.perf_counter()
        for m in range(a.accum):
            sync = m == a.accum - 1
            with contextlib.nullcontext() if sync else model.no_sync():
                f0 = clock.mark()
                _, loss = model(x, y, use_aux)
                loss = loss / a.accum
                f1 = clock.mark()
                x, y = get_batch()  # prefetch the next batch while the GPU works
                loss.backward()
                b1 = clock.mark()
            row["micro"].append((f0, f1, b1))
        opt.step()
        opt.zero_grad(set_to_none=True)
        row["end"] = clock.mark()
        row["host_ms"] = (time.perf_counter() - h0) * 1e3
        row["host_sync_ms"] = 0.0
        if a.item == "rank0" and rank == 0:
            s0 = time.perf_counter()
            lossf = loss.item() * a.accum  # the logging line of every training script
            row["host_sync_ms"] += (time.perf_counter() - s0) * 1e3
            if it % 5 == 0:
                print(f"iter {it}: loss {lossf:.4f}", flush=True)
        if a.log_every and (it + 1) % a.log_every == 0:
            def log_eval():
                v = evaluate(1)
                dist.all_reduce(v)
                return v / world
            timed_extra("log_eval", it, log_eval)
            row["host_sync_ms"] += extra[-1]["host_sync_ms"]
        iters.append(row)

    if cuda:
        torch.cuda.synchronize()
    first = iters[0]["start"]
    record = []
    for it, row in enumerate(iters):
        fwd = [clock.ms(f0, f1) for f0, f1, _ in row["micro"]]
        bwd = [clock.ms(f1, b1) for _, f1, b1 in row["micro"]]
        record.append({
            "iteration": it, "iter_ms": clock.ms(row["start"], row["end"]), "micro_steps": a.accum,
            "forward_ms": fwd, "backward_ms": bwd,
            "optimizer_ms": clock.ms(row["micro"][-1][2], row["end"]),
            "host_ms": row["host_ms"], "host_sync_ms": row["host_sync_ms"],
            "start_unix_ns": row["start_unix_ns"], "gpu_start_ms": clock.ms(first, row["start"]),
        })
    extra_rows = [{k: v for k, v in e.items() if k != "gpu"} | {"gpu_ms": clock.ms(*e["gpu"])} for e in extra]

    gathered = [None] * world
    dist.all_gather_object(gathered, {"iterations": record, "extra_work": extra_rows})
    if rank == 0:
        per_rank = [[r["iter_ms"] for r in g["iterations"]] for g in gathered]
        truth = {
            "program": os.path.basename(__file__), "made_by": "foreign (not the ddp-profile harness)",
            "options": vars(a) | {"out": None},
            "parallelism": "DDP (default 25 MB buckets)" + (", find_unused_parameters" if a.find_unused else "")
            + (", torch.compile" if a.compile else "") + ", fp32 (TF32 matmuls), AdamW",
            "nvtx": "none from the program",
            "world_size": world, "params": params,
            "model": {"n_layer": a.n_layer, "n_embd": a.n_embd, "n_head": a.n_head, "vocab": a.vocab,
                      "seq_len": a.seq_len, "batch_per_rank": a.batch},
            "gpu_name": torch.cuda.get_device_name(device) if cuda else "cpu",
            "torch_version": torch.__version__, "cuda_version": torch.version.cuda,
            "nccl_version": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
            "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "timing_source": "cuda_events" if cuda else "host_perf_counter",
            "iterations": [g["iterations"] for g in gathered],
            "extra_work": [e for g in gathered for e in g["extra_work"]],
            "iter_ms_per_rank": per_rank,
            "median_iter_ms_per_rank": [statistics.median(r) for r in per_rank],
            "final_loss": float(loss.detach()) * a.accum,
        }
        assert math.isfinite(truth["final_loss"])
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "truth.json"), "w") as fh:
            json.dump(truth, fh, indent=1)
        print(f"gpt_loop: {params / 1e6:.1f}M params, {world} ranks, median iteration "
              f"{truth['median_iter_ms_per_rank']} ms; wrote truth.json", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
