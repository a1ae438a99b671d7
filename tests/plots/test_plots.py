"""Figures from synthetic frames whose layout is known (see conftest.make_run): trace counts, axes,
titles carrying GPU/model/dtype/steps, sub-pixel merging, escaping of hover text."""

import numpy as np
import pandas as pd
import pytest
from conftest import make_run

from ddp_profile.fmt import fmt_duration
from ddp_profile.plots import (
    alpha_beta_figure,
    bucket_sweep_figure,
    describe_source,
    exposed_comm_figure,
    overlap_picture,
    palette,
    step_breakdown,
    strategy_bars,
    timeline_figure,
    timeline_steps,
)
from ddp_profile.plots.figure_parts import merge_small_bars
from ddp_profile.plots.timeline import TAIL_K, TRACE_NAMES, bars_for_window, figure_for_step

pytest.importorskip("plotly")
SRC = describe_source(
    {"gpu_name": "NVIDIA H100", "world_size": 2, "model": "xl", "dtype": "fp32"}, None, [3, 4]
)


def test_describe_source_names_machine_model_dtype_steps():
    assert SRC == "NVIDIA H100 ×2 · model xl · fp32 · steps 3–4 (2)"
    assert describe_source(None, "H200", [5]) == "H200 · step 5"  # unknown model and dtype left out


@pytest.mark.parametrize(
    "rows,starts,ends,min_ns,expected",
    [
        ([], [], [], 10, []),
        ([0, 0, 0], [0, 3, 6], [2, 5, 8], 10, [0, 0, 0]),  # three sub-pixel kernels, gaps 1 < 10: one bar
        ([0, 0, 0], [0, 30, 60], [2, 32, 62], 10, [0, 1, 2]),  # gaps 28 > 10: kept apart
        ([0, 0, 0], [0, 3, 100], [2, 95, 102], 10, [0, 1, 2]),  # a long kernel is never merged
        ([0, 1], [0, 3], [2, 5], 10, [0, 1]),  # rows never merge
        (
            [0, 0, 0],
            [0, 1, 20],
            [50, 2, 22],
            10,
            [0, 1, 1],
        ),  # small ones under a long one merge with each other
    ],
)
def test_merge_small_bars_table(rows, starts, ends, min_ns, expected):
    gid = merge_small_bars(
        np.array(rows, dtype=np.int64), np.array(starts, float), np.array(ends, float), min_ns
    )
    assert gid.tolist() == expected


def test_timeline_traces_axes_title_and_known_bars():
    t, a = make_run(n_steps=3, kernels_per_phase=4)
    fig = timeline_figure(t.kernels, a.phases, a.steps, a.collectives, step=1, source=SRC)
    assert [tr.name for tr in fig.data] == TRACE_NAMES and len(fig.data) == 11
    assert fig.layout.xaxis.title.text == "time since step start (ms)"
    assert fig.layout.yaxis.title.text == "rank · stream"
    assert "step 1" in fig.layout.title.text and "NVIDIA H100" in fig.layout.title.text
    assert "xl" in fig.layout.title.text and "fp32" in fig.layout.title.text
    compute, nccl = fig.data[0], fig.data[1]
    assert len(compute.x) == 2 * (3 * 4)  # 2 ranks × (fwd+bwd+opt) × 4 kernels, none merged
    assert len(nccl.x) == 2 * 2  # 2 ranks × 2 buckets
    assert sorted(nccl.base) == pytest.approx([0.5, 0.5, 0.65, 0.65])  # ms after step start
    hover = list(nccl.hovertext)
    assert {h.split("<br>bucket ")[1].split(" ·")[0] for h in hover} == {"0", "1"}  # bucket shown in hover
    assert all("25.0 MiB" in h and "rank " in h and "stream 17" in h for h in hover)
    assert all("wait 10.0 µs · transfer 90.0 µs" in h and "duration 100 µs" in h for h in hover)
    assert "start 500 µs" in hover[0]
    assert all("bucket" not in h for h in compute.hovertext)  # compute bars have no bucket line
    assert "rank 0 · NVTX" in fig.data[TAIL_K].hovertext[0]  # the tail has its own tooltip
    assert len(fig.data[TAIL_K].x) == 2 and fig.data[TAIL_K].x[0] == pytest.approx(
        0.05
    )  # 50 µs tail per rank
    assert list(fig.layout.yaxis.ticktext) == [
        "rank 0 · NVTX",
        "rank 0 · stream 7",
        "rank 0 · stream 17",
        "rank 1 · NVTX",
        "rank 1 · stream 7",
        "rank 1 · stream 17",
    ]
    with pytest.raises(ValueError, match="step 9"):
        timeline_figure(t.kernels, a.phases, a.steps, step=9)


