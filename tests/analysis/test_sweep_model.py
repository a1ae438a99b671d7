"""The one sweep model shared by the report's sweep page and the findings: hand-derived known answers."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from ddp_profile.analysis.costmodel import fit_params, gradient_bytes_per_step, sweep_fit, sweep_prediction


def _frame(sizes, o_ns=10_000.0, w=100.0, ranks=(0, 1), steps=(1, 2)):
    """Collectives of one run: every (rank, step) all-reduces ``sizes`` bytes, transfer = o + bytes / w."""
    rows = [
        {"rank": r, "step": s, "collective": "AllReduce", "bytes": float(b), "transfer_ns": o_ns + b / w}
        for r in ranks
        for s in steps
        for b in sizes
    ]
    return pd.DataFrame(rows)


def test_pooled_fit_recovers_o_w_and_b_star_by_hand():
    # Run 1 moves 1e6 + 3e6 bytes per step, run 2 2e6 + 2e6: s = 4e6 bytes in both.
    # Exact line: o = 10 µs = 1e4 ns, w = 100 bytes/ns (100 GB/s). b* = √(s·w·o) = √(4e6 · 100 · 1e4) = 2e6.
    fit = sweep_fit([_frame([1e6, 3e6]), _frame([2e6, 2e6]), pd.DataFrame(columns=["bytes"])])
    assert len(fit) == 1 and int(fit["n_runs"].iloc[0]) == 2  # the empty frame (no sizes) is not pooled
    o, w, r2 = fit_params(fit)
    assert math.isclose(o, 1e4, rel_tol=1e-6) and math.isclose(w, 100.0, rel_tol=1e-6) and r2 > 0.999999
    assert math.isclose(float(fit["grad_bytes_per_step"].iloc[0]), 4e6)
    assert math.isclose(float(fit["b_star_bytes"].iloc[0]), 2e6, rel_tol=1e-6)
    # overhead(n) = n·o + s/(n·w): n=1 -> 1e4 + 4e4 = 5e4; n=2 -> 2e4 + 2e4 = 4e4; n=4 -> 4e4 + 1e4 = 5e4
    pred = sweep_prediction(fit, 4e6, [1, 2, 4, None, 0])
    assert np.allclose(pred[:3], [5e4, 4e4, 5e4]) and np.isnan(pred[3:]).all()


def test_no_sizes_no_fit():
    fit = sweep_fit([_frame([1e6, 1e6])])  # one distinct size: nothing to fit
    assert not len(fit) and all(math.isnan(x) for x in fit_params(fit))
    assert np.isnan(sweep_prediction(fit, 4e6, [1])).all()
    assert math.isnan(gradient_bytes_per_step(pd.DataFrame(columns=["rank", "step", "bytes"])))


def test_prediction_uses_the_regime_of_the_mean_bucket():
    # Two regimes split at √(2e6·16e6) ≈ 5.7 MB: o = 6 µs, w = 100 below; o = 25 µs, w = 300 above.
    fit = pd.DataFrame(
        {
            "o_us": [6.0, 25.0],
            "w_gb_per_s": [100.0, 300.0],
            "r2": [1.0, 1.0],
            "min_bytes": [4_000, 16_000_000],
            "max_bytes": [2_000_000, 4_000_000_000],
        }
    )
    s = 8e6
    # n = 1: one 8 MB bucket (high regime): 25e3 + 8e6/300; n = 4: 2 MB buckets (low): 4·6e3 + 8e6/(4·100)
    assert sweep_prediction(fit, s, [1, 4]) == pytest.approx([25e3 + 8e6 / 300, 4 * 6e3 + 8e6 / 400])
    assert fit_params(fit, 1e3)[:2] == (6e3, 100.0) and fit_params(fit)[:2] == (25e3, 300.0)
