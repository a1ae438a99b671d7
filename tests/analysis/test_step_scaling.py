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
from ddp_profile.nsys.synth_scale import replicate_export
from ddp_profile.schema import JSON_SECTIONS

SOURCE = (
    Path(__file__).resolve().parents[2] / "traces" / "foreign" / "gpt-logevery" / "gpt-logevery.sqlite.xz"
)
COPIES, FACTOR, REPEATS = 2, 4, 3
MAX_GROWTH = 2.0
OPTIONAL = ("comm_kinds", "recommendation")  # computed only when asked for, as the command does


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
