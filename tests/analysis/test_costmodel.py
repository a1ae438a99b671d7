"""The α-β fit (relative, robust, size regimes) and the bucket-queue tail model: synthetic known answers,
then the committed small-model traces as end-to-end truth."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ddp_profile.analysis import costmodel as cm

TRACES = Path(__file__).resolve().parents[2] / "traces"


def _points(sizes, o_ns, w, noise=0.03, per_size=50, seed=7):
    """``per_size`` transfers per size: t = (o + b/w)·(1 + N(0, noise)), the scatter NCCL shows."""
    x = np.repeat(np.asarray(sizes, dtype=float), per_size)
    return x, (o_ns + x / w) * (1 + np.random.default_rng(seed).normal(0, noise, x.size))


SIX_DECADES = np.geomspace(4e3, 8e9, 12)  # 4 kB … 8 GB, like the XL traces (6.4 kB … 7.6 GiB)


def test_relative_fit_recovers_o_and_w_where_least_squares_cannot():
    # o = 7 µs, w = 300 bytes/ns. At 8 GB a 3 % scatter is ±0.8 ms, a hundred times o: an absolute-error
    # line puts its intercept wherever that scatter lands; relative errors pin o on the small messages.
    x, y = _points(SIX_DECADES, 7_000.0, 300.0)
    o, w, _ = cm.fit(x, y)
    assert o == pytest.approx(7_000.0, rel=0.05) and w == pytest.approx(300.0, rel=0.02)
    slope, o_ols = np.polyfit(x, y, 1)  # the previous fit: unweighted least squares
    small = x == x.min()  # relative error of the smallest messages stays at the noise level …
    assert np.median(cm.relative_errors_pct(x[small], y[small], o, w)) < 5.0
    # … where the unweighted line misses them by more than half (the data really separates the two fits)
    assert np.median(cm.relative_errors_pct(x[small], y[small], o_ols, 1 / slope)) > 50.0
    assert len(cm.regimes(x, y)) == 1  # one true line: BIC keeps one regime


def test_huber_weights_resist_short_outliers():
    # Weights 1/t² favour short transfers, so the dangerous outliers are the ones read too short, e.g. a clock
    # skew between ranks moving time from transfer into wait: 5 % of transfers here read at a third.
    x, y = _points(SIX_DECADES, 7_000.0, 300.0, noise=0.02)
    short = np.random.default_rng(3).random(x.size) < 0.05
    y = np.where(short, y / 3, y)
    o, w, _ = cm.fit(x, y)
    o0, w0, _ = cm.fit(x, y, max_iter=0)  # plain relative least squares, no reweighting
    assert o == pytest.approx(7_000.0, rel=0.03) and w == pytest.approx(300.0, rel=0.03)
    assert abs(w0 / 300.0 - 1) > 0.2  # without Huber weights the bandwidth is off by over a fifth


def test_two_regimes_found_and_recovered():
    # Latency-bound line to 2 MB (o = 6 µs, w = 100), bandwidth-bound from 16 MB (o = 25 µs, w = 300).
    lo_x, lo_y = _points([4e3, 64e3, 512e3, 2e6], 6_000.0, 100.0, noise=0.02)
    hi_x, hi_y = _points([16e6, 64e6, 256e6, 1e9, 4e9], 25_000.0, 300.0, noise=0.02, seed=8)
    reg = cm.regimes(np.r_[lo_x, hi_x], np.r_[lo_y, hi_y])
    assert len(reg) == 2
    (a0, split, o1, w1, _), (_, z1, o2, w2, _) = reg
    assert a0 == 0 and z1 == np.inf and split == pytest.approx(np.sqrt(2e6 * 16e6))  # between the clusters
    assert o1 == pytest.approx(6_000, rel=0.05) and w1 == pytest.approx(100, rel=0.05)
    assert o2 == pytest.approx(25_000, rel=0.1) and w2 == pytest.approx(300, rel=0.03)
    df = pd.DataFrame(
        {"collective": "AllReduce", "bytes": np.r_[lo_x, hi_x], "transfer_ns": np.r_[lo_y, hi_y]}
    )
    rows = cm.cost_model(df, [])
    assert len(rows) == 2 and rows["n_points"].sum() == len(df)
    assert list(rows["max_bytes"]) == [2_000_000, 4_000_000_000]
    assert (rows["median_rel_err_pct"] < 3).all() and (rows["p90_rel_err_pct"] < 6).all()
    # predictions follow the regime of each size
    pred = cm.predict_transfer_ns(rows, [4e3, 2e6, 16e6, 4e9])
    assert pred == pytest.approx([o1 + 4e3 / w1, o1 + 2e6 / w1, o2 + 16e6 / w2, o2 + 4e9 / w2])


def test_best_bucket_size_is_the_minimum_over_regimes():
    model = pd.DataFrame(
        {
            "o_us": [6.0, 25.0],
            "w_gb_per_s": [100.0, 300.0],
            "min_bytes": [4_000, 16_000_000],
            "max_bytes": [2_000_000, 4_000_000_000],
        }
    )
    s = 8e9
    b = cm.best_bucket_bytes(model, s)
    grid = np.geomspace(1e3, s, 20_000)
    o, w = cm.regime_lines(model, grid)
    brute = grid[np.argmin(s * o / grid + grid / w)]  # overhead = n_b·o + (s/n_b)/w with n_b = s/b
    assert b == pytest.approx(brute, rel=0.01)
    # the high regime's √(s·w·o) = √(8e9 · 300 · 25e3) ≈ 245 MB lies inside it: that is b*
    assert b == pytest.approx(np.sqrt(8e9 * 300 * 25e3))
    one = model.iloc[[1]].assign(min_bytes=4_000)
    assert cm.best_bucket_bytes(one, s) == pytest.approx(cm.optimal_bucket_bytes(25e3, 300, s))


def _coll(rows):
    cols = ["rank", "pid", "device", "stream", "seq", "step", "bytes", "start_ns"]
    return pd.DataFrame(rows, columns=cols).astype({"step": "Int64", "bytes": "Int64"})


def test_queue_tail_by_hand():
    # t = o + b/w with o = 100 ns, w = 10 bytes/ns: buckets of 1000, 3000, 2000 B take 200, 400, 300 ns.
    model = pd.DataFrame({"o_us": [0.1], "w_gb_per_s": [10.0], "min_bytes": [1000], "max_bytes": [3000]})
    col = _coll(
        [(r, 10 + r, r, 5, i, 1, b, 5000 + i) for r in (0, 1) for i, b in enumerate((1000, 3000, 2000))]
    )
    ready = np.array(
        [
            1000,
            1100,
            2000,  # rank 0
            1050,
            1000,
            1900.0,
        ]
    )  # rank 1 -> each bucket ready at the later rank: 1050, 1100, 2000
    steps = pd.DataFrame(
        {"rank": [0, 1], "step": [1, 1], "backward_end_ns": [2000.0, 1950.0], "comm_tail_ns": [333.0, 333.0]}
    )
    q = cm.queue_tail(col, ready, steps, model)
    # end0 = 1050 + 200 = 1250; end1 = max(1100, 1250) + 400 = 1650 (queued); end2 = max(2000, 1650) + 300 = 2300
    assert q["predicted_tail_ns"].tolist() == [300.0, 350.0] and q["comm_tail_ns"].tolist() == [333.0, 333.0]
    ready[4] = np.nan  # one rank's ready time unknown: no prediction for that step
    assert q.shape == (2, 4) and cm.queue_tail(col, ready, steps, model)["predicted_tail_ns"].isna().all()


def test_gradient_ready_time_is_the_end_of_the_work_launched_before():
    k = pd.DataFrame(
        [  # pid, device, stream, start, end, kind, launch
            (10, 0, 7, 100, 500, "compute", 0),
            (10, 0, 7, 500, 900, "compute", 10),
            (10, 0, 5, 950, 1000, "nccl", 20),  # launched after the first two: ready 900
            (10, 0, 7, 900, 1200, "memcpy", 25),
            (10, 0, 7, 1200, 1500, "compute", 30),
            (10, 0, 5, 1600, 1700, "nccl", 40),  # ready 1500
            (10, 0, 5, 1800, 1900, "nccl", pd.NA),  # no launch record: unknown
            (11, 1, 7, 0, 50, "compute", 5),
            (11, 1, 5, 60, 70, "nccl", 1),  # nothing launched before it
        ],
        columns=["pid", "device", "stream", "start_ns", "end_ns", "kind", "launch_ns"],
    ).astype({"launch_ns": "Int64"})
    col = pd.DataFrame(
        {
            "pid": [10, 10, 10, 11],
            "device": [0, 0, 0, 1],
            "stream": [5, 5, 5, 5],
            "start_ns": [1600, 950, 1800, 60],
        }
    )
    r = cm.grad_ready_ns(col, k)
    assert r[:2].tolist() == [1500.0, 900.0] and np.isnan(r[2:]).all()


SMALL = [
    "naive",
    "flat",
    "overlap",
    "bucketed-1mb",
    "bucketed-10mb",
    "bucketed-25mb",
    "bucketed-100mb",
    "bucketed-1000mb",
]


@pytest.fixture(scope="module")
def small_runs():
    from ddp_profile import load_trace
    from ddp_profile.analysis import analyze

    if not (TRACES / "naive_small_fp32_2xh200").is_dir():
        pytest.skip("committed traces not present")
    out = {}
    for name in SMALL:
        t = load_trace(TRACES / f"{name}_small_fp32_2xh200")
        out[name] = (t, analyze(t))
    return out


def test_real_traces_fit_each_run_and_predict_the_tail(small_runs):
    """End-to-end on the committed small-model campaign (2×H200): the pooled fit predicts every run's total
    transfer time and the queue model every bucketed run's tail, better than the equal-bucket formula."""
    fit = cm.sweep_fit([a.collectives for _, a in small_runs.values()])
    assert len(fit) == 2 and (fit["median_rel_err_pct"] < 10).all()
    pooled = pd.concat([a.collectives for _, a in small_runs.values()])
    tiny = pooled.loc[pooled["bytes"] == pooled["bytes"].min(), "transfer_ns"].median()
    assert float(fit["o_us"].iloc[0]) * 1e3 == pytest.approx(tiny, rel=0.2)  # o is the small-message cost
    slope, o_ols = np.polyfit(pooled["bytes"].astype(float), pooled["transfer_ns"].astype(float), 1)
    assert o_ols > 2 * tiny  # the unweighted line the fit replaced overstated it
    for name, (_, a) in small_runs.items():
        c = a.collectives.loc[a.collectives["step"].notna()]
        per = c.assign(p=cm.predict_transfer_ns(fit, c["bytes"].astype(float))).groupby(["rank", "step"])
        pred, meas = per["p"].sum().median(), per["transfer_ns"].sum().median()
        assert pred == pytest.approx(meas, rel=0.10), name
    s = float(fit["grad_bytes_per_step"].iloc[0])
    queue_err, formula_err = [], []
    for name, (t, a) in small_runs.items():
        if not name.startswith("bucketed"):
            continue
        measured = float(a.steps["comm_tail_ns"].median())
        queued = cm.predicted_tail_ns(a.collectives, t.kernels, a.steps, fit)
        n_b = a.collectives.loc[a.collectives["step"].notna()].groupby(["rank", "step"]).size().median()
        formula = float(cm.sweep_prediction(fit, s, [n_b])[0])
        assert queued == pytest.approx(measured, rel=0.15), name
        queue_err.append(abs(queued / measured - 1))
        formula_err.append(abs(formula / measured - 1))
    assert len(queue_err) == 5 and max(queue_err) < max(formula_err)  # the formula is far off at some caps
