"""The profiling scripts on a machine without nsys or GPUs.

Syntax and headers of every script; the nsys finder's messages; and the whole profile.sh chain
(torchrun -> harness -> "nsys" -> export -> scrubber) with a stand-in `nsys` written below: it runs the
profiled command, writes a placeholder report, and "exports" by copying the real nsys sample export in
tests/data, so the project's scrubber runs on real data.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((ROOT / "scripts").glob("*.sh"))
SAMPLE = ROOT / "tests" / "data" / "ddp_mlp_2xh200.sqlite"

FAKE_NSYS = r"""#!/usr/bin/env bash
set -euo pipefail
cmd=$1; shift
case "$cmd" in
  --version) echo "NVIDIA Nsight Systems version 0.0-standin" ;;
  profile)
    echo "ARGS $* ENV NVLS=${NCCL_NVLS_ENABLE:-} SYMM=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-} SHMEM=${NVSHMEM_DISABLE_NVLS:-}" >>"$FAKE_NSYS_LOG"
    out=""
    while [ $# -gt 0 ]; do
      case "$1" in -o|-t) [ "$1" = -o ] && out=$2; shift 2 ;; -*) shift ;; *) break ;; esac
    done
    "$@"
    out=${out//%q\{RANK\}/${RANK:-}}
    # the DDP bucket log of the run that made FAKE_NSYS_SQLITE, into the run named FAKE_NSYS_RUN_JSON_FOR
    if [ -n "${FAKE_NSYS_RUN_JSON_FOR:-}" ] && [ "${out##*/}" = "$FAKE_NSYS_RUN_JSON_FOR" ]; then
      "$PYTHON" -c 'import json, sys
mine, theirs = (json.load(open(p)) for p in sys.argv[1:])
mine["layout"] = theirs["layout"]
json.dump(mine, open(sys.argv[1], "w"))' "$out.json" "$FAKE_NSYS_RUN_JSON"
    fi
    echo placeholder >"$out.nsys-rep" ;;
  export)
    out=""
    while [ $# -gt 0 ]; do
      case "$1" in -o|--type) [ "$1" = -o ] && out=$2; shift 2 ;; -*) shift ;; *) break ;; esac
    done
    cp "$FAKE_NSYS_SQLITE" "$out" ;;
