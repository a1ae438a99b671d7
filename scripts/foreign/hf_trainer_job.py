"""A Hugging Face ``Trainer`` job as a user writes one: a small GPT-2 from a config, random tokens, DDP or FSDP.

Stand-alone: torch + transformers (+ accelerate, which Trainer uses), no ddp_profile import, no NVTX.
Nothing is downloaded: the model is ``GPT2LMHeadModel(GPT2Config(...))`` and the data random tokens.
Gradient accumulation 2 and logging every 4 optimizer steps by default; ``--fsdp`` turns on Trainer's
FSDP2 (``fsdp=True`` with ``fsdp_config={"version": 2, "reshard_after_forward": True, ...}``, full
sharding, one unit per GPT2Block).

    torchrun --standalone --nproc_per_node=2 scripts/foreign/hf_trainer_job.py --out DIR [--fsdp] \
        [--steps 16] [--accum 2] [--logging-steps 4] [--cpu]

Ground truth, gathered from every rank by a ``TrainerCallback`` and written by rank 0 to
``<out>/truth.json`` (iteration k is optimizer step k, the same on every rank):

- ``iterations[r][k]``: ``iter_ms`` CUDA-event time from ``on_step_begin`` (before the first
  micro-batch's forward; the batches are fetched and copied before it) to ``on_step_end`` (after
  ``optimizer.step()``, the LR scheduler and ``zero_grad()``); ``micro_steps``; ``micro_ms`` per
  micro-step (``on_step_begin``/``on_substep_end`` to the next ``on_substep_end``, the last one ending
  at ``on_pre_optimizer_step``, so it includes gradient clipping); ``forward_ms`` (model forward
  pre-hook to forward hook, per micro-step) and ``backward_ms`` (forward hook to the micro-step's end:
  loss scaling, backward, the NaN check, and on the last micro-step the gradient reduction wait and
  clipping); ``optimizer_ms`` (``on_pre_optimizer_step`` to the end); ``host_ms`` host wall time from
  ``on_step_begin`` to ``on_step_end``; ``host_sync_ms`` is null: the synchronising calls are inside
  Trainer (``torch.isnan(loss)`` as a Python bool after every micro-step on every rank, the logging
  step's ``.item()`` calls) where a callback cannot time them; ``gap_after_ms`` GPU time (CUDA events)
  from this iteration's end to the next one's start (logging, the next batches' fetch and copy);
  ``start_unix_ns``; ``gpu_start_ms`` after iteration 0's start on the same rank.
- ``extra_work``: one row per ``on_log`` call seen on a rank: ``rank``, ``kind`` ``trainer_log``,
  ``after_iteration`` (the iteration it follows), ``gpu_ms`` and ``host_ms`` of the gap after that
  iteration (which also holds the next batches' fetch).
- ``fsdp_enabled``: whether Trainer really ran FSDP (it ignores FSDP on the CPU).
- ``iter_ms_per_rank``, ``median_iter_ms_per_rank``; what ran: options, parallelism, params, model,
  world_size, gpu_name, torch / transformers / accelerate / CUDA / NCCL versions, date,
  ``timing_source`` (``cuda_events``, or ``host_perf_counter`` with ``--cpu``).
"""

import argparse
import datetime
import json
import os
import statistics
import time

import accelerate
import torch
import torch.distributed as dist
import transformers
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, n, seq_len, vocab, seed):
        g = torch.Generator().manual_seed(seed)
        self.tokens = torch.randint(vocab, (n, seq_len), generator=g)

    def __len__(self):
        return len(self.tokens)

    def __getitem__(self, i):
        return {"input_ids": self.tokens[i], "labels": self.tokens[i]}


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


