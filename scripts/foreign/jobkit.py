"""What the user-like jobs of this folder share: a GPT-2-shaped model and their own CUDA-event timing.

Torch only (no ddp_profile import): a job is a user's script that happens to keep a stopwatch. Each job
imports this file from its own folder (a script's folder is first on ``sys.path``, under torchrun, the
``deepspeed`` launcher and ``accelerate launch`` alike).

Ground truth a job writes (rank 0 gathers every rank's record into ``<out>/truth.json``):

- ``iterations[r][k]`` for rank r and the k-th *recorded* optimizer step (the same k is the same optimizer
  step on every rank; ``iteration`` is its index in the program's loop): ``iter_ms`` CUDA-event time from an
  event recorded right before the first micro-step's forward to one recorded after the optimizer's update
  (and ``zero_grad``); ``step_ms`` the loop period, this step's start event to the next step's (the last
  step's "next start" is an event recorded where the next step would begin), so host time between steps
  (a sleep, a ``.item()``) counts; ``micro_steps``; per micro-step ``forward_ms`` (event before the forward
  to event after the loss) and ``backward_ms`` (event after the loss to event after the backward call
  returns); ``optimizer_ms`` (after the last backward to the end event); ``host_ms`` host wall time from
  the start event's record to the end event's record; ``start_unix_ns``; ``gpu_start_ms`` (this step's
  start event after the first recorded step's, same rank).
- ``recorded``: which loop iterations these are. A job profiled with ``--profile-from W`` calls
  ``torch.cuda.profiler.start()`` before iteration W and ``stop()`` after the last one, so the recorded
  iterations are exactly the ones in a ``--capture-range=cudaProfilerApi`` trace; the warm-up iterations'
  ``iter_ms`` are kept apart in ``warmup_iter_ms_per_rank``.
- ``iter_ms_per_rank``, ``median_iter_ms_per_rank``, ``step_ms_per_rank``, ``median_step_ms_per_rank``:
  the recorded steps arranged for tests.
- What ran: program, options, parallelism, params, model shape, world_size, gpu_name, torch, CUDA and
  NCCL versions, date; ``timing_source`` ``cuda_events`` (``host_perf_counter`` on the CPU, where every
  time is host wall time).
"""

import datetime
import itertools
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

# GPT-2 small (124M with tied embeddings), and a tiny shape for CPU smoke runs.
SHAPES = {
    "gpt2": dict(vocab=50304, seq_len=1024, n_layer=12, n_embd=768, n_head=12),
    "tiny": dict(vocab=512, seq_len=64, n_layer=2, n_embd=64, n_head=4),
}


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
    """nanoGPT's GPT-2. ``tie=False`` unties the output head from the token embedding (then the embedding's
    gradient is complete only at the very end of the backward, and it is a large tensor)."""

    def __init__(self, vocab, seq_len, n_layer, n_embd, n_head, tie=True):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(seq_len, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        if tie:
            self.lm_head.weight = self.wte.weight
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.reshape(-1))


def add_model_args(p, shape="gpt2", batch=8, seq_len=512):
    p.add_argument("--shape", choices=sorted(SHAPES), default=shape)
    p.add_argument("--batch", type=int, default=batch, help="sequences per micro-batch per rank")
    p.add_argument("--seq-len", type=int, default=seq_len)
    p.add_argument("--n-layer", type=int, default=None, help="override the shape's layer count")
    p.add_argument("--cpu", action="store_true", help="gloo on the CPU (smoke test)")
    p.add_argument("--out", default=".")


def model_kwargs(a):
    kw = dict(SHAPES[a.shape])
    kw["seq_len"] = min(kw["seq_len"], a.seq_len) if a.shape == "tiny" else a.seq_len
    if a.n_layer:
        kw["n_layer"] = a.n_layer
    return kw


def setup_cuda(cuda, device):
    if cuda:
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def batches(a, kw, rank, device, cuda):
    """Random-token batches made on the host, copied pinned and non-blocking (nanoGPT's way)."""
    gen = torch.Generator().manual_seed(1 + rank)

    def get():
        xy = torch.randint(kw["vocab"], (a.batch, kw["seq_len"] + 1), generator=gen)
        if cuda:
            xy = xy.pin_memory().to(device, non_blocking=True)
        return xy[:, :-1], xy[:, 1:]
    return get


_BARRIERS = itertools.count()


