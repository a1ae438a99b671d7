"""Real-browser check of a whole report (Chromium via Playwright): every page loads without console
errors, every figure renders, hover labels show kernel names as text, the step selector swaps the
timeline, no injected script runs. Screenshots go to test-artifacts/ (git-ignored)."""

import os
from pathlib import Path

import pytest
from conftest import run_set, write_site

from ddp_profile import report

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"

# CI (.ci/run) sets DDP_PROFILE_REQUIRE_BROWSER=1: there a missing Chromium fails the tests instead of
# skipping them; elsewhere they skip when Chromium is absent.
REQUIRE = os.environ.get("DDP_PROFILE_REQUIRE_BROWSER", "") not in ("", "0")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not REQUIRE and not Path(CHROMIUM).exists(),
        reason=f"Chromium not installed at {CHROMIUM} (apt-get install chromium; CI installs it)",
    ),
]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return write_site(tmp_path_factory, run_set(hostile_run=True))


@pytest.fixture(scope="module")
def browser():
    assert Path(CHROMIUM).exists(), f"DDP_PROFILE_REQUIRE_BROWSER is set but {CHROMIUM} is missing"
    if REQUIRE:
        import playwright.sync_api as sync
    else:
        sync = pytest.importorskip("playwright.sync_api")
    with sync.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def _open(browser, path: Path):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    problems = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on(
        "request",
        lambda r: (
            problems.append(f"remote request {r.url}")
            if not r.url.startswith(("file:", "data:", "blob:"))
            else None
        ),
    )
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    return page, problems


def _expected_figures(path: Path) -> int:
    """plotly figures the page asks for (one Plotly.newPlot each); run pages have 2-3 beside the timeline
    (a canvas of the page's own script), comparisons 2."""
    n = path.read_text().count("Plotly.newPlot(")
    assert n == 0 if path.name == "index.html" else n >= 2, path.name
    return n


def _draw_figures(page, n: int) -> None:
    """Scroll every figure into view, as a reader would: figures below the fold are drawn (and plotly.js
    fetched) only when they come near the screen."""
    for i in range(page.locator(".figure").count()):
        page.locator(".figure").nth(i).scroll_into_view_if_needed()
    page.wait_for_function(f"document.querySelectorAll('.js-plotly-plot').length === {n}", timeout=20_000)


def _timeline_ready(page):
    page.wait_for_function("(document.getElementById('timeline').__ddpDrawn || 0) >= 1", timeout=20_000)


def test_every_page_loads_and_every_figure_renders(site, browser):
    pages = sorted(site.glob("*.html"))
    assert len(pages) == 10  # index, 7 runs, strategies, sweep
    for path in pages:
        page, problems = _open(browser, path)
        n = _expected_figures(path)
        if path.name.startswith("run-"):
            _timeline_ready(page)  # the timeline: every trace drawn has bars
            bars = page.evaluate("document.getElementById('timeline').ddp.bars.map(b => b.x.length)")
            assert sum(bars) > 0 and bars[0] > 0, (path.name, bars)
        _draw_figures(page, n)
        drawn = page.evaluate("""() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(
            d => d.querySelectorAll('.main-svg .trace, .main-svg .point, canvas').length)""")
        assert all(c > 0 for c in drawn), (path.name, drawn)
        assert page.evaluate("typeof window.__pwned") == "undefined", path.name
        assert problems == [], (path.name, problems)
        page.close()


# A bar's centre in page coordinates: trace k, bar i of the canvas timeline.
BAR_AT = """([k, i]) => { const d = document.getElementById('timeline'), T = d.ddp, b = T.bars[k], L = T.cfg.traces[k].lane;
    const r = T.canvas.getBoundingClientRect();
    return {x: r.left + (T.px(b.base[i]) + T.px(b.base[i] + b.x[i])) / 2, y: r.top + T.py(b.y[i] + L[0] + L[1] / 2)}; }"""  # noqa: E501


def _hover_bar(page, k, i):
    box = page.evaluate(BAR_AT, [k, i])
    _hover_at(page, box["x"], box["y"])