esac
"""  # noqa: E501


def bash(script: str, env: dict, cwd=ROOT):
    return subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env=env, cwd=cwd, timeout=180
    )


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_script_syntax_and_header(path):
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0
    text = path.read_text()
    if path.name.startswith("_"):
        assert "Knobs" in text
    else:
        assert "set -euo pipefail" in text and "Usage:" in text and "Knobs" in text
        assert os.access(path, os.X_OK)


def _no_nsys_anywhere() -> bool:
    patterns = [
        "/opt/nvidia/nsight-systems*/bin/nsys",
        "/usr/local/cuda*/bin/nsys",
        "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
    ]
    return shutil.which("nsys", path="/usr/bin:/bin") is None and not any(glob.glob(p) for p in patterns)


@pytest.mark.skipif(not _no_nsys_anywhere(), reason="this machine has nsys installed")
def test_finder_says_how_to_install_when_nsys_is_absent():
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp")}
    proc = bash("source scripts/_nsys.sh && find_nsys", env)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "nsys (Nsight Systems) not found" in lines[0] and "install" in lines[0] and "NSYS=" in lines[0]


def test_finder_rejects_a_bad_nsys_variable_and_accepts_a_good_one(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "NSYS": str(tmp_path / "missing")}
    proc = bash("source scripts/_nsys.sh && find_nsys", env)
    assert proc.returncode == 1 and "is not an executable file" in proc.stderr
    fake = tmp_path / "nsys"
    fake.write_text(FAKE_NSYS)
    fake.chmod(0o755)
    proc = bash('source scripts/_nsys.sh && find_nsys && echo "$NSYS"', {"PATH": f"{tmp_path}:/usr/bin:/bin"})
    assert proc.returncode == 0 and proc.stdout.strip() == str(fake)


def test_qdstrm_only_is_explained(tmp_path):
    (tmp_path / "run.qdstrm").write_text("")
    proc = bash(f"source scripts/_nsys.sh && check_report {tmp_path}/run", {"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 1
    assert "left only" in proc.stderr and "run.qdstrm" in proc.stderr
    assert "libdw" in proc.stderr and "nsys-prepare.sh" in proc.stderr
    proc = bash(f"source scripts/_nsys.sh && check_report {tmp_path}/other", {"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 1 and "no report" in proc.stderr


def test_profile_sh_without_strategy_prints_usage():
    proc = bash("scripts/profile.sh", {"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2 and "usage: scripts/profile.sh STRATEGY" in proc.stderr


@pytest.fixture()
def standin_env(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "nsys").write_text(FAKE_NSYS)
    (bindir / "nsys").chmod(0o755)
    return {
        **os.environ,
        "PATH": f"{bindir}:{os.environ['PATH']}",
        "PYTHON": sys.executable,
        "TRACES": str(tmp_path / "traces"),
        "FAKE_NSYS_SQLITE": str(SAMPLE),
        "FAKE_NSYS_LOG": str(tmp_path / "nsys.log"),
        "NSYS": "",
    }


@pytest.mark.slow
@pytest.mark.parametrize("per_rank", ["0", "1"])
def test_profile_sh_end_to_end_with_a_standin_nsys(standin_env, tmp_path, per_rank):
    env = {**standin_env, "PER_RANK": per_rank}
    env.pop("NSYS")
    proc = bash("scripts/profile.sh overlap --model tiny --seq-len 8 --batch 2 --warmup 1 --steps 2", env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = "overlap_tiny_fp32_2xcpu"
    folder = tmp_path / "traces" / run
    files = sorted(p.name for p in folder.iterdir())
    reports = [f"{run}.nsys-rep"] if per_rank == "0" else [f"{run}_rank0.nsys-rep", f"{run}_rank1.nsys-rep"]
    exports = [r.replace(".nsys-rep", ".sqlite.xz") for r in reports]
    assert files == sorted([f"{run}.json", *reports, *exports])  # unscrubbed exports deleted
    record = json.loads((folder / f"{run}.json").read_text())
    assert record["world_size"] == 2 and record["nsys_version"].endswith("0.0-standin")
    profiled = (tmp_path / "nsys.log").read_text()
    # capture range and slim tracing options reached nsys; the NVLink-multicast variables were exported
    assert "ddp_profile.harness --strategy overlap" in profiled
    for option in (
        "-t cuda,nvtx",
        "--sample=none",
        "--cpuctxsw=none",
        "--capture-range=cudaProfilerApi",
        "--capture-range-end=stop",
    ):
        assert option in profiled
    assert "NVLS=0 SYMM=1 SHMEM=1" in profiled
    assert profiled.count("ARGS ") == (1 if per_rank == "0" else 2)
    assert "nsys-ui" in proc.stdout
    assert not list((tmp_path / "traces").glob(".*partial"))


@pytest.mark.slow
def test_profile_all_only_runs_the_matching_runs_of_a_set(standin_env, tmp_path):
    env = {
        **standin_env,
        "SMALL_MODEL": "tiny",
        "SMALL_SEQ": "8",
        "SMALL_STEPS": "1",
        "INSPECT": "0",
        "ONLY": "^none ",
    }
    env.pop("NSYS")
    proc = bash("scripts/profile_all.sh small", env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "== campaign: 1 runs done, 0 skipped, 0 failed" in proc.stdout
    assert sorted(p.name for p in (tmp_path / "traces").iterdir() if not p.name.startswith(".")) == [
        "none_tiny_fp32_1xcpu"
    ]


CAMPAIGN_CONFIGS = """\
# a tiny campaign for the CPU: set T (two lines of part 1, one of part 2), a line the harness rejects,
# a line too long for the deadline, one foreign program and the two-node line
set T --model tiny --seq-len 8 --batch 2 --warmup 1 --steps 2
1 T 2 bucketed --bucket-mb 25
2 T 2 overlap
1 T 2 bucketed --no-such-flag
1 T 2 naive --model xl
1 foreign 2 plain-cuda -t cuda -- plain_loop.py --steps 2 --width 32 --depth 2 --batch 4
1 two-node 1 bucketed --model tiny --seq-len 8 --batch 2 --warmup 1 --steps 2
"""


@pytest.mark.slow
def test_campaign_part_runs_its_lines_and_packs_them(standin_env, tmp_path):
    import lzma
    import socket
    import tarfile

    configs = tmp_path / "configs.txt"
    configs.write_text(CAMPAIGN_CONFIGS)
    out = tmp_path / "out"
    env = {
        **standin_env,
        "OUT": str(out),
        "CONFIGS": str(configs),
        "KIT": str(tmp_path / "no-kit"),
        "REPEATS": "2",
        "XL_PROF_S": "100000",
        "RDZV_PORT": "29531",
    }
    env.pop("NSYS")
    proc = subprocess.run(
        ["bash", "scripts/campaign.sh", "1"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=900
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 1, log  # the rejected line is a failure; the others still ran and were packed
    assert "3 done, 1 skipped, 1 failed" in log
    assert "skipped T: NPROC=2 naive --model tiny" in log and "(deadline:" in log
    assert "FAILED  T: NPROC=2 bucketed" in log and "rejected the options" in log
    assert "overlap" not in log.split("== campaign part 1")[1]  # part 2's line did not run

    assert sorted(p.name for p in out.iterdir()) == [
        "T.tar",
        "foreign.tar",
        "logs-part1.tar.xz",
        "machine-part1.txt",
        "two-node.tar",
    ]
    run = two = "bucketed-25mb_tiny_fp32_2xcpu"
    members = {
        name: sorted(tarfile.open(out / f"{name}.tar").getnames()) for name in ("T", "foreign", "two-node")
    }
    assert members["T"] == [
        f"traces/campaign/T/{run}/{run}.json",
        f"traces/campaign/T/{run}/{run}.sqlite.xz",
        "traces/campaign/T/machine.txt",
    ]
    assert members["foreign"] == [
        "traces/foreign/machine.txt",
        "traces/foreign/plain-cuda/plain-cuda.sqlite.xz",
        "traces/foreign/plain-cuda/program.json",
    ]
    assert members["two-node"] == [
        f"traces/two-node/{two}/{two}.json",
        f"traces/two-node/{two}/{two}_rank0.sqlite.xz",
        f"traces/two-node/{two}/{two}_rank1.sqlite.xz",
        "traces/two-node/machine.txt",
    ]
    with tarfile.open(out / "logs-part1.tar.xz") as tar:
        logs = tar.getnames()
    assert "traces/.logs/campaign-part1/summary.txt" in logs

    # the un-profiled repeats were folded into the profiled run's JSON, with the machine's label
    traces = tmp_path / "traces"
    machine = (out / "machine-part1.txt").read_text()
    label = machine.split("host label ")[1].split()[0]
    assert label.startswith("campaign-cpu-host-") and socket.gethostname() not in machine
    for set_name, folder, name in (
        ("T", traces / "campaign" / "T" / run, run),
        ("two-node", traces / "two-node" / two, two),
    ):
        record = json.loads((folder / f"{name}.json").read_text())
        repeats = sorted(
            (traces / ".logs" / "campaign-part1" / "unprofiled" / set_name / name).glob("rep*/*.json")
        )
        assert len(repeats) == 2
        assert record["unprofiled_repeat_medians_ms"] == [
            json.loads(p.read_text())["step_ms_median"] for p in repeats
        ]
        assert record["host"] == label and record["unprofiled_repeats"] == 2
    assert json.loads((traces / "foreign" / "plain-cuda" / "program.json").read_text())["world_size"] == 2
    # the profiled runs went through the (stand-in) nsys with the campaign's options
    profiled = (tmp_path / "nsys.log").read_text()
    assert (
        "--sample=none --cpuctxsw=none" in profiled
        and "-t cuda -o" in profiled
        and "plain_loop.py" in profiled
    )
    assert profiled.count("--capture-range=cudaProfilerApi") == 3  # harness line + one per two-node rank
    assert "NVLS=0 SYMM=1 SHMEM=1" in profiled
    lzma.decompress((traces / "campaign" / "T" / run / f"{run}.sqlite.xz").read_bytes())  # scrubbed, xz


RECOMMEND_CONFIGS = """\
set R --model tiny --seq-len 8 --batch 2 --warmup 1 --steps 2
1 R 2 torch_ddp --bucket-mb 25
1 R 2 @recommend torch_ddp --bucket-mb 25
1 R 2 @recommend overlap
"""


@pytest.mark.slow
def test_campaign_recommend_line_runs_what_the_tool_recommends(standin_env, tmp_path):
    """``@recommend STRATEGY OPTIONS``: ddp-profile analyses the run profiled earlier in the same call and the
    harness runs its recommendation. The stand-in nsys hands back a committed 2-GPU bf16 DDP export (and puts
    that run's DDP bucket log, which sizes its all-reduces, into the stock run's record), so the tool recommends a
    channel cut and the next run must be that configuration with the set's options; a @recommend of a run
    this call did not profile is a listed failure, and the rest still packs."""
    import lzma
    import tarfile

    source = (
        ROOT
        / "traces"
        / "campaign"
        / "B"
        / "torch_ddp-25mb_xl_bf16_2xh200"
        / "torch_ddp-25mb_xl_bf16_2xh200.sqlite.xz"
    )
    export = tmp_path / "b.sqlite"
    export.write_bytes(lzma.decompress(source.read_bytes()))
    configs = tmp_path / "configs.txt"
    configs.write_text(RECOMMEND_CONFIGS)
    out = tmp_path / "out"
    env = {
        **standin_env,
        "OUT": str(out),
        "CONFIGS": str(configs),
        "KIT": str(tmp_path / "no-kit"),
        "REPEATS": "1",
        "FAKE_NSYS_SQLITE": str(export),
        "FAKE_NSYS_RUN_JSON": str(source.parent / f"{source.parent.name}.json"),
        "FAKE_NSYS_RUN_JSON_FOR": "torch_ddp-25mb_tiny_fp32_2xcpu",
    }
    env.pop("NSYS")
    proc = subprocess.run(
        ["bash", "scripts/campaign.sh", "1"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=900
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 1, log  # the @recommend of a run not profiled in this call failed; the rest ran
    assert "2 done, 0 skipped, 1 failed" in log, log
    assert "FAILED  R: @recommend overlap" in log and "run its line first" in log
    stock = "torch_ddp-25mb_tiny_fp32_2xcpu"
    recorded = (tmp_path / "traces" / ".logs" / "campaign-part1" / "recommendations.txt").read_text()
    assert recorded.startswith(f"{stock}: --strategy torch_ddp ")
    flags = recorded.split(": ", 1)[1].split()
    channels = flags[flags.index("--nccl-channels") + 1]
    recommended = f"torch_ddp-25mb-ch{channels}-hiprio_tiny_fp32_2xcpu"
    assert f"ddp-profile recommends for {stock}: {recorded.split(': ', 1)[1].strip()}" in log
    with tarfile.open(out / "R.tar") as tar:
        names = tar.getnames()
    for run in (stock, recommended):
        assert (
            f"traces/campaign/R/{run}/{run}.json" in names
            and f"traces/campaign/R/{run}/{run}.sqlite.xz" in names
        )
    record = json.loads(
        (tmp_path / "traces" / "campaign" / "R" / recommended / f"{recommended}.json").read_text()
    )
    assert record["unprofiled_repeats"] == 1  # timed like every other line


def test_campaign_without_part_prints_usage():
    proc = bash("scripts/campaign.sh", {"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2 and "usage: scripts/campaign.sh PART" in proc.stderr


def test_campaign_config_list_is_well_formed():
    """Every line of the shipped list: PART SET NPROC WHAT, known parts, sets defined before use."""
    sets: set[str] = set()
    lines = 0
    for raw in (ROOT / "scripts" / "campaign_configs.txt").read_text().splitlines():
        words = raw.split("#")[0].split()
        if not words:
            continue
        if words[0] == "set":
            sets.add(words[1])
            continue
        part, set_name, nproc, *what = words
        lines += 1
        assert (
            part.isdigit() and 1 <= int(part) <= 9 and nproc.isdigit() and int(nproc) in (1, 2, 4, 8) and what
        ), raw
        if set_name == "foreign":
            assert "--" in what and (ROOT / "scripts" / "foreign" / what[what.index("--") + 1]).is_file(), raw
        elif set_name != "two-node":
            assert set_name in sets, raw
    assert lines >= 10


@pytest.mark.slow
def test_campaign_with_no_repeats_profiles_and_reports_no_failure(standin_env, tmp_path):
    """REPEATS=0 (set Q: profiled runs only) is not a failure of every line for want of un-profiled runs."""
    configs = tmp_path / "configs.txt"
    configs.write_text(
        "set Q --model tiny --seq-len 8 --batch 2 --warmup 1 --steps 2\n1 Q 2 bucketed --bucket-mb 25\n"
    )
    out = tmp_path / "out"
    env = {
        **standin_env,
        "OUT": str(out),
        "CONFIGS": str(configs),
        "KIT": str(tmp_path / "no-kit"),
        "REPEATS": "0",
    }
    env.pop("NSYS")
    proc = subprocess.run(
        ["bash", "scripts/campaign.sh", "1"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=600
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log
    assert "1 done, 0 skipped, 0 failed" in log and "no un-profiled run finished" not in log
    assert (out / "Q.tar").is_file()


@pytest.mark.parametrize("path", sorted((ROOT / "scripts").glob("timing_configs*.txt")), ids=lambda p: p.name)
def test_every_timing_configuration_list_parses(path):
    """Each committed list of interleaved configurations is one the harness takes (a typo would cost a machine call)."""
    from ddp_profile.harness.repeats import parse_configs

    assert parse_configs(path.read_text(), path.name)


@pytest.mark.parametrize(
    "path", sorted((ROOT / "scripts").glob("campaign_configs_*.txt")), ids=lambda p: p.name
)
def test_every_extra_campaign_list_parses(path):
    """Each extra campaign list: PART SET NPROC STRATEGY OPTIONS lines whose options (after the set's) the
    harness takes."""
    import argparse
    import shlex

    from ddp_profile.harness.bench import add_arguments, config_from_args

    parser = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    add_arguments(parser)
    sets: dict[str, list[str]] = {}
    lines = 0
    for raw in path.read_text().splitlines():
        words = shlex.split(raw, comments=True)
        if not words:
            continue
        if words[0] == "set":
            sets[words[1]] = words[2:]
            continue
        part, set_name, nproc, strategy, *options = words
        assert part.isdigit() and nproc.isdigit() and set_name in sets, raw
        args, extra = parser.parse_known_args([*sets[set_name], "--strategy", strategy, *options])
        assert not extra, raw
        config_from_args(args)  # a senseless combination raises
        lines += 1
    assert lines
