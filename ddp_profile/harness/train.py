"""The one training loop of the harness: every strategy, every model, NVTX-annotated, steady-state timed.

Read top to bottom: `run()` builds the model on its device, wraps it in the strategy, makes the data, and
calls `run_steps()`, which is the loop. Warm-up steps come first (allocator, NCCL communicators and cuBLAS
heuristics settle there); then `torch.cuda.profiler.start()` opens the capture range that
`nsys --capture-range=cudaProfilerApi` records, the measured steps run, and `stop()` closes it.

Each step ends with a device synchronisation, inside the step's NVTX range: it makes CUDA-event and host
times agree on where a step ends and keeps one step's GPU work inside its own range, at the cost of a
small bubble between steps (the same for every strategy).

`python -m ddp_profile.harness ...` is the same as `ddp-profile bench ...` without loading the CLI's other
commands (the GPU machines lack their reporting dependencies).
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import itertools
import json
import os
import platform
import time
from typing import Any, cast

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ddp_profile import nvtx_names as names
from ddp_profile.errors import ConfigError
from ddp_profile.harness import cuda_graph, nvtx_ranges
from ddp_profile.harness.config import MLP_MODEL, TRANSFORMER_PRESETS, RunConfig, run_name
from ddp_profile.harness.gemm_sms import every_sm, gemm_sms
from ddp_profile.harness.launch import comm_setup
from ddp_profile.harness.levers import strategy_kwargs
from ddp_profile.harness.models import build_model, param_stats
from ddp_profile.harness.strategies import Bucketed, ShardedOptimizer, create, world
from ddp_profile.harness.strategies.bucketed import BucketOptimizers
from ddp_profile.harness.strategies.overlap import Overlap
from ddp_profile.harness.strategies.sharded_update import ShardedUpdate

LoopOptimizer = torch.optim.Optimizer | BucketOptimizers | ShardedUpdate
"""What the loop steps: one optimizer, or a strategy's per-bucket / per-part optimizers."""


def gpu_short_name(device: torch.device) -> str:
    """`h100`, `h200`, `a100`, ... from the CUDA device name; `cpu` off the GPU."""
    if device.type != "cuda":
        return "cpu"
    full = torch.cuda.get_device_name(device).upper()
    for known in ("GH200", "H200", "H100", "A100", "B200", "L40S", "A10G", "V100"):
        if known in full:
            return known.lower()
    return "".join(c for c in full.split()[-1].lower() if c.isalnum()) or "gpu"


def make_batches(cfg: RunConfig, rank: int, world_size: int, device: torch.device) -> list[tuple]:
    """Per-step (input, target) for this rank: the same global batch on every rank, sliced by rank.

    Generating the global batch from one seed and slicing it makes each rank's shard disjoint and makes
    a single process on the full batch see exactly the union of the shards (what the tests compare).
    """
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    lo, hi = rank * cfg.batch, (rank + 1) * cfg.batch
    total = cfg.batch * world_size
    batches = []
    for _ in range(cfg.warmup + cfg.steps):
        if cfg.model == MLP_MODEL:
            x = torch.randn(total, 4096, generator=gen)[lo:hi]
            y = torch.randn(total, 2048, generator=gen)[lo:hi]
        else:
            vocab = TRANSFORMER_PRESETS[cfg.model].vocab_size
            tokens = torch.randint(0, vocab, (total, cfg.seq_len + 1), generator=gen)[lo:hi]
            x, y = tokens[:, :-1], tokens[:, 1:]
        batches.append((x.contiguous().to(device), y.contiguous().to(device)))
    return batches


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy for LM logits; mean squared error for the MLP (float targets)."""
    if target.is_floating_point():
        return F.mse_loss(output.float(), target)
    return F.cross_entropy(output.reshape(-1, output.shape[-1]).float(), target.reshape(-1))


def make_optimizer(cfg: RunConfig, params) -> torch.optim.Optimizer:
    """The run's optimizer over `params` (pass the wrapped strategy's `.module.parameters()`: after fsdp's
    wrapping they are the DTensor shards), sharded over ranks when cfg.shard_optimizer is set."""
    params = [p for p in params if p.requires_grad]
    cls: type[torch.optim.Optimizer]
    kwargs: dict[str, Any]  # lr (float), and fused / capturable (bool) for AdamW
    if cfg.optimizer == "sgd":
        cls, kwargs = torch.optim.SGD, {"lr": cfg.lr}
    else:
        on_gpu = bool(params) and params[0].is_cuda
        # a captured step keeps AdamW's step counter on the GPU (capturable), the rest is the same fused kernel
        cls, kwargs = (
            torch.optim.AdamW,
            {"lr": cfg.lr, "fused": on_gpu, **({"capturable": True} if on_gpu and cfg.cuda_graph else {})},
        )
    if cfg.shard_optimizer == "ours":
        return ShardedOptimizer(params, cls, **kwargs)
    if cfg.shard_optimizer == "torch":
        from torch.distributed.optim import ZeroRedundancyOptimizer

        if not dist.is_initialized():
            raise ConfigError(
                "shard_optimizer torch needs a process group: run it under torchrun or with --nproc N"
            )

        return ZeroRedundancyOptimizer(params, optimizer_class=cls, **kwargs)
    return cls(params, **kwargs)


def optimizer_state_bytes(optimizer: LoopOptimizer) -> int:
    """Bytes of the tensors in this rank's optimizer state (a DTensor counts its local shard only).

    ZeroRedundancyOptimizer keeps the state in its wrapped `.optim`; ShardedOptimizer's `.state` is its
    wrapped optimizer's, i.e. the owned shard's."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    state = optimizer.optim.state if isinstance(optimizer, ZeroRedundancyOptimizer) else optimizer.state
    total = 0
    for per_param in state.values():
        for value in per_param.values():
            if isinstance(value, torch.Tensor):
                local = value.to_local() if hasattr(value, "to_local") else value
                total += local.numel() * local.element_size()
    return total


