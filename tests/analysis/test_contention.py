"""Contention compares each overlapped kernel with the same kernel alone: (name, position in the step).

One name, two shapes (hand-built, one rank, NVTX steps 0-5). Per step s, on GPU from B = 100_000·s:

    g#0 (big)   B .. B+1000      alone in every step          (1000 ns)
    g#1 (small) B+2000 .. +d     alone in steps 0-2           (d = 100, 104, 96)
                                 under NCCL in steps 3-5      (d = 150, 170, 160; NCCL B+1990 .. B+2300)

Per name (the old rule): alone median = median(1000 x6, 100, 104, 96) = 1000, so
lost = (150 + 170 + 160) − 3·1000 = −2520: the big kernel is no baseline for the small one.
Per key: g#0 has no overlapped instance (left out); g#1: alone median 100, baseline 3·100 = 300,
lost = 480 − 300 = 180, slowdown = 100·180/300 = 60 %.
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
import pytest
from test_analysis import kernels, nvtx, trace

from ddp_profile import nvtx_names as nn
from ddp_profile import schema
from ddp_profile.analysis import KernelArrays, analyze
from ddp_profile.analysis import windows as win
from ddp_profile.analysis.contention import (
    contention,
    contention_per_step_ns,
    contention_samples,
    estimated_loss_ns,
    pooled_contention,
)
from ddp_profile.analysis.contention_rows import step_ordinals
from ddp_profile.analysis.overlap import overlapped_by_other_class
from ddp_profile.nsys.loader import load_trace

AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
SMALL = {0: 100, 1: 104, 2: 96, 3: 150, 4: 170, 5: 160}


def two_shapes(ranks=(0,)):
    krows, nrows = [], []
    for r in ranks:
        pid = 100 + r
        for s in range(6):
            b, h = 100_000 * s, 1000 * s
            krows.append((r, pid, 7, b, b + 1000, "g", "compute", h + 10, 1))
            krows.append((r, pid, 7, b + 2000, b + 2000 + SMALL[s], "g", "compute", h + 20, 1))
            if s >= 3:
                krows.append((r, pid, 17, b + 1990, b + 2300, AR, "nccl", h + 15, 1))
            nrows.append((r, pid, 1, nn.DOMAIN, f"step {s}", h, h + 500, 0, s))
    return kernels(krows), nvtx(nrows)


def _parts(k, n):
    karr = KernelArrays(k)
    steps, _ = win.find_steps(n)
    windows = win.phase_windows(steps, win.find_phases(n, steps), karr)
    return karr, overlapped_by_other_class(karr), windows


def test_one_name_two_shapes_per_name_rule_is_negative_per_key_rule_exact():
    k, n = two_shapes()
    karr, covered, windows = _parts(k, n)
    np.testing.assert_array_equal(step_ordinals(karr, windows)[karr.is_compute], [0, 1] * 6)
    old = contention(karr, covered).iloc[0]  # no windows: the per-name rule
    # the per-name rule pairs the small kernels under NCCL with the large ones alone: 480 − 3 · 1000 < 0,
    # reported as 0 (lost_ns is never negative) with the unlike baseline in view
    assert (
        old["lost_ns"] == 0
        and old["baseline_ns"] == pytest.approx(3 * 1000)
        and old["alone_median_ns"] == 1000
    )
    assert old["slowdown_pct"] == 0
    new = analyze(trace(k, n)).contention
    assert list(new.columns) == schema.CONTENTION_COLUMNS and len(new) == 1
    row = new.iloc[0]
    assert row[["n_alone", "n_overlapped"]].tolist() == [3, 3]
    assert row["alone_median_ns"] == 100 and row["overlapped_median_ns"] == 160
    assert row["baseline_ns"] == pytest.approx(300)
    assert row["lost_ns"] == pytest.approx(180)
    assert row["slowdown_pct"] == pytest.approx(60.0)
    assert row["overlapped_ns"] == 150 + 170 + 160 and old["overlapped_ns"] == 480
    # every overlapped instance of g is counted here, so the estimate is the measured loss
    assert estimated_loss_ns(new) == pytest.approx(180)
    pd.testing.assert_frame_equal(contention(karr, covered, windows), new)


def test_keys_pool_over_ranks_and_per_rank_samples_give_the_same_table():
    k, n = two_shapes(ranks=(0, 1))
    karr, covered, windows = _parts(k, n)
    whole = contention(karr, covered, windows)
    row = whole.iloc[0]
    assert row[["n_alone", "n_overlapped"]].tolist() == [6, 6]
    assert row["lost_ns"] == pytest.approx(2 * 180) and row["slowdown_pct"] == pytest.approx(60.0)
    per_rank = []
    for r in (0, 1):
        rows = np.flatnonzero(karr.rank == r)
        per_rank.append(contention_samples(karr.subset(rows), covered[rows], windows[windows["rank"] == r]))
    assert set(per_rank[0]) == {("g", 0), ("g", 1)}
    pd.testing.assert_frame_equal(pooled_contention(per_rank), whole)
    # Without windows both paths fall back to the per-name rule, alike.
    no_steps = [
        contention_samples(karr.subset(np.flatnonzero(karr.rank == r)), covered[karr.rank == r])
        for r in (0, 1)
    ]
    pd.testing.assert_frame_equal(pooled_contention(no_steps), contention(karr, covered))
    assert contention(karr, covered)["lost_ns"].iloc[0] == 0  # 2 · (480 − 3 · 1000) < 0: never negative


def test_kernels_outside_every_step_are_left_out():
    k, n = two_shapes()
    extra = kernels(
        [(0, 100, 7, 900_000 + 10 * i, 900_005 + 10 * i, "g", "compute", 90_000, 1) for i in range(5)]
    )
    k = pd.concat([k, extra], ignore_index=True)
    karr, covered, windows = _parts(k, n)
    assert (step_ordinals(karr, windows)[len(k) - 5 :] == -1).all()
    assert contention(karr, covered, windows)["lost_ns"].iloc[0] == pytest.approx(180)


# A NCCL-channel-capped run: under the per-name rule its GEMMs' alone instances (24, the big ones) were the
# baseline of 6,912 small overlapped ones, and the total came out at about −167 ms per rank-step.
CAPPED = "traces/campaign/C/torch_ddp-25mb-ch2-hiprio_xl_fp32_4xh100"
CAPPED_D = "traces/campaign/D/torch_ddp-25mb-ch9-hiprio_xl_fp32_4xh100"


@pytest.mark.parametrize("run", [CAPPED, CAPPED_D])
def test_lost_time_on_committed_channel_capped_runs_is_not_negative(run):
    res = analyze(load_trace(run))
    c = res.contention
    # Like for like, a key's lost time is noise around its true loss (≥ 0): negative keys are timing jitter
    # of a few % of a kernel, and they cancel in the sum. Bound: the total may not fall below −1 % of the
    # alone baseline it was measured against (a 1 % median jitter on every counted kernel, all one way).
    assert c["lost_ns"].sum() >= -0.01 * c["baseline_ns"].sum()
    assert contention_per_step_ns(c, res.steps) >= -0.01 * c["baseline_ns"].sum() / len(res.steps)
    assert (c["slowdown_pct"].dropna() > -5).all()


def test_rows_out_of_time_order_give_the_same_table():
    """The loader's frames are sorted by (rank, start) and contention then finds each step window's rows as
    slices; any other row order takes the searching path and must give the same table."""
    k, n = two_shapes(ranks=(0, 1))
    karr, covered, windows = _parts(k, n)
    ordered = contention(karr, covered, windows)
    shuffled = k.sample(frac=1.0, random_state=3).reset_index(drop=True)
    karr2, covered2, windows2 = _parts(shuffled, n)
    pd.testing.assert_frame_equal(contention(karr2, covered2, windows2), ordered)
    assert ordered.iloc[0]["lost_ns"] == pytest.approx(2 * 180)


def test_names_found_by_mask_or_by_sort_give_the_same_table(monkeypatch):
    """Up to MASKED_NAMES names each name's rows are found by a mask; past it by one stable sort."""
    import ddp_profile.analysis.contention_rows as rows_mod

    k, n = two_shapes(ranks=(0, 1))
    karr, covered, windows = _parts(k, n)
    masked = contention(karr, covered, windows)
    monkeypatch.setattr(rows_mod, "MASKED_NAMES", 0)
    pd.testing.assert_frame_equal(contention(karr, covered, windows), masked)


