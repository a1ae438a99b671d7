"""Pages a person reads at a glance, in real Chromium at 1280 × 900: a small site (two synthetic runs, one of
them with a rank launching on hundreds of streams as a CUDA-graph run does; their comparison; the index; a
findings page) is built once for the module.

Every page kind: no sideways scroll, a height of at most :data:`MAX_SCREENS` screens once every figure is
drawn, no two tick labels of a plotly axis overlapping, the timeline at most :data:`MAX_TIMELINE_ROWS` rows
per rank. The timeline folds the many streams into one row that a button (or a click on the row's label)
unfolds."""

import os
from pathlib import Path

import pandas as pd
import pytest
from conftest import make_run, write_site
from test_browser import ARGS, CHROMIUM, REQUIRE

from ddp_profile.report import Run

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not REQUIRE and not Path(CHROMIUM).exists(), reason=f"Chromium not installed at {CHROMIUM}"
    ),
]
VIEW = {"width": 1280, "height": 900}
N_GRAPH_STREAMS = 200
MAX_SCREENS = {"run": 6, "strategies": 3, "index": 2, "findings": 3}
"""Page height bound, in 900 px screens, per page kind, with every figure drawn (measured on this site: run
pages about 4.1, the comparison 1.5, the index 1)."""
MAX_TIMELINE_ROWS = 2 + 6
"""Per rank: its NVTX and CPU rows and at most 6 stream rows (timeline_rows.MAX_STREAM_ROWS)."""


def _graph_like_run() -> Run:
    """A 2-rank run whose rank 0 also launches one kernel on each of 200 more streams (a CUDA graph's nodes),
    and whose rank 1 runs one kernel on stream 77 in its second step only."""
    t, a = make_run("overlap_xl_fp32_2xh100", "overlap", 2, 25.0, n_steps=2, kernels_per_phase=2)
    k = t.kernels
    one = k[(k["rank"] == 0) & (k["kind"] == "compute")].head(1)
    many = pd.concat([one.assign(stream=1000 + i) for i in range(N_GRAPH_STREAMS)], ignore_index=True)
    w = a.steps[(a.steps["rank"] == 1) & (a.steps["step"] == 1)].iloc[0]
    late = k[(k["rank"] == 1) & (k["kind"] == "compute") & (k["start_ns"] >= w["start_ns"])].head(1)
    t.kernels = pd.concat([k, many, late.assign(stream=77)], ignore_index=True)
    return Run("overlap_xl_fp32_2xh100", t, a, dict(t.run))


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """Two 2-GPU runs of one workload (so a strategy comparison page too), one of them graph-like, and the
    index."""
    t, a = make_run("bucketed-25mb_xl_fp32_2xh100", "bucketed", 2, 25.0, n_steps=2)
    runs = [Run("bucketed-25mb_xl_fp32_2xh100", t, a, dict(t.run)), _graph_like_run()]
    out = write_site(tmp_path_factory, runs, name="glance")
    (out / "findings.html").write_text(_findings_page())
    return out, runs


