"""Pages a person reads at a glance, in real Chromium at 1280 × 900: a small site (two synthetic runs, one of
them with a rank launching on hundreds of streams as a CUDA-graph run does) is built once for the module.
The timeline folds the many streams into one row that a button (or a click on the row's label) unfolds."""

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


def _graph_like_run() -> Run:
    """A 2-rank run whose rank 0 also launches one kernel on each of 200 more streams (a CUDA graph's nodes),
    and whose rank 1 runs one kernel on stream 77 in its second step only."""
    t, a = make_run("graphs_xl_fp32_2xh100", "bucketed", 2, 25.0, n_steps=2, kernels_per_phase=2)
    k = t.kernels
    one = k[(k["rank"] == 0) & (k["kind"] == "compute")].head(1)
    many = pd.concat([one.assign(stream=1000 + i) for i in range(N_GRAPH_STREAMS)], ignore_index=True)
    w = a.steps[(a.steps["rank"] == 1) & (a.steps["step"] == 1)].iloc[0]
    late = k[(k["rank"] == 1) & (k["kind"] == "compute") & (k["start_ns"] >= w["start_ns"])].head(1)
    t.kernels = pd.concat([k, many, late.assign(stream=77)], ignore_index=True)
    return Run("graphs_xl_fp32_2xh100", t, a, dict(t.run))


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    t, a = make_run("bucketed-25mb_xl_fp32_2xh100", "bucketed", 2, 25.0, n_steps=2)
    runs = [Run("bucketed-25mb_xl_fp32_2xh100", t, a, dict(t.run)), _graph_like_run()]
    return write_site(tmp_path_factory, runs, name="glance"), runs


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


if os.environ.get("DDP_PROFILE_GLANCE_SHOTS"):  # screenshots for a person checking by eye, never in the repo

    def test_screenshots(site, browser):
        out, runs = site
        for r in runs:
            page, _ = _open(browser, out / r.page)
            _timeline(page)
            page.screenshot(path=f"/tmp/glance_{r.name}.png", full_page=False)
            page.close()
