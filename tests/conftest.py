"""Shared fixtures: the real 2025.3 sample export and builders of synthetic exports (ddp_profile.nsys.synth)."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pandas as pd
import pytest

# The library's entry points (load_trace, analyze, the API-call loaders, the Dask tasks) make their frames with
# Python-backed strings and give the caller's pandas setting back after (ddp_profile.memory.python_strings);
# tests that call the analysis internals directly and compare their frames with an entry point's use the same
# storage (a frame's column labels and text columns carry it in their dtype).
pd.set_option("mode.string_storage", "python")

DATA = Path(__file__).parent / "data"
SAMPLE = DATA / "ddp_mlp_2xh200.sqlite"


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


@pytest.fixture
def launch_section():
    """``launch_section(trace, api, **analyze_kwargs)``: the launch section of ``analyze`` given the CUDA API
    calls (what ``ddp-profile launches`` prints)."""
    from ddp_profile.analysis import analyze

    def section(trace, api, **kw):
        return analyze(trace, api=api, sections=[], **kw).launches

    return section

