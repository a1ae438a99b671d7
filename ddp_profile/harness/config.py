"""Typed run configuration for the training harness, validated on creation.

A :class:`RunConfig` is everything that decides what one profiled run does; it is written verbatim into
the run JSON, so a trace can always be traced back to the knobs that made it. Invalid values raise
:class:`ddp_profile.errors.ConfigError` at construction, before any process group or GPU is touched.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ddp_profile.errors import ConfigError
from ddp_profile.harness import levers
from ddp_profile.harness.levers import DDP_COMM_HOOKS, GRAD_REDUCE_DTYPES, GRAPH_STRATEGIES, STRATEGIES

# Optimizer-state sharding (ZeRO-1) on top of a gradient strategy: "" off, "ours" (ShardedOptimizer),
# "torch" (torch.distributed.optim.ZeroRedundancyOptimizer, the reference).
SHARD_OPTIMIZERS = ("", "ours", "torch")
# Gradient strategies ZeRO-1 composes with: not none (ranks would diverge) and not fsdp (already shards state).
SHARDABLE_STRATEGIES = ("naive", "flat", "overlap", "bucketed", "torch_ddp")
FSDP_PARAM_DTYPES = ("fp32", "bf16")
DTYPES = ("fp32", "bf16")
OPTIMIZERS = ("adamw", "sgd")
MLP_MODEL = "mlp"


@dataclass(frozen=True)
class TransformerPreset:
    """Shape of a CS336 Transformer LM (no biases, untied head, RoPE theta 10000)."""

    d_model: int
    """Width of the residual stream."""
    d_ff: int
    """Hidden width of the SwiGLU feed-forward."""
    num_layers: int
    """Number of pre-norm Transformer blocks."""
    num_heads: int
    """Attention heads; d_model must divide evenly."""
    vocab_size: int = 10000
    """Token vocabulary (CS336 uses 10000)."""
    context_length: int = 2048
    """Longest sequence the model accepts (RoPE is computed on the fly, so this only bounds inputs)."""
    rope_theta: float = 10000.0
    """RoPE base frequency."""


# The CS336 assignment's table, plus `tiny` for tests (fast on CPU, still every component).
TRANSFORMER_PRESETS: dict[str, TransformerPreset] = {
    "tiny": TransformerPreset(
        d_model=32, d_ff=64, num_layers=2, num_heads=2, vocab_size=97, context_length=64
    ),
    "small": TransformerPreset(768, 3072, 12, 12),
    "medium": TransformerPreset(1024, 4096, 24, 16),
    "large": TransformerPreset(1280, 5120, 36, 20),
    "xl": TransformerPreset(1600, 6400, 48, 25),
    "2.7B": TransformerPreset(2560, 10240, 32, 32),
}

MODELS = (*TRANSFORMER_PRESETS, MLP_MODEL)


@dataclass(frozen=True)
class MLPPreset:
    """The scaling study's MLP: Linear(in, hidden) + ReLU, (depth - 2) x Linear(hidden, hidden) + ReLU,
    Linear(hidden, out)."""

    in_features: int = 4096
    """Input width."""
    hidden: int = 4096
    """Hidden width."""
    out_features: int = 2048
    """Output width."""
    depth: int = 8
    """Number of Linear layers (at least 2)."""


@dataclass(frozen=True)
class RunConfig:
    """One training run of the harness. Field values end up in the run JSON."""

    strategy: str = "bucketed"
    """Gradient-synchronisation strategy: one of STRATEGIES."""
    model: str = "tiny"
    """Model preset: a TRANSFORMER_PRESETS key or "mlp"."""
    batch: int = 4
    """Sequences (or MLP rows) per rank per step."""
    seq_len: int = 256
    """Tokens per sequence (ignored by the MLP)."""
    steps: int = 5
    """Measured steps (inside the cudaProfilerApi capture range)."""
    warmup: int = 3
    """Steps run before measuring (allocator, NCCL communicators, cuBLAS heuristics settle here)."""
    bucket_mb: float = 25.0
    """Bucket cap in MiB for `bucketed` and `torch_ddp` (ignored by the others)."""
    dtype: str = "fp32"
    """"fp32" or "bf16" (bf16 autocast around forward and loss; parameters and grads stay fp32)."""
    tf32: bool = False
    """Allow TF32 matmuls in fp32 runs (faster compute, so communication matters more)."""
    seed: int = 0
    """Seed for model initialisation (rank 0's copy wins at wrap time) and for the random data."""
    optimizer: str = "adamw"
    """"adamw" (the realistic case) or "sgd" (tests: makes multi-rank vs single-rank equality exact)."""
    lr: float = 1e-4
    """Learning rate."""
    mlp_depth: int = 8
    """Linear layers of the MLP model."""
    backend: str = ""
    """Process-group backend; empty means nccl on GPU, gloo on CPU."""
    ddp_nvtx_hook: bool = False
    """torch_ddp only: register the project's NVTX comm hook (per-bucket ranges with bytes). Off by default:
    with any comm hook DDP copies gradients into buckets unscaled and the hook scales them, a different GPU
    path from stock DDP, so the reference stays stock (its bytes come from DDP's logged bucket sizes)."""
    # ---- strategy options ----
    shard_optimizer: str = ""
    """Optimizer-state sharding (ZeRO-1) on top of a gradient strategy other than none/fsdp: "" off, "ours"
    (ShardedOptimizer: owners update their shard, then broadcast it) or "torch" (ZeroRedundancyOptimizer)."""
    fsdp_reshard: bool = True
    """fsdp only: free gathered parameters after each unit's forward (reshard_after_forward); False keeps
    them until backward (one all-gather per unit per step instead of two, more memory)."""
    fsdp_param_dtype: str = "fp32"
    """fsdp only: "bf16" gathers and computes with bf16 parameters (MixedPrecisionPolicy(param_dtype=bf16,
    reduce_dtype=fp32)); "fp32" has no mixed-precision policy."""
    # ---- the levers (harness/levers.py declares each once; docs/harness.md "Levers"); the defaults are the stock
    # behaviour. Grouped by concern as levers.CONCERNS; the run JSON's config stays flat (reports read it by key).
    # levers: buckets (how gradients are packed and reduced)
    first_bucket_mb: float = 0.0
    """bucketed only: cap in MiB of the first bucket (the last layers' gradients), smaller than bucket_mb,
    so communication starts early; later buckets use bucket_mb (0: every bucket uses bucket_mb)."""
    grad_views: bool = False
    """bucketed: each .grad becomes a view of its bucket slot (no copy-back after the all-reduce);
    torch_ddp: DDP's gradient_as_bucket_view=True."""
    reduce_avg: bool = False
    """overlap only: each gradient is all-reduced with NCCL's average (``ReduceOp.AVG``: every input scaled by
    1/world size as NCCL reads it, then summed), in place in ``.grad``, instead of being divided by the world
    size first (one more read and write of every gradient). Same numbers as stock DDP, which scales each
    gradient by 1/world size as it copies it into its bucket. Groups without AVG (gloo) divide first, as
    without the lever (``reduce_op`` in the run JSON's layout says which ran)."""
    grad_reduce_dtype: str = ""
    """bucketed only: "bf16" all-reduces each bucket in bf16 (cast, sum, cast back; params, grads and
    optimizer stay fp32); empty: in the gradients' own dtype."""
    ddp_comm_hook: str = ""
    """torch_ddp only: "bf16" registers PyTorch's own `bf16_compress_hook` (default_hooks): each bucket is
    cast to bf16, divided by the world size, all-reduced in bf16 and copied back into the fp32 bucket;
    parameters, gradients and optimizer stay fp32. Empty: stock DDP (no hook)."""
    # levers: update (how the optimizer step runs)
    sharded_update: bool = False
    """overlap only: each gradient is reduce-scattered (not all-reduced), each rank updates its 1/world-size
    part of every parameter from the gradient's hook, on a side stream, while backward goes on, and the parts
    are all-gathered back (``strategies/sharded_update.py``): ZeRO stage 1 with the update overlapping
    backward. Optimizer state is 1/world size; an element-wise optimizer trains exactly as without it."""
    sharded_update_normal_priority: bool = False
    """With sharded_update: the side stream that runs the parts' updates has the compute stream's (normal)
    CUDA priority instead of high priority, so the update's kernels do not take SMs ahead of the backward's."""
    overlap_optimizer: bool = False
    """bucketed only: one optimizer per bucket, stepped as soon as that bucket's mean gradient is ready
    (in launch order), so early buckets' optimizer work overlaps later buckets' communication."""
    # levers: comm (how NCCL and the copy engines run)
    peer_copy_allreduce: bool = False
    """bucketed, 2 ranks: each bucket is summed by pushing it into a receive buffer on the other GPU
    (symmetric memory, a copy-engine transfer) and one local add, instead of an NCCL all-reduce. overlap with
    sharded_update, any number of ranks on one host: each split parameter's reduce-scatter and all-gather are
    such pushes (rank j's part of the gradient into rank j's receive slot, the updated own part into every
    peer's parameter); across hosts the NCCL collectives stay, with a note."""
    nccl_channels: int = 0
    """NCCL CTAs/channels per collective for the process group (0: NCCL's choice). Set through the
    group's NCCL config (`ProcessGroupNCCL.Options().config.max_ctas`), else NCCL_MAX_NCHANNELS; ignored
    (with a note in the run JSON) on gloo."""
    nccl_min_ctas: int = 0
    """At least N CTAs per collective (0: NCCL's choice), through the group's NCCL config
    (`ProcessGroupNCCL.Options().config.min_ctas`, ncclConfig_t.minCTAs), else NCCL_MIN_CTAS; ignored (with
    a note) on gloo. The upper limit is `nccl_channels` (maxCTAs); equal values pin the CTA count."""
    nccl_high_priority: bool = False
    """NCCL streams at high CUDA priority (`ProcessGroupNCCL.Options(is_high_priority_stream=True)`)."""
    # levers: runtime (settings of the whole job)
    gc_mode: str = ""
    """Python's garbage collector during the steps, any strategy (1 GPU included): "" automatic (Python's
    default); "freeze": one collection, then everything alive moved to the permanent generation (gc.freeze)
    before the first step, so the collector's full passes skip the model's long-lived objects; "off": the
    same, then automatic collection disabled until the last step (a long job collects every N steps at the
    same point on every rank). Restored after the loop."""
    cuda_graph: bool = False
    """none, overlap and torch_ddp: each step captured once as a CUDA graph and replayed (``ddp_profile.harness.
    cuda_graph``): the host issues one call a step instead of thousands of kernels; 11 eager steps run
    first (DDP's requirement), AdamW is made capturable. Ignored (with a note) on the CPU."""
    step_sync: bool = True
    """Any strategy: wait for the GPU at the end of every step (``torch.cuda.synchronize``), the harness's
    default since round 1. False (``--no-step-sync``, ``-nosync``): the loop does not wait between steps, so
    the host issues the next step's kernels while the GPU still runs this one, as a training loop that logs
    every N steps does; it waits once at the capture range's ends. Step times still come from CUDA events on
    the stream (start and end of each step as the GPU reaches them); ``host_step_ms`` then measures issuing
    a step, not the step. On the CPU every step ends synchronously anyway."""
    gemm_sm_carveout: int = 0
    """Any strategy: every GEMM targets the GPU's SMs minus N (cuBLASLt's SM-count target, PyTorch's
    preferred BLAS library set to cuBLASLt), so that a GEMM beside an NCCL kernel holding at most N SMs
    still runs in one wave (``ddp_profile.harness.gemm_sms``). 0: off. Ignored (with a note) on the CPU."""
    gemm_sm_carveout_scope: str = ""
    """With ``gemm_sm_carveout``: "" the whole step; "backward": the forward's GEMMs use every SM (no NCCL
    runs beside them) and only the backward's leave the N SMs, the phase whose gradients are all-reduced
    while it computes (``-carveNbwd``). The optimizer has no GEMMs."""
    blas_library: str = ""
    """"cublaslt": PyTorch's preferred BLAS library set to cuBLASLt, no carveout (the control for
    ``gemm_sm_carveout``, which implies it). Empty: PyTorch's default."""

    def __post_init__(self) -> None:
        validate(self)

    @property
    def bucket_bytes(self) -> int:
        return int(self.bucket_mb * 1024 * 1024)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def replace(self, **changes) -> RunConfig:
        return dataclasses.replace(self, **changes)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


BOUNDS = {
    "batch": (1, 1 << 16),
    "seq_len": (1, 1 << 20),
    "steps": (1, 100_000),
    "warmup": (0, 100_000),
    "bucket_mb": (1e-6, float(1 << 20)),
    "lr": (1e-12, 10.0),
    "mlp_depth": (2, 1024),
    "seed": (0, 2**63 - 1),
    "first_bucket_mb": (0.0, float(1 << 20)),
}
"""Sane ranges of the numeric fields (inclusive): a value outside parses but makes no sense for a run (a
bucket of ``inf`` MiB, a learning rate of 1e308, a batch of 10^12 sequences)."""


def _check_bounds(cfg: RunConfig) -> None:
    import math

    for name, (lo, hi) in BOUNDS.items():
        value = getattr(cfg, name)
        ok = (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and math.isfinite(value)
            and lo <= value <= hi
        )
        _check(ok, f"{name} must be between {_mb(lo)} and {_mb(hi)}, got {str(value)[:30]}")


def validate(cfg: RunConfig) -> None:
    """Raise ConfigError naming the field and the allowed values for the first bad field."""
    _check(
        cfg.strategy in STRATEGIES,
        f"strategy {cfg.strategy!r} is unknown; choose one of {', '.join(STRATEGIES)}",
    )
    _check(cfg.model in MODELS, f"model {cfg.model!r} is unknown; choose one of {', '.join(MODELS)}")
    _check(cfg.dtype in DTYPES, f"dtype {cfg.dtype!r} is unknown; choose fp32 or bf16")
    _check(cfg.optimizer in OPTIMIZERS, f"optimizer {cfg.optimizer!r} is unknown; choose adamw or sgd")
    _check(cfg.backend in ("", "gloo", "nccl"), f"backend {cfg.backend!r} is unknown; choose gloo or nccl")
    for name in ("batch", "seq_len", "steps"):
        value = getattr(cfg, name)
        _check(isinstance(value, int) and value >= 1, f"{name} must be a positive integer, got {value!r}")
    _check(isinstance(cfg.warmup, int) and cfg.warmup >= 0, f"warmup must be >= 0, got {cfg.warmup!r}")
    _check(cfg.bucket_mb > 0, f"bucket_mb must be > 0 MiB, got {cfg.bucket_mb!r}")
    _check(cfg.lr > 0, f"lr must be > 0, got {cfg.lr!r}")
    _check(
        not cfg.ddp_nvtx_hook or cfg.strategy == "torch_ddp",
        f"ddp_nvtx_hook applies to strategy torch_ddp only, not {cfg.strategy!r}",
    )
    _check(
        not (cfg.ddp_comm_hook and cfg.ddp_nvtx_hook),
        "ddp_comm_hook and ddp_nvtx_hook cannot be combined (DDP takes one communication hook)",
    )
    _check(
        cfg.shard_optimizer in SHARD_OPTIMIZERS,
        f"shard_optimizer {cfg.shard_optimizer!r} is unknown; choose ours or torch",
    )
    _check(
        not cfg.shard_optimizer or cfg.strategy in SHARDABLE_STRATEGIES,
        f"shard_optimizer needs a gradient strategy ({', '.join(SHARDABLE_STRATEGIES)}), not {cfg.strategy!r}"
        + (" (fsdp already shards optimizer state)" if cfg.strategy == "fsdp" else ""),
    )
    _check(
        not (cfg.shard_optimizer and cfg.overlap_optimizer),
        "overlap_optimizer and shard_optimizer cannot be combined (per-bucket optimizers own every parameter)",
    )
    _check(
        cfg.fsdp_param_dtype in FSDP_PARAM_DTYPES,
        f"fsdp_param_dtype {cfg.fsdp_param_dtype!r} is unknown; choose fp32 or bf16",
    )
    _check(
        cfg.strategy == "fsdp" or (cfg.fsdp_reshard and cfg.fsdp_param_dtype == "fp32"),
        f"fsdp_reshard and fsdp_param_dtype apply to strategy fsdp only, not {cfg.strategy!r}",
    )
    _check(cfg.mlp_depth >= 2, f"mlp_depth must be >= 2 (input and output layers), got {cfg.mlp_depth!r}")
    _validate_levers(cfg)
    _check_bounds(cfg)
    if cfg.model in TRANSFORMER_PRESETS:
        ctx = TRANSFORMER_PRESETS[cfg.model].context_length
        _check(
            cfg.seq_len <= ctx, f"seq_len {cfg.seq_len} exceeds model {cfg.model!r}'s context length {ctx}"
        )


def _validate_levers(cfg: RunConfig) -> None:
    """Each lever's own rules (levers.validate), then the rules that tie a lever to another field."""
    levers.validate(cfg)
    _check(
        not cfg.peer_copy_allreduce or cfg.strategy == "bucketed" or cfg.sharded_update,
        f"peer_copy_allreduce applies to strategy bucketed or to overlap with sharded_update only, not {cfg.strategy!r}"
        + (" without sharded_update" if cfg.strategy == "overlap" else ""),
    )
    _check(
        not (cfg.sharded_update and cfg.shard_optimizer),
        "sharded_update and shard_optimizer cannot be combined (sharded_update already shards the optimizer)",
    )
    _check(
        not cfg.cuda_graph or not (cfg.ddp_comm_hook or cfg.ddp_nvtx_hook or cfg.shard_optimizer),
        "cuda_graph cannot be combined with a DDP communication hook or optimizer sharding (host work between kernels)",
    )
    _check(cfg.first_bucket_mb >= 0, f"first_bucket_mb must be > 0 MiB (0: off), got {cfg.first_bucket_mb!r}")
    _check(
        cfg.first_bucket_mb < cfg.bucket_mb or cfg.first_bucket_mb == 0,
        f"first_bucket_mb {cfg.first_bucket_mb} must be smaller than bucket_mb {cfg.bucket_mb}",
    )
    _check(
        not (cfg.nccl_min_ctas and cfg.nccl_channels) or cfg.nccl_min_ctas <= cfg.nccl_channels,
        f"nccl_min_ctas {cfg.nccl_min_ctas} must not exceed nccl_channels {cfg.nccl_channels} (the CTA maximum)",
    )


def _mb(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def lever_suffix(cfg: RunConfig) -> str:
    """Run-name suffix of the levers, in levers.LEVERS order: -first<X>mb -views -avg -shardupd -updnormal -gradbf16
    -hookbf16 -optoverlap -peercopy -ch<N> -minctas<N> -hiprio -gc<mode> -graph -nosync -carve<N>[bwd] (or -lt for
    cuBLASLt without a carveout)."""
    return levers.suffix(cfg)


def model_preset(name: str, mlp_depth: int = 8) -> TransformerPreset | MLPPreset:
    """The preset object for a model name (ConfigError if unknown)."""
    if name == MLP_MODEL:
        return MLPPreset(depth=mlp_depth)
    try:
        return TRANSFORMER_PRESETS[name]
    except KeyError:
        raise ConfigError(f"model {name!r} is unknown; choose one of {', '.join(MODELS)}") from None


def bucket_label(cfg: RunConfig) -> str:
    """Strategy part of a run name: `bucketed-25mb`, `torch_ddp-25mb`, `torch_ddp-25mb-nvtxhook`, `naive`,
    plus the levers' suffix (`bucketed-100mb-first1mb-views-ch2-hiprio`); `fsdp`, `fsdp-noreshard-mpbf16`;
    optimizer sharding appends `+zero1` (ours) or `+zero1torch` (torch)."""
    if cfg.strategy in ("bucketed", "torch_ddp"):
        mb = int(cfg.bucket_mb) if float(cfg.bucket_mb).is_integer() else cfg.bucket_mb
        label = f"{cfg.strategy}-{mb}mb" + ("-nvtxhook" if cfg.ddp_nvtx_hook else "")
    elif cfg.strategy == "fsdp":
        label = (
            "fsdp"
            + ("" if cfg.fsdp_reshard else "-noreshard")
            + ("-mpbf16" if cfg.fsdp_param_dtype == "bf16" else "")
        )
    else:
        label = cfg.strategy
    return label + lever_suffix(cfg) + {"": "", "ours": "+zero1", "torch": "+zero1torch"}[cfg.shard_optimizer]


def run_name(cfg: RunConfig, world_size: int, gpu_short: str) -> str:
    """`<strategy>[-<N>mb][+zero1|+zero1torch]_<model>_<dtype>[-tf32]_<world>x<gpu>`, e.g.
    `bucketed-25mb_xl_fp32_2xh100`, `bucketed-100mb+zero1_xl_fp32_2xh200`, `fsdp-mpbf16_xl_bf16_2xh100`."""
    dtype = cfg.dtype + ("-tf32" if cfg.tf32 and cfg.dtype == "fp32" else "")
    model = cfg.model if cfg.model != MLP_MODEL else f"mlp{cfg.mlp_depth}"
    return f"{bucket_label(cfg)}_{model}_{dtype}_{world_size}x{gpu_short}"


__all__ = [
    "DDP_COMM_HOOKS",
    "DTYPES",
    "GRAD_REDUCE_DTYPES",
    "GRAPH_STRATEGIES",
    "FSDP_PARAM_DTYPES",
    "MLPPreset",
    "MODELS",
    "OPTIMIZERS",
    "RunConfig",
    "SHARDABLE_STRATEGIES",
    "SHARD_OPTIMIZERS",
    "STRATEGIES",
    "TRANSFORMER_PRESETS",
    "TransformerPreset",
    "bucket_label",
    "lever_suffix",
    "model_preset",
    "run_name",
    "validate",
]
