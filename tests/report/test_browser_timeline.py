"""The run page's timeline in real Chromium, as a reader uses it: find a kernel by name (the search box
outlines every match and steps through them), the all-steps view, the CPU main-thread rows and the
"inferred" phase labels, on the committed foreign plain-autograd trace (no NVTX: steps and phases are
inferred; its CUDA API rows give the CPU rows)."""

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from test_browser import ARGS, ARTIFACTS, CHROMIUM, REQUIRE, _open

from ddp_profile import report

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not REQUIRE and not Path(CHROMIUM).exists(), reason=f"Chromium not installed at {CHROMIUM}"
    ),
]
TRACE = Path(__file__).resolve().parents[2] / "traces" / "foreign" / "plain-autograd"


@pytest.fixture(scope="module")
def browser():
    sync = pytest.importorskip("playwright.sync_api")
    with sync.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def own_page(tmp_path_factory):
    """The report page of the foreign plain-autograd trace, loaded as the report loads a run."""
    from ddp_profile.analysis import analyze
    from ddp_profile.nsys.loader import load_trace
    from ddp_profile.report.runs import host_diagnosis, read_api

    if not TRACE.exists():
        pytest.skip("committed foreign trace not present")
    trace = load_trace(TRACE)
    api = read_api(trace)
    a = analyze(trace, api=api)
    launches, calls = host_diagnosis(trace, a, api)
    run = report.Run("plain-autograd", trace, a, {}, launches=launches, host_calls=calls)
    out = tmp_path_factory.mktemp("own") / "reports"
    report.write_report([run], out, progress=open(os.devnull, "w"))
    return out / run.page


def _data(path: Path) -> dict:
    from ddp_profile.plots.timeline import decode_page_data

    text = path.read_text()
    return decode_page_data(json.loads(re.search(r"id='tl-data'>(.*?)</script>", text, re.S).group(1)))


def _ready(page):
    page.wait_for_function("(document.getElementById('timeline').__ddpDrawn || 0) >= 1", timeout=20_000)


def _kernels(step: dict, names: list[str], needle: str | None = None, end_to_end: bool = False) -> set:
    """(trace, row, start, duration, name) of the step's kernels (traces 0-3), optionally those whose name
    holds ``needle`` (any case); starts from the step's start, or with ``end_to_end`` from the first step's."""
    out = set()
    for t in step["tracks"]:
        if t["k"] > 3:
            continue
        starts = (step["t0_ns"] if end_to_end else 0) + np.cumsum(t["s"])
        for s, d, n in zip(starts.tolist(), t["d"], t["n"], strict=True):
            if needle is None or needle.lower() in names[n].lower():
                out.add((t["k"], t["r"], s, d, n))
    return out


def test_find_kernel_outlines_every_match_and_zooms_to_each(own_page, browser):
    page, problems = _open(browser, own_page)
    _ready(page)
    data = _data(own_page)
    idx = page.evaluate("document.getElementById('timeline').ddp.idx")
    step = data["steps"][idx]
    needle = "GEMM"  # upper case: the search ignores case
    expected = _kernels(step, data["names"], needle)
    assert expected, "the step runs GEMM kernels"
    page.fill("#tl-search", needle)
    status = page.locator("#tl-search-status")
    assert page.evaluate("document.getElementById('timeline').ddp.hits.length") == len(expected)
    assert status.text_content().startswith(f"{len(expected)} kernels of ")
    page.click("#tl-next")
    T = "document.getElementById('timeline').ddp"
    first = min(expected, key=lambda x: x[2])
    lo, hi = page.evaluate(f"{T}.range")
    assert lo * 1e6 <= first[2] and first[2] + first[3] <= hi * 1e6  # the view holds the first match
    assert status.text_content().startswith(f"match 1 of {len(expected)}: ")
    assert data["names"][first[4]].split("(")[0][:20] in status.text_content()
    page.locator("#timeline").screenshot(path=str(ARTIFACTS / "timeline-find-kernel.png"))
    page.fill("#tl-search", "no-such-kernel-name")
    assert page.evaluate(f"{T}.hits.length") == 0 and "no kernel name holds" in status.text_content()
    assert not problems, problems