def test_a_stream_used_only_between_steps_gets_no_timeline_row():
    """Seen on gpt-logevery: streams 14 and 15 ran kernels only outside the steps and showed as empty rows
    in every step's view. A stream with one kernel inside some step keeps its row."""
    import pandas as pd

    t, a = make_run(n_steps=2, kernels_per_phase=2)
    k, w = (
        t.kernels,
        a.steps.groupby("step")[["start_ns", "end_ns"]].agg({"start_ns": "min", "end_ns": "max"}),
    )
    gap = int(w.loc[0, "end_ns"]) + 1, int(w.loc[1, "start_ns"]) - 1  # strictly between step 0 and step 1
    assert gap[0] < gap[1]
    one = k.head(1)
    between = one.assign(stream=14, start_ns=gap[0], end_ns=gap[1])
    before = one.assign(
        stream=15, start_ns=int(w.loc[0, "start_ns"]) - 10, end_ns=int(w.loc[0, "start_ns"]) - 1
    )
    straddles = one.assign(
        stream=16, start_ns=int(w.loc[1, "start_ns"]) - 5, end_ns=int(w.loc[1, "start_ns"]) + 5
    )
    t.kernels = pd.concat([k, between, before, straddles], ignore_index=True)
    rows = timeline_steps(t.kernels, a.phases, a.steps, a.collectives)["rows"]
    base = timeline_steps(k, a.phases, a.steps, a.collectives)["rows"]
    assert set(rows) - set(base) == {"rank 0 · stream 16"}, rows  # 16 overlaps step 1's window by 5 ns


def test_a_rank_with_hundreds_of_streams_folds_them_into_one_row_and_keeps_every_kernel():
    """A CUDA-graph run launches each graph node on its own stream: one row per stream made a page thousands
    of pixels high. Past MAX_STREAM_ROWS a rank keeps its NCCL stream and its busiest streams and folds the
    rest into one row; every kernel is still drawn, on its stream's row or the folded one. The folded streams
    keep their own rows in the data (row_fold names their shared row) so the page can unfold them, and the
    static figure draws them on the shared row."""
    from ddp_profile.plots.timeline_rows import MAX_STREAM_ROWS

    t, a = make_run(n_steps=1, kernels_per_phase=2)
    k = t.kernels
    one = k[(k["rank"] == 0) & (k["kind"] == "compute")].head(1)
    many = pd.concat([one.assign(stream=1000 + i) for i in range(200)], ignore_index=True)
    t.kernels = pd.concat([k, many], ignore_index=True)
    data = timeline_steps(t.kernels, a.phases, a.steps, a.collectives)
    fold = data["row_fold"]
    shown = [r for r, f in zip(data["rows"], fold, strict=True) if f < 0]
    rank0 = [r for r in shown if r.startswith("rank 0 · stream")]
    folded = [r for r in shown if r.startswith("rank 0") and "folded" in r]
    n_streams = t.kernels.loc[t.kernels["rank"] == 0, "stream"].nunique()
    assert len(rank0) + len(folded) == MAX_STREAM_ROWS and len(folded) == 1
    assert folded[0] == f"rank 0 · {n_streams - len(rank0)} more streams (folded)"
    nccl = k.loc[(k["rank"] == 0) & (k["kind"] == "nccl"), "stream"].unique()
    assert all(f"rank 0 · stream {s}" in rank0 for s in nccl)
    assert len(data["row_rank"]) == len(data["rows"]) == len(fold)
    head = data["rows"].index(folded[0])
    members = [data["rows"][r] for r, f in enumerate(fold) if f == head]
    assert len(members) == n_streams - len(rank0) and all(m.startswith("rank 0 · stream ") for m in members)
    assert not any(tr["r"] == head for tr in data["steps"][0]["tracks"])  # the shared row holds no track
    drawn = sum(len(tr["s"]) for tr in data["steps"][0]["tracks"] if tr["k"] < 4)
    assert drawn == len(t.kernels)
    fig = figure_for_step(data, 0)
    assert list(fig.layout.yaxis.ticktext) == shown
    assert max(y for tr in fig.data for y in tr.y) == len(shown) - 1


