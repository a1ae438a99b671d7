"""A PyTorch Lightning job as a user writes one: a LightningModule (a small causal transformer on random
tokens) and ``pl.Trainer`` with ``strategy="ddp"`` or FSDP.

Stand-alone: torch + pytorch_lightning, no ddp_profile import, no NVTX. The loss is logged every step
with ``self.log(..., prog_bar=True)`` and written every ``--log-every`` steps (``log_every_n_steps``);
``--strategy fsdp`` uses Lightning's ``FSDPStrategy`` with one FSDP unit per transformer layer (the
form Lightning's docs give; a bare ``strategy="fsdp"`` would make the whole model one unit).

    torchrun --standalone --nproc_per_node=2 scripts/foreign/lightning_job.py --out DIR \
        [--strategy ddp|fsdp] [--steps 16] [--accum 1] [--log-every 4] [--cpu]

Ground truth, gathered from every rank by a ``Callback`` and written by rank 0 to ``<out>/truth.json``
(iteration k is optimizer step k, the same on every rank):

- ``iterations[r][k]``: ``iter_ms`` CUDA-event time from ``on_train_batch_start`` of the step's first
  micro-batch (the batch is already on the GPU) to ``on_train_batch_end`` of the batch that stepped the
  optimizer; ``micro_steps``; per micro-step ``forward_ms`` (its ``on_train_batch_start`` to
  ``on_before_backward``: ``zero_grad`` and ``training_step``), ``backward_ms`` (``on_before_backward``
  to ``on_after_backward``; on the step's last micro-batch with DDP this includes the wait for the
  gradient all-reduces) and ``micro_ms`` (their sum); ``optimizer_ms`` (``on_after_backward`` of the
  last micro-batch to the end: ``on_before_optimizer_step``, ``optimizer.step()``, Lightning's logging
  bookkeeping); ``host_ms`` host wall time from start to end; ``host_sync_ms`` is null: the
  synchronising calls are inside Lightning (converting logged tensors to numbers for the progress bar
  on rank 0 and for the logger every ``log_every_n_steps``) where a callback cannot time them;
  ``gap_after_ms`` GPU time from this iteration's end to the next one's start (the next batch's fetch
  and copy, progress bar and logger work); ``start_unix_ns``; ``gpu_start_ms`` after iteration 0's
  start on the same rank.
- ``extra_work``: one row per ``log_metrics`` call of the logger on each rank (Lightning calls it on
  every rank after turning the logged tensors into numbers; only rank 0 writes the file): ``rank``, ``kind`` ``logger_write``, ``after_iteration``, ``gpu_ms`` and
  ``host_ms`` of the gap after that iteration.
- ``iter_ms_per_rank``, ``median_iter_ms_per_rank``; what ran: options, parallelism, params, model,
  world_size, gpu_name, torch / pytorch_lightning / CUDA / NCCL versions, date, ``timing_source``
  (``cuda_events``, or ``host_perf_counter`` with ``--cpu``).
"""

import argparse
import datetime
import json
import os
import statistics
import time

import pytorch_lightning as pl
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from pytorch_lightning.loggers import CSVLogger
from pytorch_lightning.strategies import FSDPStrategy


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, n, seq_len, vocab, seed):
        g = torch.Generator().manual_seed(seed)
        self.tokens = torch.randint(vocab, (n, seq_len + 1), generator=g)

    def __len__(self):
        return len(self.tokens)

    def __getitem__(self, i):
        return self.tokens[i, :-1], self.tokens[i, 1:]


class LitGPT(pl.LightningModule):
    def __init__(self, vocab=8192, seq_len=256, n_layer=4, d_model=512, n_head=8, lr=3e-4):
        super().__init__()
        self.save_hyperparameters()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.zeros(1, seq_len, d_model))
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(d_model, n_head, 4 * d_model, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True)
            for _ in range(n_layer))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, idx):
        t = idx.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=idx.device)
        x = self.embed(idx) + self.pos[:, :t]
        for layer in self.layers:
            x = layer(x, src_mask=mask, is_causal=True)
        return self.head(self.norm(x))

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=0.1)


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


