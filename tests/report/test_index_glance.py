"""The index's run table reads at a glance: open, no column that repeats the run name or that almost no run
fills."""

import pandas as pd

from ddp_profile.report.html import table
from ddp_profile.report.index import SPARSE, glanceable


def _runs(n: int) -> pd.DataFrame:
    names = [f"bucketed-{i}mb_xl_bf16_2xh200" for i in range(n)]
    return pd.DataFrame(
        {
            "run": names,
            "bound_by": ["communication"] * n,
            "strategy": ["bucketed"] * n,
            "dtype": ["bf16"] * n,
            "gpu_name": ["NVIDIA H200"] * n,
            "step_ns": [1e8 + i for i in range(n)],
            "unprofiled_step_ns": [9e7] + [None] * (n - 1),
            "bucket_mb": [None] * n,
        }
    )


def test_index_drops_columns_the_names_spell_or_almost_no_run_fills():
    shown = glanceable(_runs(10))
    assert list(shown.columns) == ["run", "bound_by", "gpu_name", "step_ns"]  # 1 of 10 < SPARSE filled
    assert SPARSE > 0.1
    filled = _runs(10).assign(unprofiled_step_ns=[9e7] * 3 + [None] * 7)  # 3 of 10: kept
    assert "unprofiled_step_ns" in glanceable(filled).columns
    own = _runs(10).assign(strategy=["own job"] * 10)  # a value no name spells stays
    assert "strategy" in glanceable(own).columns


def test_index_table_stays_open():
    df = _runs(30)[["run", "step_ns"]]
    html = table(df, "Every run", fold=False, links={"run": [f"run-{r}.html" for r in df["run"]]})
    assert "<details>" not in html and "<details>" in table(df, "Every run")
    assert "href='run-bucketed-0mb_xl_bf16_2xh200.html'" in html  # the link itself is untouched


def test_run_names_never_break_and_baselines_clip_with_the_whole_name_kept():
    df = _runs(3)[["run", "step_ns"]].assign(baseline=["none_xl_bf16_1xh200_a_long_name"] * 2 + [None])
    html = table(
        df,
        "Every run",
        fold=False,
        links={"run": [f"{r}.html" for r in df["run"]], "baseline": ["b.html", None, None]},
        names=("run",),
        clip=("baseline",),
    )
    assert (
        "<td class='name'><a href='bucketed-0mb_xl_bf16_2xh200.html'>bucketed-0mb_xl_bf16_2xh200</a></td>"
        in html
    )
    full = "none_xl_bf16_1xh200_a_long_name"
    assert (
        f"<td class='clip' title='{full}'><a href='b.html'>{full}</a></td>" in html
    )  # the link text is whole
    assert f"<td class='clip' title='{full}'><span>{full}</span></td>" in html  # no page: the text in a span
    assert "<wbr>" not in html


def test_all_runs_links_to_the_index_from_every_page_but_the_index():
    from ddp_profile.report.html import nav, page

    assert "<a href='index.html'>All runs</a>" in nav([("Run x", None)])
    assert "<a href='index.html'>" not in page("ddp-profile report", "", crumbs=None)
    assert "<span aria-current='page'>All runs</span>" in page("ddp-profile report", "", crumbs=None)
