"""Number formatting and data-driven wording, so prose cannot contradict the numbers beside it.

Every comparative word in the findings comes from :func:`compare` or :func:`ranges_overlap` applied to the
measured values; tests swap two runs' values and check the word flips.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from ddp_profile.fmt import fmt_mib, fmt_ms, fmt_pct, missing, no_negative_zero

TOPIC_TIMING = "timing"
"""Topic of the summary: the lowest-median configuration of one interleaved timing set (:mod:`.timing`)."""
TOPIC_LOSSES = "losses"
"""Topic of the summary: where one campaign set's multi-GPU step loses its time (:mod:`.losses`)."""
TOPIC_CONFIRM = "confirm"
"""Topic of the summary: recommend → confirm over every set (:mod:`.confirm`)."""
TOPIC_CAMPAIGN_BEST = "campaign-best"
"""Topic of the summary: the lowest-median configuration of one campaign set (:mod:`.campaign`)."""
TOPIC_CAMPAIGN_REC = "campaign-recommendation"
"""Topic of the summary: what one campaign set's stock trace recommends and whether it ran (:mod:`.campaign`)."""
TOPIC_TRACES_BEST = "traces-best"
"""Topic of the summary: the fastest hand-written strategy of one set of traces/ (:mod:`.reference`)."""
TOPICS = (
    TOPIC_TIMING,
    TOPIC_LOSSES,
    TOPIC_CONFIRM,
    TOPIC_CAMPAIGN_BEST,
    TOPIC_CAMPAIGN_REC,
    TOPIC_TRACES_BEST,
)


def ms(ns: float | None) -> str:
    """ns -> "12.345 ms" (:func:`ddp_profile.fmt.fmt_ms`, the one formatter); "n/a" when missing."""
    return "n/a" if missing(ns) else fmt_ms(ns)


def pct(x: float | None, digits: int = 1) -> str:
    """12.345 -> "12.3 %" (:func:`ddp_profile.fmt.fmt_pct` at one decimal); "n/a" when missing."""
    if x is None or missing(x):
        return "n/a"
    return fmt_pct(x) if digits == 1 else no_negative_zero(f"{float(x):,.{digits}f}") + " %"


def _signed(x: float, fmt) -> str:
    """``fmt(|x|)`` with its sign: "+" or a true minus "−"; "+" when it rounds to zero (no "−0.000")."""
    text = fmt(abs(float(x)))
    return ("−" if float(x) < 0 and text != fmt(0.0) else "+") + text


def signed_ms(ns: float) -> str:
    """+12.345 ms / −12.345 ms (:func:`ms`); a change that rounds to zero is +0.000 ms."""
    return _signed(ns, ms)


def signed_pct_value(x: float | None) -> str:
    """12.3 -> "+12.3 %", -20.6 -> "−20.6 %" (a true minus sign, as every other signed change); "+0.0 %" when
    it rounds to zero; "n/a" when missing."""
    if x is None or missing(x):
        return "n/a"
    return _signed(x, pct)


def num(x: float | None, digits: int = 2) -> str:
    return "n/a" if x is None or missing(x) else no_negative_zero(f"{float(x):,.{digits}f}")


def mb(nbytes: float) -> str:
    """bytes -> "61.0 MiB" / "1.86 GiB" (:func:`ddp_profile.fmt.fmt_mib`); "n/a" when missing."""
    return "n/a" if missing(nbytes) else fmt_mib(nbytes)


def spread(lo: float, hi: float) -> str:
    """ "min–max" of a (lo, hi) pair of ns."""
    return f"{fmt_ms(lo, unit=False)}–{ms(hi)}"


def compare(
    a: float,
    b: float,
    lower: str = "faster",
    higher: str = "slower",
    same: str = "as fast as",
    rel_tol: float = 0.0,
) -> str:
    """The word for a relative to b: ``lower`` when a < b, ``higher`` when a > b, ``same`` when equal within
    ``rel_tol``; "n/a" when either is missing."""
    if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in (a, b)):
        return "n/a"
    if abs(a - b) <= rel_tol * abs(b):
        return same
    return lower if a < b else higher


def rel(a: float, b: float) -> str:
    """|a/b − 1| as a percentage string (the size of the difference named by :func:`compare`)."""
    if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in (a, b)) or b == 0:
        return "n/a"
    return pct(100.0 * abs(a / b - 1.0))


def ranges_overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether two (min, max) spreads overlap: then a median order over 4–5 steps is not established."""
    return not (a[1] < b[0] or b[1] < a[0])


def certainty(a: tuple[float, float], b: tuple[float, float]) -> str:
    """A clause qualifying a comparison by the step-to-step spreads."""
    if ranges_overlap(a, b):
        return "but their step-time ranges overlap, so these few steps do not establish the order"
    return "and their step-time ranges do not overlap"


@dataclass(frozen=True)
class Para:
    """A paragraph of generated prose."""

    text: str


@dataclass(frozen=True)
class Table:
    """A table and its caption."""

    frame: pd.DataFrame
    caption: str


@dataclass(frozen=True)
class Figure:
    """A figure, by its key in the findings' figure dict, and its caption."""

    key: str
    caption: str


@dataclass(frozen=True)
class Links:
    """A line of (text, href) links to report pages."""

    pairs: list[tuple[str, str]]


Block = Para | Table | Figure | Links


@dataclass
class Section:
    """One question's answer: an ordered list of blocks (:class:`Para`, :class:`Table`, :class:`Figure`,
    :class:`Links`)."""

    key: str
    title: str
    blocks: list[Block] = field(default_factory=list)
    summary: dict[str, list[dict]] = field(default_factory=dict)  # topic -> facts, for the opening summary

    def add_summary(self, topic: str, **fact) -> None:
        """Record a result under ``topic`` (one of :data:`TOPICS`) for the document's opening summary
        (:mod:`ddp_profile.findings.summary`): the values this section states, formatted as it states
        them, and the words its own comparisons chose; never a second computation of them."""
        if topic not in TOPICS:
            raise ValueError(f"summary topic {topic!r} is none of {TOPICS}")
        self.summary.setdefault(topic, []).append(fact)

    def p(self, text: str) -> None:
        self.blocks.append(Para(text))

    def table(self, df: pd.DataFrame, caption: str) -> None:
        self.blocks.append(Table(df, caption))

    def fig(self, key: str, caption: str) -> None:
        self.blocks.append(Figure(key, caption))

    def links(self, pairs: list[tuple[str, str]]) -> None:
        self.blocks.append(Links(list(pairs)))

    def paragraphs(self) -> list[str]:
        """The prose of the section, in order."""
        return [b.text for b in self.blocks if isinstance(b, Para)]
