"""The findings' scaling section from the timing sets (1 → 2 → 4 GPUs, stock DDP and the fastest configuration):
4-GPU rows appear when a 4-GPU timing set exists and are said to be missing otherwise.

The timing sets are made on tmp_path by the real summarizer from synthetic journals
(tests/report/test_findings_timing.py's ``_timing_set``: step times chosen here, not measurements).
"""

from __future__ import annotations

from test_findings_timing import _timing_set

from ddp_profile.findings import timing_scaling
from ddp_profile.findings.data import read_timing_runs

TWO = {  # an older set: 1 and 2 GPUs
    "none_xl_fp32_1xh100": ("none", 1, [350.0, 351.0, 349.5, 350.5, 350.0], {}),
    "torch_ddp-25mb_xl_fp32_2xh100": ("torch_ddp", 2, [380.0, 381.0, 379.5, 380.5, 380.2], {}),
    "overlap-avg-shardupd-peercopy_xl_fp32_2xh100": (
        "overlap",
        2,
        [352.0, 352.5, 351.5, 352.2, 352.1],
        {"sharded_update": True, "peer_copy_allreduce": True},
    ),
}
FOUR = {  # a newer set: 1 and 4 GPUs
    "none_xl_fp32_1xh100": ("none", 1, [349.0, 350.0, 349.5, 349.8, 349.2], {}),
    "torch_ddp-25mb_xl_fp32_4xh100": ("torch_ddp", 4, [400.0, 401.0, 399.5, 400.5, 400.2], {}),
    "overlap-avg-shardupd-peercopy_xl_fp32_4xh100": (
        "overlap",
        4,
        [358.0, 358.5, 357.5, 358.2, 358.1],
        {"sharded_update": True, "peer_copy_allreduce": True},
    ),
}


def _text(sec) -> str:
    return " ".join(sec.paragraphs())


def test_without_a_four_gpu_set_the_section_says_none_was_run(tmp_path):
    _timing_set(tmp_path, TWO, name="Z")
    runs = read_timing_runs(tmp_path)
    (df, missing), *others = timing_scaling.scaling_rows(runs).values()
    assert not others and missing == [4]
    assert sorted(df["GPUs"]) == [1, 2, 2]
    assert dict(zip(df["configuration"], df["run"], strict=True)) == {
        "1 GPU": "none_xl_fp32_1xh100",
        "stock DDP": "torch_ddp-25mb_xl_fp32_2xh100",
        "fastest": "overlap-avg-shardupd-peercopy_xl_fp32_2xh100",
    }
    text = _text(timing_scaling.timing_scaling(runs))
    assert "no timing set ran 4 GPUs; that row is missing, not measured" in text
    assert "on 4 GPUs" not in text


def test_a_four_gpu_set_adds_its_rows_against_its_own_one_gpu_run(tmp_path):
    _timing_set(tmp_path, TWO, name="Z")
    _timing_set(tmp_path, FOUR, name="AA")  # lettered after Z: the newer set
    runs = read_timing_runs(tmp_path)
    (df, missing), *_ = timing_scaling.scaling_rows(runs).values()
    assert missing == []
    rows = {
        (g, c): row for g, c, row in zip(df["GPUs"], df["configuration"], df.to_dict("records"), strict=True)
    }
    assert sorted(rows) == [(1, "1 GPU"), (2, "fastest"), (2, "stock DDP"), (4, "fastest"), (4, "stock DDP")]
    assert rows[(1, "1 GPU")]["timing set"] == "AA"  # the newest set with a 1-GPU run
    assert rows[(2, "fastest")]["timing set"] == "Z" and rows[(4, "fastest")]["timing set"] == "AA"
    four = rows[(4, "fastest")]
    assert four["run"] == "overlap-avg-shardupd-peercopy_xl_fp32_4xh100" and four["vs stock"] == "faster"
    # against set AA's own 1-GPU run (median 349.5 ms), not set Z's (350.0 ms)
    by = {r.name: r for r in runs if r.folder.parent.name == "AA"}
    one, best = by["none_xl_fp32_1xh100"], by["overlap-avg-shardupd-peercopy_xl_fp32_4xh100"]
    assert four["_eff"] == 100 * timing_scaling.timing.med(one) / timing_scaling.timing.med(best)
    assert rows[(4, "stock DDP")]["vs stock"] == "reference"
    text = _text(timing_scaling.timing_scaling(runs))
    assert "missing, not measured" not in text
    assert (
        f"on 2 GPUs (overlap-avg-shardupd-peercopy_xl_fp32_2xh100) → {timing_scaling.pct(four['_eff'])} on 4 GPUs"
        in text
    )


def test_when_stock_is_fastest_at_a_count_it_is_one_row_saying_so(tmp_path):
    slow = dict(FOUR)
    slow["overlap-avg-shardupd-peercopy_xl_fp32_4xh100"] = (
        "overlap",
        4,
        [420.0, 421.0, 419.5, 420.5, 420.2],
        {"sharded_update": True, "peer_copy_allreduce": True},
    )
    _timing_set(tmp_path, slow, name="G")
    (df, missing), *_ = timing_scaling.scaling_rows(read_timing_runs(tmp_path)).values()
    assert missing == [2]
    four = df[df["GPUs"] == 4]
    assert list(four["configuration"]) == ["stock DDP (also the fastest)"]


def test_sets_are_ordered_as_they_were_lettered():
    assert sorted(["AB", "Z", "AA", "B"], key=timing_scaling.set_order) == ["B", "Z", "AA", "AB"]