def test_hover_shows_kernel_name_as_text_and_step_selector_swaps_timeline(site, browser):
    ARTIFACTS.mkdir(exist_ok=True)
    page, problems = _open(browser, site / "run-hostile-run.html")
    _timeline_ready(page)
    page.locator(
        "#timeline"
    ).scroll_into_view_if_needed()  # the verdict comes first: bring the chart on screen
    # Hover the hostile compute bar with the mouse, at its pixel position on the canvas.
    i = page.evaluate("""() => { const T = document.getElementById('timeline').ddp;
        return T.bars[0].x.findIndex((_, i) => T.text(0, i).includes('pwned')); }""")
    assert i >= 0
    _hover_bar(page, 0, i)
    label = page.wait_for_selector("#timeline .hovertext", state="visible", timeout=15_000).text_content()
    assert "<script>window.__pwned=1</script>" in label  # shown literally, as text
    page.screenshot(path=str(ARTIFACTS / "report-run-hover.png"), full_page=True)

    title_before = page.evaluate("document.getElementById('timeline').ddp.title.textContent")
    assert "step 1" in title_before
    drawn = page.evaluate("document.getElementById('timeline').__ddpDrawn")
    page.select_option("#step-select", "2")
    page.wait_for_function("document.getElementById('timeline').ddp.title.textContent.includes('step 2')")
    counts = page.evaluate("""() => { const T = document.getElementById('timeline').ddp;
        return [T.bars[0].x.length, T.text(0, 1), document.getElementById('timeline').__ddpDrawn]; }""")
    assert counts[0] == 2 * 3 * 4 and "duration" in counts[1]  # 2 ranks × 3 phases × 4 kernels
    assert counts[2] == drawn + 1
    page.screenshot(path=str(ARTIFACTS / "report-run-step2.png"), full_page=True)
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert problems == []
    page.close()


def test_comparison_and_index_screenshots(site, browser):
    ARTIFACTS.mkdir(exist_ok=True)
    for path in [site / "index.html", *site.glob("strategies-*.html"), *site.glob("sweep-*.html")]:
        page, problems = _open(browser, path)
        page.wait_for_timeout(300)
        page.screenshot(path=str(ARTIFACTS / f"report-{path.stem[:40]}.png"), full_page=True)
        assert problems == [] and page.evaluate("typeof window.__pwned") == "undefined"
        links = page.evaluate("Array.from(document.querySelectorAll('a')).map(a => a.getAttribute('href'))")
        for href in links:  # every link resolves to a page in the folder (CSV downloads are data: URLs)
            assert href.startswith("data:text/csv") or (site / href.split("#")[0]).exists(), (path.name, href)
        page.close()


def test_sweep_optimum_marker_sits_at_b_star_without_stretching_the_axis(browser, tmp_path):
    """The b* marker must be drawn at b* MiB on the log axis, and the axis must span the data (a shape
    there was once autoranged as a log10 exponent: b* = 243 MiB stretched the axis to 10^251)."""
    import pandas as pd

    from ddp_profile.plots.sweep import bucket_sweep_figure

    caps = [1.0, 10.0, 25.0, 100.0, 1000.0]
    comp = pd.DataFrame(
        {
            "bucket_mb": caps,
            "strategy": "bucketed",
            "step_ns": [3.9e8] * 5,
            "comm_tail_ns": [3.3e5, 3.3e5, 4.1e5, 8.1e5, 2.7e6],
            "exposed_comm_ns": [6.0e6, 5.7e6, 3.7e6, 2.0e6, 1.9e6],
        }
    )
    model = pd.DataFrame({"bucket_mb": caps, "predicted_ns": [9.6e6, 6.9e6, 5.6e6, 2.3e6, 3.7e6]})
    path = tmp_path / "sweep.html"
    bucket_sweep_figure(comp, model, 243.3).write_html(path, include_plotlyjs=True)
    page, problems = _open(browser, path)
    page.wait_for_timeout(300)
    got = page.evaluate("""() => {
        const gd = document.querySelector('.js-plotly-plot');
        const star = gd.data.find(t => (t.name || '').startsWith('b* ='));
        const ax = gd._fullLayout.xaxis2;
        return {b: star.x[0], range: ax.range, px: ax.l2p(Math.log10(star.x[0])), left: ax.l2p(ax.range[0]),
                right: ax.l2p(ax.range[1]), drawn: document.querySelectorAll('.scatterlayer .trace').length};
    }""")
    page.close()
    assert problems == [] and got["b"] == 243.3
    assert 10 ** got["range"][0] >= 0.1 and 10 ** got["range"][1] <= 10_000, got  # 1..1000 MiB, not 10^243
    assert got["left"] < got["px"] < got["right"] and got["drawn"] == 5, got  # 3 measured, model, b*


