"""Shared fixtures and helpers: the real 2025.3 sample export, builders of synthetic exports
(ddp_profile.nsys.synth), the CLI in a fresh process, and stand-in runs for the report and plot tests."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from ddp_profile import schema

# The library's entry points (load_trace, analyze, the API-call loaders, the Dask tasks) make their frames with
# Python-backed strings and give the caller's pandas setting back after (ddp_profile.memory.python_strings);
# tests that call the analysis internals directly and compare their frames with an entry point's use the same
# storage (a frame's column labels and text columns carry it in their dtype).
pd.set_option("mode.string_storage", "python")

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"
SAMPLE = DATA / "ddp_mlp_2xh200.sqlite"


def run_cli(
    args,
    cwd=ROOT,
    prelude: str = "",
    *,
    env: dict | None = None,
    timeout: float = 120,
    module: str = "ddp_profile",
) -> subprocess.CompletedProcess:
    """``python -m ddp_profile ARGS`` (``module`` for another entry) in a fresh process running this checkout's
    code, from ``cwd``, output captured as text; ``env`` adds variables. With ``prelude``, Python code run
    first in that process (e.g. to make writes fail), then the same CLI entry."""
    cmd = (
        [sys.executable, "-m", module, *map(str, args)]
        if not prelude
        else [
            sys.executable,
            "-c",
            prelude + "import sys\nfrom ddp_profile.cli import main\nraise SystemExit(main(sys.argv[1:]))",
            *map(str, args),
        ]
    )
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


@pytest.fixture
def launch_section():
    """``launch_section(trace, api, **analyze_kwargs)``: the launch section of ``analyze`` given the CUDA API
    calls (what ``ddp-profile launches`` prints)."""
    from ddp_profile.analysis import analyze

    def section(trace, api, **kw):
        return analyze(trace, api=api, sections=[], **kw).launches

    return section


# ---- stand-in runs for report and plot tests ------------------------------------------------------------
# Stand-in traces and analyses for report/plot tests: frames that follow ddp_profile.schema exactly, with
# a known layout (2 ranks; per step: forward, backward with NCCL buckets overlapping it, then optimizer), so
# figure contents can be checked by counting. Also: hostile names to prove escaping.

HOSTILE = "<script>window.__pwned=1</script>\"'&amp;<img src=x onerror=window.__pwned=2>"
US = 1000  # ns


def make_run(
    name="bucketed-25mb_xl_fp32_2xh100",
    strategy="bucketed",
    world_size=2,
    bucket_mb=25.0,
    n_steps=3,
    kernels_per_phase=4,
    hostile=False,
    model="xl",
    gpu="NVIDIA H100 80GB HBM3",
    step_us=1000,
):
    """One run: (trace, analysis) stand-ins. Per rank and step (times in µs from the step start):
    forward kernels 0-300, backward 300-700, NCCL buckets 500-600 and 650-750 (tail 700-750), optimizer
    750-900. ``step_us`` stretches the step (for the sweep)."""
    k_rows, phase_rows, step_rows, col_rows = [], [], [], []
    for rank in range(world_size):
        pid = 100 + rank
        for step in range(n_steps):
            t0 = (10_000 + step * step_us * 2) * US
            for phase, (a, b) in {
                "forward": (0, 300),
                "backward": (300, 700),
                "optimizer": (750, 900),
            }.items():
                edges = np.linspace(a, b, kernels_per_phase + 1)
                gap = min(5.0, (b - a) / kernels_per_phase / 4)  # idle µs between kernels
                for i in range(kernels_per_phase):
                    nm = HOSTILE if (hostile and i == 0) else f"{phase}_gemm_{i}"
                    k_rows.append(
                        (
                            rank,
                            pid,
                            rank,
                            7,
                            t0 + int(edges[i] * US),
                            t0 + int((edges[i + 1] - gap) * US),
                            nm,
                            "compute",
                            None,
                            None,
                            None,
                            None,
                            len(k_rows),
                            t0,
                            1,
                            pd.NA,
                        )
                    )
                phase_rows.append((rank, step, phase, t0 + a * US, t0 + b * US, t0 + a * US, t0 + b * US))
            phase_rows.append((rank, step, "step", t0, t0 + 900 * US, t0, t0 + 900 * US))
            for bucket, (a, b) in enumerate([(500, 600), (650, 750)] if world_size > 1 else []):
                nbytes = int(bucket_mb * 2**20)
                k_rows.append(
                    (
                        rank,
                        pid,
                        rank,
                        17,
                        t0 + a * US,
                        t0 + b * US,
                        "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                        "nccl",
                        "AllReduce",
                        "RING",
                        "LL",
                        "f32",
                        len(k_rows),
                        t0,
                        2,
                        pd.NA,
                    )
                )
                col_rows.append(
                    (
                        rank,
                        pid,
                        rank,
                        17,
                        step * 2 + bucket,
                        step,
                        "AllReduce",
                        "RING",
                        "LL",
                        "f32",
                        bucket,
                        nbytes,
                        t0 + a * US,
                        t0 + b * US,
                        (b - a) * US,
                        10 * US,
                        (b - a - 10) * US,
                        nbytes / ((b - a - 10) * US),
                        "RING_LL",
                    )
                )
            k_rows.append(
                (
                    rank,
                    pid,
                    rank,
                    7,
                    t0 + 901 * US,
                    t0 + 902 * US,
                    "Memcpy HtoD",
                    "memcpy",
                    None,
                    None,
                    None,
                    None,
                    len(k_rows),
                    t0,
                    1,
                    4096,
                )
            )
            comm = 200 * US if world_size > 1 else 0
            step_rows.append(
                (
                    rank,
                    step,
                    t0,
                    t0 + 902 * US,
                    902 * US,
                    (step_us * 2 * US if step else 902 * US),
                    880 * US,
                    comm,
                    min(comm, 150 * US),
                    max(comm - 150 * US, 0),
                    1 * US,
                    20 * US,
                    300 * US,
                    400 * US,
                    150 * US,
                    t0 + 700 * US,
                    50 * US if comm else 0,
                    22.0,
                    5.5,
                    # exposed wait/transfer, param sync (none), exposed all-gather (none), job tail
                    10 * US if comm else 0,
                    40 * US if comm else 0,
                    0,
                    0,
                    0,
                    50 * US if comm else 0,
                    # micro-steps, extra kernels / GPU / host time (none)
                    1,
                    0,
                    0,
                    0,
                )
            )
    kernels = pd.DataFrame(k_rows, columns=schema.KERNEL_COLUMNS)
    trace = SimpleNamespace(
        kernels=kernels,
        nvtx=schema.empty_frame(schema.NVTX_COLUMNS),
        gpus=pd.DataFrame(
            [("f", r, gpu, 132, 80 * 2**30, "0") for r in range(world_size)], columns=schema.GPU_COLUMNS
        ),
        ranks=pd.DataFrame(
            [(r, 100 + r, r, gpu, "f", "host", "nvtx-marker") for r in range(world_size)],
            columns=schema.RANK_COLUMNS,
        ),
        meta={"nsys_version": "2025.3"},
        paths=[],
        run={
            "run_name": (HOSTILE if hostile else name),
            "strategy": strategy,
            "model": (HOSTILE if hostile else model),
            "dtype": "fp32",
            "world_size": world_size,
            "bucket_mb": bucket_mb,
            "gpu_name": gpu,
            "steps": n_steps,
        },
    )
    collectives = (
        pd.DataFrame(col_rows, columns=schema.COLLECTIVE_COLUMNS)
        if col_rows
        else schema.empty_frame(schema.COLLECTIVE_COLUMNS)
    )
    steps = pd.DataFrame(step_rows, columns=schema.STEP_METRIC_COLUMNS)
    analysis = SimpleNamespace(
        steps=steps,
        phases=pd.DataFrame(phase_rows, columns=schema.PHASE_COLUMNS),
        rank_overlap=schema.empty_frame(schema.RANK_OVERLAP_COLUMNS),
        kernel_overlap=schema.empty_frame(schema.KERNEL_OVERLAP_COLUMNS),
        collectives=collectives,
        cost_model=pd.DataFrame(
            [("AllReduce", len(col_rows), 12.0, 150.0, 0.99, 2**20, 2**26, 3.0, 8.0)],
            columns=schema.COST_MODEL_COLUMNS,
        ),
        comm_kinds=schema.empty_frame(schema.COMM_KIND_COLUMNS),
        contention=pd.DataFrame(
            [
                (
                    HOSTILE if hostile else "backward_gemm_0",
                    3,
                    3,
                    90_000,
                    99_000,
                    10.0,
                    270_000,
                    27_000,
                    297_000,
                )
            ],
            columns=schema.CONTENTION_COLUMNS,
        ),
        notes=[f"note about {HOSTILE}"] if hostile else ["synthetic stand-in"],
        summary=lambda: {"step_ms": 0.902, "exposed_comm_pct": 5.5},
    )
    return trace, analysis


def fake_compare_runs(pairs):
    """Stand-in for analysis.compare_runs: medians of the step frame, efficiency against a 1-GPU run."""
    rows = []
    for trace, a in pairs:
        r, s = trace.run, a.steps
        rows.append(
            {
                "run": r["run_name"],
                "strategy": r["strategy"],
                "bucket_mb": r["bucket_mb"],
                "model": r["model"],
                "dtype": r["dtype"],
                "world_size": r["world_size"],
                "gpu_name": r["gpu_name"],
                "n_steps": s["step"].nunique(),
                "step_ns": s["step_ns"].median(),
                "compute_ns": s["compute_ns"].median(),
                "comm_ns": s["comm_ns"].median(),
                "exposed_comm_ns": s["exposed_comm_ns"].median(),
                "comm_tail_ns": s["comm_tail_ns"].median(),
                "comm_pct": s["comm_pct"].median(),
                "overlap_pct": 75.0,
                "speedup_vs_1gpu": np.nan,
                "efficiency_pct": np.nan,
                "serial_fraction": np.nan,
                "predicted_overhead_ns": np.nan,
            }
        )
    return schema.select(pd.DataFrame(rows), schema.COMPARISON_COLUMNS)


def patch_analysis(monkeypatch):
    import ddp_profile.report.compare as compare

    monkeypatch.setattr(compare, "compare_runs", fake_compare_runs)


def write_site(tmp_path_factory, runs, name="site"):
    """``report.write_report`` of ``runs`` into a fresh ``<tmp>/<name>/reports`` with the comparison seam
    patched (:func:`patch_analysis`) for the duration of the write; returns the folder."""
    import pytest

    from ddp_profile import report

    mp = pytest.MonkeyPatch()
    patch_analysis(mp)
    out = tmp_path_factory.mktemp(name) / "reports"
    try:
        report.write_report(runs, out)
    finally:
        mp.undo()
    return out


def run_set(hostile_run=False):
    """A 1-GPU baseline, naive/overlap/bucketed at 2 GPUs, and a 3-point bucket sweep: Run objects."""
    from ddp_profile.report import Run

    specs = [
        ("none_xl_fp32_1xh100", "none", 1, 25.0),
        ("naive_xl_fp32_2xh100", "naive", 2, 25.0),
        ("overlap_xl_fp32_2xh100", "overlap", 2, 25.0),
        ("bucketed-1mb_xl_fp32_2xh100", "bucketed", 2, 1.0),
        ("bucketed-25mb_xl_fp32_2xh100", "bucketed", 2, 25.0),
        ("bucketed-100mb_xl_fp32_2xh100", "bucketed", 2, 100.0),
    ]
    runs = []
    for i, (name, strat, ws, mb) in enumerate(specs):
        t, a = make_run(name, strat, ws, mb, step_us=1000 + 100 * i)
        runs.append(Run(name, t, a, dict(t.run)))
    if hostile_run:
        t, a = make_run("hostile", "bucketed", 2, 25.0, hostile=True, model="xl")
        runs.append(Run("hostile<run>", t, a, dict(t.run)))
    return runs