def host_barrier():
    """Wait for every rank through the rendezvous store: no collective kernel, so none lands at the edge of
    the capture range (``dist.barrier()`` would launch an all-reduce)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return
    store = dist.distributed_c10d._get_default_store()
    key = f"jobkit/barrier/{next(_BARRIERS)}"
    store.add(key, 1)
    while store.add(key, 0) < dist.get_world_size():
        time.sleep(0.001)


class StepClock:
    """CUDA events around each optimizer step and its micro-steps, read only at the end (no syncs in the loop).

    Usage per optimizer step: ``begin(i)``, then per micro-step ``fwd_start()``, ``fwd_end()``,
    ``bwd_end()``, then ``end()``. ``finish()`` records the last step's "next start" and synchronises."""

    def __init__(self, cuda, profile_from=0, record_from=None):
        """``profile_from`` W > 0: start the CUDA profiler before iteration W. ``record_from``: the first
        iteration kept in :meth:`records` (default ``profile_from``; 0 keeps every iteration)."""
        self.cuda, self.profile_from = cuda, profile_from
        self.record_from = profile_from if record_from is None else record_from
        self.rows, self.warmup = [], []
        self.profiling = False

    def _mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def _ms(self, a, b):
        return a.elapsed_time(b) if self.cuda else (b - a) * 1e3

    def begin(self, i):
        if self.profile_from and i == self.profile_from and self.cuda:
            torch.cuda.synchronize()
            host_barrier()
            torch.cuda.profiler.start()
            self.profiling = True
        row = {"iteration": i, "start": self._mark(), "start_unix_ns": time.time_ns(), "h0": time.perf_counter(),
               "micro": []}
        if self.rows:
            self.rows[-1]["next"] = row["start"]
        self.rows.append(row)

    def fwd_start(self):
        self.rows[-1]["micro"].append([self._mark(), None, None])

    def fwd_end(self):
        self.rows[-1]["micro"][-1][1] = self._mark()

    def bwd_end(self):
        self.rows[-1]["micro"][-1][2] = self._mark()

    def end(self):
        self.rows[-1]["end"] = self._mark()
        self.rows[-1]["host_ms"] = (time.perf_counter() - self.rows[-1]["h0"]) * 1e3

    def finish(self):
        """After the loop: the last step's next start, stop the capture, synchronise."""
        if self.rows and self.rows[-1].get("next") is None:
            self.rows[-1]["next"] = self._mark()
        if self.cuda:
            torch.cuda.synchronize()
            if self.profiling:
                host_barrier()
                torch.cuda.profiler.stop()
                self.profiling = False

    def records(self):
        """(recorded steps, warm-up iter_ms): the steps from ``profile_from`` on (all when it is 0)."""
        first = self.record_from
        kept = [r for r in self.rows if r["iteration"] >= first]
        warm = [self._ms(r["start"], r["end"]) for r in self.rows if r["iteration"] < first]
        out = []
        for r in kept:
            out.append({
                "iteration": r["iteration"], "iter_ms": self._ms(r["start"], r["end"]),
                "step_ms": self._ms(r["start"], r["next"]), "micro_steps": len(r["micro"]),
                "forward_ms": [self._ms(f0, f1) for f0, f1, _ in r["micro"]],
                "backward_ms": [self._ms(f1, b1) for _, f1, b1 in r["micro"]],
                "optimizer_ms": self._ms(r["micro"][-1][2], r["end"]), "host_ms": r["host_ms"],
                "host_sync_ms": 0.0, "start_unix_ns": r["start_unix_ns"],
                "gpu_start_ms": self._ms(kept[0]["start"], r["start"]),
            })
        return out, warm


def write_truth(dist, clock, a, program, parallelism, params, kw, device, cuda, extra=None):
    """Gather every rank's steps; rank 0 writes <out>/truth.json. Returns the truth on rank 0, else None."""
    rank, world = dist.get_rank(), dist.get_world_size()
    rows, warm = clock.records()
    # Through the rendezvous store, not a collective: under nsys --cuda-graph-trace=node the first NCCL
    # collective after the capture stopped never completed (seen with a reduce-overhead job on 4 x H200).
    store = dist.distributed_c10d._get_default_store() if world > 1 else None
    mine = json.dumps({"iterations": rows, "warmup": warm})
    if store is not None:
        store.set(f"jobkit/truth/{rank}", mine)
    host_barrier()
    if rank != 0:
        return None
    gathered = [json.loads(store.get(f"jobkit/truth/{r}")) for r in range(world)] if store else [json.loads(mine)]
    iters = [g["iterations"] for g in gathered]
    per_rank = [[r["iter_ms"] for r in it] for it in iters]
    periods = [[r["step_ms"] for r in it] for it in iters]
    truth = {
        "program": os.path.basename(program), "made_by": "foreign (not the ddp-profile harness)",
        "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
        "options": {k: v for k, v in vars(a).items() if k != "out"},
        "parallelism": parallelism, "nvtx": "none from the program",
        "world_size": world, "params": params,
        "model": kw | {"batch_per_rank": a.batch},
        "gpu_name": torch.cuda.get_device_name(device) if cuda else "cpu",
        "torch_version": torch.__version__, "cuda_version": torch.version.cuda,
        "nccl_version": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "timing_source": "cuda_events" if cuda else "host_perf_counter",
        "recorded": {"first_iteration": iters[0][0]["iteration"] if iters[0] else None,
                     "last_iteration": iters[0][-1]["iteration"] if iters[0] else None,
                     "capture": "cudaProfilerApi start before the first, stop after the last"
                     if clock.profile_from and cuda else "none (the program never calls the profiler API)"},
        "iterations": iters, "extra_work": [],
        "warmup_iter_ms_per_rank": [g["warmup"] for g in gathered],
        "iter_ms_per_rank": per_rank, "median_iter_ms_per_rank": [statistics.median(r) for r in per_rank],
        "step_ms_per_rank": periods, "median_step_ms_per_rank": [statistics.median(r) for r in periods],
    } | (extra or {})
    os.makedirs(a.out, exist_ok=True)
    tmp = os.path.join(a.out, ".truth.json.tmp")
    with open(tmp, "w") as fh:
        json.dump(truth, fh, indent=1)
    os.replace(tmp, os.path.join(a.out, "truth.json"))
    print(f"{truth['program']}: {params / 1e6:.1f}M params, {world} ranks, {len(per_rank[0])} recorded steps, "
          f"median step {[round(x, 2) for x in truth['median_step_ms_per_rank']]} ms; wrote truth.json", flush=True)
    return truth
