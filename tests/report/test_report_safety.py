"""Report safety: text from a trace or run.json reaches HTML only as text. The whole real pipeline
runs here -- an nsys-shaped export whose kernel names and NVTX texts hold markup (``<script>``, ``</script>``,
quotes, ``&amp;`` entities, an ``onerror`` handler), a run folder and run.json named with markup, then
``load_trace`` -> ``analyze`` -> ``build_report`` -- and the pages are checked statically (no live markup,
nothing remote) and in a real Chromium (no injected script runs, the names are visible as literal text).

NVTX texts are planted too, although no page currently displays raw NVTX text: the check is that they never
appear unescaped, whatever a future page shows.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from ddp_profile.nsys import synth
from ddp_profile.report import build_report

HOSTILE = "<script>window.__pwned=1</script>\"'&amp;</script><img src=x onerror=window.__pwned=2>"
KERNEL = f"{HOSTILE} fwd_gemm"
FOLDER = "run<img src=x onerror=window.__pwned=3>\"'&amp;"  # no '/' in a file name
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
REMOTE = re.compile(
    r"""(?:\b(?:src|href|action|poster|data)\s*=\s*["']?\s*(?:https?:)?//)|(?:url\(\s*["']?\s*"""
    r"""(?:https?:)?//)|@import|<link\b[^>]*\bhref\s*=\s*["']?\s*https?:""",
    re.I,
)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("hostile")
    run = base / "traces" / FOLDER
    run.mkdir(parents=True)
    export = run / "hostile.sqlite"
    synth.synth_ddp_run(export, n_ranks=2, n_steps=3)
    con = sqlite3.connect(export)
    con.execute("UPDATE StringIds SET value = ? WHERE value = 'fwd_gemm'", (KERNEL,))
    con.execute("UPDATE StringIds SET value = ? WHERE value = 'forward'", (f"forward {HOSTILE}",))
    con.execute("UPDATE NVTX_EVENTS SET text = text || ? WHERE text LIKE 'step %'", (f" {HOSTILE}",))
    con.commit()
    con.close()
    (run / "run.json").write_text(
        json.dumps({"run_name": f"{HOSTILE} run", "strategy": HOSTILE, "model": HOSTILE})
    )
    out = base / "reports"
    sizes, failures = build_report([base / "traces"], out)
    assert not failures and len(sizes) >= 2
    return out


def _pages(site: Path) -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(site.glob("*.html"))}


def test_markup_from_the_trace_is_never_live(site):
    pages = _pages(site)
    for name, text in pages.items():
        assert "<script>window" not in text and "<img" not in text.lower(), name
        assert "onerror=window.__pwned=2>" not in text.replace("&gt;", ""), name  # only as escaped text
        assert text.lower().count("<script") == text.lower().count("</script>"), name  # no tag closed early
    run_page = next(t for n, t in pages.items() if n.startswith("run-"))
    # The kernel name is in the per-kernel table as escaped text, entity included (&amp; -> &amp;amp;).
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;&quot;&#x27;&amp;amp;&lt;/script&gt;" in run_page


def test_pages_reference_nothing_remote(site):
    for name, text in _pages(site).items():
        assert not REMOTE.findall(text), (name, REMOTE.findall(text)[:3])
        for ref in re.findall(r"""\b(?:src|href)\s*=\s*["']([^"']*)["']""", text):
            assert not re.match(r"^[a-z][a-z0-9+.-]*:", ref, re.I) or ref.startswith(("data:", "#")), (
                name,
                ref,
            )
    assert (site / "plotly.min.js").is_file()


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"Chromium not installed at {CHROMIUM} (apt-get install chromium; CI installs it)")
    sync = pytest.importorskip("playwright.sync_api")
    with sync.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.mark.browser
def test_browser_runs_no_injected_script_and_shows_the_text(site, browser, tmp_path):
    pages = sorted(site.glob("*.html"))
    assert any(p.name.startswith("run-") for p in pages)
    for path in pages:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        remote, errors, dialogs = [], [], []
        page.on(
            "request",
            lambda r, out=remote: (
                out.append(r.url) if not r.url.startswith(("file:", "data:", "blob:")) else None
            ),
        )
        page.on("pageerror", lambda e, out=errors: out.append(str(e)))
        page.on("dialog", lambda d, out=dialogs: (out.append(d.message), d.dismiss()))
        page.goto(path.as_uri())
        page.wait_for_load_state("load")
        page.wait_for_timeout(300)
        assert page.evaluate("typeof window.__pwned") == "undefined", path.name
        assert not remote and not errors and not dialogs, (path.name, remote, errors, dialogs)
        body = page.inner_text("body")
        if path.name.startswith("run-"):
            assert KERNEL in body  # the per-kernel table shows the name literally, entity and all
            # Hover a bar of the hostile kernel with the mouse: the timeline's tooltip shows the name as text.
            page.wait_for_function("(document.getElementById('timeline').__ddpDrawn || 0) >= 1")
            page.locator("#timeline").scroll_into_view_if_needed()
            at = page.evaluate("""() => { const T = document.getElementById('timeline').ddp;
                for (let k = 0; k < T.bars.length; k++) {
                    const b = T.bars[k], L = T.cfg.traces[k].lane, r = T.canvas.getBoundingClientRect();
                    for (let i = 0; i < b.x.length; i++) {
                        if (T.text(k, i).includes('window.__pwned=1')) {
                            return {x: r.left + (T.px(b.base[i]) + T.px(b.base[i] + b.x[i])) / 2,
                                    y: r.top + T.py(b.y[i] + L[0] + L[1] / 2)};
                        }
                    }
                }
                return null; }""")
            assert at
            page.mouse.move(at["x"] - 1, at["y"])
            page.mouse.move(at["x"], at["y"])
            label = page.wait_for_selector("#timeline .hovertext", state="visible").text_content()
            assert "<script>window.__pwned=1</script>" in label and "&amp;" in label, label
            assert page.evaluate("typeof window.__pwned") == "undefined"
        if path.name == "index.html":
            assert f"{HOSTILE} run" in body
        page.close()
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.mark.browser
def test_browser_check_detects_injection(browser, tmp_path):
    """Negative control: the same page with the name NOT escaped does run the script, so the check above
    (``window.__pwned`` undefined) can fail."""
    bad = tmp_path / "bad.html"
    bad.write_text(f"<!doctype html><html><body><table><tr><td>{KERNEL}</td></tr></table></body></html>")
    page = browser.new_page()
    page.goto(bad.as_uri())
    page.wait_for_load_state("load")
    page.wait_for_timeout(300)
    assert page.evaluate("typeof window.__pwned") == "number"
    page.close()
