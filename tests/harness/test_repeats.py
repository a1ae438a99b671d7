"""The timing protocol: interleaved repeats (ddp_profile.harness.repeats), their bootstrap interval
(ddp_profile.harness.spread) and the nvidia-smi record (ddp_profile.harness.gpu_state).

The bootstrap tests use synthetic step times (a statistics check, not a measurement). The nvidia-smi parser
reads tests/data/nvidia_smi_query_fixture.csv, a parser fixture written by hand in the documented
``--format=csv`` layout, not a recorded measurement. The end-to-end tests run the driver on CPU (gloo, two
ranks, model tiny) and check its files against the journal it wrote.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddp_profile.errors import UsageError
from ddp_profile.harness import gpu_state, repeats, spread
from ddp_profile.harness.config import run_name
from ddp_profile.harness.strategies import solo, world

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
TINY = "common --model tiny --batch 2 --seq-len 8 --warmup 1 --steps 3 --optimizer sgd\n"


def _noisy(scale: float, seed: int = 1, reps: int = 5, steps: int = 10) -> list[list[float]]:
    rng = random.Random(seed)
    out = []
    for _ in range(reps):
        offset = rng.gauss(0.0, scale)  # between-repeat spread
        out.append([100.0 + offset + rng.gauss(0.0, scale / 2) for _ in range(steps)])
    return out


# ---------------------------------------------------------------- bootstrap


def test_bootstrap_is_deterministic_for_a_seed():
    data = _noisy(3.0)
    a = spread.bootstrap_median(data, resamples=500, seed=7)
    b = spread.bootstrap_median(data, resamples=500, seed=7)
    assert a == b
    # the seed drives the resampling: with few resamples some other seed moves an end of the interval
    few = {
        (iv.low_ms, iv.high_ms)
        for iv in (spread.bootstrap_median(data, resamples=20, seed=s) for s in range(6))
    }
    assert len(few) > 1


@pytest.mark.parametrize("scale", [0.0, 0.5, 3.0, 20.0])
def test_interval_contains_the_pooled_median(scale):
    data = _noisy(scale)
    iv = spread.bootstrap_median(data, resamples=500)
    assert iv.median_ms == spread.upper_median([v for r in data for v in r])
    assert iv.low_ms <= iv.median_ms <= iv.high_ms
    assert iv.repeats == 5 and iv.steps == 50


def test_interval_widens_with_noise():
    widths = [
        spread.bootstrap_median(_noisy(s), resamples=1000).high_ms
        - spread.bootstrap_median(_noisy(s), resamples=1000).low_ms
        for s in (0.5, 2.0, 8.0)
    ]
    assert widths[0] < widths[1] < widths[2]
    assert (
        spread.bootstrap_median([[5.0] * 10] * 5).high_ms
        == spread.bootstrap_median([[5.0] * 10] * 5).low_ms
        == 5.0
    )


def test_interval_reflects_spread_between_repeats():
    # steps within each repeat identical, repeats far apart: resampling pooled steps alone would give a
    # narrow interval; resampling repeats first keeps the launch-to-launch spread
    data = [[100.0] * 10, [110.0] * 10, [120.0] * 10, [130.0] * 10, [140.0] * 10]
    iv = spread.bootstrap_median(data, resamples=2000)
    assert iv.low_ms <= 110.0 and iv.high_ms >= 130.0


def test_bootstrap_rejects_empty_input():
    with pytest.raises(Exception, match="no repeat"):
        spread.bootstrap_median([[], []])


def test_separated_means_no_overlap():
    assert spread.separated((1.0, 2.0), (2.5, 3.0))
    assert spread.separated((2.5, 3.0), (1.0, 2.0))
    assert not spread.separated((1.0, 2.0), (2.0, 3.0))
    assert not spread.separated((1.0, 5.0), (2.0, 3.0))


# ---------------------------------------------------------------- order, configs, deadline, journal


def test_interleaved_order_is_round_by_round():
    assert repeats.interleaved_order(3, 2) == [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2)]
    order = [c for _, c in repeats.interleaved_order(4, 5)]
    assert order == [0, 1, 2, 3] * 5


def test_parse_configs_applies_common_options():
    cfgs = repeats.parse_configs(
        "common --model tiny --seq-len 8 --steps 4\n--strategy none  # 1 GPU\n\n"
        "--strategy torch_ddp --bucket-mb 10\ncommon --model mlp\n--strategy naive\n"
    )
    assert [(c.strategy, c.model, c.steps) for c in cfgs] == [
        ("none", "tiny", 4),
        ("torch_ddp", "tiny", 4),
        ("naive", "mlp", 5),
    ]
    assert cfgs[1].bucket_mb == 10


@pytest.mark.parametrize(
    "text, message",
    [
        ("--strategy nope", "configs:1"),
        ("--strategy bucketed --bogus 1", "unknown options"),
        ("# nothing\n", "no configuration"),
        ("--strategy fsdp --seq-len 8 --nccl-channels 2", "own group"),
    ],
)
def test_parse_configs_names_the_bad_line(text, message):
    with pytest.raises(UsageError, match=message):
        repeats.parse_configs(text)


def test_fits_skips_what_would_end_after_the_deadline():
    assert repeats.fits(100.0, 10.0, 110.0) == "run"
    assert repeats.fits(100.0, 10.0, None) == "run"
    assert repeats.fits(100.0, 10.5, 110.0).startswith("deadline: ~10 s needed, 10 s left")


def test_journal_state_finds_unfinished_repeats():
    events = [
        {"event": "start", "repeat": 1, "config_index": 0},
        {"event": "done", "repeat": 1, "config_index": 0},
        {"event": "start", "repeat": 1, "config_index": 1},
        {"event": "skip", "repeat": 1, "config_index": 2},
    ]
    done, failed = repeats.journal_state(events)
    assert done == {(1, 0)} and failed == {1}


def test_solo_makes_this_process_alone():
    outer = world()
    with solo():
        assert world() == (0, 1)
    assert world() == outer


# ---------------------------------------------------------------- nvidia-smi


def test_nvidia_smi_csv_parses():
    rows = gpu_state.parse((DATA / "nvidia_smi_query_fixture.csv").read_text())
    assert [r["index"] for r in rows] == [0, 1, 2]
    assert rows[0] == {
        "index": 0,
        "sm_clock_mhz": 1980.0,
        "mem_clock_mhz": 2619.0,
        "temperature_c": 41.0,
        "power_w": 312.45,
        "throttle_reasons_mask": "0x0000000000000000",
        "throttle_reasons": [],
    }
    assert rows[1]["throttle_reasons"] == ["sw_power_cap", "sw_thermal_slowdown"]
    assert rows[2]["sm_clock_mhz"] is None and rows[2]["throttle_reasons"] == []


def test_unknown_throttle_bits_are_named():
    assert gpu_state.reasons(0x1 | 0x400) == ["gpu_idle", "bit_0x400"]


def test_query_asks_the_documented_fields():
    assert gpu_state.QUERY == [
        "nvidia-smi",
        "--query-gpu=index,clocks.sm,clocks.mem,temperature.gpu,power.draw,clocks_throttle_reasons.active",
        "--format=csv",
    ]


def test_query_without_nvidia_smi_says_why(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert gpu_state.query() == {"gpus": [], "error": "nvidia-smi not found"}


# ---------------------------------------------------------------- end to end on CPU (gloo)


def _driver(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "ddp_profile.harness.repeats", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def gloo_job(tmp_path_factory):
    base = tmp_path_factory.mktemp("repeats")
    configs = base / "configs.txt"
    configs.write_text(TINY + "--strategy none\n--strategy bucketed --bucket-mb 25 --nccl-high-priority\n")
    out = base / "out"
    proc = _driver(
        "run", "--configs", configs, "--out", out, "--repeats", 2, "--nproc", 2, "--host", "cpu-test"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


@pytest.mark.slow
def test_gloo_job_writes_one_json_per_configuration(gloo_job):
    names = ["none_tiny_fp32_1xcpu", "bucketed-25mb-hiprio_tiny_fp32_2xcpu"]
    recs = {n: json.loads((gloo_job / n / f"{n}.json").read_text()) for n in names}
    journal = repeats.read_journal(gloo_job)
    done = [e for e in journal if e["event"] == "done"]
    assert [e["record"]["run"] for e in done] == [names[0], names[1], names[0], names[1]]  # interleaved
    for n, rec in recs.items():
        assert rec["timing_protocol"]["order"] == [names[0], names[1], names[0], names[1]]
        assert rec["unprofiled_repeats"] == 2 and rec["unprofiled_steps"] == 6
        steps = [
            [float(v) for v in e["record"]["step_ms_slowest_rank"]] for e in done if e["record"]["run"] == n
        ]
        assert [r["step_ms_slowest_rank"] for r in rec["repeats"]] == steps
        assert rec["unprofiled_step_ms_median"] == spread.upper_median([v for s in steps for v in s])
        assert rec["unprofiled_ci_low_ms"] <= rec["unprofiled_step_ms_median"] <= rec["unprofiled_ci_high_ms"]
        assert rec["unprofiled_ci_seed"] == spread.DEFAULT_SEED and rec["unprofiled_ci_level"] == 0.95
        assert rec["host"] == "cpu-test" and rec["skipped"] == []
        assert [r["position"] for r in rec["repeats"]] == ([1, 3] if n == names[0] else [2, 4])
        assert all(r["gpu_before"] is None for r in rec["repeats"])  # no GPU: no nvidia-smi record
    assert recs[names[0]]["world_size"] == 1 and recs[names[0]]["backend"] is None
    assert (
        recs[names[1]]["world_size"] == 2
        and recs[names[1]]["nccl_levers"]["group"] == "own group (new_group)"
    )
    assert "ignored" in recs[names[1]]["nccl_levers"]["note"]
    assert (gloo_job / "skipped.txt").read_text() == "nothing skipped\n"


@pytest.mark.slow
def test_summarize_again_gives_the_same_files(gloo_job, tmp_path):
    name = "none_tiny_fp32_1xcpu"
    before = (gloo_job / name / f"{name}.json").read_text()
    proc = _driver("summarize", "--out", gloo_job, "--host", "cpu-test")
    assert proc.returncode == 0, proc.stderr
    assert "95 % interval" in proc.stdout
    assert (gloo_job / name / f"{name}.json").read_text() == before


@pytest.mark.slow
def test_resume_skips_done_repeats_and_drops_a_configuration_that_died(tmp_path):
    configs = tmp_path / "configs.txt"
    configs.write_text(TINY + "--strategy none\n--strategy naive\n")
    out = tmp_path / "out"
    assert _driver("run", "--configs", configs, "--out", out, "--repeats", 1).returncode == 0
    with open(out / repeats.JOURNAL, "a") as f:  # as if repeat 2 of configuration 1 had crashed the job
        f.write(json.dumps({"event": "start", "repeat": 2, "config_index": 1}) + "\n")
    proc = _driver("run", "--configs", configs, "--out", out, "--repeats", 2, "--resume")
    assert proc.returncode == 0, proc.stderr
    done = [(e["repeat"], e["config_index"]) for e in repeats.read_journal(out) if e["event"] == "done"]
    assert done == [(1, 0), (1, 1), (2, 0)]
    assert "repeat 2 of naive_tiny_fp32_1xcpu: failed earlier" in (out / "skipped.txt").read_text()


@pytest.mark.slow
def test_deadline_in_the_past_skips_everything_with_one_line(tmp_path):
    configs = tmp_path / "configs.txt"
    configs.write_text(TINY + "--strategy none\n")
    proc = _driver("run", "--configs", configs, "--out", tmp_path / "out", "--deadline-at", time.time() - 1)
    assert proc.returncode != 0
    assert "no finished repeat" in proc.stderr and "Traceback" not in proc.stderr
    assert "deadline" in (tmp_path / "out" / "skipped.txt").read_text()


def test_missing_configs_file_is_a_usage_error(tmp_path):
    proc = _driver("run", "--configs", tmp_path / "none.txt", "--out", tmp_path)
    assert proc.returncode == 2 and "cannot read" in proc.stderr


@pytest.mark.slow
def test_wrapper_packs_one_set_into_out(tmp_path):
    configs = tmp_path / "configs.txt"
    configs.write_text(TINY + "--strategy none\n--strategy torch_ddp --bucket-mb 25\n")
    env = {
        "PATH": "/usr/bin:/bin",
        "OUT": str(tmp_path / "out"),
        "TRACES": str(tmp_path / "traces"),
        "CONFIGS": str(configs),
        "REPEATS": "2",
        "DEADLINE": "200",
        "SET": "T",
        "PYTHON": sys.executable,
        "HOST_LABEL": "cpu-test",
        "KIT": str(tmp_path / "no-kit"),
    }
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "timing_repeats.sh")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert files == ["T.tar", "machine-T.txt", "timing-T.log"]
    listing = subprocess.run(
        ["tar", "-tf", str(tmp_path / "out" / "T.tar")], capture_output=True, text=True
    ).stdout
    for path in (
        "traces/campaign/T/none_tiny_fp32_1xcpu/none_tiny_fp32_1xcpu.json",
        "traces/campaign/T/torch_ddp-25mb_tiny_fp32_2xcpu/torch_ddp-25mb_tiny_fp32_2xcpu.json",
        "traces/campaign/T/repeats.jsonl.xz",
        "traces/campaign/T/skipped.txt",
        "traces/campaign/T/machine.txt",
    ):
        assert path in listing.split()
    assert (
        "NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1"
        in (tmp_path / "out" / "machine-T.txt").read_text()
    )


def _leak_worker(info, outdir: str) -> None:
    """Rank body: run each strategy that registers gradient hooks, then count the tensors still alive."""
    import gc

    import torch

    from ddp_profile.harness import train

    counts = {}
    for line in (
        "--strategy bucketed --bucket-mb 25 --grad-views --overlap-optimizer",
        "--strategy overlap",
        "--strategy bucketed --bucket-mb 25",
    ):
        cfg = repeats.parse_configs(TINY + line + " --backend gloo")[0]
        train.run(cfg, torch.device("cpu"))
        # A leak never reaches 0; what a helper thread of the overlapped optimizer still holds for a moment
        # after train.run returns does (seen once as 3 tensors in a full run on 2 loaded cores): up to ~2 s.
        for _ in range(40):
            gc.collect()
            counts[line] = sum(1 for o in gc.get_objects() if torch.is_tensor(o))
            if counts[line] == 0:
                break
            time.sleep(0.05)
    if info.rank == 0:
        Path(outdir, "counts.json").write_text(json.dumps(counts))


@pytest.mark.slow
def test_a_run_leaves_no_tensor_alive(tmp_path):
    """Gradient hooks held model, buckets and optimizer past train.run (a cycle through autograd's C++ side):
    the second XL repeat of one job ran out of memory on 80 GB. train.run now removes them."""
    from ddp_profile.harness.launch import spawn_local

    spawn_local(2, _leak_worker, str(tmp_path))
    counts = json.loads((tmp_path / "counts.json").read_text())
    assert counts and all(n == 0 for n in counts.values()), counts


@pytest.mark.parametrize("path", sorted((ROOT / "scripts").glob("timing_configs*.txt")), ids=lambda p: p.name)
def test_committed_configuration_lists_parse(path):
    """Every line of the committed lists is a valid configuration, each name once (a typo fails here, not
    on the device)."""
    configs = repeats.parse_configs(path.read_text(), where=path.name)
    names = [run_name(c, 1 if repeats.is_solo(c) else 2, "h100") for c in configs]
    assert len(set(names)) == len(names)


STANDIN_PYTHON = r"""#!/usr/bin/env bash
# Stand-in interpreter: the torchrun job starts a "rank" in a session of its own that never ends (as ranks hung
# in NCCL did in set AA's call) and then hangs without writing the journal; every other call succeeds quietly.
if [ "${1:-}" = "-m" ] && [ "${2:-}" = "torch.distributed.run" ]; then
    setsid sleep 600 &
    echo $! > "$RANK_PID_FILE"
    sleep 600
fi
exit 0
"""


@pytest.mark.slow
def test_a_hung_job_is_killed_with_ranks_outside_its_process_group(tmp_path):
    """The watchdog kills the job's process group and every process below the job, so a rank in a session of
    its own neither survives nor keeps the script's output open (the call returns, within the test's timeout)."""
    python = tmp_path / "python"
    python.write_text(STANDIN_PYTHON)
    python.chmod(0o755)
    configs = tmp_path / "configs.txt"
    configs.write_text(TINY + "--strategy none\n")
    pid_file = tmp_path / "rank.pid"
    env = {
        "PATH": "/usr/bin:/bin",
        "OUT": str(tmp_path / "out"),
        "TRACES": str(tmp_path / "traces"),
        "CONFIGS": str(configs),
        "DEADLINE": "40",
        "RESERVE": "5",
        "STALL_S": "2",
        "SET": "H",
        "PYTHON": str(python),
        "HOST_LABEL": "cpu-test",
        "KIT": str(tmp_path / "no-kit"),
        "RANK_PID_FILE": str(pid_file),
    }
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "timing_repeats.sh")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=90,
    )
    assert "no progress for 2 s: the job is taken for hung and killed" in proc.stdout
    rank = int(pid_file.read_text())
    time.sleep(0.5)
    alive = (
        Path(f"/proc/{rank}").exists() and "zombie" not in Path(f"/proc/{rank}/status").read_text().lower()
    )
    assert not alive, f"rank {rank} outlived the killed job"


def test_a_repeat_that_started_and_never_finished_is_listed(tmp_path):
    """Set AA's journal (committed): round 6's repeat of the sharded update started, its job hung and was killed.
    The summary lists it beside the skipped ones (skipped.txt and that run's JSON), named from the
    configuration's finished repeats, and leaves every finished repeat as it was."""
    import lzma

    committed = ROOT / "traces" / "campaign" / "AA"
    if not (committed / "repeats.jsonl.xz").exists():
        pytest.skip("committed timing set AA not present")
    (tmp_path / repeats.JOURNAL).write_bytes(lzma.decompress((committed / "repeats.jsonl.xz").read_bytes()))
    paths = repeats.summarize(tmp_path, host="timing-h200-host-5bce98f7")
    run = "overlap-avg-shardupd-graph_xl_bf16_2xh200"
    assert (tmp_path / repeats.SKIPPED).read_text() == f"repeat 6 of {run}: {repeats.UNFINISHED}\n"
    for path in paths:
        got = json.loads(path.read_text())
        was = json.loads((committed / path.parent.name / path.name).read_text())
        assert got["skipped"] == ([{"repeat": 6, "why": repeats.UNFINISHED}] if got["run"] == run else [])
        assert {k: v for k, v in got.items() if k != "skipped"} == {
            k: v for k, v in was.items() if k != "skipped"
        }
