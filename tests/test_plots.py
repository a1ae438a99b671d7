"""Figures from synthetic frames whose layout is known (see report_synth.make_run): trace counts, axes,
titles carrying GPU/model/dtype/steps, sub-pixel merging, escaping of hover text."""


import numpy as np
import pandas as pd
import pytest
from report_synth import make_run

from ddp_profile.plots import (
    alpha_beta_figure,
    bucket_sweep_figure,
    describe_source,
    overlap_picture,
    step_breakdown,
    strategy_bars,
    timeline_figure,
    timeline_steps,
)
from ddp_profile.plots._common import merge_small_bars
from ddp_profile.plots.timeline import TRACE_NAMES

pytest.importorskip("plotly")
SRC = describe_source({"gpu_name": "NVIDIA H100", "world_size": 2, "model": "xl", "dtype": "fp32"}, None, [3, 4])


def test_describe_source_names_machine_model_dtype_steps():
    assert SRC == "NVIDIA H100 ×2 · model xl · fp32 · steps 3–4 (2)"
    assert describe_source(None, "H200", [5]) == "H200 · model ? · dtype ? · step 5"


@pytest.mark.parametrize("rows,starts,ends,min_ns,expected", [
    ([], [], [], 10, []),
    ([0, 0, 0], [0, 3, 6], [2, 5, 8], 10, [0, 0, 0]),          # three sub-pixel kernels, gaps 1 < 10: one bar
    ([0, 0, 0], [0, 30, 60], [2, 32, 62], 10, [0, 1, 2]),      # gaps 28 > 10: kept apart
    ([0, 0, 0], [0, 3, 100], [2, 95, 102], 10, [0, 1, 2]),     # a long kernel is never merged
    ([0, 1], [0, 3], [2, 5], 10, [0, 1]),                      # rows never merge
    ([0, 0, 0], [0, 1, 20], [50, 2, 22], 10, [0, 1, 1]),       # small ones under a long one merge with each other
])
def test_merge_small_bars_table(rows, starts, ends, min_ns, expected):
    gid = merge_small_bars(np.array(rows, dtype=np.int64), np.array(starts, float), np.array(ends, float), min_ns)
    assert gid.tolist() == expected


def test_timeline_traces_axes_title_and_known_bars():
    t, a = make_run(n_steps=3, kernels_per_phase=4)
    fig = timeline_figure(t.kernels, a.phases, a.steps, a.collectives, step=1, source=SRC)
    assert [tr.name for tr in fig.data] == TRACE_NAMES and len(fig.data) == 9
    assert fig.layout.xaxis.title.text == "time since step start (ms)"
    assert fig.layout.yaxis.title.text == "rank · stream"
    assert "step 1" in fig.layout.title.text and "NVIDIA H100" in fig.layout.title.text
    assert "xl" in fig.layout.title.text and "fp32" in fig.layout.title.text
    compute, nccl = fig.data[0], fig.data[1]
    assert len(compute.x) == 2 * (3 * 4)          # 2 ranks × (fwd+bwd+opt) × 4 kernels, none merged
    assert len(nccl.x) == 2 * 2                   # 2 ranks × 2 buckets
    assert sorted(nccl.base) == pytest.approx([0.5, 0.5, 0.65, 0.65])  # ms after step start
    assert {cd[2] for cd in nccl.customdata} == {"0", "1"}            # bucket shown in hover
    assert all(cd[3] == "25.0 MiB" for cd in nccl.customdata)
    assert len(fig.data[-1].x) == 2 and fig.data[-1].x[0] == pytest.approx(0.05)  # 50 µs tail per rank
    assert list(fig.layout.yaxis.ticktext) == ["rank 0 · NVTX", "rank 0 · stream 7", "rank 0 · stream 17",
                                              "rank 1 · NVTX", "rank 1 · stream 7", "rank 1 · stream 17"]
    with pytest.raises(ValueError, match="step 9"):
        timeline_figure(t.kernels, a.phases, a.steps, step=9)


def test_timeline_merges_sub_pixel_kernels_and_bounds_bar_count():
    t, a = make_run(n_steps=1, kernels_per_phase=3000)  # 9000 compute kernels of ~0.1 µs spacing per rank
    data = timeline_steps(t.kernels, a.phases, a.steps, a.collectives, pixels=500)
    compute = data["steps"][0]["traces"][0]
    assert len(compute["x"]) < 2 * 500 + 10
    assert sum(compute["c"]) == 2 * 9000          # every kernel accounted for in some merged bar


def test_timeline_hover_names_are_escaped_text():
    t, a = make_run(n_steps=1, hostile=True)
    fig = timeline_figure(t.kernels, a.phases, a.steps)
    names = {cd[0] for cd in fig.data[0].customdata}
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;\"'&amp;amp;&lt;img src=x onerror=window.__pwned=2&gt;" in names
    assert not any("<script" in n for n in names)


