"""GPT-2 (124M) training jobs for the what-if ledger: one baseline job per advice rule, and the job with the
change that rule advises, timed by the program's own CUDA events.

Stand-alone: torch only (the model and stopwatch of scripts/foreign/jobkit.py), no NVTX from the program.
Every job is data-parallel GPT-2 small (12 layers, 768 wide, tied embeddings), fp32 with TF32 matmuls,
AdamW, random tokens.

Jobs (``JOBS``: the baselines) and rules (``RULES``: rule id -> job, the change in words, what it sets):

    gpt2-ddp            DDP, default 25 MB buckets, batch 8 x 512 per rank
    gpt2-ddp-slowhost   ... rank 1 sleeps 6 ms on the host before each step (a slow data loader, say)
    gpt2-ddp-slowgpu    ... rank 1 runs ~5 ms of extra GEMMs before each step (a metric, an EMA update)
    gpt2-ddp-item       ... every rank reads loss.item() after every step
    gpt2-ddp-b1         ... batch 1 x 128 per rank (kernel launches outlast the GPU work)
    gpt2-fsdp2          FSDP2 fully_shard per block + root, default (implicit) prefetch
    gpt2-ddp-b32        DDP, batch 32 x 512 per rank: GPU-bound, also under nsys
    gpt2-ddp-b32-slowgpu ... rank 1 runs ~5 ms of extra GEMMs before each step
    gpt2-ddp-b2         ... batch 2 x 512 per rank (launch-bound's second job: more GPU work per launch)
    gpt2-ddp-bwdsync    ... every rank calls torch.cuda.synchronize() after each backward, before the
                        optimizer step (host-sync's second job: another call, in another place of the step)

Three ways to run it (torchrun, one process per GPU):

    --variant baseline|changed --rule R --steps S [--profile-from W]
        one job alone: W warm-up steps, then S recorded steps (the profiler API brackets them when W > 0:
        ``nsys profile --capture-range=cudaProfilerApi``); writes <out>/truth.json (jobkit's format).
    --repeats N --rules R1,R2,...
        for each rule in turn, the baseline and the changed job built side by side in this one process
        (their own model, DDP/FSDP wrapper and optimizer each; a runner whose change is only what the loop
        does, such as a sleep, is built once) and run in alternating segments, baseline first:
        A B A B ... (2N segments), each ``--warmup`` steps (more for a runner's first segment, which may
        compile) then ``--steps`` recorded steps. Writes <out>/<rule>/repeats.json per finished rule.

A recorded step's time is its loop period (jobkit ``step_ms``): this step's start event to the next step's
start event, per rank. ``step_ms`` of a repeat is, per recorded step, the mean of that period over ranks.
"""

import argparse
import datetime
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "foreign"))
import jobkit  # noqa: E402

SLOW_RANK = 1
GEMM_N = 6144  # extra GEMMs of the slow-GPU job: 6144^3 (about 1.2 ms each in TF32 on an H200)

BASE = dict(kind="ddp", bucket_mb=25.0, grad_view=False, zero=False, max_ctas=0, compile="", prefetch=0,
            sleep_ms=0.0, gemm_ms=0.0, item=False, bwd_sync=False, batch=8, seq_len=512)