def test_all_steps_view_lays_every_step_end_to_end_and_is_in_the_address(own_page, browser):
    page, problems = _open(browser, own_page)
    _ready(page)
    data = _data(own_page)
    page.select_option("#step-select", "all")
    T = "document.getElementById('timeline').ddp"
    page.wait_for_function(f"{T}.title.textContent.includes('all steps')")
    assert page.evaluate("location.hash") == "#step=all"
    every = set().union(
        *(_kernels(s, data["names"], end_to_end=True) for s in data["steps"])
    )  # a kernel in two windows: once
    shown = page.evaluate(
        f"ddpDecode({T}.data.steps[{T}.idx]).filter(D => D.k < 4).reduce((n, D) => n + D.s.length, 0)"
    )
    assert shown == len(every)
    span = max(s["t0_ns"] / 1e6 + s["span_ms"] for s in data["steps"])
    assert page.evaluate(f"{T}.full[1]") >= span - 1e-6  # the axis reaches the last step's end
    page.locator("#timeline").screenshot(path=str(ARTIFACTS / "timeline-all-steps.png"))
    page.goto(own_page.as_uri() + "#step=all")  # the link opens the same view
    page.reload()
    _ready(page)
    assert page.evaluate(f"{T}.data.steps[{T}.idx].all") is True
    assert not problems, problems


def test_cpu_rows_and_inferred_phase_labels(own_page, browser):
    page, problems = _open(browser, own_page)
    _ready(page)
    T = "document.getElementById('timeline').ddp"
    rows = page.evaluate(f"{T}.rowAt.map(r => {T}.data.rows[r])")
    assert "rank 0 · CPU main thread" in rows and "rank 0 · phases (inferred)" in rows
    assert not any("NVTX" in r for r in rows)
    legend = page.locator(".tl-leg").all_text_contents()
    assert "forward (inferred)" in legend and not any(x.startswith("NVTX") for x in legend)
    # the legend lists only what some step draws: no grad_wait band in this job, so no entry for one
    drawn = page.evaluate(f"[...new Set({T}.data.steps.flatMap(s => (s.tracks || []).map(t => t.k)))]")
    names = page.evaluate(f"{T}.cfg.traces.map(t => t.name)")
    assert sorted(legend) == sorted(names[k] for k in drawn) and len(legend) < len(names)
    assert not any(x.startswith("grad_wait") for x in legend)
    syncs = page.evaluate(f"{T}.bars[10].x.length")  # trace 10: the main thread's sync calls
    assert syncs > 0
    texts = page.evaluate(f"{T}.bars[10].x.map((_, i) => {T}.text(10, i))")
    assert all(
        "CPU main thread" in t and ("sync calls merged" in t or "sync, host waits for the GPU" in t)
        for t in texts
    )
    page.locator("#timeline").screenshot(path=str(ARTIFACTS / "timeline-cpu-rows.png"))
    assert not problems, problems


def test_stepping_through_matches_never_zooms_out_past_the_step(own_page, browser):
    """Each match is shown with context around it, but the view stays inside the step's own view: a long
    NCCL kernel (one waiting for a later rank) once sent the view to 20x its length, wider than the step."""
    page, problems = _open(browser, own_page)
    _ready(page)
    T = "document.getElementById('timeline').ddp"
    full = page.evaluate(f"{T}.full")
    page.fill("#tl-search", "nccl")
    n = page.evaluate(f"{T}.hits.length")
    assert n > 0, "the step runs NCCL kernels"
    for _ in range(n):
        page.click("#tl-next")
        lo, hi = page.evaluate(f"{T}.range")
        s, e = page.evaluate(
            f"(() => {{ const h = {T}.hits[{T}.cur], D = ddpDecode({T}.data.steps[{T}.idx])[h[0]];"
            " return [D.s[h[1]] / 1e6, D.e[h[1]] / 1e6]; })()"
        )
        assert lo <= s and e <= hi  # the match is in view
        assert full[0] - 1e-9 <= lo and hi <= full[1] + 1e-9, (
            lo,
            hi,
            full,
        )  # and the view is inside the step's
    assert not problems, problems
