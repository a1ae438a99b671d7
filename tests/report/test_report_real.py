"""The report on copies of real campaign runs (traces/): recursive discovery, unique run ids and page names,
groups that never mix campaign folders (hosts), and a real-browser pass over every page.

Layout built in tmp_path (small runs only, to stay fast)::

    traces/none_small_fp32_1xh200, naive_small_fp32_2xh200, overlap_small_fp32_2xh200   (2-GPU host)
    traces/scaling/bucketed-25mb_mlp8_fp32_{1,2,4}xh200                                 (4-GPU host)
    traces/scaling/naive_small_fp32_2xh200      <- same run name as the top level, other folder
"""

import os
import re
import shutil
from pathlib import Path

import pytest

from ddp_profile import report
from ddp_profile.findings.pages import FindingsPages

pytest.importorskip("plotly")
TRACES = Path(__file__).resolve().parents[2] / "traces"
TOP = ["none_small_fp32_1xh200", "naive_small_fp32_2xh200", "overlap_small_fp32_2xh200"]
SCALING = [f"bucketed-25mb_mlp8_fp32_{n}xh200" for n in (1, 2, 4)]
CHROMIUM = "/usr/bin/chromium"
REQUIRE = os.environ.get("DDP_PROFILE_REQUIRE_BROWSER", "") not in ("", "0")

pytestmark = pytest.mark.skipif(
    not all((TRACES / r).is_dir() for r in TOP)
    or not all((TRACES / "scaling" / r).is_dir() for r in SCALING),
    reason="campaign traces not in this checkout",
)


def _copy(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True)
    for f in src.iterdir():  # exports and run JSON only (no .nsys-rep, no recipe/)
        if f.is_file() and f.name.endswith((".sqlite.xz", ".json")):
            shutil.copy(f, dst / f.name)


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("campaign") / "traces"
    for r in TOP:
        _copy(TRACES / r, root / r)
    for r in SCALING:
        _copy(TRACES / "scaling" / r, root / "scaling" / r)
    _copy(TRACES / "naive_small_fp32_2xh200", root / "scaling" / "naive_small_fp32_2xh200")
    return root


@pytest.fixture(scope="module")
def site(campaign) -> Path:
    out = campaign.parent / "reports"
    sizes, failures = report.build_report([campaign], out, jobs=2, extras=[FindingsPages()])
    assert failures == []
    return out


def test_discovery_recurses_and_ids_are_unique(campaign):
    found = report.discover_runs([campaign])
    ids = [rid for _, rid in found]
    assert sorted(ids) == sorted(
        TOP + [f"scaling/{r}" for r in SCALING] + ["scaling/naive_small_fp32_2xh200"]
    )
    pages = [report.run_page_name(i) for i in ids]
    assert len(set(pages)) == len(pages) == 7
    assert (
        "run-scaling--naive_small_fp32_2xh200.html" in pages and "run-naive_small_fp32_2xh200.html" in pages
    )
    # a run folder passed twice (directly and through its parent) is one run
    assert len(report.discover_runs([campaign, campaign / TOP[0]])) == 7


def test_page_names():
    assert (
        report.run_page_name("scaling/bucketed-25mb_xl_fp32_2xh200")
        == "run-scaling--bucketed-25mb_xl_fp32_2xh200.html"
    )
    assert (
        report.group_page_name("sweep", "", "xl", "fp32", "NVIDIA H200", 2)
        == "sweep-xl-fp32-NVIDIA-H200-x2.html"
    )
    assert (
        report.group_page_name("scaling", "scaling", "mlp", "fp32", "NVIDIA H200")
        == "scaling-scaling--mlp-fp32-NVIDIA-H200.html"
    )