# ---- the timeline of a real run: zoom re-aggregates, NCCL tooltips, chart config -------------------------

NAIVE = Path(__file__).resolve().parents[2] / "traces" / "naive_xl_bf16_2xh200"


@pytest.fixture(scope="module")
def naive_page(tmp_path_factory):
    """The report page of the committed naive bf16 run (435 all-reduces per step on the compute stream)."""
    from ddp_profile.analysis import analyze
    from ddp_profile.nsys.loader import load_trace

    trace = load_trace(NAIVE)
    run = report.Run("naive_xl_bf16_2xh200", trace, analyze(trace), dict(trace.run or {}))
    out = tmp_path_factory.mktemp("naive") / "reports"
    report.write_report([run], out, progress=open(os.devnull, "w"))
    return out / run.page


NCCL_BARS = """() => { const d = document.getElementById('timeline'), T = d.ddp, b = T.bars[1];
    const text = b.x.map((_, i) => T.text(1, i)); let m = -1;
    text.forEach((h, i) => { if (h.includes('merged') && (m < 0 || b.x[i] > b.x[m])) m = i; });
    return {n: b.x.length, drawn: d.__ddpDrawn || 0, merged: text.filter(h => h.includes('merged')).length,
            range: (T.range || T.full).slice(), block: m < 0 ? null : [b.base[m], b.x[m]]};
}"""


def _hover_at(page, x, y):
    """Move onto (x, y) in two steps: plotly.js hovers on mousemove, and a lone move can land while a busy
    page (CI, 2 cores) is still drawing."""
    page.mouse.move(x - 1, y)
    page.wait_for_timeout(100)
    page.mouse.move(x, y)


def test_zoom_separates_naive_all_reduces_and_nccl_tooltip_has_rank_stream_bucket_bytes_wait(
    naive_page, browser
):
    ARTIFACTS.mkdir(exist_ok=True)
    page, problems = _open(browser, naive_page)
    page.wait_for_function("(document.getElementById('timeline').__ddpDrawn || 0) >= 1")
    page.locator("#timeline").scroll_into_view_if_needed()  # the mouse can only hover what is on screen
    before = page.evaluate(NCCL_BARS)
    assert before["merged"] > 0  # at the full step, the 435 all-reduces of a rank share a few bars
    # zoom with a mouse drag over the first quarter of the widest merged NCCL bar
    lo, width = before["block"]
    ends = page.evaluate(
        """([lo, hi]) => { const T = document.getElementById('timeline').ddp, r = T.canvas.getBoundingClientRect();
        return [r.left + T.px(lo), r.left + T.px(hi), r.top + T.py(0)]; }""",
        [lo, lo + width / 4],
    )
    page.mouse.move(ends[0], ends[2])
    page.mouse.down()
    page.mouse.move((ends[0] + ends[1]) / 2, ends[2])
    page.mouse.move(ends[1], ends[2])
    page.mouse.up()
    page.wait_for_function(f"document.getElementById('timeline').__ddpDrawn > {before['drawn']}")
    after = page.evaluate(NCCL_BARS)
    assert after["n"] > before["n"] + 10, (before, after)
    # the drag lands on whole pixels: the zoom starts within a pixel and a half of the bar's start
    px_ms = (before["range"][1] - before["range"][0]) / page.evaluate(
        "document.getElementById('timeline').ddp.pw"
    )
    assert after["range"][0] == pytest.approx(lo, abs=max(2 * width / 4 / 1000, 1.5 * px_ms))
    assert after["range"][1] < lo + width / 2
    # hover a single (unmerged) all-reduce inside the view, with the mouse
    best = page.evaluate("""() => { const T = document.getElementById('timeline').ddp, b = T.bars[1], r = T.range;
        let best = -1;
        b.x.forEach((_, i) => { if (!T.text(1, i).includes('merged') && b.base[i] > r[0] && b.base[i] + b.x[i] < r[1]
            && (best < 0 || b.x[i] > b.x[best])) best = i; });
        return best; }""")
    assert best >= 0
    _hover_bar(page, 1, best)
    label = page.wait_for_selector("#timeline .hovertext", state="visible", timeout=15_000).text_content()
    page.screenshot(path=str(ARTIFACTS / "report-naive-zoomed-nccl-hover.png"), full_page=True)
    for part in ("NCCL kernel", "rank ", "stream ", "bucket ", "wait ", "transfer ", "start ", "duration "):
        assert part in label, (part, label)
    assert any(u in label for u in (" B", "KiB", "MiB", "GiB")), label
    # double-click resets to the whole step, merged again
    page.mouse.dblclick(ends[0], ends[2])
    page.wait_for_function(f"document.getElementById('timeline').__ddpDrawn > {after['drawn']}")
    assert page.evaluate(NCCL_BARS)["n"] == before["n"]
    # the comm tail strip has its own lane in the NVTX row, and its own tooltip
    page.mouse.move(0, 0)
    _hover_bar(page, 8, 0)
    page.wait_for_function(
        "Array.from(document.querySelectorAll('#timeline .hovertext'))"
        ".some(h => h.textContent.includes('comm tail'))",
        timeout=15_000,
    )
    assert problems == []
    page.close()


