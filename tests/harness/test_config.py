"""Run-config validation: each bad field gives a ConfigError (a usage error, exit code 2) naming it."""

import pytest

from ddp_profile.errors import ConfigError, UsageError
from ddp_profile.harness.config import RunConfig, run_name


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"strategy": "ring"}, "strategy 'ring'"),
        ({"model": "huge"}, "model 'huge'"),
        ({"dtype": "fp16"}, "dtype 'fp16'"),
        ({"optimizer": "lion"}, "optimizer 'lion'"),
        ({"batch": 0}, "batch must be a positive integer"),
        ({"seq_len": -1}, "seq_len must be a positive integer"),
        ({"steps": 0}, "steps must be a positive integer"),
        ({"warmup": -1}, "warmup must be >= 0"),
        ({"bucket_mb": 0}, "bucket_mb must be > 0"),
        ({"lr": 0}, "lr must be > 0"),
        ({"mlp_depth": 1}, "mlp_depth must be >= 2"),
        ({"backend": "mpi"}, "backend 'mpi'"),
        ({"model": "tiny", "seq_len": 65}, "exceeds model 'tiny'"),
        ({"strategy": "bucketed", "ddp_nvtx_hook": True}, "ddp_nvtx_hook applies to strategy torch_ddp only"),
        ({"shard_optimizer": "zero3"}, "shard_optimizer 'zero3' is unknown"),
        (
            {"strategy": "fsdp", "shard_optimizer": "ours"},
            r"not 'fsdp' \(fsdp already shards optimizer state\)",
        ),
        ({"strategy": "none", "shard_optimizer": "torch"}, "shard_optimizer needs a gradient strategy"),
        ({"strategy": "fsdp", "fsdp_param_dtype": "fp16"}, "fsdp_param_dtype 'fp16'"),
        ({"strategy": "bucketed", "fsdp_reshard": False}, "apply to strategy fsdp only, not 'bucketed'"),
        ({"strategy": "naive", "fsdp_param_dtype": "bf16"}, "apply to strategy fsdp only, not 'naive'"),
    ],
)
def test_invalid_values_raise_config_error_naming_the_field(changes, needle):
    with pytest.raises(ConfigError, match=needle):
        RunConfig(**changes)


def test_config_error_is_a_usage_error_with_exit_code_2():
    assert issubclass(ConfigError, UsageError)
    assert ConfigError.exit_code == 2


def test_valid_config_round_trips_and_replace_revalidates():
    cfg = RunConfig(strategy="torch_ddp", model="xl", bucket_mb=100)
    assert cfg.to_dict()["bucket_mb"] == 100
    assert cfg.bucket_bytes == 100 * 1024 * 1024
    with pytest.raises(ConfigError):
        cfg.replace(batch=0)


@pytest.mark.parametrize(
    ("cfg", "world", "gpu", "name"),
    [
        (RunConfig(strategy="bucketed", model="xl", bucket_mb=25), 2, "h100", "bucketed-25mb_xl_fp32_2xh100"),
        (RunConfig(strategy="none", model="xl"), 1, "h200", "none_xl_fp32_1xh200"),
        (
            RunConfig(strategy="torch_ddp", model="xl", dtype="bf16", bucket_mb=0.5),
            2,
            "h100",
            "torch_ddp-0.5mb_xl_bf16_2xh100",
        ),
        (
            RunConfig(strategy="torch_ddp", model="xl", ddp_nvtx_hook=True),
            2,
            "h200",
            "torch_ddp-25mb-nvtxhook_xl_fp32_2xh200",
        ),
        (RunConfig(strategy="naive", model="small", tf32=True), 2, "a100", "naive_small_fp32-tf32_2xa100"),
        (RunConfig(strategy="overlap", model="mlp", mlp_depth=4), 4, "cpu", "overlap_mlp4_fp32_4xcpu"),
        (
            RunConfig(strategy="bucketed", model="xl", bucket_mb=100, shard_optimizer="ours"),
            2,
            "h200",
            "bucketed-100mb+zero1_xl_fp32_2xh200",
        ),
        (
            RunConfig(strategy="torch_ddp", model="xl", shard_optimizer="torch"),
            2,
            "h200",
            "torch_ddp-25mb+zero1torch_xl_fp32_2xh200",
        ),
        (
            RunConfig(strategy="naive", model="xl", shard_optimizer="ours"),
            2,
            "h100",
            "naive+zero1_xl_fp32_2xh100",
        ),
        (RunConfig(strategy="fsdp", model="xl"), 2, "h100", "fsdp_xl_fp32_2xh100"),
        (
            RunConfig(strategy="fsdp", model="xl", fsdp_reshard=False),
            2,
            "h100",
            "fsdp-noreshard_xl_fp32_2xh100",
        ),
        (
            RunConfig(strategy="fsdp", model="xl", dtype="bf16", fsdp_param_dtype="bf16"),
            2,
            "h100",
            "fsdp-mpbf16_xl_bf16_2xh100",
        ),
    ],
)
def test_run_names(cfg, world, gpu, name):
    assert run_name(cfg, world, gpu) == name