JOBS = {
    "gpt2-ddp": {},
    "gpt2-ddp-slowhost": dict(sleep_ms=6.0),
    "gpt2-ddp-slowgpu": dict(gemm_ms=5.0),
    "gpt2-ddp-item": dict(item=True),
    "gpt2-ddp-b1": dict(batch=1, seq_len=128),
    "gpt2-fsdp2": dict(kind="fsdp"),
    # GPU-bound (batch 32 x 512: the GPU's work outlasts the host's launches, also under nsys)
    "gpt2-ddp-b32": dict(batch=32),
    "gpt2-ddp-b32-slowgpu": dict(batch=32, gemm_ms=5.0),
    # second jobs of the rules whose prediction was rebuilt from their first pair (issue: advice you can trust)
    "gpt2-ddp-b2": dict(batch=2),
    "gpt2-ddp-bwdsync": dict(bwd_sync=True),
}
RULES = {  # rule -> (baseline job, the change in words, the settings the change sets)
    "balanced": ("gpt2-ddp", "none: the same job again (A/A), the noise floor; no straggler advice expected", {}),
    "straggler-host": ("gpt2-ddp-slowhost", f"rank {SLOW_RANK}'s 6 ms host sleep before each step removed",
                       dict(sleep_ms=0.0)),
    "straggler-gpu": ("gpt2-ddp-slowgpu", f"rank {SLOW_RANK}'s extra GEMMs (~5 ms) before each step removed",
                      dict(gemm_ms=0.0)),
    "host-sync": ("gpt2-ddp-item", "loss.item() after every step dropped", dict(item=False)),
    "launch-bound": ("gpt2-ddp-b1", "CUDA graphs: torch.compile(mode='reduce-overhead') on the model before DDP",
                     dict(compile="reduce-overhead")),
    "comm-tail": ("gpt2-ddp", "DDP bucket_cap_mb 25 (the default) -> 100", dict(bucket_mb=100.0)),
    "contention": ("gpt2-ddp", "NCCL at most 8 CTAs (ProcessGroupNCCL config max_ctas=8) for DDP's group",
                   dict(max_ctas=8)),
    "optimizer-shard": ("gpt2-ddp", "ZeroRedundancyOptimizer(AdamW): each rank updates a quarter of the "
                        "parameters, then broadcasts them", dict(zero=True)),
    "grad-copy-back": ("gpt2-ddp", "DDP gradient_as_bucket_view=True (no copy from the buckets back to .grad)",
                       dict(grad_view=True)),
    # A rule's second job: key "<rule>@<tag>" (the ledger's rule id is the part before "@")
    "balanced@b32": ("gpt2-ddp-b32", "none: the same job again (A/A), the noise floor; no straggler advice expected",
                     {}),
    "straggler-gpu@b32": ("gpt2-ddp-b32-slowgpu", f"rank {SLOW_RANK}'s extra GEMMs (~5 ms) before each step removed",
                          dict(gemm_ms=0.0)),
    "launch-bound@b2": ("gpt2-ddp-b2", "CUDA graphs: torch.compile(mode='reduce-overhead') on the model before "
                        "DDP", dict(compile="reduce-overhead")),
    "host-sync@bwdsync": ("gpt2-ddp-bwdsync", "torch.cuda.synchronize() after every backward dropped",
                          dict(bwd_sync=False)),
    "fsdp-prefetch": ("gpt2-fsdp2", "FSDP2 explicit prefetch: each block's AllGather issued 2 blocks ahead, in "
                      "the forward and the backward", dict(prefetch=2)),
}


def gemm_size(cuda):
    return GEMM_N if cuda else 128


def config(rule, variant):
    job, _, change = RULES[rule]
    cfg = BASE | JOBS[job]
    return cfg | change if variant == "changed" else cfg