def test_no_chart_offers_to_send_data_and_the_wheel_scrolls_the_page(naive_page, browser):
    page, problems = _open(browser, naive_page)
    n = _expected_figures(naive_page)
    _timeline_ready(page)
    _draw_figures(page, n)
    page.wait_for_function(f"document.querySelectorAll('.js-plotly-plot .modebar').length === {n}")
    titles = page.evaluate("""() => Array.from(document.querySelectorAll('.modebar-btn')).map(
        b => (b.getAttribute('data-title') || '') + ' ' + (b.getAttribute('title') || ''))""")
    assert titles and not [
        t
        for t in titles
        if any(w in t.lower() for w in ("share", "cloud", "chart studio", "edit in", "plotly"))
    ], titles
    configs = page.evaluate("""() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(
        d => [d._context.scrollZoom, !!d._context.showSendToCloud, !!d._context.showEditInChartStudio])""")
    assert configs == [[False, False, False]] * n
    # the timeline (a canvas) has no send button either: only its legend's toggles and the find box's arrows
    assert page.evaluate(
        "Array.from(document.querySelectorAll('#timeline button:not(.tl-leg), #timeline a')).map(b => b.id)"
    ) == ["tl-prev", "tl-next"]
    page.locator("#timeline").scroll_into_view_if_needed()
    range_before = page.evaluate("document.getElementById('timeline').ddp.full.slice()")
    rect = page.locator("#timeline canvas").bounding_box()
    page.mouse.move(rect["x"] + rect["width"] / 2, rect["y"] + min(rect["height"] / 2, 300))
    scroll_before = page.evaluate("window.scrollY")
    page.mouse.wheel(0, 400)
    page.wait_for_timeout(300)
    assert page.evaluate("document.getElementById('timeline').ddp.range") is None  # not zoomed
    assert page.evaluate("document.getElementById('timeline').ddp.full.slice()") == range_before
    assert page.evaluate("window.scrollY") > scroll_before  # the page scrolled instead
    assert problems == []


def test_pages_fit_1440px_tables_sort_csv_downloads_and_the_step_is_in_the_address(site, browser):
    """One page of each type fits a 1440 px window (wide tables scroll inside their container); the index
    loads no chart library; a header click sorts; the CSV link downloads the table; #step=N selects a step
    and choosing a step writes it to the address."""
    pages = [
        site / "index.html",
        next(site.glob("strategies-*.html")),
        next(site.glob("sweep-*.html")),
        site / "run-naive_xl_fp32_2xh100.html",
    ]
    for path in pages:
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.goto(path.as_uri())
        page.wait_for_load_state("load")
        assert page.evaluate("document.documentElement.scrollWidth") <= 1440, path.name
        if path.name == "index.html":
            assert page.evaluate("typeof window.Plotly") == "undefined"
            th = page.locator("table.sortable th", has_text="step time (ms)").first
            col = th.evaluate("h => Array.prototype.indexOf.call(h.parentNode.children, h)")
            th.click()
            up = page.evaluate(
                """(i) => Array.from(document.querySelectorAll('table.sortable tbody tr'))
                .map(r => +r.children[i].getAttribute('data-v'))""",
                col,
            )
            assert up == sorted(up) and th.get_attribute("aria-sort") == "ascending"
            th.click()
            down = page.evaluate(
                """(i) => Array.from(document.querySelectorAll('table.sortable tbody tr'))
                .map(r => +r.children[i].getAttribute('data-v'))""",
                col,
            )
            assert down == sorted(down, reverse=True)
            with page.expect_download() as dl:
                page.locator("a.csv").first.click()
            text = Path(dl.value.path()).read_text()
            # the first CSV on the index: one row per run, with its step time
            head = text.splitlines()[0]
            assert head.startswith("run,") and "step time (ms)" in head and len(text.splitlines()) == 8
        page.close()
    run = site / "run-naive_xl_fp32_2xh100.html"
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.goto(run.as_uri() + "#step=2")  # the old form of the link still opens its step, every rank shown
    page.wait_for_function("document.getElementById('timeline').ddp.title.textContent.includes('step 2')")
    assert page.evaluate("document.getElementById('timeline').ddp.rowAt.length") == 6  # 2 ranks × 3 rows
    page.select_option("#step-select", "0")
    page.wait_for_function("location.hash === '#step=0'")
    page.close()