def memory_stats(device: torch.device, optimizer: LoopOptimizer) -> dict:
    """This rank's peak CUDA memory since the reset after setup (None off the GPU) and optimizer-state bytes."""
    cuda = device.type == "cuda"
    return {
        "peak_allocated": torch.cuda.max_memory_allocated(device) if cuda else None,
        "peak_reserved": torch.cuda.max_memory_reserved(device) if cuda else None,
        "optimizer_state": optimizer_state_bytes(optimizer),
    }


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


_BARRIER_ROUNDS = itertools.count()


def default_store():
    """The default process group's key-value store, or None where PyTorch's private accessor moved or fails."""
    try:
        return dist.distributed_c10d._get_default_store()
    except (AttributeError, RuntimeError):
        return None


def host_barrier(tag: str) -> None:
    """Wait until every rank reaches this point, without launching a collective kernel.

    Used at the capture-range boundaries so all ranks start and stop profiling together, and so that no
    extra NCCL kernel (which dist.barrier() would launch) lands inside the captured window.
    """
    rank, world_size = world()
    if world_size == 1:
        return
    store = default_store()
    if store is None:  # fall back to a real barrier
        dist.barrier()
        return
    key = f"ddp_profile/{tag}/{next(_BARRIER_ROUNDS)}"  # fresh key each call: every rank counts alike
    store.add(key, 1)
    while store.add(key, 0) < world_size:
        time.sleep(0.0005)


def gather_to_rank0(payload: dict) -> list[dict]:
    """Every rank's JSON-able ``payload`` in rank order on rank 0 (an empty list elsewhere), through the process
    group's key-value store: no collective on the GPU. A graphed 2-rank NCCL run under nsys stopped in
    ``all_gather_object`` after its capture range, both ranks waiting on the GPU (stack dumps), so no
    profiled graphed 2-rank run ever wrote its JSON; the store needs no GPU. Falls back to
    ``all_gather_object`` where the store cannot be reached."""
    rank, world_size = world()
    if world_size == 1:
        return [payload]
    store = default_store()
    if store is None:  # gather on the process group instead
        gathered: list[object] = [None] * world_size
        dist.all_gather_object(gathered, payload)
        return cast("list[dict]", gathered) if rank == 0 else []
    key = f"ddp_profile/gather/{next(_BARRIER_ROUNDS)}"  # every rank counts its calls alike
    store.set(f"{key}/{rank}", json.dumps(payload))
    if rank != 0:
        return []
    return [
        json.loads(store.get(f"{key}/{r}")) for r in range(world_size)
    ]  # get() waits until the key is set


def run_steps(
    strategy,
    optimizer,
    batches,
    device: torch.device,
    warmup: int,
    dtype: str = "fp32",
    gc_mode: str = "",
    step_sync: bool = True,
    stream: torch.cuda.Stream | None = None,
    forward_every_sm: bool = False,
) -> dict:
    """The loop. Returns {"step_ms": CUDA-event ms per measured step (host ms off the GPU),
    "host_step_ms": wall ms per measured step, "final_loss": float}. ``gc_mode``: RunConfig.gc_mode;
    ``step_sync``: RunConfig.step_sync (False: no wait for the GPU between steps, so "host_step_ms" is the
    time to issue a step, not the step); ``stream``: the side stream of a graphed run
    (``cuda_graph.graph_stream``), whose steps are captured once and replayed; ``forward_every_sm``: the
    forward's GEMMs ignore the run's SM carveout (``gemm_sms.every_sm``; RunConfig.gemm_sm_carveout_scope)."""
    with collector(gc_mode):
        return _steps(
            strategy, optimizer, batches, device, warmup, dtype, step_sync, stream, forward_every_sm
        )