class Runner:
    """One job's model, wrapper, optimizer and per-step habits, built once, stepped many times."""

    groups: dict = {}  # max_ctas -> process group, made once per process (new_group is collective)

    def __init__(self, cfg, a, rank, device, cuda):
        self.cfg, self.rank, self.device, self.cuda = cfg, rank, device, cuda
        a_shape = argparse.Namespace(**(vars(a) | {"batch": cfg["batch"], "seq_len": cfg["seq_len"]}))
        self.kw = jobkit.model_kwargs(a_shape)
        torch.manual_seed(0)
        gpt = jobkit.GPT(**self.kw).to(device)
        self.params = sum(q.numel() for q in gpt.parameters())
        if cfg["kind"] == "fsdp":
            from torch.distributed.fsdp import fully_shard
            blocks = list(gpt.blocks)
            for block in blocks:
                fully_shard(block)
            fully_shard(gpt)
            k = cfg["prefetch"]
            for i, block in enumerate(blocks):
                if k:
                    block.set_modules_to_forward_prefetch(blocks[i + 1:i + 1 + k])
                    block.set_modules_to_backward_prefetch(blocks[max(i - k, 0):i][::-1])
            self.model = gpt
            self.opt = torch.optim.AdamW(gpt.parameters(), lr=3e-4, weight_decay=0.1)
        else:
            module = torch.compile(gpt, mode=cfg["compile"]) if cfg["compile"] else gpt
            self.model = DDP(module, device_ids=[device.index] if cuda else None, bucket_cap_mb=cfg["bucket_mb"],
                             gradient_as_bucket_view=cfg["grad_view"], process_group=self.group(cfg["max_ctas"]))
            if cfg["zero"]:
                from torch.distributed.optim import ZeroRedundancyOptimizer
                self.opt = ZeroRedundancyOptimizer(self.model.parameters(), optimizer_class=torch.optim.AdamW,
                                                   lr=3e-4, weight_decay=0.1)
            else:
                self.opt = torch.optim.AdamW(self.model.parameters(), lr=3e-4, weight_decay=0.1)
        self.get = jobkit.batches(a_shape, self.kw, rank, device, cuda)
        self.x, self.y = self.get()
        self.gemms, self.gemm_ms_each = 0, None
        if cfg["gemm_ms"] and rank == SLOW_RANK:
            self.calibrate_gemms(cfg["gemm_ms"])
        self.segments = 0

    def group(self, max_ctas):
        if not max_ctas or not self.cuda:
            return None
        if max_ctas not in Runner.groups:
            opts = dist.ProcessGroupNCCL.Options()
            opts.config.max_ctas = max_ctas
            Runner.groups[max_ctas] = dist.new_group(backend="nccl", pg_options=opts)
        return Runner.groups[max_ctas]

    def calibrate_gemms(self, target_ms):
        n = gemm_size(self.cuda)
        self.ga, self.gb = (torch.randn(n, n, device=self.device) for _ in range(2))
        self.gc = torch.empty(n, n, device=self.device)
        for _ in range(3):
            torch.mm(self.ga, self.gb, out=self.gc)
        t0 = time.perf_counter()
        if self.cuda:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
        for _ in range(10):
            torch.mm(self.ga, self.gb, out=self.gc)
        if self.cuda:
            e1.record()
            torch.cuda.synchronize()
            each = e0.elapsed_time(e1) / 10
        else:
            each = (time.perf_counter() - t0) * 1e3 / 10
        self.gemm_ms_each = each
        self.gemms = max(1, round(target_ms / each))

    def step(self, clock, i):
        cfg = self.cfg
        clock.begin(i)
        if cfg["sleep_ms"] and self.rank == SLOW_RANK:
            time.sleep(cfg["sleep_ms"] / 1e3)
        for _ in range(self.gemms if cfg["gemm_ms"] else 0):
            torch.mm(self.ga, self.gb, out=self.gc)
        if cfg["compile"] == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()
        clock.fwd_start()
        loss = self.model(self.x, self.y)
        clock.fwd_end()
        self.x, self.y = self.get()
        loss.backward()
        clock.bwd_end()
        if cfg["bwd_sync"] and self.cuda:
            torch.cuda.synchronize()  # a timing habit: wait for the backward before the optimizer step
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        clock.end()
        if cfg["item"]:
            loss.item()  # the logging line that waits for the GPU every step
        return loss

    def segment(self, warmup, steps, profile_from=0):
        """``warmup`` + ``steps`` steps; the clock records the last ``steps``."""
        clock = jobkit.StepClock(self.cuda, profile_from, record_from=warmup)
        for i in range(warmup + steps):
            loss = self.step(clock, i)
        clock.finish()
        self.segments += 1
        self.last_loss = float(loss.detach())
        return clock


def gathered_periods(clock, world):
    rows, _ = clock.records()
    per_rank = [None] * world
    dist.all_gather_object(per_rank, [r["step_ms"] for r in rows])
    iters = [None] * world
    dist.all_gather_object(iters, [r["iter_ms"] for r in rows])
    return per_rank, iters


