"""Shared fixtures: the real 2025.3 sample export and builders of synthetic exports (ddp_profile.nsys.synth)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

# The library's entry points (load_trace, analyze, the API-call loaders, the Dask tasks) make their frames with
# Python-backed strings and give the caller's pandas setting back after (ddp_profile.memory.python_strings);
# tests that call the analysis internals directly and compare their frames with an entry point's use the same
# storage (a frame's column labels and text columns carry it in their dtype).
pd.set_option("mode.string_storage", "python")

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"
SAMPLE = DATA / "ddp_mlp_2xh200.sqlite"


def run_cli(args, cwd=ROOT, prelude: str = "", *, env: dict | None = None, timeout: float = 120,
            module: str = "ddp_profile") -> subprocess.CompletedProcess:
    """``python -m ddp_profile ARGS`` (``module`` for another entry) in a fresh process running this checkout's
    code, from ``cwd``, output captured as text; ``env`` adds variables. With ``prelude``, Python code run
    first in that process (e.g. to make writes fail), then the same CLI entry."""
    cmd = [sys.executable, "-m", module, *map(str, args)] if not prelude else \
        [sys.executable, "-c", prelude + "import sys\nfrom ddp_profile.cli import main\nraise SystemExit(main(sys.argv[1:]))",
         *map(str, args)]
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run(cmd, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout)


def run_cli_in_process(argv: list[str], cwd) -> tuple[int, str]:
    """``ddp_profile.cli.main(argv)`` in this process, from ``cwd``: (exit code, stderr). For property tests
    that run thousands of commands, where a process each would cost seconds."""
    from ddp_profile import cli

    err, out = io.StringIO(), io.StringIO()
    old = os.getcwd()
    try:
        os.chdir(cwd)
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            code = cli.main(argv)
    finally:
        os.chdir(old)
    return code, err.getvalue()


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture(scope="session")
def sample_path() -> Path:
    """The committed real export itself (read-only use only)."""
    return SAMPLE


@pytest.fixture
def sample_export(tmp_path) -> Path:
    """A private copy of the real 2-rank 2025.3 export (safe to scrub, rename, compress)."""
    dst = tmp_path / SAMPLE.name
    shutil.copyfile(SAMPLE, dst)
    return dst


@pytest.fixture
def build_export(tmp_path):
    """``build_export(name, **kwargs)`` -> path of an export written by ddp_profile.nsys.synth.build_export."""
    from ddp_profile.nsys import synth

    def make(name: str = "synth.sqlite", **kwargs) -> Path:
        return synth.build_export(tmp_path / name, **kwargs)

    return make


@pytest.fixture
def ddp_run(tmp_path):
    """``ddp_run(name, **kwargs)`` -> truth dict of ddp_profile.nsys.synth.synth_ddp_run (known overlap)."""
    from ddp_profile.nsys import synth

    def make(name: str = "run.sqlite", **kwargs) -> dict:
        return synth.synth_ddp_run(tmp_path / name, **kwargs)

    return make