def test_groups_stay_within_one_folder(site):
    pages = sorted(p.name for p in site.glob("*.html"))
    runs = [p for p in pages if p.startswith("run-")]
    assert len(runs) == 7
    # top level: none x1 + naive + overlap x2 -> one strategies page; scaling/: bucketed 1/2/4 -> scaling page,
    # the copied naive run is alone in its (folder, model) and joins nothing
    groups = [p for p in pages if p.startswith(("strategies-", "sweep-", "scaling-"))]
    assert groups == [
        "scaling-scaling--mlp-fp32-NVIDIA-H200.html",
        "strategies-small-fp32-NVIDIA-H200-x2.html",
    ]
    strat = (site / groups[1]).read_text()
    linked = set(re.findall(r"href='(run-[^']+)'", strat))
    assert linked == {f"run-{r}.html" for r in TOP}  # never the scaling/ copy of the naive run
    scal = (site / groups[0]).read_text()
    assert set(re.findall(r"href='(run-[^']+)'", scal)) == {f"run-scaling--{r}.html" for r in SCALING}
    assert "NVIDIA H200 ×1/2/4 · model mlp · fp32" in scal  # the source line names machine, model, dtype


browser = pytest.mark.skipif(
    not REQUIRE and not Path(CHROMIUM).exists(),
    reason=f"Chromium not at {CHROMIUM} (CI sets DDP_PROFILE_REQUIRE_BROWSER=1)",
)


@browser
def test_every_real_page_loads_and_every_figure_renders(site):
    assert Path(CHROMIUM).exists(), f"DDP_PROFILE_REQUIRE_BROWSER is set but {CHROMIUM} is missing"
    sync = __import__("playwright.sync_api").sync_api
    art = Path(__file__).resolve().parents[2] / "test-artifacts"
    art.mkdir(exist_ok=True)
    with sync.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
        for path in sorted(site.glob("*.html")):
            page = b.new_page(viewport={"width": 1400, "height": 1000})
            problems = []
            page.on(
                "console", lambda m, problems=problems: problems.append(m.text) if m.type == "error" else None
            )
            page.on("pageerror", lambda e, problems=problems: problems.append(str(e)))
            page.goto(path.as_uri())
            page.wait_for_load_state("load")
            n = path.read_text().count("Plotly.newPlot(")
            assert n == 0 if path.name == "index.html" else n >= (2 if path.name.startswith("run-") else 1), (
                path.name
            )
            if path.name.startswith("run-"):  # the canvas timeline draws first, with bars
                page.wait_for_function(
                    "(document.getElementById('timeline').__ddpDrawn || 0) >= 1", timeout=20_000
                )
                assert page.evaluate("document.getElementById('timeline').ddp.bars[0].x.length") > 0, (
                    path.name
                )
            for i in range(page.locator(".figure").count()):  # figures below the fold draw when scrolled to
                page.locator(".figure").nth(i).scroll_into_view_if_needed()
            page.wait_for_function(
                f"document.querySelectorAll('.js-plotly-plot').length === {n}", timeout=20_000
            )
            drawn = page.evaluate("""() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(
                d => d.querySelectorAll('.main-svg .trace, .main-svg .point').length)""")
            assert all(c > 0 for c in drawn), (path.name, drawn)
            for href in page.evaluate(
                "Array.from(document.querySelectorAll('a')).map(a => a.getAttribute('href'))"
            ):
                if not href.startswith(("#", "data:text/csv")):  # in-page anchors, CSV downloads
                    assert (site / href.split("#")[0]).exists(), (path.name, href)
            if not path.name.startswith("run-"):
                page.screenshot(path=str(art / f"real-{path.stem[:50]}.png"), full_page=True)
            assert problems == [], (path.name, problems)
            page.close()
        b.close()


def test_findings_link_to_the_comparison_pages(site):
    """Item 9: the findings are no dead end: they link to the strategy and scaling pages the report wrote."""
    import re

    text = (site / "findings.html").read_text()
    pages = set(re.findall(r"href='((?:strategies|sweep|scaling)-[^']+\.html)'", text))
    assert any(p.startswith("strategies-") for p in pages) and any(p.startswith("scaling-") for p in pages)
    assert all((site / p).exists() for p in pages)