class GroundTruth(TrainerCallback):
    """Marks every optimizer step and micro-step with CUDA events; reads them after training."""

    def __init__(self, clock, model):
        self.clock, self.rows, self.logs, self.row = clock, [], [], None
        self.fwd = []
        model.register_forward_pre_hook(lambda *_: self.fwd.append([self.clock.mark()]))
        model.register_forward_hook(lambda *_: self.fwd[-1].append(self.clock.mark()))

    def on_step_begin(self, args, state, control, **kw):
        self.fwd = []
        self.row = {"marks": [self.clock.mark()], "start_unix_ns": time.time_ns(), "h0": time.perf_counter()}

    def on_substep_end(self, args, state, control, **kw):
        self.row["marks"].append(self.clock.mark())

    def on_pre_optimizer_step(self, args, state, control, **kw):
        self.row["marks"].append(self.clock.mark())

    def on_step_end(self, args, state, control, **kw):
        self.row |= {"end": self.clock.mark(), "host_ms": (time.perf_counter() - self.row["h0"]) * 1e3,
                     "fwd": self.fwd, "h_end": time.perf_counter()}
        self.rows.append(self.row)

    def on_log(self, args, state, control, logs=None, **kw):
        if self.rows and "loss" in (logs or {}):
            self.logs.append(len(self.rows) - 1)

    def record(self, rank):
        c, first = self.clock, self.rows[0]["marks"][0]
        out = []
        for k, row in enumerate(self.rows):
            marks = row["marks"]
            micro = [c.ms(a, b) for a, b in zip(marks, marks[1:], strict=False)]
            fwd = [c.ms(f0, f1) for f0, f1 in row["fwd"]]
            bwd = [c.ms(f1, m1) for (_, f1), m1 in zip(row["fwd"], marks[1:], strict=False)]
            nxt = self.rows[k + 1] if k + 1 < len(self.rows) else None
            out.append({
                "iteration": k, "iter_ms": c.ms(marks[0], row["end"]), "micro_steps": len(micro),
                "micro_ms": micro, "forward_ms": fwd, "backward_ms": bwd,
                "optimizer_ms": c.ms(marks[-1], row["end"]), "host_ms": row["host_ms"], "host_sync_ms": None,
                "gap_after_ms": c.ms(row["end"], nxt["marks"][0]) if nxt else None,
                "gap_after_host_ms": (nxt["h0"] - row["h_end"]) * 1e3 if nxt else None,
                "start_unix_ns": row["start_unix_ns"], "gpu_start_ms": c.ms(first, marks[0]),
            })
        extra = [{"rank": rank, "kind": "trainer_log", "after_iteration": k, "gpu_ms": out[k]["gap_after_ms"],
                  "host_ms": out[k]["gap_after_host_ms"]} for k in self.logs]
        return {"iterations": out, "extra_work": extra}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--accum", type=int, default=2)
    p.add_argument("--logging-steps", type=int, default=4)
    p.add_argument("--fsdp", action="store_true")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=512)
    p.add_argument("--n-head", type=int, default=8)
    p.add_argument("--cpu", action="store_true", help="gloo on CPU (smoke test)")
    p.add_argument("--out", default=".")
    a = p.parse_args()

    cuda = torch.cuda.is_available() and not a.cpu
    world = int(os.environ.get("WORLD_SIZE", 1))
    config = GPT2Config(vocab_size=a.vocab, n_positions=a.seq_len, n_embd=a.n_embd, n_layer=a.n_layer,
                        n_head=a.n_head)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    params = sum(q.numel() for q in model.parameters())
    n = a.steps * a.accum * a.batch * world
    data = RandomTokens(n, a.seq_len, a.vocab, seed=1)

    fsdp = {}
    if a.fsdp:
        fsdp = {"fsdp": True,
                "fsdp_config": {"version": 2, "reshard_after_forward": True,
                                "transformer_layer_cls_to_wrap": ["GPT2Block"]}}
    args = TrainingArguments(
        output_dir=os.path.join(a.out, "trainer"), max_steps=a.steps, per_device_train_batch_size=a.batch,
        gradient_accumulation_steps=a.accum, logging_steps=a.logging_steps, learning_rate=3e-4,
        save_strategy="no", report_to="none", dataloader_num_workers=0, use_cpu=not cuda,
        tf32=cuda or None, **fsdp,
    )
    clock = Clock(cuda)
    truth_cb = GroundTruth(clock, model)
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[truth_cb])
    result = trainer.train()

    if cuda:
        torch.cuda.synchronize()
    rank = dist.get_rank() if dist.is_initialized() else 0
    mine = truth_cb.record(rank)
    gathered = [mine]
    if dist.is_initialized():
        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, mine)
    if rank == 0:
        per_rank = [[r["iter_ms"] for r in g["iterations"]] for g in gathered]
        device = torch.cuda.current_device() if cuda else None
        truth = {
            "program": os.path.basename(__file__), "made_by": "foreign (not the ddp-profile harness)",
            "options": vars(a) | {"out": None},
            "parallelism": ("FSDP2 via Trainer (fsdp_config version 2, full shard, GPT2Block units)"
                            if a.fsdp else "DDP via Trainer (its default find_unused_parameters=True)") + ", fp32 (TF32 matmuls), AdamW, grad clip 1.0",
            "nvtx": "none from the program",
            "fsdp_enabled": bool(trainer.is_fsdp_enabled), "world_size": len(gathered), "params": params,
            "model": {"class": "GPT2LMHeadModel", "n_layer": a.n_layer, "n_embd": a.n_embd, "n_head": a.n_head,
                      "vocab": a.vocab, "seq_len": a.seq_len, "batch_per_rank": a.batch},
            "gpu_name": torch.cuda.get_device_name(device) if cuda else "cpu",
            "torch_version": torch.__version__, "transformers_version": transformers.__version__,
            "accelerate_version": accelerate.__version__, "cuda_version": torch.version.cuda,
            "nccl_version": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
            "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "timing_source": "cuda_events" if cuda else "host_perf_counter",
            "iterations": [g["iterations"] for g in gathered],
            "extra_work": [e for g in gathered for e in g["extra_work"]],
            "iter_ms_per_rank": per_rank,
            "median_iter_ms_per_rank": [statistics.median(r) for r in per_rank],
            "final_loss": result.training_loss,
        }
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "truth.json"), "w") as fh:
            json.dump(truth, fh, indent=1)
        print(f"hf_trainer_job: {params / 1e6:.1f}M params, {len(gathered)} ranks, median iteration "
              f"{truth['median_iter_ms_per_rank']} ms; wrote truth.json", flush=True)
    if dist.is_initialized():
        dist.barrier()


if __name__ == "__main__":
    main()
