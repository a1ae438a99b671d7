"""The findings' opening summary stays readable: a few short bullets, each one claim ending with a link to an
existing section, the same in FINDINGS.md and findings.html; the timing sets as a table, not prose.

Checked on the committed reports/FINDINGS.md (what a person opens), on the findings built from the shipped
traces (slow: every run is loaded) and on a summary built in code (escaping, anchors)."""

from __future__ import annotations

import html as htmllib
import re
from pathlib import Path

import pandas as pd
import pytest

from ddp_profile.findings.render import to_html, to_markdown
from ddp_profile.findings.summary import Bullet, Summary
from ddp_profile.findings.text import Section, Table

ROOT = Path(__file__).resolve().parents[2]
MAX_BULLETS = 8
MAX_CHARS = 300
"""A bullet's length in FINDINGS.md, link included: about two lines of the HTML page at 1280 px."""
BULLET = re.compile(r"^- \*\*(?P<lead>.+?)\*\* (?P<text>.+) \(\[(?P<link>[^\]]+)\]\(#(?P<anchor>[\w-]+)\)\)$")


def summary_lines(md: str) -> list[str]:
    """The lines from '**Summary.**' up to the first line of the intro (the first that is no bullet, table,
    caption or blank)."""
    lines = md.splitlines()
    start = lines.index("**Summary.**")
    out = []
    for line in lines[start + 1 :]:
        if line and not line.startswith(("- ", "|", "*")):
            break
        out.append(line)
    return out


def check_markdown(md: str) -> list[dict]:
    """Assert the summary of a FINDINGS.md is short bullets with working section links; return the bullets."""
    region = summary_lines(md)
    bullets = [line for line in region if line.startswith("- ")]
    assert 1 <= len(bullets) <= MAX_BULLETS, bullets
    anchors = set(re.findall(r'^<a id="([\w-]+)"></a>$', md, flags=re.M))
    got = []
    for line in bullets:
        assert len(line) <= MAX_CHARS, f"{len(line)} characters: {line}"
        m = BULLET.match(line)
        assert m, f"not '- **lead** text ([link](#anchor))': {line}"
        assert m["anchor"] in anchors, f"#{m['anchor']} is no section anchor of the document"
        got.append(m.groupdict())
    # the anchor sits right before its section's heading
    for a in anchors:
        assert re.search(rf'^<a id="{a}"></a>\n\n## ', md, flags=re.M)
    # nothing else in the summary but the bullets, the set codes they use and one table (with its caption)
    others = [line for line in region if line and not line.startswith(("- ", "|"))]
    assert len(others) <= 2 and all(line.startswith("*") and line.endswith("*") for line in others), others
    return got


def plain(text: str) -> str:
    """Visible text of a Markdown fragment or an HTML one (tags, emphasis and code marks dropped)."""
    text = re.sub(r"\[([^\]]+)\]\(#[^)]+\)", r"\1", text)
    text = htmllib.unescape(re.sub(r"<[^>]+>", "", text))
    return re.sub(r"\s+", " ", text.replace("**", "").replace("`", "")).strip()


def check_html(page: str, md_bullets: list[dict]) -> None:
    """The page's summary box holds the same bullets as FINDINGS.md, each linking to an id on the page."""
    box = re.search(r"<ul class='summary'>(.*?)</ul>", page, flags=re.S)
    assert box, "no summary list on the page"
    items = re.findall(r"<li>(.*?)</li>", box.group(1), flags=re.S)
    assert len(items) == len(md_bullets)
    ids = set(re.findall(r"\bid='([\w-]+)'", page))
    for item, b in zip(items, md_bullets, strict=True):
        (href,) = re.findall(r"href='#([\w-]+)'", item)
        assert href == b["anchor"] and href in ids
        assert plain(item) == plain(f"{b['lead']} {b['text']} ({b['link']})")


def test_committed_findings_open_with_short_linked_bullets():
    md = (ROOT / "reports" / "FINDINGS.md").read_text()
    check_markdown(md)


