"""Chromium checks of run-page fixes from the page review: a deep link to a step the trace lacks says so
and rewrites the address; an FSDP-like run's NCCL tooltips (no bucket, no size) carry no placeholder."""

import json
import re

import pytest
from conftest import make_run, write_site
from test_browser import ARGS, CHROMIUM, REQUIRE, pytestmark  # noqa: F401  (same skip rules)
from test_report_pages import _unknown_sizes_run

from ddp_profile import report


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    t, a = make_run("naive_xl_fp32_2xh100", "naive", 2, 25.0, n_steps=4)
    # the profiled steps are 3–6 (the harness skips warm-up steps)
    for frame in (a.steps, a.phases, a.collectives):
        frame["step"] = frame["step"] + 3
    ft, fa = _unknown_sizes_run()
    runs = [
        report.Run("naive_xl_fp32_2xh100", t, a, dict(t.run)),
        report.Run("fsdp_xl_fp32_2xh100", ft, fa, dict(ft.run)),
    ]
    return write_site(tmp_path_factory, runs, "pages"), runs


@pytest.fixture(scope="module")
def browser():
    sync = (
        pytest.importorskip("playwright.sync_api")
        if not REQUIRE
        else __import__("playwright.sync_api").sync_api
    )
    with sync.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


STATE = """() => ({step: document.getElementById('step-select').selectedOptions[0].text, hash: location.hash,
    note: document.getElementById('step-notice').hidden ? null : document.getElementById('step-notice').textContent,
    title: document.getElementById('timeline').ddp.title.textContent})"""


def _ready(page):
    page.wait_for_function("document.getElementById('timeline').ddp !== undefined", timeout=20_000)


def test_deep_link_to_a_missing_step_says_so_and_rewrites_the_address(pages, browser):
    out, runs = pages
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    problems = []
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.goto((out / runs[0].page).as_uri() + "#rank=1&step=2")
    _ready(page)
    s = page.evaluate(STATE)
    shown = s["step"].replace("step ", "")
    assert shown in {"3", "4", "5", "6"} and f"step {shown}" in s["title"], s
    assert s["note"] == f"step 2 is not in this trace; showing step {shown}.", s
    assert s["hash"] == f"#rank=1&step={shown}", s
    # an existing step: the notice goes away
    page.evaluate("location.hash = '#rank=1&step=4'")
    page.wait_for_function("document.getElementById('step-select').selectedOptions[0].text === 'step 4'")
    assert page.evaluate(STATE)["note"] is None
    # an edited address to a missing step: notice again, address follows what is shown
    page.evaluate("location.hash = '#step=99'")
    page.wait_for_function("!document.getElementById('step-notice').hidden")
    s = page.evaluate(STATE)
    assert s["note"] == "step 99 is not in this trace; showing step 4." and s["hash"] == "#step=4", s
    assert problems == []
    page.close()


def test_page_tooltips_of_collectives_without_bucket_or_size_carry_no_placeholder(pages, browser):
    from ddp_profile.plots.timeline import bars_for_window, decode_page_data

    out, runs = pages
    path = out / runs[1].page
    text = path.read_text()
    assert "&lt;NA&gt;" not in text
    data = decode_page_data(json.loads(re.search(r"id='tl-data'>(.*?)</script>", text, re.S).group(1)))
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.goto(path.as_uri())
    _ready(page)
    idx = page.evaluate("document.getElementById('timeline').ddp.idx")
    got = page.evaluate(
        """([idx]) => { const d = document.getElementById('timeline').ddp.data, st = d.steps[idx];
        const dec = ddpDecode(st), o = ddpBars(d, idx, -1e18, 1e18, 0, null)[1];
        return o.tr.map((t, i) => ddpHover(d, st, dec[t], o.a[i], o.b[i])); }""",
        [idx],
    )
    want = bars_for_window(data, idx, -1e18, 1e18, 0)[1]["hovertext"]
    assert got and got == want
    assert all("bucket" not in h and " · –" not in h for h in got), got[0]
    page.close()
