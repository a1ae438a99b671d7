"""Run-record values that parse as JSON but make no sense (a channel count "auto", NaN, Infinity, a list;
bucket sizes beyond int64) are dropped with one warning naming the file and the field; the rest of the
record is kept, and no command ends in a traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SAMPLE

from ddp_profile.nsys.loader import load_trace
from ddp_profile.nsys.run_record import clean_run_record

ROOT = Path(__file__).resolve().parents[2]
TOO_BIG = 2**70
HOSTILE = [
    ("config", "nccl_channels", "auto"),
    ("config", "nccl_channels", float("nan")),
    ("config", "nccl_channels", float("inf")),
    ("config", "nccl_channels", [1]),
    ("config", "nccl_high_priority", "yes"),
    ("config", "lr", float("-inf")),
    ("layout", "ddp_bucket_bytes", [TOO_BIG, 5]),
    ("layout", "reduce_bytes", [1.5]),
    ("layout", "buckets", -1),
]


@pytest.mark.parametrize(("section", "key", "value"), HOSTILE)
def test_a_senseless_value_is_dropped_with_a_line_naming_file_and_field(section, key, value):
    record = {
        "strategy": "torch_ddp",
        "world_size": 2,
        section: {key: value, "kept": 1},
        **({"config": {"batch": 4}} if section == "layout" else {}),
    }
    warnings: list[str] = []
    out = clean_run_record(record, "runs/r.json", warnings)
    assert key not in out[section] and out[section]["kept"] == 1 and out["world_size"] == 2
    assert (
        len(warnings) == 1 and warnings[0].startswith("runs/r.json: ") and f"{section}.{key!r}" in warnings[0]
    )


def test_sensible_values_pass_untouched():
    record = {
        "config": {"nccl_channels": 8, "nccl_high_priority": True, "lr": 1e-4, "shard_optimizer": ""},
        "layout": {"ddp_bucket_bytes": [26214400, 1048576], "buckets": 2, "bucket_bytes": [2**62]},
    }
    warnings: list[str] = []
    assert clean_run_record(record, "r.json", warnings) == record and warnings == []


def _run(tmp: Path) -> Path:
    run = tmp / "run"
    run.mkdir()
    shutil.copyfile(SAMPLE, run / "run.sqlite")
    config = {
        "strategy": "torch_ddp",
        "nccl_channels": "auto",
        "nccl_min_ctas": float("nan"),
        "bucket_mb": float("inf"),
        "nccl_high_priority": [1],
    }
    (run / "run.json").write_text(
        json.dumps(
            {
                "strategy": "torch_ddp",
                "world_size": 2,
                "config": config,
                "layout": {"ddp_bucket_bytes": [TOO_BIG, 5]},
            }
        )
    )
    return run


@pytest.mark.parametrize("command", ["analyze", "export", "report"])
def test_commands_finish_and_name_the_dropped_fields(command, tmp_path):
    run = _run(tmp_path)
    out = {
        "analyze": [],
        "export": ["-o", tmp_path / "x.json"],
        "report": ["-o", tmp_path / "rep", "--no-findings"],
    }[command]
    proc = subprocess.run(
        [sys.executable, "-m", "ddp_profile", command, run, *out],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    warnings = load_trace(run / "run.sqlite").warnings
    for field in (
        "config.'nccl_channels'",
        "config.'nccl_min_ctas'",
        "config.'bucket_mb'",
        "config.'nccl_high_priority'",
        "layout.'ddp_bucket_bytes'",
    ):
        assert sum(field in w and "run.json" in w for w in warnings) == 1, (field, warnings)
