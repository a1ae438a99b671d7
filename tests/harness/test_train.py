"""The loop, the run record and `ddp-profile bench` on the CPU."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest
import torch

from ddp_profile.errors import ConfigError
from ddp_profile.harness.config import RunConfig, validate
from ddp_profile.harness.launch import free_port, torchrun_env
from ddp_profile.harness.models import build_model, param_stats
from ddp_profile.harness.strategies import ShardedOptimizer
from ddp_profile.harness.train import gpu_short_name, make_batches, make_optimizer, run
from ddp_profile.safeio import write_record_atomic

ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def bench(*args, module="ddp_profile.harness"):
    return subprocess.run(
        [sys.executable, "-m", module, *args], capture_output=True, text=True, env=ENV, timeout=120
    )


def test_bench_spawns_two_gloo_processes_and_writes_the_run_json(tmp_path):
    proc = bench(
        "--strategy",
        "bucketed",
        "--nproc",
        "2",
        "--model",
        "tiny",
        "--seq-len",
        "16",
        "--batch",
        "2",
        "--steps",
        "3",
        "--warmup",
        "1",
        "--bucket-mb",
        "0.01",
        "--out",
        str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    path = tmp_path / "bucketed-0.01mb_tiny_fp32_2xcpu.json"
    record = json.loads(path.read_text())
    assert record["run"] == path.stem
    assert record["world_size"] == 2 and record["backend"] == "gloo"
    assert record["strategy"] == "bucketed" and record["config"]["bucket_mb"] == 0.01
    assert [len(r) for r in record["step_ms_per_rank"]] == [3, 3]
    assert [len(r) for r in record["host_step_ms_per_rank"]] == [3, 3]
    assert all(t > 0 for r in record["step_ms_per_rank"] for t in r)
    assert record["param_count"] == param_stats(build_model("tiny", device="meta"))["param_count"]
    assert record["bucket_count"] == len(record["bucket_bytes"]) > 1
    assert sum(record["bucket_bytes"]) == record["param_bytes"]
    assert record["gpu_name"] == "cpu" and record["is_h200"] is False
    assert record["torch_version"] == torch.__version__ and record["date_utc"]
    assert record["step_ms_median"] in record["step_ms_slowest_rank"]
    assert path.name in proc.stdout


def test_print_run_name_uses_nproc_as_world_size():
    proc = bench("--strategy", "flat", "--model", "xl", "--nproc", "2", "--print-run-name")
    assert proc.returncode == 0, proc.stderr
    expected = "flat_xl_fp32_2x" + (
        "cpu" if not torch.cuda.is_available() else gpu_short_name(torch.device("cuda", 0))
    )
    assert proc.stdout.strip() == expected


def test_print_run_name_with_optimizer_sharding_and_fsdp_options():
    gpu = "cpu" if not torch.cuda.is_available() else gpu_short_name(torch.device("cuda", 0))
    for args, expected in (
        (
            ["--strategy", "bucketed", "--bucket-mb", "100", "--shard-optimizer"],
            f"bucketed-100mb+zero1_xl_fp32_2x{gpu}",
        ),
        (
            ["--strategy", "torch_ddp", "--shard-optimizer", "torch"],
            f"torch_ddp-25mb+zero1torch_xl_fp32_2x{gpu}",
        ),
        (
            ["--strategy", "fsdp", "--fsdp-no-reshard", "--fsdp-param-dtype", "bf16", "--dtype", "bf16"],
            f"fsdp-noreshard-mpbf16_xl_bf16_2x{gpu}",
        ),
    ):
        proc = bench(*args, "--model", "xl", "--nproc", "2", "--print-run-name")
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == expected


def test_shard_optimizer_with_fsdp_or_none_is_a_one_line_error():
    for strategy in ("fsdp", "none"):
        proc = bench("--strategy", strategy, "--shard-optimizer", "--print-run-name")
        assert proc.returncode == 2
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(
            "ddp-profile bench: error: shard_optimizer needs a gradient strategy"
        )


def test_make_optimizer_shards_on_request():
    params = [torch.nn.Parameter(torch.zeros(2))]
    ours = make_optimizer(RunConfig(strategy="naive", seq_len=16, shard_optimizer="ours"), params)
    assert isinstance(ours, ShardedOptimizer) and isinstance(ours.local, torch.optim.AdamW)
    assert type(make_optimizer(RunConfig(strategy="naive", seq_len=16), params)) is torch.optim.AdamW
    with pytest.raises(ConfigError, match="shard_optimizer torch needs a process group"):
        make_optimizer(RunConfig(strategy="naive", seq_len=16, shard_optimizer="torch"), params)


@pytest.mark.slow  # two gloo processes through the CLI: ~10 s on two cores
def test_bench_sharded_optimizer_run_json_has_per_rank_memory_fields(tmp_path):
    proc = bench(
        "--strategy",
        "flat",
        "--shard-optimizer",
        "--nproc",
        "2",
        "--model",
        "tiny",
        "--seq-len",
        "8",
        "--batch",
        "1",
        "--steps",
        "1",
        "--warmup",
        "1",
        "--out",
        str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    record = json.loads((tmp_path / "flat+zero1_tiny_fp32_2xcpu.json").read_text())
    assert record["shard_optimizer"] == "ours" and record["config"]["shard_optimizer"] == "ours"
    assert record["peak_memory_allocated_bytes_per_rank"] == [None, None]
    state = record["optimizer_state_bytes_per_rank"]
    full = 2 * record["param_bytes"] + 4 * record["param_tensors"]
    assert sum(state) == full and all(0 < b < full for b in state)
    assert sum(record["layout"]["param_sync_bytes"]) == record["param_bytes"]


def test_bad_config_is_one_line_and_exit_code_2():
    for module in ("ddp_profile.harness", "ddp_profile"):
        args = ["bench"] if module == "ddp_profile" else []
        proc = bench(*args, "--strategy", "naive", "--batch", "0", module=module)
        assert proc.returncode == 2
        assert proc.stderr.strip().splitlines() == [
            "ddp-profile bench: error: batch must be a positive integer, got 0"
        ]


def test_single_process_run_record_in_process(tmp_path):
    cfg = RunConfig(strategy="none", model="tiny", batch=2, seq_len=8, steps=2, warmup=1)
    record = run(cfg, torch.device("cpu"))
    assert record["world_size"] == 1 and record["timing_source"] == "host"
    assert record["bucket_count"] == 0 and record["run"] == "none_tiny_fp32_1xcpu"
    assert len(record["step_ms_per_rank"][0]) == 2
    # No CUDA here: peak memory is null per rank; AdamW's state (exp_avg, exp_avg_sq, step) is counted.
    assert record["peak_memory_allocated_bytes_per_rank"] == [None]
    assert record["peak_memory_reserved_bytes_per_rank"] == [None]
    assert record["optimizer_state_bytes_per_rank"] == [
        2 * record["param_bytes"] + 4 * record["param_tensors"]
    ]
    assert record["shard_optimizer"] is None
    path = write_record_atomic(tmp_path / "sub" / "r.json", record, make_parents=True)
    assert json.loads(path.read_text())["run"] == "none_tiny_fp32_1xcpu"
    assert [p.name for p in path.parent.iterdir()] == ["r.json"]  # no temp file left behind
    assert path.stat().st_mode & 0o777 == 0o644


def test_each_rank_gets_a_disjoint_shard_of_the_global_batch():
    cfg = RunConfig(strategy="naive", model="tiny", batch=2, seq_len=8, steps=2, warmup=1)
    full = make_batches(cfg.replace(batch=4), 0, 1, torch.device("cpu"))
    shards = [make_batches(cfg, r, 2, torch.device("cpu")) for r in (0, 1)]
    for step, (x, y) in enumerate(full):
        torch.testing.assert_close(torch.cat([shards[0][step][0], shards[1][step][0]]), x)
        torch.testing.assert_close(torch.cat([shards[0][step][1], shards[1][step][1]]), y)
        torch.testing.assert_close(x[:, 1:], y[:, :-1])  # targets are the inputs shifted by one token
    assert not torch.equal(shards[0][0][0], shards[1][0][0])


def test_mlp_batches_have_the_study_shapes():
    cfg = RunConfig(strategy="naive", model="mlp", batch=3, steps=1, warmup=0)
    ((x, y),) = make_batches(cfg, 1, 2, torch.device("cpu"))
    assert x.shape == (3, 4096) and y.shape == (3, 2048) and y.is_floating_point()


def test_torchrun_env_and_free_port():
    assert torchrun_env({}) is None
    assert torchrun_env({"RANK": "3", "WORLD_SIZE": "4"}) is None
    info = torchrun_env({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"})
    assert (info.rank, info.world_size, info.local_rank) == (3, 4, 1)
    port = free_port()
    assert 1024 <= port <= 65535


def test_gpu_short_name_on_cpu():
    assert gpu_short_name(torch.device("cpu")) == "cpu"


@pytest.mark.parametrize("mode", ["freeze", "off"])
def test_gc_mode_trains_the_same_and_restores_the_collector(mode, monkeypatch):
    """--gc freeze / off: the same losses as Python's automatic collector; during the steps the collector is
    frozen (and off for "off"); afterwards enabled and unfrozen again, as before the run."""
    import gc

    from ddp_profile.harness import train as tr

    seen = []
    real = tr._steps

    def spy(*args, **kwargs):
        seen.append((gc.isenabled(), gc.get_freeze_count() > 0))
        return real(*args, **kwargs)

    monkeypatch.setattr(tr, "_steps", spy)
    base = RunConfig(strategy="none", model="tiny", batch=2, seq_len=8, steps=3, warmup=1, optimizer="sgd")
    plain = run(base, torch.device("cpu"))
    got = run(dataclasses.replace(base, gc_mode=mode), torch.device("cpu"))
    assert got["final_loss_per_rank"] == plain["final_loss_per_rank"]
    assert got["run"] == f"none-gc{mode}_tiny_fp32_1xcpu" and got["config"]["gc_mode"] == mode
    assert seen == [(True, False), (mode != "off", True)]
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_unknown_gc_mode_is_a_one_line_error():
    with pytest.raises(ConfigError, match="gc_mode 'never' is unknown"):
        validate(RunConfig(strategy="none", gc_mode="never"))
