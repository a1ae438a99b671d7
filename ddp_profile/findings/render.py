"""Rendering the findings: Markdown (FINDINGS.md) and one offline HTML page (findings.html) from the same
sections. Figures are plotly figures built in :mod:`ddp_profile.findings.figures`; the HTML uses the report
module's conventions (escaped text, ``plotly.min.js`` beside the page, JSON escaped for ``<script>``)."""

from __future__ import annotations

import re

import pandas as pd

from ddp_profile.findings.summary import Bullet, Summary
from ddp_profile.findings.text import Figure, Links, Para, Table

CODE = re.compile(r"`([^`]+)`")

TAG_START = re.compile(r"<(?=[A-Za-z/!?])")  # what a Markdown renderer would take for raw HTML
ENTITY = re.compile(r"&(?=#?[A-Za-z0-9]+;)")


def md_text(v) -> str:
    """Text for FINDINGS.md: run JSON and hosts.txt values reach it, so a tag (``<script>``, ``<img ...>``)
    or an entity is escaped; a plain comparison (``a < b``) stays readable."""
    return TAG_START.sub("&lt;", ENTITY.sub("&amp;", str(v)))


def _md_cell(v) -> str:
    return md_text(v).replace("|", "\\|").replace("\n", " ")


def _md_table(df: pd.DataFrame, link_col: str = "report page") -> str:
    cols = list(df.columns)
    out = ["| " + " | ".join(map(_md_cell, cols)) + " |", "|" + "---|" * len(cols)]
    for row in df.itertuples(index=False):
        cells = [
            f"[{md_text(v)}]({md_text(v)})" if c == link_col and v else _md_cell(v)
            for c, v in zip(cols, row, strict=False)
        ]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def html_text(v) -> str:
    """Escaped text for findings.html with Markdown inline code (```ddp-profile report```) as <code>."""
    from ddp_profile.report.html import esc

    return CODE.sub(r"<code>\1</code>", esc(v))


def summary_markdown(summary: Summary | None) -> list[str]:
    """The summary's lines: one bullet per claim, each ending with a link to its section's anchor (the
    ``<a id>`` :func:`to_markdown` puts before every section heading, the id findings.html gives it), then the
    timing sets' table."""
    if not summary:
        return []
    lines = (
        ([md_text(summary.plain), ""] if summary.plain else [])
        + ["**Summary.**", ""]
        + [
            f"- **{md_text(b.lead)}** {md_text(b.text)} ([{md_text(b.link)}](#{b.anchor}))"
            for b in summary.bullets
        ]
    )
    if summary.key:
        lines += ["", f"*{md_text(summary.key)}*"]
    if summary.table is not None:
        lines += ["", f"*{md_text(summary.table.caption)}*", "", _md_table(summary.table.frame)]
    return lines + [""]


def to_markdown(title: str, intro: list[str], sections: list, summary: Summary | None = None) -> str:
    lines = [f"# {md_text(title)}", ""] + summary_markdown(summary)
    lines += [md_text(x) + "\n" for x in intro]
    for s in sections:
        lines += [f'<a id="{s.key}"></a>', "", f"## {md_text(s.title)}", ""]
        for block in s.blocks:
            match block:
                case Para(text):
                    lines += [md_text(text), ""]
                case Table(frame, caption):
                    lines += [f"*{md_text(caption)}*", "", _md_table(frame), ""]
                case Figure(key, caption):
                    lines += [f"*Figure ({key}): {md_text(caption)} See findings.html.*", ""]
                case Links(pairs):
                    lines += [", ".join(f"[{md_text(t)}]({md_text(h)})" for t, h in pairs), ""]
    return "\n".join(lines).rstrip() + "\n"


def bullet_html(b: Bullet, page: str = "") -> str:
    """One summary bullet as an HTML list item, its link to the section anchor on ``page`` ("": this page)."""
    from ddp_profile.report.html import esc

    return (
        f"<li><strong>{html_text(b.lead)}</strong> {html_text(b.text)} "
        f"(<a href='{esc(page)}#{esc(b.anchor)}'>{esc(b.link)}</a>)</li>"
    )


def summary_html(summary: Summary | None) -> tuple[str, str]:
    """(the bullets, for the page's verdict box; the timing sets' table, opening the body), the same content
    as :func:`summary_markdown`."""
    if not summary:
        return "", ""
    bullets = (
        (
            (f"<p>{html_text(summary.plain)}</p>" if summary.plain else "")
            + "<p><strong>Summary.</strong></p><ul class='summary'>"
            + "".join(bullet_html(b) for b in summary.bullets)
            + "</ul>"
            + (f"<p class='note'>{html_text(summary.key)}</p>" if summary.key else "")
        )
        if summary.bullets
        else ""
    )
    table = _html_table(summary.table.frame, summary.table.caption) if summary.table is not None else ""
    return bullets, table


def to_html(
    title: str, intro: list[str], sections: list, figures: dict, summary: Summary | None = None
) -> str:
    from ddp_profile.report.html import esc, figure_div, page

    verdict, table = summary_html(summary)
    parts = [table] if table else []
    parts += [f"<p>{html_text(x)}</p>" for x in intro]
    parts.append(
        "<ul>" + "".join(f"<li><a href='#{esc(s.key)}'>{esc(s.title)}</a></li>" for s in sections) + "</ul>"
    )
    for s in sections:
        body = []
        for block in s.blocks:
            match block:
                case Para(text):
                    body.append(f"<p>{html_text(text)}</p>")
                case Table(frame, caption):
                    body.append(_html_table(frame, caption))
                case Figure(key, caption) if figures.get(key) is not None:
                    body.append(
                        f"<p class='note'>{html_text(caption)}</p>" + figure_div(figures[key], f"fig-{key}")
                    )
                case Links(pairs):
                    body.append(
                        "<p>" + ", ".join(f"<a href='{esc(h)}'>{esc(t)}</a>" for t, h in pairs) + "</p>"
                    )
        parts.append(section_html(s.key, s.title, "".join(body)))
    parts.append(f"<script>{OPEN_JS}</script>")
    return page(
        title,
        "\n".join(parts),
        "Every number on this page is computed from traces/ by ddp-profile findings",
        crumbs=[("Findings", None)],
        verdict=verdict,
    )


LONG_SECTION = 1500
"""A section whose HTML holds more characters of text than this folds under its heading on findings.html."""

# A link to a folded section (the section list, a summary bullet, an address) opens it.
OPEN_JS = """function ddpOpen(){var e=location.hash&&document.getElementById(decodeURIComponent(location.hash.slice(1)));
if(e&&e.tagName==='DETAILS')e.open=true;}window.addEventListener('hashchange',ddpOpen);ddpOpen();"""


def section_html(key: str, title: str, body: str) -> str:
    """A section of findings.html: its heading, then its body; a long one (more than :data:`LONG_SECTION`
    characters of text) folded under its heading in a <details> that a link to it opens."""
    from ddp_profile.report.html import esc

    if len(re.sub(r"<[^>]*>", "", body)) <= LONG_SECTION:
        return f"<h2 id='{esc(key)}'>{esc(title)}</h2>{body}"
    return f"<details id='{esc(key)}'><summary><h2>{esc(title)}</h2></summary>{body}</details>"


def _html_table(df: pd.DataFrame, caption: str) -> str:
    """The report's table (sortable, CSV, scroll container); 'report page' cells link to the page."""
    from ddp_profile.report.html import table

    links = {"report page": list(df["report page"])} if "report page" in df else None
    return table(df, caption, links=links)