def test_comparison_tables_fit_1280px_without_sideways_scrolling(site, browser):
    """At 1280 px every table of the index and the comparison pages, folded ones opened, fits its container:
    the numbers table shows its main columns and folds the rest into a second table, and run names wrap.
    (Seen before: the 28-column strategy table needed 1,900-2,200 px and scrolled sideways.)"""
    pages = [site / "index.html", *site.glob("strategies-*.html"), *site.glob("sweep-*.html")]
    for path in pages:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(path.as_uri())
        page.wait_for_load_state("load")
        page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
        wide = page.evaluate("""() => Array.from(document.querySelectorAll('div.scroll'))
            .map(d => [d.querySelector('caption').textContent, d.scrollWidth, d.clientWidth])""")
        assert wide and all(sw <= cw + 1 for _, sw, cw in wide), (path.name, wide)
        assert page.evaluate("document.documentElement.scrollWidth") <= 1280, path.name
        page.close()


def test_rank_and_step_deep_link_both_ways(site, browser):
    """#rank=R&step=N opens step N with only rank R's rows; choosing a rank or a step writes both to the
    address; a changed hash selects again; "every rank" drops the rank from the address."""
    run = site / "run-naive_xl_fp32_2xh100.html"
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    problems = []
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.goto(run.as_uri() + "#rank=1&step=2")
    _timeline_ready(page)
    state = """() => { const T = document.getElementById('timeline').ddp;
        return {title: T.title.textContent, rows: T.rowAt.map(r => T.data.rows[r]), rank: T.rank,
                bars: T.bars.map(b => b.y.map(y => T.data.rows[y])).flat(),
                step: document.getElementById('step-select').selectedOptions[0].text,
                rankSel: document.getElementById('rank-select').value, hash: location.hash}; }"""
    s = page.evaluate(state)
    assert "step 2" in s["title"] and s["step"] == "step 2" and s["rankSel"] == "1" and s["rank"] == 1, s
    assert s["rows"] and all(r.startswith("rank 1 ") for r in s["rows"]), s["rows"]
    assert s["bars"] and all(r.startswith("rank 1 ") for r in s["bars"])  # no bar of rank 0 is drawn
    assert page.evaluate("document.getElementById('timeline').__ddpDrawn") == 1  # drawn once
    page.select_option("#rank-select", "0")
    page.wait_for_function("location.hash === '#rank=0&step=2'")
    assert all(r.startswith("rank 0 ") for r in page.evaluate(state)["rows"])
    page.select_option("#step-select", "1")
    page.wait_for_function("location.hash === '#rank=0&step=1'")
    assert "step 1" in page.evaluate(state)["title"]
    page.evaluate("location.hash = '#rank=1&step=0'")  # an edited address selects again
    page.wait_for_function("document.getElementById('rank-select').value === '1'")
    s = page.evaluate(state)
    assert (
        "step 0" in s["title"] and s["step"] == "step 0" and all(r.startswith("rank 1 ") for r in s["rows"])
    )
    page.select_option("#rank-select", "")
    page.wait_for_function("location.hash === '#step=0'")
    assert len(page.evaluate(state)["rows"]) == 6
    assert problems == []
    page.close()


PAGE_BARS = """([idx, lo, hi, mn]) => { const d = document.getElementById('timeline').ddp.data, st = d.steps[idx];
    const dec = ddpDecode(st);
    return ddpBars(d, idx, lo, hi, mn, null).map(o => ({base: o.base, x: o.x, y: o.y,
        hovertext: o.base.map((_, i) => ddpHover(d, st, dec[o.tr[i]], o.a[i], o.b[i]))})); }"""