def _merged_count(text):
    return int(text[3:].split(" ")[0]) if "merged" in text else 1


def test_timeline_merges_sub_pixel_kernels_and_separates_them_when_zoomed():
    t, a = make_run(n_steps=1, kernels_per_phase=3000)  # 9000 compute kernels of ~0.1 µs spacing per rank
    data = timeline_steps(t.kernels, a.phases, a.steps, a.collectives)
    assert sum(len(tr["s"]) for tr in data["steps"][0]["tracks"] if tr["k"] == 0) == 2 * 9000  # all kept
    compute = bars_for_window(data, 0, -np.inf, np.inf, 1e6 / 500)[0]  # 1 ms step on 500 pixels
    assert len(compute["x"]) < 2 * 500 + 10
    assert sum(_merged_count(h) for h in compute["hovertext"]) == 2 * 9000  # every kernel in some bar
    assert all("compute kernels merged" in h for h in compute["hovertext"] if "merged" in h)
    zoom = bars_for_window(data, 0, 0, 2_000, 2_000 / 500)[0]  # the first 2 µs: single kernels
    assert 0 < len(zoom["x"]) and all("merged" not in h for h in zoom["hovertext"])


def test_timeline_never_merges_kinds_and_formats_durations():
    import pandas as pd

    t, a = make_run(n_steps=1, kernels_per_phase=4)
    k = t.kernels.copy()  # memsets interleaved with the forward kernels on the same stream
    ms = (
        k[k["kind"] == "compute"]
        .head(4)
        .assign(kind="memset", name="Memset", end_ns=lambda d: d["start_ns"] + 100)
    )
    t.kernels = pd.concat([k, ms], ignore_index=True)
    data = timeline_steps(t.kernels, a.phases, a.steps, a.collectives)
    bars = bars_for_window(data, 0, -np.inf, np.inf, 1e6)  # a whole step per pixel: everything merges
    assert all("memset" not in h.lower() for h in bars[0]["hovertext"])
    assert bars[3]["hovertext"] and all("memset" in h.lower() for h in bars[3]["hovertext"])
    assert fmt_duration(247_105_900) == "247 ms" and fmt_duration(999_949) == "1.00 ms"
    assert fmt_duration(999_400) == "999 µs" and fmt_duration(12_345) == "12.3 µs"
    assert fmt_duration(None) == "–"


def test_exposed_comm_figure_per_step_on_its_own_scale():
    t, a = make_run(n_steps=3)
    fig = exposed_comm_figure(a.steps, source=SRC)
    assert [tr.name for tr in fig.data] == ["exposed comm", "comm tail"]
    assert list(fig.data[0].x) == ["step 0", "step 1", "step 2"]
    assert fig.data[0].y[0] == pytest.approx(0.05) and fig.data[1].y[0] == pytest.approx(0.05)
    assert fig.data[0].marker.color == palette.NCCL_EXPOSED and fig.data[1].marker.color == palette.TAIL
    assert fig.layout.yaxis.title.text == "time (ms)"


