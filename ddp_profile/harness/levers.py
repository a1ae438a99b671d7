"""The contention-cutting levers, declared once (docs/harness.md "Levers").

Each :class:`Lever` names a :class:`~ddp_profile.harness.config.RunConfig` field and says everything else
about it: its type and allowed values, its command-line flag, its run-name suffix, the strategies it applies
to, what it needs, whether the strategy receives it as a keyword argument, and its help. From :data:`LEVERS`
come the harness's argparse group (:func:`add_arguments`), the config's keyword arguments from parsed flags
(:func:`from_args`), the run-name suffix (:func:`suffix`), the per-lever checks (:func:`validate`) and the
strategy's keyword arguments (:func:`strategy_kwargs`). Rules that tie two levers or a lever to a value of
another field stay in ``config._validate_levers``.

Standard library only: the harness runs on GPU machines without the reporting dependencies.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from ddp_profile.errors import ConfigError
from ddp_profile.strategy_names import STRATEGIES

COMM_STRATEGIES = tuple(s for s in STRATEGIES if s != "none")
"""Strategies that communicate: the NCCL levers need one."""
GRAPH_STRATEGIES = ("none", "overlap", "torch_ddp")
"""Strategies whose whole step can be captured as a CUDA graph (harness.cuda_graph.STRATEGIES is this list)."""
GRAD_REDUCE_DTYPES = ("", "bf16")
GC_MODES = ("", "freeze", "off")
DDP_COMM_HOOKS = ("", "bf16")
BLAS_LIBRARIES = ("", "cublaslt")
CARVEOUT_SCOPES = ("", "backward")
MAX_NCCL_CHANNELS = 64
MAX_GEMM_SM_CARVEOUT = 64
"""At most this many SMs kept from GEMMs (half of a Hopper GPU's 132); the GPU's own count is checked at run time."""

CONCERNS = ("buckets", "update", "comm", "runtime")
"""What a lever changes: how gradients are bucketed, how the update runs, how NCCL runs, or the whole job."""


@dataclass(frozen=True)
class Lever:
    """One lever: a RunConfig field whose default is the stock behaviour."""

    name: str
    """The RunConfig field (and the run JSON's ``config`` key)."""
    type: type
    """bool, int, float or str."""
    default: Any
    """The stock value: the lever is on when the field differs from it."""
    flag: str
    """The command-line flag (a bool flag is a switch that sets the field to ``not default``)."""
    suffix: str
    """Run-name part when the lever is on; ``{}`` takes the value (``-ch{}`` -> ``-ch2``)."""
    strategies: tuple[str, ...]
    """Strategies it applies to (``STRATEGIES``: any)."""
    concern: str
    """One of CONCERNS."""
    help: str
    """The flag's help (the RunConfig field's docstring says more)."""
    choices: tuple[str, ...] = ()
    """For a str lever: the allowed values, the stock "" first."""
    maximum: int = 0
    """For an int lever: the largest value (0 is the stock value, meaning off)."""
    zero: str = ""
    """For an int lever: what 0 means, for the error message."""
    unit: str = ""
    """For an int lever: the unit named in the error message."""
    metavar: str | None = None
    needs: tuple[str, str] | None = None
    """(another lever, why): the lever means nothing without that one."""
    not_for: str = ""
    """Message for a strategy it does not apply to, instead of "applies to ... only"; ``{strategy}`` is filled."""
    to_strategy: bool = False
    """Whether the strategy's factory receives it as a keyword argument of the same name."""
    hidden_by: str = ""
    """Another lever whose suffix already says this one (the carveout implies cuBLASLt)."""
    dest: str | None = None
    """argparse destination when the flag's name differs from the field (``--gc`` -> gc_mode)."""


LEVERS: tuple[Lever, ...] = (  # in run-name order
    Lever(
        "first_bucket_mb",
        float,
        0.0,
        "--first-bucket-mb",
        "-first{}mb",
        ("bucketed",),
        "buckets",
        "bucketed: first bucket capped at X MiB, smaller than --bucket-mb (-firstXmb)",
        metavar="X",
        to_strategy=True,
    ),
    Lever(
        "grad_views",
        bool,
        False,
        "--grad-views",
        "-views",
        ("bucketed", "torch_ddp"),
        "buckets",
        "bucketed: .grad are views of the bucket slots (no copy-back); torch_ddp: gradient_as_bucket_view (-views)",
        to_strategy=True,
    ),
    Lever(
        "reduce_avg",
        bool,
        False,
        "--reduce-avg",
        "-avg",
        ("overlap",),
        "buckets",
        "overlap: all-reduce each gradient in place with NCCL's average instead of dividing it first (-avg; gloo "
        "divides first)",
        to_strategy=True,
    ),
    Lever(
        "sharded_update",
        bool,
        False,
        "--sharded-update",
        "-shardupd",
        ("overlap",),
        "update",
        "overlap: reduce-scatter each gradient, update this rank's part of the parameter from its hook while "
        "backward runs, all-gather the parts (ZeRO-1 overlapped; -shardupd)",
    ),
    Lever(
        "sharded_update_normal_priority",
        bool,
        False,
        "--sharded-update-normal-priority",
        "-updnormal",
        ("overlap",),
        "update",
        "with --sharded-update: run the updates on a normal-priority side stream, not a high-priority one "
        "(-updnormal)",
        needs=("sharded_update", "it sets the priority of the update's side stream"),
        to_strategy=True,
    ),
    Lever(
        "grad_reduce_dtype",
        str,
        "",
        "--grad-reduce-dtype",
        "-grad{}",
        ("bucketed",),
        "buckets",
        "bucketed: all-reduce buckets in bf16, fp32 params and optimizer (-gradbf16)",
        choices=GRAD_REDUCE_DTYPES,
        to_strategy=True,
    ),
    Lever(
        "ddp_comm_hook",
        str,
        "",
        "--ddp-comm-hook",
        "-hook{}",
        ("torch_ddp",),
        "buckets",
        "torch_ddp: PyTorch's bf16_compress_hook, buckets all-reduced in bf16, fp32 params, grads and optimizer "
        "(-hookbf16)",
        choices=DDP_COMM_HOOKS,
        to_strategy=True,
    ),
    Lever(
        "overlap_optimizer",
        bool,
        False,
        "--overlap-optimizer",
        "-optoverlap",
        ("bucketed",),
        "update",
        "bucketed: per-bucket optimizer step as soon as the bucket is reduced (-optoverlap)",
    ),
    Lever(
        "peer_copy_allreduce",
        bool,
        False,
        "--peer-copy-allreduce",
        "-peercopy",
        ("bucketed", "overlap"),
        "comm",
        "bucketed (2 ranks): sum each bucket by a peer copy into the other GPU's symmetric memory (copy engine) "
        "plus one local add, instead of NCCL; overlap --sharded-update (ranks of one host): reduce-scatter and "
        "all-gather each parameter by such copies (-peercopy)",
        not_for="applies to strategy bucketed or to overlap with sharded_update only, not {strategy!r}",
        to_strategy=True,
    ),
    Lever(
        "nccl_channels",
        int,
        0,
        "--nccl-channels",
        "-ch{}",
        COMM_STRATEGIES,
        "comm",
        "at most N NCCL channels (CTAs) per collective, via the group's NCCL config (-chN; ignored on gloo)",
        maximum=MAX_NCCL_CHANNELS,
        zero="NCCL's choice",
        metavar="N",
        not_for="needs communication; strategy none has none",
    ),
    Lever(
        "nccl_min_ctas",
        int,
        0,
        "--nccl-min-ctas",
        "-minctas{}",
        COMM_STRATEGIES,
        "comm",
        "at least N CTAs per collective via the group's NCCL config (min_ctas; --nccl-channels is the maximum, "
        "equal values pin the count) (-minctasN; ignored on gloo)",
        maximum=MAX_NCCL_CHANNELS,
        zero="NCCL's choice",
        metavar="N",
        not_for="needs communication; strategy none has none",
    ),
    Lever(
        "nccl_high_priority",
        bool,
        False,
        "--nccl-high-priority",
        "-hiprio",
        COMM_STRATEGIES,
        "comm",
        "high-priority NCCL streams (-hiprio; ignored on gloo)",
        not_for="needs communication; strategy none has none",
    ),
    Lever(
        "gc_mode",
        str,
        "",
        "--gc",
        "-gc{}",
        STRATEGIES,
        "runtime",
        "Python's garbage collector during the steps: freeze (gc.freeze after one collection) or off (frozen "
        "and disabled), any strategy (-gcfreeze, -gcoff)",
        choices=GC_MODES,
        dest="gc_mode",
    ),
    Lever(
        "cuda_graph",
        bool,
        False,
        "--cuda-graph",
        "-graph",
        GRAPH_STRATEGIES,
        "runtime",
        "none, overlap, torch_ddp: capture the step once as a CUDA graph (after 11 eager steps) and replay it, "
        "so the host issues one call a step (-graph; ignored on the CPU)",
    ),
    Lever(
        "step_sync",
        bool,
        True,
        "--no-step-sync",
        "-nosync",
        STRATEGIES,
        "runtime",
        "any strategy: no wait for the GPU between steps (the host queues the next step while the GPU runs "
        "this one); step times stay CUDA events (-nosync)",
        dest="step_sync",
    ),
    Lever(
        "gemm_sm_carveout",
        int,
        0,
        "--gemm-sm-carveout",
        "-carve{}",
        STRATEGIES,
        "runtime",
        "any strategy: GEMMs target the GPU's SMs minus N (cuBLASLt SM-count target), so a GEMM beside an NCCL "
        "kernel of at most N CTAs runs in one wave (-carveN; ignored on the CPU)",
        maximum=MAX_GEMM_SM_CARVEOUT,
        zero="off",
        unit="SMs",
        metavar="N",
    ),
    Lever(
        "gemm_sm_carveout_scope",
        str,
        "",
        "--gemm-sm-carveout-scope",
        "bwd",
        STRATEGIES,
        "runtime",
        "with --gemm-sm-carveout: backward = only the backward's GEMMs leave the SMs, the forward's use all of "
        "them (-carveNbwd)",
        choices=CARVEOUT_SCOPES,
        needs=("gemm_sm_carveout", "the SMs the backward's GEMMs leave"),
    ),
    Lever(
        "blas_library",
        str,
        "",
        "--blas-library",
        "-lt",
        STRATEGIES,
        "runtime",
        "PyTorch's preferred BLAS library, cuBLASLt without a carveout: the control for --gemm-sm-carveout, "
        "which implies it (-lt)",
        choices=BLAS_LIBRARIES,
        hidden_by="gemm_sm_carveout",
    ),
)
BY_NAME = {lever.name: lever for lever in LEVERS}


def is_on(cfg: Any, lever: Lever) -> bool:
    return bool(getattr(cfg, lever.name) != lever.default)


def _text(value: Any) -> str:
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else str(value)
    return str(value)


def suffix(cfg: Any) -> str:
    """Run-name suffix of the levers that are on, in :data:`LEVERS` order."""
    return "".join(
        lever.suffix.format(_text(getattr(cfg, lever.name)))
        for lever in LEVERS
        if is_on(cfg, lever) and not (lever.hidden_by and is_on(cfg, BY_NAME[lever.hidden_by]))
    )


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def _strategy_list(strategies: tuple[str, ...]) -> str:
    if len(strategies) == 1:
        return f"strategy {strategies[0]}"
    if len(strategies) == 2:
        return f"strategies {strategies[0]} and {strategies[1]}"
    return f"strategies {', '.join(strategies)}"


def validate(cfg: Any) -> None:
    """Each lever's own rules, lever by lever: its values, what it needs, the strategies it applies to."""
    strategy = cfg.strategy
    for lever in LEVERS:
        value = getattr(cfg, lever.name)
        if lever.choices:
            allowed = " or ".join(c for c in lever.choices if c)
            _check(
                value in lever.choices,
                f"{lever.name} {value!r} is unknown; choose {allowed} (or leave it empty)",
            )
        if lever.maximum:
            unit = f" {lever.unit}" if lever.unit else ""
            _check(
                isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= lever.maximum,
                f"{lever.name} must be an integer from 1 to {lever.maximum}{unit} (0: {lever.zero}), got {value!r}",
            )
        if not is_on(cfg, lever):
            continue
        if lever.needs:
            other, why = lever.needs
            _check(is_on(cfg, BY_NAME[other]), f"{lever.name} needs {other} ({why})")
        if strategy not in lever.strategies:
            why = lever.not_for or f"applies to {_strategy_list(lever.strategies)} only, not {{strategy!r}}"
            raise ConfigError(f"{lever.name} {why.format(strategy=strategy)}")


def strategy_kwargs(cfg: Any) -> dict[str, Any]:
    """The levers the strategy's factory takes, by field name, for the levers that apply to its strategy."""
    strategy = cfg.strategy
    return {
        lever.name: getattr(cfg, lever.name)
        for lever in LEVERS
        if lever.to_strategy and strategy in lever.strategies
    }


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The levers' flags, one argparse group per concern, each flag's default the stock value."""
    groups = {c: p.add_argument_group(f"levers: {c}") for c in CONCERNS}
    for lever in LEVERS:
        g = groups[lever.concern]
        dest = lever.dest or lever.name
        if lever.type is bool:
            action = "store_false" if lever.default else "store_true"
            g.add_argument(lever.flag, dest=dest, action=action, help=lever.help)
        elif lever.choices:
            g.add_argument(
                lever.flag, dest=dest, default=lever.default, choices=lever.choices, help=lever.help
            )
        else:
            g.add_argument(
                lever.flag,
                dest=dest,
                type=lever.type,
                default=lever.default,
                metavar=lever.metavar,
                help=lever.help,
            )


def from_args(args: argparse.Namespace) -> dict[str, Any]:
    """RunConfig keyword arguments of the levers from parsed flags."""
    return {lever.name: getattr(args, lever.dest or lever.name) for lever in LEVERS}


def flags(cfg: Any) -> list[str]:
    """The command-line flags that give ``cfg``'s levers (the inverse of :func:`from_args`)."""
    out: list[str] = []
    for lever in LEVERS:
        if not is_on(cfg, lever):
            continue
        value = getattr(cfg, lever.name)
        out += [lever.flag] if lever.type is bool else [lever.flag, _text(value)]
    return out


__all__ = [
    "BY_NAME",
    "CONCERNS",
    "LEVERS",
    "Lever",
    "add_arguments",
    "flags",
    "from_args",
    "is_on",
    "strategy_kwargs",
    "suffix",
    "validate",
]
