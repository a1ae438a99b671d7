"""The report's Perfetto writer (kernel events written a column at a time) gives exactly the text json.dumps
gives for the event dicts, on synthetic runs (NCCL args with buckets, bytes, waits) and a committed real run."""

import json
from pathlib import Path

import pytest
from conftest import make_run

from ddp_profile.analysis import analyze
from ddp_profile.nsys.loader import load_trace
from ddp_profile.report import perfetto

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "traces" / "bucketed-25mb_small_fp32_2xh200"


def _dumped(t, a) -> str:
    return json.dumps(perfetto.trace_events(t, a), separators=(",", ":"), allow_nan=False)


@pytest.mark.parametrize("steps", [1, 3])
def test_synthetic_run_text_equals_json_dumps(steps):
    t, a = make_run(n_steps=steps, kernels_per_phase=4)
    assert perfetto.trace_json(t, a) == _dumped(t, a)


def test_kernels_only_and_a_real_run_text_equals_json_dumps():
    t, a = make_run(n_steps=2, kernels_per_phase=3)
    assert perfetto.trace_json(t, None) == _dumped(t, None)
    trace = load_trace(REAL)
    res = analyze(trace)
    text = perfetto.trace_json(trace, res)
    assert text == _dumped(trace, res)
    assert sum(e["ph"] == "X" for e in json.loads(text)["traceEvents"]) >= len(trace.kernels)