@pytest.mark.slow  # loads every shipped trace: ~30 s on two cores
def test_findings_of_the_shipped_traces_open_with_short_linked_bullets(tmp_path):
    from ddp_profile.findings import build_findings

    if not (ROOT / "traces" / "campaign").is_dir():
        pytest.skip("committed traces not present")
    headline: list = []
    build_findings(ROOT / "traces", tmp_path, headline=headline)
    bullets = check_markdown((tmp_path / "FINDINGS.md").read_text())
    check_html((tmp_path / "findings.html").read_text(), bullets)
    leads = [b["lead"] for b in bullets]
    # the answers come first: per dtype the best configuration against one GPU and stock, then where time goes
    assert leads[:2] == ["fp32, closest to one GPU:", "bf16, closest to one GPU:"]
    assert leads[2:4] == [
        "fp32, where the multi-GPU step loses time:",
        "bf16, where the multi-GPU step loses time:",
    ]
    # the index page repeats the timing bullets: the same two
    assert [b.lead for b in headline] == leads[:2]


def test_summary_renders_the_same_escaped_bullets_in_both_documents():
    s = Section("losses", "Where the multi-GPU step loses its time against one GPU")
    s.p("detail")
    summary = Summary(
        [
            Bullet(
                "fp32 <b>x</b>:",
                "compute grows most, `--flag` <script>alert(1)</script>",
                "losses",
                "where the time goes",
            )
        ],
        Table(pd.DataFrame([{"timing set": "H", "best configuration": "a|b"}]), "Timing sets"),
    )
    md = to_markdown("T", ["intro"], [s], summary)
    bullets = check_markdown(md)
    assert "<script>" not in md and "<b>" not in md and "a\\|b" in md
    page = to_html("T", ["intro"], [s], {}, summary)
    check_html(page, bullets)
    assert "<script>alert" not in page and "<code>--flag</code>" in page
    # the table opens the body, before the intro
    assert page.index("Timing sets") < page.index("<p>intro</p>")
    assert to_markdown("T", ["intro"], [s], Summary()).startswith("# T\n\nintro")


def test_confirm_bullet_counts_and_names_the_worst_case():
    """The recommend → confirm bullet states the counts and the worst error q12 recorded; a topic no bullet
    knows is refused where it is recorded."""
    from ddp_profile.findings.summary import build_summary
    from ddp_profile.findings.text import TOPIC_CONFIRM

    s = Section("confirm", "Recommend → confirm")
    s.add_summary(
        TOPIC_CONFIRM,
        met=9,
        total=11,
        target="±5 %",
        sets_met=5,
        sets=7,
        worst_set="Campaign set B",
        worst_run="ch4",
        worst_error="−20.6 %",
    )
    (b,) = build_summary([s]).bullets
    assert (b.anchor, b.text) == (
        "confirm",
        "9 of 11 step times predicted from the stock trace alone lie within ±5 % "
        "of the measured step (5 of 7 sets with none outside); worst −20.6 %: ch4 "
        "(Campaign set B).",
    )
    with pytest.raises(ValueError, match="summary topic"):
        s.add_summary("Recommend → confirm (prediction from the stock trace vs measured, target ±5 %)", met=1)


def test_summary_hands_out_one_topics_bullets():
    """What the index page repeats (``Summary.about``): the bullets of one topic only, each knowing its topic."""
    from ddp_profile.findings.summary import build_summary
    from ddp_profile.findings.text import TOPIC_CONFIRM, TOPIC_TIMING

    s = Section("confirm", "Recommend → confirm")
    s.add_summary(
        TOPIC_CONFIRM,
        met=9,
        total=11,
        target="±5 %",
        sets_met=5,
        sets=7,
        worst_set="Campaign set B",
        worst_run="ch4",
        worst_error="−20.6 %",
    )
    summary = build_summary([s])
    assert summary.about(TOPIC_CONFIRM) == summary.bullets and summary.bullets[0].topic == TOPIC_CONFIRM
    assert summary.about(TOPIC_TIMING) == []


def _timing_fact(set_name: str, eff: tuple[float, float, float], word: str = "faster") -> dict:
    return {"set": set_name, "eff_pct": eff[0], "eff_lo_pct": eff[1], "eff_hi_pct": eff[2], "word": word}