def test_page_aggregation_is_the_python_one_at_every_zoom(naive_page, browser):
    """The canvas draws what plots.timeline.bars_for_window computes: same bars (start, width, row) and the
    same tooltip for every trace, over the whole step and zoomed onto a window of a few all-reduces, from
    the data the page embeds."""
    import json
    import re

    from ddp_profile.plots.timeline import bars_for_window, decode_page_data

    text = naive_page.read_text()
    data = decode_page_data(json.loads(re.search(r"id='tl-data'>(.*?)</script>", text, re.S).group(1)))
    page, problems = _open(browser, naive_page)
    _timeline_ready(page)
    idx = page.evaluate("document.getElementById('timeline').ddp.idx")
    span = data["steps"][idx]["span_ms"] * 1e6
    nccl = bars_for_window(data, idx, -1e18, 1e18, 0)[1]  # single all-reduces: zoom onto the 100th to 110th
    lo, hi = nccl["base"][100] * 1e6, (nccl["base"][110] + nccl["x"][110]) * 1e6
    for window in [(-1e18, 1e18, span / 1200), (lo, hi, (hi - lo) / 1200), (lo, hi, (hi - lo) / 40)]:
        want = bars_for_window(data, idx, *window)
        got = page.evaluate(PAGE_BARS, [idx, *window])
        assert sum(len(w["x"]) for w in want) > 0
        for k, (g, w) in enumerate(zip(got, want, strict=True)):
            assert g["y"] == w["y"] and g["hovertext"] == w["hovertext"], (k, window)
            assert g["base"] == pytest.approx(w["base"], abs=1e-6) and g["x"] == pytest.approx(
                w["x"], abs=1e-6
            )
    assert problems == []
    page.close()


def test_run_page_draws_the_timeline_before_fetching_plotly_and_figures_when_scrolled_to(naive_page, browser):
    """The page opens on the canvas timeline alone: plotly.js is not fetched until a figure below comes near
    the screen, then once, and each figure's placeholder gives way to its chart. (A short window: on a tall
    one the first figure under naive's 6-row timeline is already near the screen.)"""
    page = browser.new_page(viewport={"width": 1400, "height": 400})
    problems, scripts = [], []
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("request", lambda r: scripts.append(r.url) if r.url.endswith("plotly.min.js") else None)
    page.goto(naive_page.as_uri())
    page.wait_for_load_state("load")
    _timeline_ready(page)
    page.wait_for_timeout(500)
    assert page.evaluate("typeof window.Plotly") == "undefined" and scripts == []
    assert page.evaluate("document.querySelectorAll('.lazy-note').length") == _expected_figures(naive_page)
    page.locator("#exposed").scroll_into_view_if_needed()
    page.wait_for_function(
        "document.querySelector('#exposed.js-plotly-plot .main-svg') !== null", timeout=20_000
    )
    assert page.evaluate("document.querySelector('#exposed .lazy-note')") is None
    _draw_figures(page, _expected_figures(naive_page))
    assert page.evaluate("document.querySelectorAll('.lazy-note').length") == 0
    assert len(scripts) == 1 and page.evaluate("document.querySelectorAll('script[src]').length") == 1
    assert problems == []
    page.close()


def test_timeline_zooms_pans_and_resets_from_the_keyboard(naive_page, browser):
    page, problems = _open(browser, naive_page)
    _timeline_ready(page)
    page.locator("#timeline canvas").focus()
    view = "() => { const T = document.getElementById('timeline').ddp; return (T.range || T.full).slice(); }"
    full = page.evaluate(view)
    page.keyboard.press("+")
    zoomed = page.evaluate(view)
    assert zoomed[1] - zoomed[0] == pytest.approx((full[1] - full[0]) / 2)
    assert (zoomed[0] + zoomed[1]) / 2 == pytest.approx((full[0] + full[1]) / 2)
    page.keyboard.press("ArrowRight")
    panned = page.evaluate(view)
    assert panned[0] == pytest.approx(zoomed[0] + (zoomed[1] - zoomed[0]) / 4)
    page.keyboard.press("0")
    assert (
        page.evaluate(view) == full and page.evaluate("document.getElementById('timeline').ddp.range") is None
    )
    assert problems == []
    page.close()