def _findings_page() -> str:
    """A findings page of the real renderer: the summary with its set key, a short section and a long one
    (folded), a table as wide as the findings' timing table."""
    from ddp_profile.findings.render import LONG_SECTION, to_html
    from ddp_profile.findings.summary import Bullet, Summary
    from ddp_profile.findings.text import Section, Table

    short, long_ = Section("timing", "Timing with intervals"), Section("losses", "Where the step loses time")
    short.p("The lowest-median configuration of each timing set against stock DDP.")
    long_.p("Compute grows most when NCCL runs beside it. " * (LONG_SECTION // 40))
    wide = pd.DataFrame(
        [
            {
                "timing set": code,
                "workload": "XL bf16, 16×256, NVIDIA H200, every step one CUDA graph",
                "best configuration": "overlap-avg-shardupd-ch16-graph-carve16_xl_bf16_2xh200",
                "median step (95 % interval)": "183 ms (182–184 ms)",
                "vs stock DDP": "faster by 7.7 %",
                "of one GPU (interval)": "93.6 % (92.8 %–94.1 %)",
            }
            for code in ("AA", "AB", "AC")
        ]
    )
    bullets = [
        Bullet("bf16, closest to one GPU:", "a configuration at 100.6 % of one GPU", "timing", "timing sets")
    ]
    summary = Summary(
        bullets, Table(wide, "Timing sets"), key="Campaign set codes: A: XL fp32, 4×256, NVIDIA H200."
    )
    return to_html("Findings", ["intro"], [short, long_], {}, summary)


@pytest.fixture(scope="module")
def browser():
    if REQUIRE:
        import playwright.sync_api as sync
    else:
        sync = pytest.importorskip("playwright.sync_api")
    with sync.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def _open(browser, path: Path):
    page = browser.new_page(viewport=VIEW)
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.goto(path.as_uri())
    return page, problems


def _timeline(page):
    page.wait_for_function("() => (document.getElementById('timeline') || {}).__ddpDrawn > 0", timeout=60_000)


ROWS = "() => { const T = document.getElementById('timeline').ddp; return T.rowAt.map(r => T.data.rows[r]); }"


def test_folded_streams_unfold_on_the_button_and_on_their_label(site, browser):
    out, runs = site
    page, problems = _open(browser, out / runs[1].page)
    _timeline(page)
    page.evaluate("ddpShowStep(document.getElementById('timeline'), 0)")  # the step the graph streams run in
    folded = page.evaluate(ROWS)
    head = next(r for r in folded if "folded" in r)
    assert len(folded) <= 2 * (2 + 6), folded  # per rank: NVTX, CPU at most, and at most 6 stream rows
    assert (
        sum(r.startswith("rank 0 · stream") for r in folded) == 5
    )  # the NCCL and busiest streams, + 1 folded
    page.click("#tl-unfold")
    page.wait_for_function(f"() => document.getElementById('timeline').ddp.rowAt.length > {len(folded)}")
    unfolded = page.evaluate(ROWS)
    n_more = int(head.split(" · ")[1].split(" ")[0])
    assert len(unfolded) == len(folded) + n_more
    assert sum(r.startswith("rank 0 · stream 1") for r in unfolded) >= N_GRAPH_STREAMS - 6
    # every kernel drawn once unfolded as folded: the bars' rows change, their count does not
    assert page.evaluate("document.getElementById('tl-unfold').getAttribute('aria-pressed')") == "true"
    page.click("#tl-unfold")
    page.wait_for_function(f"() => document.getElementById('timeline').ddp.rowAt.length === {len(folded)}")
    # a click on the folded row's label unfolds that rank's streams
    p = folded.index(head)
    box = page.locator("#timeline canvas").bounding_box()
    page.mouse.click(box["x"] + 40, box["y"] + 8 + (p + 0.5) * 44)
    page.wait_for_function(f"() => document.getElementById('timeline').ddp.rowAt.length === {len(unfolded)}")
    assert problems == []
    page.close()


EMPTY = """() => { const T = document.getElementById('timeline').ddp, used = {};
    ddpDecode(T.data.steps[T.idx]).forEach(D => { used[T.pos[D.r]] = 1; });
    return T.rowAt.filter((r, p) => !used[p]).map(r => T.data.rows[r]); }"""


def test_a_step_draws_no_empty_row(site, browser):
    """A row with no track in the shown step is not drawn: rank 1's stream 77 has a kernel in step 1 only."""
    out, runs = site
    page, problems = _open(browser, out / runs[1].page)
    _timeline(page)
    for step, want in ((0, False), (1, True)):
        page.evaluate(f"ddpShowStep(document.getElementById('timeline'), {step})")
        assert page.evaluate(EMPTY) == []
        assert ("rank 1 · stream 77" in page.evaluate(ROWS)) is want, step
    assert problems == []
    page.close()


DRAW_ALL = """async () => { const figs = Array.from(document.querySelectorAll('.figure'));
    for (const f of figs) { f.scrollIntoView(); await new Promise(r => setTimeout(r, 50)); }
    window.scrollTo(0, 0); return figs.length; }"""

# Per plotly axis (each x or y tick layer of each figure): pairs of tick labels whose boxes overlap.
OVERLAPS = """() => { const out = [];
    document.querySelectorAll('.js-plotly-plot .main-svg').forEach(svg => {
      const fig = svg.closest('.js-plotly-plot').id;
      svg.querySelectorAll('g.xaxislayer-above, g.yaxislayer-above').forEach(layer => {
        const boxes = Array.from(layer.querySelectorAll('text')).filter(t => t.textContent.trim())
          .map(t => [t.textContent, t.getBoundingClientRect()]).filter(([_, b]) => b.width > 0);
        for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
          const [ta, a] = boxes[i], [tb, b] = boxes[j];
          if (a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5)
            out.push([fig, layer.getAttribute('class'), ta, tb]);
        } }); });
    return out; }"""


def _kind(name: str) -> str:
    return name.split("-", 1)[0].removesuffix(".html")


def test_every_page_kind_fits_the_screen_width_a_few_screens_and_draws_no_overlapping_ticks(site, browser):
    out, runs = site
    pages = sorted(out.glob("*.html"))
    assert {_kind(p.name) for p in pages} == set(MAX_SCREENS), [p.name for p in pages]
    for path in pages:
        page, problems = _open(browser, path)
        page.wait_for_load_state("load")
        n_figs = page.evaluate(DRAW_ALL)
        if n_figs and _kind(path.name) != "index":
            page.wait_for_function(
                "() => document.querySelectorAll('.js-plotly-plot').length"
                " >= document.querySelectorAll('.figure:not(#timeline)').length",
                timeout=60_000,
            )
        el = page.evaluate(
            "(() => { const e = document.scrollingElement; "
            "return {w: e.scrollWidth, cw: e.clientWidth, h: e.scrollHeight}; })()"
        )
        assert el["w"] <= el["cw"], (path.name, el)  # no sideways scroll
        assert el["h"] <= MAX_SCREENS[_kind(path.name)] * VIEW["height"], (path.name, el)
        assert page.evaluate(OVERLAPS) == [], path.name
        if _kind(path.name) == "run":
            _timeline(page)
            n = page.evaluate("document.getElementById('timeline').ddp.rowAt.length")
            assert n <= MAX_TIMELINE_ROWS * 2, (path.name, n)  # 2 ranks
        assert problems == [], (path.name, problems)
        page.close()


if os.environ.get("DDP_PROFILE_GLANCE_SHOTS"):  # screenshots for a person checking by eye, never in the repo

    def test_screenshots(site, browser):
        out, runs = site
        for path in sorted(out.glob("*.html")):
            page, _ = _open(browser, path)
            page.wait_for_load_state("load")
            page.screenshot(path=f"/tmp/glance_{path.stem}.png", full_page=False)
            page.close()
