"""Pieces every report page is built from: escaping, the page frame, figures and tables.

Safety: every string from a trace or run.json reaches a page either through :func:`esc` (markup, via
:func:`html.escape`) or :func:`script_json` (data inside ``<script>``, with ``<``, ``>``, ``&`` and
U+2028/2029 escaped), so a kernel called ``</script><script>…`` stays text. Pages reference nothing remote:
plotly.js is the file :data:`PLOTLY_JS` written once beside them.

No plotly import here: figures arrive as built objects and only their JSON is used.
"""

from __future__ import annotations

import html
import io
import json
import re
import urllib.parse

import pandas as pd

from ddp_profile.fmt import DASH, missing
from ddp_profile.report.glossary import cell_text, display_value, glossary_html, header
from ddp_profile.report.runs import Run

PLOTLY_JS = "plotly.min.js"


def script_json(obj) -> str:
    """JSON safe to place inside <script>: no '</script>', no '<!--', no JS line separators."""
    text = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"), allow_nan=False)
    for ch, rep in (
        ("&", "\\u0026"),
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(ch, rep)
    return text


def esc(value) -> str:
    return html.escape(
        "–" if value is None or (not isinstance(value, str) and pd.isna(value)) else str(value)
    )


def figure_div(fig, div_id: str, extra_js: str = "", alt: str | None = None, lazy: bool = False) -> str:
    """A figure as a div plus a script calling Plotly.newPlot with escaped JSON. The div is an image for
    assistive technology: ``alt`` (default: the figure's title) is its aria-label. ``lazy``: the call is
    wrapped in ``ddpLater`` (:data:`LAZY_JS`), which runs it when the div comes near the screen, fetching
    plotly.js then (once), so a page opens without waiting for figures below the fold."""
    spec = json.loads(fig.to_json())
    if alt is None:
        title = ((spec.get("layout") or {}).get("title") or {}).get("text") or div_id
        alt = html.unescape(re.sub(r"<[^>]+>", " ", str(title))).strip()
    call = (
        f'Plotly.newPlot("{div_id}",{script_json(spec.get("data", []))},{script_json(spec.get("layout", {}))},'
        f"{script_json(PLOT_CONFIG)});{extra_js}"
    )
    wait = ""
    if lazy:
        call = f'ddpLater("{div_id}",function(){{{call}}});'
        wait = "<p class='note lazy-note'>Drawn when scrolled to…</p>"
    return f'<div id="{div_id}" class="figure" role="img" aria-label="{esc(alt)}">{wait}</div>\n<script>{call}</script>'


# Figures drawn when they come within 200 px of the screen (figure_div(lazy=True)); plotly.js is fetched
# the first time one is, and only once; figures waiting for it are drawn one per frame, so the first shows
# before the next is drawn. Without IntersectionObserver every figure is drawn at once.
LAZY_JS = f"""var ddpLazy={{}};function ddpPlotly(f){{if(window.Plotly){{f();return;}}(ddpPlotly.q=ddpPlotly.q||[]).push(f);
if(ddpPlotly.s)return;var s=ddpPlotly.s=document.createElement('script');s.src='{PLOTLY_JS}';
s.onload=function next(){{var g=ddpPlotly.q.shift();if(g){{g();requestAnimationFrame(function(){{setTimeout(next,0);}});}}}};document.head.appendChild(s);}}
function ddpDrawLazy(el,draw){{var n=el.querySelector('.lazy-note');if(n)n.textContent='Drawing…';
ddpPlotly(function(){{if(n)n.remove();draw();}});}}
function ddpLater(id,draw){{var el=document.getElementById(id);if(!window.IntersectionObserver){{ddpDrawLazy(el,draw);return;}}
ddpLazy[id]=draw;if(!ddpLater.io)ddpLater.io=new IntersectionObserver(function(es){{es.forEach(function(e){{
if(!e.isIntersecting)return;ddpLater.io.unobserve(e.target);var f=ddpLazy[e.target.id];delete ddpLazy[e.target.id];
if(f)ddpDrawLazy(e.target,f);}});}},{{rootMargin:'200px 0px'}});ddpLater.io.observe(el);}}"""


# Every figure the project writes: nothing offers to send data anywhere (no cloud / Chart Studio buttons,
# no plotly logo link), and the mouse wheel scrolls the page instead of zooming (drag to zoom).
PLOT_CONFIG = {
    "responsive": True,
    "displaylogo": False,
    "scrollZoom": False,
    "showSendToCloud": False,
    "showEditInChartStudio": False,
    "showLink": False,
    "sendData": False,
    "modeBarButtonsToRemove": ["sendDataToCloud", "editInChartStudio"],
}


def _csv_href(df: pd.DataFrame) -> str:
    buf = io.StringIO()
    shown = pd.DataFrame({header(c)[0]: [display_value(c, v) for v in df[c]] for c in df.columns})
    shown.to_csv(buf, index=False)
    return "data:text/csv;charset=utf-8," + urllib.parse.quote(buf.getvalue())


def drop_empty_columns(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` without the columns where every value is missing, blank or '–': an own job's tables leave out
    what only the harness records, a comparison what no run of its set has (a lever variant, an un-profiled
    timing)."""
    if df is None or not len(df):
        return df

    def shows(col: str, v) -> bool:
        shown = display_value(col, v)
        return shown is not None and str(shown).strip() not in ("", "–")

    keep = [c for c in df.columns if any(shows(str(c), v) for v in df[c])]
    return df.loc[:, keep]


LONG_WORD = 48
"""Characters of one word beyond which a table cell may wrap inside it (kernel names run to 130)."""
TOKEN = 16
"""Characters of one word beyond which a table cell may wrap inside it at any character (run names)."""


NUMBER_UNIT = re.compile(r"^([+\u2212-]?[\d,.]+) (ms|µs|%|KiB|MiB|GiB|GB/s)$")
"""A table cell that is one number and its unit (the findings' text cells): its space becomes no-break."""


def table(
    df: pd.DataFrame,
    caption: str,
    max_rows: int = 200,
    links: dict | None = None,
    fold: bool = True,
    names: tuple = (),
    clip: tuple = (),
) -> str:
    """An escaped, sortable HTML table in a horizontal scroll container, with units in the headers, a
    definition on hover (``title``) for every known metric, and a CSV download of all rows (a data: URL,
    offline). The first ``max_rows`` rows are shown (the note says so when cut). ``links``: {column:
    [href per row]} makes those cells links (a missing href leaves its cell plain). ``fold``: a table of more than
    25 rows folds away under its caption (False for a page's main table). ``names``: columns whose text never
    breaks (run names: the table's other columns wrap instead); ``clip``: columns whose text never breaks
    either but is cut with an ellipsis past 12em, the whole text kept in its link and in the cell's title."""
    if df is None or not len(df):
        return f"<h3>{esc(caption)}</h3><p class='empty'>none in this trace</p>"
    cut = len(df) > max_rows
    heads, numeric = [], set()
    for c in df.columns:
        label, definition = header(str(c))
        tip = f" title='{esc(definition)}'" if definition else ""
        # a text column's header sits left, over its cells (numbers and their headers sit right)
        words = not any(
            isinstance(display_value(str(c), v), (int, float)) and not isinstance(v, bool)
            for v in df[c].head(max_rows)
        )
        cls = " class='txt'" if words else ""
        if not words:
            numeric.add(str(c))
        heads.append(f"<th scope='col'{cls}{tip} data-k='{esc(c)}'>{esc(label)}</th>")
    rows = []
    cols = [str(c) for c in df.columns]
    hrefs = links or {}
    for i, row in enumerate(df.head(max_rows).itertuples(index=False)):
        cells = []
        for c, v in zip(cols, row, strict=False):
            d = display_value(c, v)
            key = f" data-v='{esc(d)}'" if isinstance(d, (int, float)) and not isinstance(d, bool) else ""
            raw = str(cell_text(c, v))
            # a number with its unit as text ('369.297 ms', '+4.9 %') never breaks between the two
            text = esc(NUMBER_UNIT.sub("\\1\u00a0\\2", raw) if not key else raw)
            link = c in hrefs and not missing(
                hrefs[c][i]
            )  # no page (None, or NaN in a string column): no link
            if link:
                text = f"<a href='{esc(hrefs[c][i])}'>{text}</a>"
            # a long unbroken text (a kernel name) may wrap anywhere; so may a text with a word longer than
            # TOKEN (a run name, its baseline; a linked one stays 12em wide), so wide tables fit the screen;
            # shorter words wrap at spaces only
            cls = ""
            if c in clip and not key and raw != DASH:
                cls = f" class='clip' title='{esc(raw)}'"
                text = f"<span>{text}</span>" if not link else text
            elif c in names and not key:
                cls = " class='name'"
            elif not key and c in numeric and raw == DASH:
                cls = " class='na'"  # a missing number sits right, under its header, as the numbers do
            elif not key and any(len(w) > LONG_WORD for w in raw.split()):
                cls = " class='long'"
            elif not key and any(len(w) > TOKEN for w in raw.split()):
                cls = " class='tok link'" if link else " class='tok'"
            cells.append(f"<td{key}{cls}>{text}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    note = f"<p class='note'>first {max_rows} of {len(df)} rows (the CSV has all)</p>" if cut else ""
    name = re.sub(r"[^A-Za-z0-9]+", "-", caption).strip("-")[:60].lower() or "table"
    csv = f"<a class='csv' download='{esc(name)}.csv' href='{esc(_csv_href(df))}'>CSV</a>"
    grid = (
        f"<div class='scroll'><table class='sortable'><caption class='sr'>{esc(caption)}</caption>"
        f"<thead><tr>{''.join(heads)}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>{note}"
    )
    if fold and len(df) > 25:  # long tables fold away so the figures stay on the first screens
        return f"<details><summary><h3>{esc(caption)} ({len(df)} rows)</h3></summary>{csv}{grid}</details>"
    return f"<h3>{esc(caption)} {csv}</h3>{grid}"


# Click a header to sort (numbers by their data-v, text otherwise; again to reverse). No library.
TABLE_JS = """document.querySelectorAll('table.sortable th').forEach(function(th){
th.tabIndex=0;th.setAttribute('aria-sort','none');function go(){var t=th.closest('table'),b=t.tBodies[0],
i=Array.prototype.indexOf.call(th.parentNode.children,th),up=th.getAttribute('aria-sort')!=='ascending';
Array.prototype.forEach.call(th.parentNode.children,function(h){h.setAttribute('aria-sort','none');});
th.setAttribute('aria-sort',up?'ascending':'descending');
function k(r){var c=r.children[i];if(!c)return '';var v=c.getAttribute('data-v');
return v!==null&&v!==''&&!isNaN(+v)?+v:c.textContent;}
Array.prototype.slice.call(b.rows).sort(function(x,y){var a=k(x),c=k(y),n=typeof a==='number'&&
typeof c==='number',r=n?a-c:String(a).localeCompare(String(c),undefined,{numeric:true});
return up?r:-r;}).forEach(function(r){b.appendChild(r);});}
th.addEventListener('click',go);th.addEventListener('keydown',function(e){if(e.key==='Enter')go();});});"""


def run_links(runs: list[Run]) -> str:
    return (
        "<h2>Runs</h2><ul>"
        + "".join(f"<li><a href='{esc(r.page)}'>{esc(r.name)}</a></li>" for r in runs)
        + "</ul>"
    )


def nav(crumbs) -> str:
    """Breadcrumbs: [(label, href or None)], always starting at the index ("All runs"); ``None`` on the index
    itself, where "All runs" names the page instead of linking to it."""
    items = [("All runs", "index.html")] + list(crumbs) if crumbs is not None else [("All runs", None)]
    return (
        "<nav aria-label='breadcrumb' class='crumbs'>"
        + " › ".join(
            f"<a href='{esc(h)}'>{esc(lbl)}</a>" if h else f"<span aria-current='page'>{esc(lbl)}</span>"
            for lbl, h in items
        )
        + "</nav>"
    )


def page(title: str, body: str, subtitle: str = "", crumbs=None, verdict: str = "", glossary=()) -> str:
    """The page frame: breadcrumbs, title, the verdict (plain sentences answering the page's question)
    first, the body, the definitions of the metrics shown. plotly.js is included only when the body draws
    a figure (fetched by :data:`LAZY_JS` when all its figures are lazy); the table-sorting script only when it
    holds a table."""
    plotly = f'<script src="{PLOTLY_JS}"></script>' if "<script>Plotly.newPlot(" in body else ""
    if "<script>ddpLater(" in body:
        plotly += f"<script>{LAZY_JS}</script>"
    sorter = f"<script>{TABLE_JS}</script>" if "class='sortable'" in body else ""
    lead = f"<div class='verdict'>{verdict}</div>" if verdict else ""
    gl = glossary_html(glossary, esc)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(title)} · ddp-profile</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{{font:14px/1.45 system-ui,sans-serif;margin:1.2em 2em;color:#222;max-width:1400px}}
@media (max-width:600px){{body{{margin:.6em}}}}
.scroll{{overflow-x:auto;max-width:100%}}
table{{border-collapse:collapse;margin:.5em 0 1.5em;font-size:12px}}td,th{{border:1px solid #ddd;padding:2px 6px;
text-align:right}}th{{background:#f4f4f4;cursor:pointer}}th[aria-sort=ascending]::after{{content:" ▲"}}
th[aria-sort=descending]::after{{content:" ▼"}}td:first-child,th:first-child{{text-align:left}}
.sr{{position:absolute;left:-9999px}}a.csv{{font-size:12px;font-weight:normal;margin-left:.6em}}
.figure{{width:100%;min-height:260px;margin-bottom:1em;overflow-x:auto;position:relative}}td:not([data-v]),th.txt{{text-align:left}}td.na{{text-align:right}}.note,.empty{{color:#595959}}
td.long{{max-width:32em;overflow-wrap:anywhere}}td.name{{white-space:nowrap}}
td.clip{{white-space:nowrap}}td.clip>*{{display:inline-block;max-width:12em;overflow:hidden;text-overflow:ellipsis;
vertical-align:bottom}}td.tok{{overflow-wrap:anywhere}}td.link{{min-width:12em}}.fail{{color:#b00}}
.verdict{{background:#f3f7fb;border-left:4px solid #4C78A8;padding:.4em 1em;margin:.6em 0 1em;max-width:75em}}
.crumbs{{font-size:13px}}code{{background:#f4f4f4;padding:1px 3px;overflow-wrap:anywhere}}
h1{{overflow-wrap:anywhere}}dt{{font-weight:600;margin-top:.4em}}dd{{margin-left:1.5em}}
summary h2,summary h3{{display:inline;cursor:pointer}}</style>
{plotly}</head><body>
{nav(crumbs)}<h1>{esc(title)}</h1><p class="note">{esc(subtitle)}</p>
{lead}
{body}
{gl}
<p class="note">Generated by ddp-profile from Nsight Systems exports; all numbers are measured from the traces.</p>
{sorter}</body></html>
"""
