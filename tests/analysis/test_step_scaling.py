"""Analysis cost is linear in the number of steps: no per-step pass over a whole column.

A committed real 2-rank job (``traces/foreign/gpt-logevery``: a host sync every step on one rank, so the
straggler's cause and its host-wait evidence are computed every step; no step NVTX, so the steps are
inferred) repeated along time (``synth_scale.replicate_export``) COPIES and FACTOR x COPIES times. Each is read by the plainest complete read of its kernel table
(the *floor*, linear in rows by construction) and analysed as ``analyze --format json`` does (load, default
sections, JSON text), both timed in this process as CPU time (less disturbed by other work on a shared machine
than wall time), the minimum of REPEATS. The analysis's cost per floor then stays flat as steps grow::

    growth = (analysis(FACTOR·n) / floor(FACTOR·n)) / (analysis(n) / floor(n))  <  MAX_GROWTH

A step loop that scans a whole column per step (cost steps x rows) makes ``growth`` about FACTOR; fixed costs
(the small export's share of imports, regexes, empty frames) push it below 1.

A second case isolates the cost per step: a synthetic 2-rank export of many tiny inferred steps (the shape of
the 100,000-step benchmark case: 12 compute kernels and 2 all-reduces per rank and step,
``synth_scale.synth_scale_run``) at SYNTH_STEPS and 2 x SYNTH_STEPS steps, the same kernels per step; the CPU
time per step of load + analysis + JSON text, minimum of REPEATS, may not grow by MAX_STEP_GROWTH or more as
the steps double (a cost steps² doubles it; fixed costs lower it).
"""  # noqa: E501

from __future__ import annotations

import itertools
import lzma
import sqlite3
import time
from pathlib import Path

import numpy as np
import pytest

from ddp_profile.analysis import analyze
from ddp_profile.commands.writers import json_text
from ddp_profile.nsys.loader import load_trace
from ddp_profile.nsys.synth_scale import replicate_export, synth_scale_run
from ddp_profile.schema import JSON_SECTIONS

SOURCE = (
    Path(__file__).resolve().parents[2] / "traces" / "foreign" / "gpt-logevery" / "gpt-logevery.sqlite.xz"
)
COPIES, FACTOR, REPEATS = 2, 4, 3
MAX_GROWTH = 2.0
OPTIONAL = ("comm_kinds", "recommendation")  # computed only when asked for, as the command does
SYNTH_STEPS, MAX_STEP_GROWTH = 3_000, 1.6


def _build(path, copies: int):
    src = sqlite3.connect(":memory:")
    src.deserialize(lzma.decompress(SOURCE.read_bytes()))
    replicate_export(src, path, copies)
    src.close()
    return path


def _floor(path) -> float:
    t0 = time.process_time()
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    n = con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    cur = con.execute(
        "SELECT start, end, deviceId, streamId, globalPid, correlationId, shortName "
        "FROM CUPTI_ACTIVITY_KIND_KERNEL"
    )
    arr = np.fromiter(itertools.chain.from_iterable(cur), dtype=np.int64, count=7 * n)
    con.close()
    assert arr.size == 7 * n
    return time.process_time() - t0


def _analysis(path) -> tuple[float, int]:
    core = [k for k in JSON_SECTIONS if k not in OPTIONAL]
    t0 = time.process_time()
    res = analyze(load_trace(path))
    json_text(res, core)
    return time.process_time() - t0, int(res.summary()["n_steps"])


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    folder = tmp_path_factory.mktemp("scaling")
    return [_build(folder / f"copies{n}.sqlite", n) for n in (COPIES, FACTOR * COPIES)]


def test_time_per_step_stays_flat_as_steps_grow(exports):
    _analysis(exports[0])  # modules imported lazily on first use load here, outside the clock
    cost = []
    for path in exports:
        floor = min(_floor(path) for _ in range(REPEATS))
        runs = [_analysis(path) for _ in range(REPEATS)]
        seconds, steps = min(r[0] for r in runs), runs[0][1]
        cost.append((seconds / floor, steps))
    (small, n_small), (big, n_big) = cost
    assert n_big >= FACTOR * n_small - FACTOR, (n_small, n_big)  # every copy's steps were found
    growth = big / small
    assert growth < MAX_GROWTH, (
        f"analysis per floor grew {growth:.2f}x from {n_small} to {n_big} steps "
        f"({small:.1f} and {big:.1f} floors): a per-step pass over a whole column?"
    )


def _synth(path, steps: int):
    synth_scale_run(
        path,
        n_kernels=steps * 14 * 2,
        n_ranks=2,
        kernels_per_step=12,
        n_buckets=2,
        nvtx_steps=False,
        chunk_steps=4096,
    )
    return path


def test_synthetic_time_per_step_stays_flat_as_steps_double(tmp_path):
    paths = [_synth(tmp_path / f"steps{n}.sqlite", n) for n in (SYNTH_STEPS, 2 * SYNTH_STEPS)]
    _analysis(paths[0])  # lazy imports outside the clock
    per_step = []
    for path in paths:
        runs = [_analysis(path) for _ in range(REPEATS)]
        steps = runs[0][1]
        per_step.append((min(r[0] for r in runs) / steps, steps))
    (small, n_small), (big, n_big) = per_step
    assert n_small >= SYNTH_STEPS - 2 and n_big >= 2 * SYNTH_STEPS - 2, (n_small, n_big)  # steps all found
    growth = big / small
    assert growth < MAX_STEP_GROWTH, (
        f"CPU time per step grew {growth:.2f}x from {n_small} to {n_big} steps "
        f"({small * 1e6:.0f} and {big * 1e6:.0f} us per step): a cost that grows with steps x steps?"
    )
