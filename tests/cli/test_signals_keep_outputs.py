"""SIGINT, SIGTERM and SIGHUP at any moment of ``analyze -o``, ``launches -o``, ``export -o``, ``scrub -o`` and
``report -o`` leave the previous output byte-identical: while the command reads its input, just before its
output replaces the previous one, and just after (the signal lands while the command is still running, e.g.
freeing its frames). Each command runs as a real subprocess over a synthetic export; ``sqlite3.connect`` and
``os.replace`` are wrapped in the subprocess so that it stops at that moment (an input made slow at will), and
the signal is sent there. Exit code 128+n, one
line, no traceback, and no hidden file left beside the output."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddp_profile.nsys.synth import synth_ddp_run
from ddp_profile.report.build import MARKER

ROOT = Path(__file__).resolve().parents[2]
PRELUDE = """
import os, signal, sys, time
_real, _target, _moment = os.replace, os.path.abspath(os.environ["SIG_TARGET"]), os.environ["SIG_MOMENT"]
_landed = []
_install = signal.signal
def _signal(signum, handler):  # the command's own handlers, noting that a signal landed
    if not callable(handler):
        return _install(signum, handler)
    def noted(n, frame):
        _landed.append(n)
        return handler(n, frame)
    return _install(signum, noted)
signal.signal = _signal
def _stall(moment):  # an input made slow at will: up to 120 s, over once a signal has been handled
    print("AT " + moment, file=sys.stderr, flush=True)
    end = time.monotonic() + 120
    while not _landed and time.monotonic() < end:
        time.sleep(0.05)
def _replace(src, dst, **kw):
    hit = os.path.abspath(os.fspath(dst)) == _target
    if hit and _moment == "before":
        _stall("before")
    _real(src, dst, **kw)
    if hit and _moment == "after":
        _stall("after")
os.replace = _replace
import sqlite3
_connect = sqlite3.connect
def _connect_slowly(*a, **kw):
    if _moment == "working":
        _stall("working")
    return _connect(*a, **kw)
sqlite3.connect = _connect_slowly
from ddp_profile.cli import main
raise SystemExit(main(sys.argv[1:]))
"""
COMMANDS = {  # command -> (argv, output)
    "analyze": (["analyze", "in.sqlite", "--format", "json", "-o", "a.json"], "a.json"),
    "launches": (["launches", "in.sqlite", "-o", "l.csv"], "l.csv"),
    "export": (["export", "in.sqlite", "-o", "t.json.gz"], "t.json.gz"),
    "scrub": (["scrub", "in.sqlite", "-o", "s.sqlite"], "s.sqlite"),
    "report": (["report", "in.sqlite", "-o", "rep", "--no-cache", "--jobs", "1"], "rep"),
}
SIGNALS = [
    (signal.SIGINT, 130, "interrupted"),
    (signal.SIGTERM, 143, "terminated (SIGTERM)"),
    (signal.SIGHUP, 129, "hung up (SIGHUP)"),
]


def _state(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (hidden ones included) -> its content digest."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("input") / "in.sqlite"
    synth_ddp_run(path, n_ranks=2, n_steps=40)
    return path


def _previous(cwd: Path, output: str) -> None:
    """A previous output of that name: a file, or a report folder (our marker, a page)."""
    if output == "rep":
        (cwd / "rep").mkdir()
        (cwd / "rep" / MARKER).write_text("previous\n")
        (cwd / "rep" / "index.html").write_text("<p>previous report</p>\n")
    else:
        (cwd / output).write_bytes(b"previous output\n")


def _run(cwd: Path, argv: list, output: str, moment: str, sig: int | None):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SIG_TARGET": str(cwd / output), "SIG_MOMENT": moment}
    proc = subprocess.Popen(
        [sys.executable, "-c", PRELUDE, *argv],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    if sig is not None:
        seen, deadline = [], time.monotonic() + 240
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            seen.append(line)
            if line.startswith("AT ") or not line:
                break
        assert seen[-1].startswith(f"AT {moment}"), seen
        proc.send_signal(sig)
    out, err = proc.communicate(timeout=240)
    return proc.returncode, err


MOMENTS = ["working", "before", "after"]
CASES = [(c, m, SIGNALS[(i + j) % 3]) for i, c in enumerate(COMMANDS) for j, m in enumerate(MOMENTS)]


@pytest.mark.parametrize("command,moment,sig", CASES, ids=[f"{c}-{m}-{s[1]}" for c, m, s in CASES])
def test_a_signal_at_the_commit_leaves_the_previous_output_byte_identical(
    command, moment, sig, export, tmp_path
):
    os.link(export, tmp_path / "in.sqlite")
    argv, output = COMMANDS[command]
    _previous(tmp_path, output)
    before = _state(tmp_path)
    num, code, word = sig
    rc, err = _run(tmp_path, argv, output, moment, num)
    assert rc == code, err
    lines = [ln for ln in err.splitlines() if not ln.startswith(("AT ", "report:", "loading"))]
    assert "Traceback" not in err and lines[-1].startswith(f"ddp-profile {command}: {word};"), err
    assert _state(tmp_path) == before  # the previous output as it was; no temporary or set-aside copy left
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["in.sqlite", output])


@pytest.mark.parametrize("command", list(COMMANDS))
def test_uninterrupted_the_same_command_replaces_the_output(command, export, tmp_path):
    """The control: without a signal the command does replace that output (so the cases above test a real
    write), and leaves nothing hidden beside it."""
    os.link(export, tmp_path / "in.sqlite")
    argv, output = COMMANDS[command]
    _previous(tmp_path, output)
    before = _state(tmp_path)
    rc, err = _run(tmp_path, argv, output, "none", None)
    assert rc == 0, err
    assert _state(tmp_path) != before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["in.sqlite", output])