def _random_steps(seed: int, n: int = 6000, n_ranks: int = 3, n_names: int = 7):
    """Loader-ordered random kernels (one (pid, device) per rank, sorted by (rank, start)) with disjoint
    step windows per rank that leave gaps (kernels outside every step)."""
    rng = np.random.default_rng(seed)
    rank = np.sort(rng.integers(0, n_ranks, n)).astype(np.int32)
    start = rng.integers(0, 200 * n, n).astype(np.int64)
    kind = rng.choice(np.array(["compute", "nccl", "memcpy"], dtype=object), n, p=[0.75, 0.2, 0.05])
    end = start + np.where(kind == "nccl", rng.integers(0, 3000, n), rng.integers(0, 400, n))
    names = np.array([f"k{i}" for i in range(n_names)], dtype=object)
    name = names[rng.integers(0, n_names, n)]
    name[rng.random(n) < 0.02] = None
    k = pd.DataFrame(
        {
            "rank": rank,
            "pid": rank + 100,
            "device": rank,
            "stream": np.int32(7),
            "start_ns": start,
            "end_ns": end,
            "name": pd.Categorical(name),
            "kind": pd.Categorical(kind),
            "launch_ns": pd.array([pd.NA] * n, "Int64"),
        }
    )
    k = k.sort_values(["rank", "start_ns"], kind="stable").reset_index(drop=True)
    edges = np.arange(0, 200 * n, 10 * n)
    windows = pd.DataFrame(
        [
            {"phase": "step", "rank": r, "step": i, "start_ns": int(a), "end_ns": int(a + 8 * n)}
            for r in range(n_ranks)
            for i, a in enumerate(edges)
        ]
    )
    return k, windows


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_window_slices_and_window_search_give_the_same_tables(seed, monkeypatch):
    """Rows in (rank, start) order with disjoint windows take the window slices (_window_rows); the searching
    path (_window_ids) must give the same ordinals and tables, and so must a shuffled frame."""
    import ddp_profile.analysis.contention_rows as rows_mod

    k, windows = _random_steps(seed)
    karr = KernelArrays(k)
    covered = overlapped_by_other_class(karr)
    assert rows_mod._window_rows(karr, windows) is not None
    fast = contention(karr, covered, windows, min_count=2)
    fast_k = step_ordinals(karr, windows)
    fast_s = contention_samples(karr, covered, windows)
    assert len(fast) and (fast_k >= 0).any() and (fast_k[karr.is_compute] == -1).any()
    with monkeypatch.context() as m:  # names grouped over many small chunks of rows: the same
        m.setattr(rows_mod, "_ordered_segments", functools.partial(rows_mod._ordered_segments, chunk=7))
        pd.testing.assert_frame_equal(contention(karr, covered, windows, min_count=2), fast)
        np.testing.assert_array_equal(step_ordinals(karr, windows), fast_k)
    with monkeypatch.context() as m:
        m.setattr(rows_mod, "_window_rows", lambda karr, steps: None)
        pd.testing.assert_frame_equal(contention(karr, covered, windows, min_count=2), fast)
        np.testing.assert_array_equal(step_ordinals(karr, windows), fast_k)
        slow_s = contention_samples(karr, covered, windows)
        assert slow_s.keys() == fast_s.keys()
        for key, (a, o) in fast_s.items():
            np.testing.assert_array_equal(a, slow_s[key][0])
            np.testing.assert_array_equal(o, slow_s[key][1])
    shuffled = k.sample(frac=1.0, random_state=seed).reset_index(drop=True)
    karr2 = KernelArrays(shuffled)
    covered2 = overlapped_by_other_class(karr2)
    pd.testing.assert_frame_equal(contention(karr2, covered2, windows, min_count=2), fast)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_packed_keys_give_the_unpacked_table(seed, monkeypatch):
    """The keyed table from packed rows (groups' sums and medians read from one sorted int64 array, medians
    by binary search over the durations) equals the one from the unpacked (key, duration) sort, also with
    the packing and grouping done over small chunks of rows."""
    import ddp_profile.analysis.contention as cont
    import ddp_profile.analysis.contention_rows as rows_mod

    k, windows = _random_steps(seed)
    karr = KernelArrays(k)
    covered = overlapped_by_other_class(karr)
    packed = contention(karr, covered, windows, min_count=2)
    assert len(packed)
    with monkeypatch.context() as m:
        m.setattr(cont, "_packed", lambda k, a, d: None)
        pd.testing.assert_frame_equal(contention(karr, covered, windows, min_count=2), packed)
    with monkeypatch.context() as m:
        m.setattr(cont, "_packed", functools.partial(cont._packed, chunk=5))
        m.setattr(cont, "_packed_groups", functools.partial(cont._packed_groups, chunk=3))
        m.setattr(rows_mod, "_classes", functools.partial(rows_mod._classes, chunk=4))
        m.setattr(rows_mod, "_ordered_segments", functools.partial(rows_mod._ordered_segments, chunk=6))
        pd.testing.assert_frame_equal(contention(karr, covered, windows, min_count=2), packed)