@contextlib.contextmanager
def collector(gc_mode: str):
    """Python's garbage collector as ``RunConfig.gc_mode`` says, restored on exit."""
    if not gc_mode:
        yield
        return
    was_enabled = gc.isenabled()
    gc.collect()
    gc.freeze()
    if gc_mode == "off":
        gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
        gc.unfreeze()


def _steps(
    strategy,
    optimizer,
    batches,
    device: torch.device,
    warmup: int,
    dtype: str,
    step_sync: bool,
    stream: torch.cuda.Stream | None,
    forward_every_sm: bool,
) -> dict:
    cuda = device.type == "cuda"
    rank, world_size = world()
    autocast = (
        (lambda: torch.autocast(device_type=device.type, dtype=torch.bfloat16))
        if dtype == "bf16"
        else contextlib.nullcontext
    )

    def step(x, y):
        strategy.on_train_batch_start()
        optimizer.zero_grad(set_to_none=True)
        with nvtx_ranges.phase(names.FORWARD), autocast(), every_sm(forward_every_sm):
            out = loss_fn(strategy(x), y)
        with nvtx_ranges.phase(names.BACKWARD):
            out.backward()
        strategy.finish_gradient_synchronization()
        with nvtx_ranges.phase(names.OPTIMIZER):
            optimizer.step()
        return out

    run = step
    if (
        stream is not None
    ):  # a graphed run: the same step, captured once (its NVTX phases on the host only then)
        graph, static_x, static_y, static_loss = cuda_graph.capture(
            step, lambda: optimizer.zero_grad(set_to_none=True), batches, stream
        )

        def run(x, y):
            static_x.copy_(x)
            static_y.copy_(y)
            graph.replay()
            return static_loss

    measured = len(batches) - warmup
    events = (
        [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(measured)
        ]
        if cuda
        else []
    )
    host_ms: list[float] = []
    loss = torch.zeros(())
    for i, (x, y) in enumerate(batches):
        if i == warmup:
            _sync(device)
            host_barrier("capture-start")
            if cuda:
                torch.cuda.profiler.start()
            nvtx_ranges.rank_marker(rank, world_size)  # inside the capture range, so nsys records it
        timed = i >= warmup
        t0 = time.perf_counter()
        with nvtx_ranges.step(i):
            if timed and cuda:
                events[i - warmup][0].record()
            loss = run(x, y)
            if timed and cuda:
                events[i - warmup][1].record()
            if step_sync or not cuda:
                _sync(device)
        if timed:
            host_ms.append((time.perf_counter() - t0) * 1e3)
    _sync(device)
    host_barrier("capture-stop")
    if cuda and measured > 0:
        torch.cuda.profiler.stop()
    step_ms = [a.elapsed_time(b) for a, b in events] if cuda else list(host_ms)
    return {"step_ms": step_ms, "host_step_ms": host_ms, "final_loss": float(loss.detach().float().cpu())}


def environment(device: torch.device) -> dict:
    """Versions and hardware for the run JSON (no host names, paths or environment variables)."""
    info: dict[str, str | bool | None] = {
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "python_version": platform.python_version(),
        "nsys_version": os.environ.get("DDP_PROFILE_NSYS_VERSION") or None,
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu_name": "cpu",
        "gpu_short": gpu_short_name(device),
        "nccl_version": None,
    }
    if device.type == "cuda":
        info["gpu_name"] = torch.cuda.get_device_name(device)
        with contextlib.suppress(Exception):
            info["nccl_version"] = ".".join(str(v) for v in torch.cuda.nccl.version())
    info["is_h200"] = info["gpu_short"] == "h200"
    return info


def run(cfg: RunConfig, device: torch.device) -> dict | None:
    """One run on this rank; returns the run record on rank 0 (per-rank times gathered), None elsewhere."""
    with cuda_graph.graph_stream(cfg.cuda_graph, device) as stream:
        return _run(cfg, device, stream)