def run_repeats(a, rank, world, device, cuda):
    last_s = None
    for rule in a.rules.split(","):
        t0 = time.time()
        try:
            last_s = repeat_rule(a, rule, rank, world, device, cuda, last_s, t0)
        except Exception as exc:  # noqa: BLE001 - every rank builds alike, so all fail here together
            if rank == 0:
                print(f"{rule}: failed: {type(exc).__name__}: {exc}", flush=True)
                write_json(os.path.join(a.out, rule, "failed.json"), {"rule": rule, "error": repr(exc)})
            if cuda:
                torch.cuda.empty_cache()
            dist.barrier()


def repeat_rule(a, rule, rank, world, device, cuda, last_s, t0):
    """The interleaved repeats of one rule; returns the seconds it took (None when skipped)."""
    job, change, _ = RULES[rule]
    # Time box: a rule that would end after --until is skipped (rank 0 decides, every rank follows).
    need = max(last_s or 0.0, a.rule_s) * (4 if config(rule, "changed")["compile"] else 1)
    verdict = [a.until and t0 + need > a.until]
    dist.broadcast_object_list(verdict, src=0)
    if verdict[0]:
        if rank == 0:
            print(f"{rule}: skipped (needs ~{need:.0f} s, {a.until - t0:.0f} s left)", flush=True)
        return last_s
    cfgs = {v: config(rule, v) for v in ("baseline", "changed")}
    runners = {"baseline": Runner(cfgs["baseline"], a, rank, device, cuda)}
    loop_only = {k for k in BASE if cfgs["baseline"][k] != cfgs["changed"][k]} <= {"sleep_ms", "gemm_ms", "item", "bwd_sync"}
    if loop_only:  # same model and wrapper: only the loop's habit differs
        runners["changed"] = runners["baseline"]
    repeats = []
    for r in range(a.repeats):
        for variant in ("baseline", "changed"):
            if variant not in runners:
                runners[variant] = Runner(cfgs[variant], a, rank, device, cuda)
            run = runners[variant]
            run.cfg = cfgs[variant]  # a shared runner: the loop's habits follow the variant
            first = r == 0 and (variant == "baseline" or not loop_only)
            warm = a.first_warmup if first else a.warmup
            clock = run.segment(warm, a.steps)
            per_rank, iters = gathered_periods(clock, world)
            mean = [statistics.fmean(col) for col in zip(*per_rank, strict=True)]
            repeats.append({"order": len(repeats), "variant": variant, "warmup_steps": warm,
                            "step_ms": mean, "step_ms_per_rank": per_rank, "iter_ms_per_rank": iters,
                            "median_step_ms": statistics.median(mean)})
    if rank == 0:
        meds = {v: statistics.median([x["median_step_ms"] for x in repeats if x["variant"] == v])
                for v in ("baseline", "changed")}
        base_run = runners["baseline"]
        record = {
            "rule": rule.split("@")[0], "pair": rule, "job": job, "change": change, "world_size": world,
            "program": os.path.basename(__file__),
            "command": (f"torchrun --standalone --nproc_per_node={world} scripts/whatif/{os.path.basename(__file__)} "
                        f"--repeats {a.repeats} --rules {a.rules} --steps {a.steps} --warmup {a.warmup} "
                        f"--first-warmup {a.first_warmup}"),
            "baseline_config": cfgs["baseline"], "changed_config": cfgs["changed"],
            "protocol": (f"one process (torchrun, {world} ranks), both variants built side by side "
                         + ("(one model: the change is only what the loop does)" if loop_only else
                            "(own model, wrapper and optimizer each)")
                         + f"; {a.repeats} repeats of baseline then changed segments, alternating A B A B ...; "
                         f"each segment {a.warmup} warm-up steps ({a.first_warmup} in a variant's first) then "
                         f"{a.steps} recorded steps; step_ms per recorded step = the mean over ranks of that "
                         "step's loop period (CUDA events, start of the step to start of the next)"),
            "params": base_run.params, "model": base_run.kw,
            "gpu_name": torch.cuda.get_device_name(device) if cuda else "cpu",
            "torch_version": torch.__version__,
            "nccl_version": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
            "timing_source": "cuda_events" if cuda else "host_perf_counter",
            "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "slow_rank": SLOW_RANK if cfgs["baseline"]["sleep_ms"] or cfgs["baseline"]["gemm_ms"] else None,
            "extra_gemms_per_step": None, "repeats": repeats,
            "median_step_ms": meds, "seconds": round(time.time() - t0, 1),
        }
        write_json(os.path.join(a.out, rule, "repeats.json"), record)
        print(f"{rule}: baseline {meds['baseline']:.2f} ms, changed {meds['changed']:.2f} ms per step "
              f"({record['seconds']} s)", flush=True)
    gemm = [None] * world
    dist.all_gather_object(gemm, (runners["baseline"].gemms, runners["baseline"].gemm_ms_each))
    if rank == 0 and cfgs["baseline"]["gemm_ms"]:
        path = os.path.join(a.out, rule, "repeats.json")
        with open(path) as fh:
            record = json.load(fh)
        record["extra_gemms_per_step"] = {"rank": SLOW_RANK, "count": gemm[SLOW_RANK][0], "size": gemm_size(cuda),
                                          "calibrated_ms_each": gemm[SLOW_RANK][1]}
        write_json(path, record)
    del runners
    if cuda:
        torch.cuda.empty_cache()
    dist.barrier()
    return time.time() - t0


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(obj, fh, indent=1)
    os.replace(tmp, path)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rule", choices=sorted(RULES), help="with --variant: the job to run alone")
    p.add_argument("--variant", choices=["baseline", "changed"])
    p.add_argument("--rules", default="", help="with --repeats: comma-separated rules, interleaved A/B in turn")
    p.add_argument("--repeats", type=int, default=0)
    p.add_argument("--steps", type=int, default=8, help="recorded steps (per segment with --repeats)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up steps per segment / before the capture")
    p.add_argument("--first-warmup", type=int, default=6, help="warm-up steps of a variant's first segment")
    p.add_argument("--until", type=float, default=0.0, help="with --repeats: Unix time by which to finish; "
                   "rules that would end later are skipped (0: no limit)")
    p.add_argument("--rule-s", type=float, default=15.0, help="with --until: seconds a rule is expected to take "
                   "before one has been timed (a compiling rule: four times as long)")
    p.add_argument("--profile-from", type=int, default=0, help="alone: open the cudaProfilerApi capture after "
                   "this many warm-up steps (0: never call the profiler API)")
    jobkit.add_model_args(p)
    a = p.parse_args()
    if bool(a.variant) == bool(a.repeats) or (a.variant and not a.rule) or (a.repeats and not a.rules):
        p.error("give --rule R --variant V, or --repeats N --rules R1,R2")

    cuda = torch.cuda.is_available() and not a.cpu
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    jobkit.setup_cuda(cuda, device)
    if a.repeats:
        run_repeats(a, rank, world, device, cuda)
    else:
        cfg = config(a.rule, a.variant)
        run = Runner(cfg, a, rank, device, cuda)
        warm = a.profile_from or a.warmup
        clock = run.segment(warm, a.steps, profile_from=a.profile_from)
        gemm = [None] * world
        dist.all_gather_object(gemm, (run.gemms, run.gemm_ms_each))
        job, change, _ = RULES[a.rule]
        jobkit.write_truth(dist, clock, a, __file__,
                           f"{cfg['kind'].upper()} GPT-2 ({run.params / 1e6:.0f}M params), AdamW, fp32 (TF32 matmuls); settings {cfg}",
                           run.params, run.kw, device, cuda,
                           {"rule": a.rule, "variant": a.variant, "job": job if a.variant == "baseline" else
                            f"{job} + change", "change": change, "config": cfg, "final_loss": run.last_loss,
                            "slow_rank": SLOW_RANK if cfg["sleep_ms"] or cfg["gemm_ms"] else None,
                            "extra_gemms_per_step": {"rank": SLOW_RANK, "count": gemm[SLOW_RANK][0], "size": gemm_size(cuda),
                                                     "calibrated_ms_each": gemm[SLOW_RANK][1]}
                            if cfg["gemm_ms"] else None})
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