def test_union_median_of_packed_runs():
    """Order statistics of selected sorted runs of packed rows: the median of their durations together."""
    import ddp_profile.analysis.contention as cont

    rng = np.random.default_rng(5)
    for n in (1, 2, 7, 40):
        k = rng.integers(0, 4, n).astype(np.int32)
        a = rng.random(n) < 0.5
        d = rng.integers(0, 2**32, n) if n < 40 else rng.integers(0, 3, n)  # wide values, many ties
        want = d.copy()
        p = cont._packed(k, a, d)
        head, size, gk, ga, sums = cont._packed_groups(p)
        for sel in (ga, ~ga, np.ones(len(head), bool)):
            if not sel.any():
                continue
            rows = np.isin(k.astype(np.int64) * 2 + a, gk[sel] * 2 + ga[sel])
            got = cont._union_median(p, head, size, sel, True)
            assert got == (int(rows.sum()), float(np.median(want[rows])))
        for g in range(len(head)):
            rows = (k == gk[g]) & (a == ga[g])
            assert sums[g] == want[rows].sum()


def test_compact_in_place_over_chunks():
    """_compact selects in the array itself, a chunk at a time: the same values as x[mask]."""
    import ddp_profile.analysis.contention_rows as rows_mod

    rng = np.random.default_rng(3)
    for n, chunk in ((0, 4), (1, 4), (50, 4), (50, 7), (50, 64)):
        x = rng.integers(0, 1000, n).astype(np.int32)
        mask = rng.random(n) < 0.6
        want = x[mask]
        got = rows_mod._compact(x, mask, chunk=chunk)
        np.testing.assert_array_equal(got, want)
        assert got.dtype == np.int32


def test_lost_ns_is_never_negative_on_the_fsdp2_trace():
    """The FSDP2 trace had names whose instances ran faster beside NCCL (−8.5 % before lost_ns was clipped)."""
    from pathlib import Path

    from ddp_profile.nsys.loader import load_trace

    c = analyze(load_trace(Path(__file__).resolve().parents[2] / "traces" / "foreign" / "fsdp2")).contention
    assert len(c) > 0 and (c["lost_ns"] >= 0).all() and (c["slowdown_pct"] >= 0).all()