def test_exposed_comm_figure_cuts_a_warm_up_step_and_marks_it():
    """A warm-up step's 150 ms of collectives set the axis and hid 1-5 ms bars: the axis now stops at the
    outlier cap and the cut bar carries its height as text, as the breakdown does."""
    t, a = make_run(n_steps=6)
    s = a.steps.copy()
    s.loc[s["step"] == 0, "exposed_comm_ns"] += 150_000_000
    fig = exposed_comm_figure(s, source=SRC)
    top = fig.layout.yaxis.range[1]
    assert top < 1 and fig.layout.yaxis.title.text.startswith("time (ms, cut at")
    label = fig.data[-1]
    assert label.mode == "text" and list(label.x) == ["step 0"] and list(label.text) == ["↑150"]
    assert exposed_comm_figure(a.steps, source=SRC).layout.yaxis.range is None  # equal bars: nothing cut


def test_step_breakdown_of_many_bars_uses_one_level_labels_that_can_thin_out():
    """4 ranks × 24 steps printed 96 overlapping two-level labels: past MAX_TWO_LEVEL_BARS the axis is one
    level, each label naming step and rank."""
    from ddp_profile.plots.steps import MAX_TWO_LEVEL_BARS

    t, a = make_run(n_steps=MAX_TWO_LEVEL_BARS)
    fig = step_breakdown(a.steps, source=SRC)
    assert len(fig.data[0].x) > MAX_TWO_LEVEL_BARS and fig.data[0].x[0] == "step 0 · r0"
    assert fig.layout.xaxis.tickangle == -45


def test_every_plot_uses_the_palette_only():
    import re
    from pathlib import Path

    import ddp_profile.plots as plots

    allowed = {v.upper() for v in vars(palette).values() if isinstance(v, str) and v.startswith("#")}
    for path in Path(plots.__file__).parent.glob("*.py"):
        if path.name == "palette.py":
            continue
        for colour in re.findall(r"#[0-9A-Fa-f]{6}\b", path.read_text()):
            assert colour.upper() in allowed, (path.name, colour)


def test_timeline_hover_names_are_escaped_text():
    t, a = make_run(n_steps=1, hostile=True)
    fig = timeline_figure(t.kernels, a.phases, a.steps)
    names = " ".join(fig.data[0].hovertext)
    assert (
        "&lt;script&gt;window.__pwned=1&lt;/script&gt;\"'&amp;amp;&lt;img src=x onerror=window.__pwned=2&gt;"
        in names
    )
    assert "<script" not in names


def test_step_breakdown_segments_add_up():
    t, a = make_run(n_steps=2)
    fig = step_breakdown(a.steps, source=SRC)
    assert [tr.name for tr in fig.data] == ["compute only", "overlapped comm", "exposed comm", "idle"]
    assert len(fig.data[0].y) == 4 and fig.layout.barmode == "stack"
    total = sum(np.array(tr.y) for tr in fig.data)
    # compute 880 − overlap 150 + overlap 150 + exposed 50 + idle 20 = 950 µs per (rank, step)
    assert total == pytest.approx([0.95] * 4)
    assert fig.layout.yaxis.title.text == "time (ms)" and "fp32" in fig.layout.title.text


def test_step_breakdown_cuts_one_long_step_and_writes_its_height():
    """gpt-logevery's step 0 (warm-up, ~335 ms) beside 12-18 ms steps flattened every other bar; the axis now
    stops at 1.5 × the 90th percentile and the cut bar carries its height as text."""
    from ddp_profile.plots.steps import outlier_cap

    assert outlier_cap([12.0] * 10 + [330.0]) == pytest.approx(18.0)  # median 12, q90 12
    assert outlier_cap([12.0, 13.0, 30.0]) is None  # 30 < 3 × 13: every bar fits
    assert outlier_cap([0.0, 0.0, 5.0]) is None and outlier_cap([1.0, 100.0]) is None
    t, a = make_run(n_steps=6)
    s = a.steps.copy()
    first = (s["step"] == 0) & (s["rank"] == 0)
    s.loc[first, "idle_ns"] += 50_000_000  # 50 ms of idle: 50.95 ms against 0.95 ms for the others
    fig = step_breakdown(s, source=SRC)
    assert fig.layout.yaxis.range == pytest.approx((0, 1.5 * 0.95), rel=1e-3)
    label = fig.data[-1]
    assert label.mode == "text" and list(label.text) == ["↑51"] and list(label.x[0]) == ["step 0"]
    assert fig.layout.yaxis.title.text == "time (ms, cut at 1.43)"
    fig_plain = step_breakdown(a.steps, source=SRC)  # equal bars: nothing cut
    assert fig_plain.layout.yaxis.range is None and len(fig_plain.data) == 4