def test_closest_to_one_gpu_prefers_a_set_with_stock_then_the_surest_among_near_ties():
    from ddp_profile.findings.summary import closest_to_one_gpu
    from ddp_profile.report import measures

    no_stock = _timing_fact("Y", (92.90, 92.8, 93.0), measures.NO_STOCK)
    with_stock = _timing_fact("X", (92.89, 92.8, 93.0))
    far = _timing_fact("S", (90.6, 90.4, 90.7))
    assert closest_to_one_gpu([no_stock, with_stock, far])["set"] == "X"
    # a wide interval that reaches the top loses to a tight one just under it; one that does not reach it is out
    lucky = _timing_fact("N", (91.3, 84.9, 96.5))
    sure = _timing_fact("S", (90.6, 90.4, 90.7))
    assert closest_to_one_gpu([lucky, sure])["set"] == "S"
    assert closest_to_one_gpu([_timing_fact("A", (95.0, 94.9, 95.1)), sure])["set"] == "A"
    # without stock anywhere the highest lower end wins; NaN efficiencies never win
    nan = _timing_fact("Z", (float("nan"),) * 3)
    assert closest_to_one_gpu([nan, no_stock])["set"] == "Y"


def test_long_sections_fold_on_the_page_and_a_link_to_one_opens_it():
    from ddp_profile.findings.render import LONG_SECTION, OPEN_JS

    short, long_ = Section("short", "Short"), Section("long", "Long")
    short.p("a few words")
    long_.p("word " * (LONG_SECTION // 4))
    page = to_html("T", [], [short, long_], {}, Summary())
    assert "<h2 id='short'>Short</h2><p>a few words</p>" in page
    assert "<details id='long'><summary><h2>Long</h2></summary><p>word" in page
    assert OPEN_JS in page and "href='#long'" in page  # the section list links to it; the script opens it
    md = to_markdown("T", [], [short, long_], Summary())
    assert "<details" not in md  # FINDINGS.md keeps every section open


def test_set_codes_are_explained_below_the_bullets_in_both_documents():
    from ddp_profile.findings.summary import set_key

    facts = [
        {"set": "A", "workload": "XL fp32, 4×256, NVIDIA H200"},
        {"set": "D (2 GPUs)", "workload": "XL fp32, 4×256, NVIDIA H100"},
        {"set": "A", "workload": "XL fp32, 4×256, NVIDIA H200"},  # named twice, explained once
        {"set": "ZP", "workload": ""},  # nothing recorded: not explained with an empty text
    ]
    key = set_key(
        [{"set": "AC", "workload": "XL fp32, 4×256, NVIDIA H200, every step one CUDA graph"}], facts
    )
    assert key == (
        "Set codes: timing set AC: XL fp32, 4×256, NVIDIA H200, every step one CUDA graph; "
        "campaign set A: XL fp32, 4×256, NVIDIA H200; campaign set D (2 GPUs): XL fp32, 4×256, NVIDIA H100."
    )
    s = Section("beat-ddp", "How to beat PyTorch DDP")
    s.p("detail")
    summary = Summary(
        [Bullet("Campaign sets:", "stock has the lowest median in A", "beat-ddp", "how")], key=key
    )
    md, page = to_markdown("T", ["intro"], [s], summary), to_html("T", ["intro"], [s], {}, summary)
    assert md.index("in A") < md.index(f"*{key}*") < md.index("intro")
    assert page.index("in A") < page.index(key) < page.index("<p>intro</p>")


def test_the_summary_opens_with_the_answer_in_plain_words_before_the_bullets():
    from ddp_profile.findings.summary import plain_words

    fact = {
        "dtype": "fp32",
        "eff": "100.2 %",
        "stock": False,
        "established": True,
        "word": "faster",
        "diff": "7.6 %",
    }
    noise = dict(fact, dtype="bf16", eff="84.1 %", established=False, word="within noise")
    text = plain_words([fact, noise])
    assert text.startswith(
        "In plain words: with the best data-parallel configuration measured, in fp32 each GPU"
    )
    assert "keeps 100.2 % of the speed one GPU has alone (7.6 % faster than stock PyTorch DDP)" in text
    assert "in bf16 each GPU keeps 84.1 % of the speed one GPU has alone (not told apart from stock" in text
    assert plain_words([]) == ""
    s = Section("timing", "Timing")
    s.p("detail")
    summary = Summary([Bullet("fp32, closest to one GPU:", "x", "timing", "timing sets")], plain=text)
    md, page = to_markdown("T", [], [s], summary), to_html("T", [], [s], {}, summary)
    assert md.index(text) < md.index("**Summary.**") and page.index(htmllib.escape(text)) < page.index(
        "<strong>Summary.</strong>"
    )
    check_html(page, check_markdown(md))