def test_step_breakdown_segments_add_up():
    t, a = make_run(n_steps=2)
    fig = step_breakdown(a.steps, source=SRC)
    assert [tr.name for tr in fig.data] == ["compute only", "overlapped comm", "exposed comm", "idle"]
    assert len(fig.data[0].y) == 4 and fig.layout.barmode == "stack"
    total = sum(np.array(tr.y) for tr in fig.data)
    # compute 880 − overlap 150 + overlap 150 + exposed 50 + idle 20 = 950 µs per (rank, step)
    assert total == pytest.approx([0.95] * 4)
    assert fig.layout.yaxis.title.text == "time (ms)" and "fp32" in fig.layout.title.text


def _comparison(n):
    return pd.DataFrame({"run": [f"r{i}" for i in range(n)], "strategy": ["naive", "overlap", "bucketed"][:n],
                         "bucket_size_mb": [25.0] * n, "world_size": [2] * n, "step_ns": [3e6, 2e6, 1.5e6][:n],
                         "exposed_comm_ns": [1e6, 4e5, 2e5][:n], "comm_tail_ns": [1e6, 5e5, 3e5][:n],
                         "efficiency_pct": [40.0, np.nan, 80.0][:n]})


def test_strategy_bars_four_panels_gaps_not_zeros():
    fig = strategy_bars(_comparison(3), source=SRC)
    assert len(fig.data) == 4
    assert list(fig.data[0].x) == ["naive ×2", "overlap ×2", "bucketed 25 MiB ×2"]
    assert list(fig.data[0].y) == [3.0, 2.0, 1.5]
    assert fig.data[3].y[1] is None               # no 1-GPU baseline: a gap, not 0
    assert "H100" in fig.layout.title.text


def test_overlap_picture_rows_per_run():
    k = pd.DataFrame({"run": ["naive", "naive", "bucketed"], "kind": ["compute", "nccl", "nccl"],
                      "name": ["g", "n", "<b>x</b>"], "start_ns": [0, 100, 50], "end_ns": [90, 200, 60]})
    fig = overlap_picture(k, source=SRC)
    assert list(fig.layout.yaxis.ticktext) == ["naive · compute", "naive · comm", "bucketed · compute",
                                              "bucketed · comm"]
    assert list(fig.data[1].y) == [1, 3] and fig.data[1].hovertext[1] == "&lt;b&gt;x&lt;/b&gt;"
    assert fig.layout.xaxis.title.text == "time since step start (ms)"


def test_bucket_sweep_marks_model_and_optimum():
    comp = _comparison(3).assign(bucket_size_mb=[1.0, 25.0, 100.0])
    model = pd.DataFrame({"bucket_size_mb": [1.0, 10.0, 100.0], "predicted_ns": [5e5, 2e5, 4e5]})
    fig = bucket_sweep_figure(comp, model, 12.5, source=SRC)
    assert [tr.name for tr in fig.data] == ["bucketed: time per step", "bucketed: comm tail",
                                           "bucketed: exposed comm", "model n_b·o + s/(n_b·w)", "b* = 12.5 MiB"]
    assert list(fig.data[3].x) == [1.0, 10.0, 100.0] and list(fig.data[3].y) == [0.5, 0.2, 0.4]  # ms
    assert fig.layout.xaxis.type == "log" and fig.layout.xaxis.title.text == "bucket cap (MiB, log scale)"
    assert list(fig.layout.xaxis.ticktext) == ["1", "25", "100"]
    # b* is a vertical line trace at 12.5 MiB in data units, spanning the right panel's values (no shape)
    star = fig.data[4]
    assert list(star.x) == [12.5, 12.5] and star.xaxis == "x2" and not fig.layout.shapes
    assert min(star.y) == pytest.approx(0.2) and max(star.y) == pytest.approx(max(max(fig.data[1].y), max(fig.data[2].y), 0.5))
    assert len(bucket_sweep_figure(comp, None, None).data) == 3  # measured series only, no model


def test_alpha_beta_points_and_fit_line():
    t, a = make_run(n_steps=2)
    fig = alpha_beta_figure(a.collectives, a.cost_model, source=SRC)
    assert [tr.mode for tr in fig.data] == ["markers", "lines"]
    assert len(fig.data[0].x) == len(a.collectives)
    # fit o = 12 µs, w = 150 GB/s: at 150e3 bytes the line reads 12 + 1 = 13 µs
    xs, ys = np.array(fig.data[1].x), np.array(fig.data[1].y)
    assert np.interp(np.log(150e3 * 20), np.log(xs), ys) == pytest.approx(12 + 20, rel=0.02)
    assert fig.layout.yaxis.title.text == "time (µs)"