def _comparison(n):
    return pd.DataFrame(
        {
            "run": [f"r{i}" for i in range(n)],
            "strategy": ["naive", "overlap", "bucketed"][:n],
            "bucket_mb": [25.0] * n,
            "world_size": [2] * n,
            "step_ns": [3e6, 2e6, 1.5e6][:n],
            "exposed_comm_ns": [1e6, 4e5, 2e5][:n],
            "comm_tail_ns": [1e6, 5e5, 3e5][:n],
            "efficiency_pct": [40.0, np.nan, 80.0][:n],
        }
    )


def test_strategy_bars_four_panels_gaps_not_zeros():
    fig = strategy_bars(_comparison(3), source=SRC)
    assert len(fig.data) == 4
    assert list(fig.data[0].x) == ["naive ×2", "overlap ×2", "bucketed 25 MiB ×2"]
    assert list(fig.data[0].y) == [3.0, 2.0, 1.5]
    assert fig.data[3].y[1] is None  # no 1-GPU baseline: a gap, not 0
    assert "H100" in fig.layout.title.text


def test_overlap_picture_rows_per_run():
    k = pd.DataFrame(
        {
            "run": ["naive", "naive", "bucketed"],
            "kind": ["compute", "nccl", "nccl"],
            "name": ["g", "n", "<b>x</b>"],
            "start_ns": [0, 100, 50],
            "end_ns": [90, 200, 60],
        }
    )
    fig = overlap_picture(k, source=SRC)
    assert list(fig.layout.yaxis.ticktext) == [
        "naive · compute",
        "naive · comm",
        "bucketed · compute",
        "bucketed · comm",
    ]
    assert (
        list(fig.data[1].y) == [1, 3] and fig.data[1].hovertext[1].split("<br>")[0] == "&lt;b&gt;x&lt;/b&gt;"
    )
    assert fig.layout.xaxis.title.text == "time since step start (ms)"


def test_overlap_picture_hatches_memset_as_the_timeline_does():
    # memcpy and memset share the copy colour: the memset bars (and so their legend swatch) carry the
    # timeline's hatching, palette.MEMSET_PATTERN, and memcpy none
    k = pd.DataFrame(
        {
            "run": ["naive"] * 3,
            "kind": ["compute", "memcpy", "memset"],
            "name": ["g", "c", "s"],
            "start_ns": [0, 100, 200],
            "end_ns": [90, 150, 250],
        }
    )
    fig = overlap_picture(k, source=SRC)
    by = {tr.name: tr for tr in fig.data}
    assert by["memcpy"].marker.color == by["memset"].marker.color == palette.COPY
    assert by["memset"].marker.pattern.shape == palette.MEMSET_PATTERN["shape"]
    assert by["memset"].marker.pattern.fgcolor == palette.MEMSET_PATTERN["fgcolor"]
    assert not by["memcpy"].marker.pattern.shape and not by["compute kernel"].marker.pattern.shape


