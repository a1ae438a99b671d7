"""The harness's command line (`python -m ddp_profile.harness`, `ddp-profile bench`): run once, write the JSON.

Under torchrun it reads RANK / WORLD_SIZE / LOCAL_RANK and uses NCCL on GPUs; without torchrun,
`--nproc N` spawns N local CPU processes joined by gloo (development and tests). Imports only torch,
nvtx and the standard library, because it runs on GPU machines without the reporting dependencies.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ddp_profile.errors import UsageError, run_main
from ddp_profile.harness import levers
from ddp_profile.harness.config import (
    DTYPES,
    FSDP_PARAM_DTYPES,
    MODELS,
    OPTIMIZERS,
    STRATEGIES,
    RunConfig,
    run_name,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--strategy", required=True, choices=STRATEGIES, help="gradient synchronisation strategy")
    p.add_argument(
        "--model", default="tiny", choices=MODELS, help="model preset (default tiny; the seeds use xl)"
    )
    p.add_argument("--batch", type=int, default=4, help="sequences per rank per step (default 4)")
    p.add_argument("--seq-len", type=int, default=256, help="tokens per sequence (default 256)")
    p.add_argument("--steps", type=int, default=5, help="measured steps (default 5)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up steps before the capture range (default 3)")
    p.add_argument(
        "--bucket-mb", type=float, default=25.0, help="bucket cap, MiB, for bucketed/torch_ddp (default 25)"
    )
    p.add_argument("--dtype", default="fp32", choices=DTYPES, help="fp32, or bf16 autocast (default fp32)")
    p.add_argument("--tf32", action="store_true", help="allow TF32 matmuls in fp32 runs")
    p.add_argument("--optimizer", default="adamw", choices=OPTIMIZERS, help="default adamw")
    p.add_argument("--lr", type=float, default=1e-4, help="learning rate (default 1e-4)")
    p.add_argument("--seed", type=int, default=0, help="model and data seed (default 0)")
    p.add_argument(
        "--ddp-nvtx-hook",
        action="store_true",
        help="torch_ddp: per-bucket NVTX ranges through a comm hook (changes DDP's copy path; default stock)",
    )
    p.add_argument(
        "--shard-optimizer",
        nargs="?",
        const="ours",
        default="",
        choices=("ours", "torch"),
        help="shard optimizer state over ranks (ZeRO-1) on top of a gradient strategy: ours "
        "(ShardedOptimizer, the default when given bare) or torch (ZeroRedundancyOptimizer)",
    )
    p.add_argument(
        "--fsdp-no-reshard",
        action="store_true",
        help="fsdp: keep gathered parameters from forward to backward (reshard_after_forward=False)",
    )
    p.add_argument(
        "--fsdp-param-dtype",
        default="fp32",
        choices=FSDP_PARAM_DTYPES,
        help="fsdp: bf16 = MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) (default fp32)",
    )
    p.add_argument("--mlp-depth", type=int, default=8, help="Linear layers of the mlp model (default 8)")
    p.add_argument("--out", default="traces/bench", help="folder for <run>.json (default traces/bench)")
    p.add_argument("--nproc", type=int, default=1, help="without torchrun: spawn N local gloo CPU processes")
    p.add_argument(
        "--backend", default="", choices=("", "gloo", "nccl"), help="default: nccl on GPU, gloo on CPU"
    )
    p.add_argument(
        "--print-run-name",
        action="store_true",
        help="print the run name (world size from torchrun or --nproc) and exit",
    )
    levers.add_arguments(p)  # the levers' flags, from their table


def config_from_args(args: argparse.Namespace) -> RunConfig:
    return RunConfig(
        strategy=args.strategy,
        model=args.model,
        batch=args.batch,
        seq_len=args.seq_len,
        steps=args.steps,
        warmup=args.warmup,
        bucket_mb=args.bucket_mb,
        dtype=args.dtype,
        tf32=args.tf32,
        seed=args.seed,
        optimizer=args.optimizer,
        lr=args.lr,
        mlp_depth=args.mlp_depth,
        backend=args.backend,
        ddp_nvtx_hook=args.ddp_nvtx_hook,
        shard_optimizer=args.shard_optimizer or "",
        fsdp_reshard=not args.fsdp_no_reshard,
        fsdp_param_dtype=args.fsdp_param_dtype,
        **levers.from_args(args),
    )


def _finish(record: dict | None, out: str) -> None:
    if record is None:
        return
    from ddp_profile.safeio import write_record_atomic

    path = write_record_atomic(Path(out) / f"{record['run']}.json", record, make_parents=True)
    print(
        f"{record['run']}: median step {record['step_ms_median']:.2f} ms ({record['timing_source']}, "
        f"slowest rank, {record['measured_steps']} steps) on {record['world_size']} x {record['gpu_name']}; "
        f"wrote {path}",
        flush=True,
    )


def _torchrun_main(cfg: RunConfig, out: str, info) -> None:
    import torch.distributed as dist

    from ddp_profile.harness.launch import arm_stack_dump, default_backend, device_for, init_process_group
    from ddp_profile.harness.train import host_barrier
    from ddp_profile.harness.train import run as train_run

    arm_stack_dump()
    backend = default_backend(cfg.backend)
    device = device_for(backend, info.local_rank)
    init_process_group(
        info,
        backend,
        nccl_channels=cfg.nccl_channels,
        nccl_high_priority=cfg.nccl_high_priority,
        nccl_min_ctas=cfg.nccl_min_ctas,
    )
    exit_without_teardown = skips_group_teardown(cfg, backend, info.world_size)
    try:
        _finish(train_run(cfg, device), out)
        # Every rank waits until rank 0 has written the run JSON: tearing the group down while a peer is
        # still inside a gloo call aborts that peer ("terminate called without an active exception"). A
        # store barrier, not dist.barrier(): no GPU collective after the steps (train.gather_to_rank0 says why).
        host_barrier("run-end")
    finally:
        if not exit_without_teardown:
            dist.destroy_process_group()
    if exit_without_teardown:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def skips_group_teardown(cfg: RunConfig, backend: str, world_size: int) -> bool:
    """Whether a torchrun rank ends its process once its outputs are written, without destroying the group.

    True for graphed runs on NCCL with peers: a CUDA graph that captured NCCL collectives can leave
    `destroy_process_group` hanging in ncclCommDestroy (pytorch/pytorch#115388). The JSON and the capture
    range are complete by then, so nothing is lost by leaving at once. (Not the whole story: graphed 2-rank
    runs under nsys with ``--cuda-graph-trace=node`` have stopped before writing their JSON with and without
    this, while the same runs without nsys end normally; docs/campaigns.md records when.)
    """
    return bool(cfg.cuda_graph) and backend == "nccl" and world_size > 1


def _local_worker(info, cfg: RunConfig, out: str) -> None:
    import torch

    from ddp_profile.harness.train import run as train_run

    _finish(train_run(cfg, torch.device("cpu")), out)


MAX_NPROC = 256
"""Local gloo processes --nproc may spawn (each is a full Python + torch process)."""


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.nproc <= MAX_NPROC:  # before the config, so nothing is started for a senseless count
        raise UsageError(f"--nproc must be between 1 and {MAX_NPROC}, got {str(args.nproc)[:30]}")
    from ddp_profile.safeio import check_output_folder

    check_output_folder(args.out, flag="--out")
    cfg = config_from_args(args)
    from ddp_profile.harness.launch import default_backend, torchrun_env

    info = torchrun_env()
    if info is not None and args.nproc != 1 and args.nproc != info.world_size:
        raise UsageError("--nproc conflicts with torchrun's WORLD_SIZE; drop --nproc under torchrun")
    if args.print_run_name:
        import torch

        from ddp_profile.harness.train import gpu_short_name

        on_gpu = default_backend(cfg.backend) == "nccl"
        device = torch.device("cuda", 0) if on_gpu else torch.device("cpu")
        print(run_name(cfg, info.world_size if info else args.nproc, gpu_short_name(device)))
        return 0
    if info is not None:
        _torchrun_main(cfg, args.out, info)
    elif args.nproc > 1:
        if cfg.backend == "nccl":
            raise UsageError("--nproc spawns local CPU (gloo) processes; for NCCL on GPUs use torchrun")
        from ddp_profile.harness.launch import spawn_local

        if cfg.nccl_channels or cfg.nccl_high_priority or cfg.nccl_min_ctas:
            print(
                "note: --nccl-channels/--nccl-high-priority/--nccl-min-ctas are ignored on gloo (recorded in the run JSON)",  # noqa: E501
                file=sys.stderr,
                flush=True,
            )
        spawn_local(args.nproc, _local_worker, cfg.replace(backend="gloo"), args.out)
    else:
        import torch

        from ddp_profile.harness.train import run as train_run

        on_gpu = default_backend(cfg.backend) == "nccl"
        _finish(train_run(cfg, torch.device("cuda", 0) if on_gpu else torch.device("cpu")), args.out)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (`python -m ddp_profile.harness`): same flags, same one-line errors as the CLI."""
    parser = argparse.ArgumentParser(
        prog="python -m ddp_profile.harness",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    parser.add_argument("--debug", action="store_true", help="show full tracebacks for errors")
    args = parser.parse_args(argv)
    return run_main("ddp-profile bench", run, args, debug=args.debug)