def _run(cfg: RunConfig, device: torch.device, stream: torch.cuda.Stream | None) -> dict | None:
    rank, world_size = world()
    if cfg.tf32:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(cfg.seed)
    t0 = time.perf_counter()
    model = build_model(cfg.model, device=device, mlp_depth=cfg.mlp_depth)
    levers = strategy_kwargs(cfg)  # the levers its strategy takes (harness/levers.py says which)
    if (
        cfg.overlap_optimizer or cfg.sharded_update
    ):  # the strategy steps its own optimizers (per bucket, per part)
        levers["optimizer_factory"] = lambda params: make_optimizer(cfg, params)
    strategy = create(
        cfg.strategy,
        model,
        bucket_mb=cfg.bucket_mb,
        ddp_nvtx_hook=cfg.ddp_nvtx_hook,
        fsdp_reshard=cfg.fsdp_reshard,
        fsdp_param_dtype=cfg.fsdp_param_dtype,
        **levers,
    )
    # after wrapping: fsdp's parameters are the sharded (DTensor) ones
    optimizer: LoopOptimizer
    if cfg.overlap_optimizer or cfg.sharded_update:  # RunConfig allows them with bucketed / overlap only
        assert isinstance(strategy, (Bucketed, Overlap)) and strategy.optimizer is not None
        optimizer = strategy.optimizer
    else:
        optimizer = make_optimizer(cfg, strategy.module.parameters())
    batches = make_batches(cfg, rank, world_size, device)
    _sync(device)
    setup_s = time.perf_counter() - t0
    if device.type == "cuda":
        # Peaks cover warm-up + measured steps: the reset keeps what setup left allocated (parameters,
        # batches) as the starting level but forgets setup's transient peaks (e.g. initialisation).
        torch.cuda.reset_peak_memory_stats(device)
    with gemm_sms(cfg.gemm_sm_carveout, cfg.blas_library, device) as gemm_levers:
        times = run_steps(
            strategy,
            optimizer,
            batches,
            device,
            cfg.warmup,
            cfg.dtype,
            cfg.gc_mode,
            cfg.step_sync,
            stream,
            forward_every_sm=gemm_levers["applied"] and cfg.gemm_sm_carveout_scope == "backward",
        )
    if cfg.gemm_sm_carveout_scope:
        gemm_levers["scope"] = cfg.gemm_sm_carveout_scope
    times["memory"] = memory_stats(device, optimizer)
    # Hooks on parameters keep model, buckets and optimizer alive past this function (a cycle through
    # autograd's C++ side): a process that runs again (ddp_profile.harness.repeats) would run out of memory.
    strategy.remove_hooks()
    per_rank = gather_to_rank0(times)
    if rank != 0:
        return None
    env = environment(device)
    layout = strategy.layout()
    if isinstance(optimizer, ShardedOptimizer):
        layout = {**layout, **optimizer.layout()}
    record = {
        "run": run_name(cfg, world_size, env["gpu_short"]),
        "config": cfg.to_dict(),
        "strategy": cfg.strategy,
        "shard_optimizer": cfg.shard_optimizer or None,
        "model": cfg.model,
        "dtype": cfg.dtype,
        "world_size": world_size,
        "backend": dist.get_backend() if world_size > 1 else None,
        "bucket_count": layout["buckets"],
        "bucket_bytes": layout["bucket_bytes"],
        "layout": layout,
        "nccl_levers": comm_setup(cfg.nccl_channels, cfg.nccl_high_priority, cfg.nccl_min_ctas),
        "gemm_levers": gemm_levers,
        "cuda_graph": (
            {"captured": True, "eager_warmup_steps": cuda_graph.EAGER_WARMUP}
            if stream is not None
            else {"captured": False, **({"note": "ignored on the CPU"} if cfg.cuda_graph else {})}
        ),
        **param_stats(model),
        **env,
        "setup_s": round(setup_s, 3),
        "measured_steps": cfg.steps,
        "warmup_steps": cfg.warmup,
        "step_ms_per_rank": [t["step_ms"] for t in per_rank],
        "host_step_ms_per_rank": [t["host_step_ms"] for t in per_rank],
        "final_loss_per_rank": [t["final_loss"] for t in per_rank],
        # Peak CUDA memory over warm-up + measured steps (peak stats reset after setup); None on the CPU.
        "peak_memory_allocated_bytes_per_rank": [t["memory"]["peak_allocated"] for t in per_rank],
        "peak_memory_reserved_bytes_per_rank": [t["memory"]["peak_reserved"] for t in per_rank],
        "optimizer_state_bytes_per_rank": [t["memory"]["optimizer_state"] for t in per_rank],
        "timing_source": "cuda_events" if device.type == "cuda" else "host",
    }
    # Slowest rank per step is the step time the job actually sees; its median is the headline number.
    slowest = [max(col) for col in zip(*record["step_ms_per_rank"], strict=True)]
    record["step_ms_slowest_rank"] = slowest
    record["step_ms_median"] = sorted(slowest)[len(slowest) // 2] if slowest else None
    return record