class GroundTruth(pl.Callback):
    """Marks every optimizer step and micro-batch with CUDA events; reads them after training."""

    def __init__(self, clock):
        self.clock, self.rows, self.row, self.logged = clock, [], None, []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self.row is None:
            self.row = {"start_unix_ns": time.time_ns(), "h0": time.perf_counter(), "micro": [],
                        "stepped": False}
        self.row["micro"].append([self.clock.mark()])

    def on_before_backward(self, trainer, pl_module, loss):
        self.row["micro"][-1].append(self.clock.mark())

    def on_after_backward(self, trainer, pl_module):
        self.row["micro"][-1].append(self.clock.mark())

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.row["stepped"] = True

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.row["stepped"]:
            self.row |= {"end": self.clock.mark(), "h_end": time.perf_counter()}
            self.rows.append(self.row)
            self.row = None

    def record(self, rank):
        c, first = self.clock, self.rows[0]["micro"][0][0]
        out = []
        for k, row in enumerate(self.rows):
            fwd = [c.ms(m[0], m[1]) for m in row["micro"]]
            bwd = [c.ms(m[1], m[2]) for m in row["micro"]]
            nxt = self.rows[k + 1] if k + 1 < len(self.rows) else None
            out.append({
                "iteration": k, "iter_ms": c.ms(row["micro"][0][0], row["end"]),
                "micro_steps": len(row["micro"]), "micro_ms": [f + b for f, b in zip(fwd, bwd, strict=True)],
                "forward_ms": fwd, "backward_ms": bwd, "optimizer_ms": c.ms(row["micro"][-1][2], row["end"]),
                "host_ms": (row["h_end"] - row["h0"]) * 1e3, "host_sync_ms": None,
                "gap_after_ms": c.ms(row["end"], nxt["micro"][0][0]) if nxt else None,
                "gap_after_host_ms": (nxt["h0"] - row["h_end"]) * 1e3 if nxt else None,
                "start_unix_ns": row["start_unix_ns"], "gpu_start_ms": c.ms(first, row["micro"][0][0]),
            })
        extra = [{"rank": rank, "kind": "logger_write", "after_iteration": k,
                  "gpu_ms": out[k]["gap_after_ms"] if k < len(out) else None,
                  "host_ms": out[k]["gap_after_host_ms"] if k < len(out) else None} for k in self.logged]
        return {"iterations": out, "extra_work": extra}


class NotingCSVLogger(CSVLogger):
    """The stock CSV logger; also notes after which optimizer step it wrote (for the ground truth)."""

    def __init__(self, *args, truth=None, **kw):
        super().__init__(*args, **kw)
        self.truth, self.trainer = truth, None

    def log_metrics(self, metrics, step=None):
        if self.trainer is not None and "train_loss" in metrics:
            self.truth.logged.append(self.trainer.global_step - 1)
        super().log_metrics(metrics, step)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--strategy", choices=["ddp", "fsdp"], default="ddp")
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--log-every", type=int, default=4)
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
    if cuda:
        torch.set_float32_matmul_precision("high")
    world = int(os.environ.get("WORLD_SIZE", 1))
    pl.seed_everything(0, verbose=False)
    model = LitGPT(a.vocab, a.seq_len, a.n_layer, a.n_embd, a.n_head)
    params = sum(q.numel() for q in model.parameters())
    data = RandomTokens(a.steps * a.accum * a.batch * world, a.seq_len, a.vocab, seed=1)
    loader = torch.utils.data.DataLoader(data, batch_size=a.batch, shuffle=True, pin_memory=cuda)

    strategy = "ddp" if a.strategy == "ddp" else FSDPStrategy(auto_wrap_policy={nn.TransformerEncoderLayer})
    clock = Clock(cuda)
    truth_cb = GroundTruth(clock)
    logger = NotingCSVLogger(os.path.join(a.out, "lightning"), name="job", truth=truth_cb)
    trainer = pl.Trainer(accelerator="gpu" if cuda else "cpu", devices=world, strategy=strategy,
                         max_steps=a.steps, accumulate_grad_batches=a.accum, log_every_n_steps=a.log_every,
                         logger=logger, callbacks=[truth_cb], enable_checkpointing=False,
                         default_root_dir=os.path.join(a.out, "lightning"))
    logger.trainer = trainer
    trainer.fit(model, loader)

    if cuda:
        torch.cuda.synchronize()
    rank = trainer.global_rank
    mine = truth_cb.record(rank)
    gathered = [None] * world
    dist.all_gather_object(gathered, mine)
    if rank == 0:
        per_rank = [[r["iter_ms"] for r in g["iterations"]] for g in gathered]
        truth = {
            "program": os.path.basename(__file__), "made_by": "foreign (not the ddp-profile harness)",
            "options": vars(a) | {"out": None},
            "parallelism": ("DDP (Lightning strategy='ddp')" if a.strategy == "ddp" else
                            "FSDP (Lightning FSDPStrategy, FULL_SHARD, one unit per TransformerEncoderLayer)")
            + ", fp32 (TF32 matmuls), AdamW",
            "nvtx": "none from the program",
            "world_size": world, "params": params,
            "model": {"n_layer": a.n_layer, "d_model": a.n_embd, "n_head": a.n_head, "vocab": a.vocab,
                      "seq_len": a.seq_len, "batch_per_rank": a.batch},
            "gpu_name": torch.cuda.get_device_name(torch.cuda.current_device()) if cuda else "cpu",
            "torch_version": torch.__version__, "pytorch_lightning_version": pl.__version__,
            "cuda_version": torch.version.cuda,
            "nccl_version": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
            "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "timing_source": "cuda_events" if cuda else "host_perf_counter",
            "iterations": [g["iterations"] for g in gathered],
            "extra_work": [e for g in gathered for e in g["extra_work"]],
            "iter_ms_per_rank": per_rank,
            "median_iter_ms_per_rank": [statistics.median(r) for r in per_rank],
        }
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "truth.json"), "w") as fh:
            json.dump(truth, fh, indent=1)
        print(f"lightning_job: {params / 1e6:.1f}M params, {world} ranks, median iteration "
              f"{truth['median_iter_ms_per_rank']} ms; wrote truth.json", flush=True)
    dist.barrier()


if __name__ == "__main__":
    main()
