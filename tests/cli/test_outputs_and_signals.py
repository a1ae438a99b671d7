"""Every output path is checked before anything is written (never an input,
through any link; never a device, FIFO or folder where a file is meant), and SIGTERM / SIGHUP clean up like
Ctrl-C for every command that writes. Inputs are copies of the committed real export
(``tests/data/ddp_mlp_2xh200.sqlite``) in a tmp dir; every command runs as a real subprocess.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SAMPLE, run_cli, sha256

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable


def _one_line(proc, code: int) -> str:
    assert proc.returncode == code, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if not ln.startswith("report:")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def _run_copy(tmp: Path) -> Path:
    dst = tmp / "run.sqlite"
    shutil.copyfile(SAMPLE, dst)
    return dst


# The same input reached as the output in each way a user can name it: its own name, a hard link, a symlink.
OUTPUT_IS_INPUT = [
    ("analyze", "same name", ["analyze", "run.sqlite", "--format", "json", "-o", "run.sqlite"]),
    ("export", "same name", ["export", "run.sqlite", "-o", "run.sqlite"]),
    ("launches", "symlink", ["launches", "run.sqlite", "-o", "link.json"]),
    ("analyze", "hard link", ["analyze", "run.sqlite", "--format", "csv", "-o", "hard.csv"]),
    ("scrub", "hard link", ["scrub", "run.sqlite", "-o", "hard.csv"]),
    ("export", "input folder's file", ["export", ".", "-o", "run.sqlite"]),
]


@pytest.mark.parametrize("command,how,argv", OUTPUT_IS_INPUT, ids=[f"{c}-{h}" for c, h, _ in OUTPUT_IS_INPUT])
def test_output_that_is_an_input_is_refused_before_writing(command, how, argv, tmp_path):
    src = _run_copy(tmp_path)
    (tmp_path / "link.json").symlink_to(src)
    os.link(src, tmp_path / "hard.csv")
    before = sorted(p.name for p in tmp_path.iterdir())
    line = _one_line(run_cli(argv, tmp_path), 2)
    assert "is the input" in line, line
    assert sha256(src) == sha256(SAMPLE)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no temporary file left either


@pytest.mark.parametrize("target", ["fifo", "device link", "folder"])
@pytest.mark.parametrize("command", ["analyze", "export", "scrub", "launches"])
def test_output_that_is_a_device_fifo_or_folder_is_refused(command, target, tmp_path):
    """A FIFO, a link to /dev/null (a character device; the link keeps the test harmless if the check broke)
    or a folder named as the output file: exit 2, one line, and the thing is still what it was."""
    _run_copy(tmp_path)
    out = tmp_path / "out.json"
    if target == "fifo":
        os.mkfifo(out)
    elif target == "device link":
        out.symlink_to(os.devnull)
    else:
        out.mkdir()
    argv = {
        "analyze": ["analyze", "run.sqlite", "--format", "json", "-o", out],
        "export": ["export", "run.sqlite", "-o", out],
        "scrub": ["scrub", "run.sqlite", "-o", out],
        "launches": ["launches", "run.sqlite", "-o", out],
    }[command]
    if target == "folder" and command == "scrub":
        pytest.skip("scrub -o FOLDER writes into the folder (documented)")
    line = _one_line(run_cli(argv, tmp_path), 2)
    assert {"fifo": "FIFO", "device link": "character device", "folder": "a folder"}[target] in line, line
    kind = {"fifo": "is_fifo", "device link": "is_char_device", "folder": "is_dir"}[target]
    assert getattr(out, kind)()


def test_report_output_that_is_a_file_or_input_is_refused(tmp_path):
    src = _run_copy(tmp_path)
    line = _one_line(run_cli(["report", "run.sqlite", "-o", "run.sqlite"], tmp_path), 2)
    assert "is the input" in line
    assert sha256(src) == sha256(SAMPLE)


# ---- signals -------------------------------------------------------------------------------------------

SLOW_SCRUB = (
    "import sys, time, ddp_profile.nsys.scrub as S\n"
    "real = S._Scrubber.dirty\n"
    "n = [0]\n"
    "def slow(self, v):\n"
    "    n[0] += 1\n"
    "    if n[0] == 20:\n"
    "        print('SCRUBBING', file=sys.stderr, flush=True)\n"
    "        time.sleep(60)\n"
    "    return real(self, v)\n"
    "S._Scrubber.dirty = slow\n"
)
SLOW_REPORT = (
    "import sys, time, ddp_profile.report.build as R\n"
    "real = R._write\n"
    "def slow(p, t):\n"
    "    real(p, t)\n"
    "    print('WRITING', file=sys.stderr, flush=True)\n"
    "    time.sleep(60)\n"
    "R._write = slow\n"
)


def _signal_when(prelude: str, marker: str, argv: list, cwd: Path, sig: int) -> tuple[int, str]:
    cmd = [
        PY,
        "-c",
        prelude + "from ddp_profile.cli import main\nraise SystemExit(main(sys.argv[1:]))",
        *argv,
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    seen = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        seen.append(line)
        if line.startswith(marker) or not line:
            break
    assert seen[-1].startswith(marker), seen
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


@pytest.mark.parametrize(
    "sig,code,word",
    [
        (signal.SIGTERM, 143, "terminated"),
        (signal.SIGHUP, 129, "hung up"),
        (signal.SIGINT, 130, "interrupted"),
    ],
)
def test_signal_during_scrub_sql_function_leaves_no_unscrubbed_copy(sig, code, word, tmp_path):
    """The signal lands inside scrub's SQL row function: the right exit code (not exit 3, "damaged input"),
    one line, and no temporary (unscrubbed) copy in the output folder."""
    src = _run_copy(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    rc, err = _signal_when(
        SLOW_SCRUB, "SCRUBBING", ["scrub", "run.sqlite", "-o", "out/clean.sqlite"], tmp_path, sig
    )
    assert rc == code, err
    assert (
        "Traceback" not in err
        and err.strip().splitlines()[-1]
        == f"ddp-profile scrub: {word}"
        + (" (SIGTERM)" if sig == signal.SIGTERM else " (SIGHUP)" if sig == signal.SIGHUP else "")
        + "; no partial output was written and every previous output is unchanged"
    ), err
    assert list(out.iterdir()) == []
    assert sha256(src) == sha256(SAMPLE)


def test_sigterm_mid_report_leaves_no_hidden_folder_and_keeps_previous_report(tmp_path):
    _run_copy(tmp_path)
    assert run_cli(["report", "run.sqlite", "-o", "reports"], tmp_path).returncode == 0
    before = {p: sha256(p) for p in (tmp_path / "reports").rglob("*") if p.is_file()}
    # --no-cache: an unchanged report is otherwise kept as it is, without writing
    rc, err = _signal_when(
        SLOW_REPORT,
        "WRITING",
        ["report", "run.sqlite", "-o", "reports", "--no-cache"],
        tmp_path,
        signal.SIGTERM,
    )
    assert rc == 143, err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reports", "run.sqlite"]  # no .reports.tmp-*
    assert {p: sha256(p) for p in (tmp_path / "reports").rglob("*") if p.is_file()} == before


def test_stdout_on_a_full_disk_is_one_line_exit_5(tmp_path):
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    _run_copy(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [PY, "-m", "ddp_profile", "analyze", "run.sqlite", "--format", "json"],
            cwd=tmp_path,
            env=env,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    line = _one_line(proc, 5)
    assert "cannot write" in line and "No space left" in line, line