def test_bucket_sweep_marks_model_and_optimum():
    comp = _comparison(3).assign(bucket_mb=[1.0, 25.0, 100.0])
    model = pd.DataFrame({"bucket_mb": [1.0, 10.0, 100.0], "predicted_ns": [5e5, 2e5, 4e5]})
    fig = bucket_sweep_figure(comp, model, 12.5, source=SRC)
    assert [tr.name for tr in fig.data] == [
        "bucketed: time per step",
        "bucketed: comm tail",
        "bucketed: exposed comm",
        "model n_b·o + s/(n_b·w)",
        "b* = 12.5 MiB",
    ]
    assert list(fig.data[3].x) == [1.0, 10.0, 100.0] and list(fig.data[3].y) == [0.5, 0.2, 0.4]  # ms
    assert fig.layout.xaxis.type == "log" and fig.layout.xaxis.title.text == "bucket cap (MiB, log scale)"
    assert list(fig.layout.xaxis.ticktext) == ["1", "25", "100"]
    # b* is a vertical line trace at 12.5 MiB in data units, spanning the right panel's values (no shape)
    star = fig.data[4]
    assert list(star.x) == [12.5, 12.5] and star.xaxis == "x2" and not fig.layout.shapes
    assert min(star.y) == pytest.approx(0.2) and max(star.y) == pytest.approx(
        max(max(fig.data[1].y), max(fig.data[2].y), 0.5)
    )
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


def test_alpha_beta_draws_many_collectives_with_webgl_keeping_every_point():
    import pandas as pd

    from ddp_profile.plots.sweep import GL_POINTS

    t, a = make_run(n_steps=2)
    many = pd.concat([a.collectives] * (GL_POINTS // len(a.collectives) + 1), ignore_index=True)
    small, big = (alpha_beta_figure(c, a.cost_model, source=SRC) for c in (a.collectives, many))
    assert small.data[0].type == "scatter" and big.data[0].type == "scattergl"
    assert (
        len(big.data[0].x) == len(many) > GL_POINTS and big.data[1].type == "scatter"
    )  # the fit stays a line


def test_page_encoding_keeps_every_kernel_exactly():
    """The run page embeds the timeline as base64 typed-array columns (uint16, int32, or float64 when a value
    needs it); decoding gives back the very integers timeline_steps made, step by step."""
    import base64

    from ddp_profile.plots.timeline import decode_page_data, encode_for_page, pack_column

    t, a = make_run(n_steps=2, kernels_per_phase=5)
    data = timeline_steps(t.kernels, a.phases, a.steps, a.collectives)
    page = encode_for_page(data)
    assert all(isinstance(tr["s"], str) for st in page["steps"] for tr in st["tracks"])
    assert decode_page_data(page) == data
    assert (
        pack_column([0, 65535])[0] == "h"
        and pack_column([-1, 70_000])[0] == "i"
        and pack_column([2**31, 5])[0] == "f"
    )
    big = [2**40 + 3, -7]  # a delta over int32 (a gap of 18 minutes) stays exact
    assert (
        decode_page_data({"steps": [{"tracks": [{"s": pack_column(big)}]}]})["steps"][0]["tracks"][0]["s"]
        == big
    )
    assert len(base64.b64decode(pack_column(range(10))[2:])) == 20  # 2 bytes per value


def test_alpha_beta_message_sizes_read_in_binary_units():
    """The size axis is labelled in KiB / MiB / GiB like every size of the report, never plotly's SI '1B'
    (10^9 bytes, read as one byte); the ticks span every point."""
    from ddp_profile.plots.sweep import size_ticks

    t, a = make_run(n_steps=2)
    fig = alpha_beta_figure(a.collectives, a.cost_model, source=SRC)
    xs = [float(x) for tr in fig.data for x in tr.x]
    ax = fig.layout.xaxis
    assert ax.title.text == "message size (log scale)"
    assert min(ax.tickvals) <= min(xs) and max(ax.tickvals) >= max(xs)
    assert all(txt.endswith(("B", "KiB", "MiB", "GiB")) for txt in ax.ticktext)
    assert size_ticks([6 * 2**10, 3 * 2**30])["ticktext"] == [
        "4.0 KiB",
        "16.0 KiB",
        "64.0 KiB",
        "256.0 KiB",
        "1.0 MiB",
        "4.0 MiB",
        "16.0 MiB",
        "64.0 MiB",
        "256.0 MiB",
        "1.0 GiB",
        "4.0 GiB",
    ]
    assert size_ticks([]) == {}
