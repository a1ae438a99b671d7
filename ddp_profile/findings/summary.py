"""The findings' opening summary: a few one-claim bullets, each ending with a link to the section that holds the
detail, and one row per interleaved timing set.

The sections record their results as facts (:meth:`text.Section.add_summary`, one topic of :data:`text.TOPICS`
each): values formatted as the section states them and the words its own comparisons chose (faster only where
the 95 % intervals separate, :func:`ddp_profile.report.measures.versus`). This module only selects, counts and
orders those facts; it compares no two measurements itself. The one choice it makes is which timing set to
name per dtype: the one whose lowest-median configuration comes closest to one GPU (highest efficiency), the
measure that stays comparable across GPU models.

Bullets, in order: per dtype the best measured configuration against one GPU and stock DDP; per dtype where
the multi-GPU step loses its time; recommend → confirm; the campaign sets' lowest medians; what their stock
traces recommend; the sets of traces/ (sections 1–8).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

import pandas as pd

from ddp_profile.findings.text import (
    TOPIC_CAMPAIGN_BEST,
    TOPIC_CAMPAIGN_REC,
    TOPIC_CONFIRM,
    TOPIC_LOSSES,
    TOPIC_TIMING,
    TOPIC_TRACES_BEST,
    Section,
    Table,
    signed_ms,
)
from ddp_profile.report import measures

LINK_TEXT = {
    TOPIC_TIMING: "timing sets",
    TOPIC_LOSSES: "where the time goes",
    TOPIC_CONFIRM: "recommend → confirm",
    TOPIC_CAMPAIGN_BEST: "how to beat DDP",
    TOPIC_CAMPAIGN_REC: "how to beat DDP",
    TOPIC_TRACES_BEST: "question 5",
}
"""The text of each bullet's link to its section, by topic."""


@dataclass(frozen=True)
class Bullet:
    """One claim: bold ``lead`` words, the ``text``, and a link (``link``) to the section ``anchor``."""

    lead: str
    text: str
    anchor: str
    link: str
    topic: str = ""
    """The section topic whose facts made it (``text.TOPIC_*``; set by :func:`build_summary`)."""


@dataclass
class Summary:
    """The opening summary: bullets, then the timing sets' table (None without timing sets)."""

    bullets: list[Bullet] = field(default_factory=list)
    table: Table | None = None
    key: str = ""
    """What the set codes the bullets use stand for ("Set codes: A: XL fp32, 4×256, NVIDIA H200; …")."""
    plain: str = ""
    """The answer in plain words, before the bullets (:func:`plain_words`)."""

    def __bool__(self) -> bool:
        return bool(self.bullets) or self.table is not None

    def about(self, topic: str) -> list[Bullet]:
        """The bullets made from one topic's facts (e.g. ``TOPIC_TIMING``: per dtype, closest to one GPU)."""
        return [b for b in self.bullets if b.topic == topic]


def listing(items) -> str:
    """ "A", "A and B", "A, B and C"."""
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1] if items else ""


def change_range(values) -> str:
    """Signed changes (ns) as "+3.156 ms" or "+3.156 to +3.430 ms" (:func:`losses.signed`)."""
    lo, hi = min(values), max(values)
    return signed_ms(lo) if signed_ms(lo) == signed_ms(hi) else f"{signed_ms(lo)[:-3]} to {signed_ms(hi)}"


def in_of(n: int, total: int) -> str:
    """ " in 3 of 4"; "" when there is one case (the claim needs no count)."""
    return "" if total == 1 else f" in {n} of {total}"


def _facts(sections: list[Section], topic: str) -> tuple[list[dict], str]:
    """(facts of ``topic`` in section order, the key of the first section holding one)."""
    holders = [s for s in sections if s.summary.get(topic)]
    return [f for s in holders for f in s.summary[topic]], (holders[0].key if holders else "")


def _dtypes(facts) -> list[str]:
    seen = list(dict.fromkeys(f["dtype"] for f in facts))
    return sorted(seen, key=lambda d: (d != "fp32", d != "bf16", d))


def _vs_stock(f: dict) -> str:
    """How a timing fact's configuration stands against stock DDP, in the words its section chose."""
    if f["stock"]:
        return "is stock DDP itself"
    if f["established"]:
        return f"is {f['word']} than stock DDP by {f['diff']} (intervals separate)"
    if f["word"] == measures.WITHIN_NOISE:
        return "is within noise of stock DDP"
    if f["word"] == measures.NO_STOCK:
        return "has no stock DDP run in its set to compare with"
    return f"is {f['word']} than stock DDP by the medians (spread unknown)"


def _beaten(beat: int, with_stock: int, sets: int, dtype: str) -> str:
    """In how many of the dtype's timing sets stock DDP is beaten outside noise, counting the sets that timed it."""
    if not with_stock:
        return f"No {dtype} timing set timed stock DDP."
    if with_stock == sets:
        return f"Stock beaten outside noise in {beat} of {sets} {dtype} timing set{'s' if sets > 1 else ''}."
    return f"Stock beaten outside noise in {beat} of {with_stock} {dtype} set{'s' if with_stock > 1 else ''} timing it."


def closest_to_one_gpu(facts: list[dict]) -> dict:
    """The timing fact to name as closest to one GPU: of the facts whose efficiency interval overlaps the
    highest median efficiency's, one with a stock run in its set if any (so the claim against stock is made in
    one set), then the highest interval's lower end (the surest, not the luckiest)."""

    def finite(v: float) -> float:
        return v if v == v else float("-inf")

    top = max(facts, key=lambda f: finite(f["eff_pct"]))
    near = [
        f
        for f in facts
        if finite(f["eff_hi_pct"]) >= finite(top["eff_lo_pct"])
        and finite(f["eff_lo_pct"]) <= finite(top["eff_hi_pct"])
    ] or [top]
    return max(near, key=lambda f: (f["word"] != measures.NO_STOCK, finite(f["eff_lo_pct"])))


def timing_bullets(facts: list[dict], anchor: str) -> list[Bullet]:
    """Per dtype: the timing set whose best configuration comes closest to one GPU, and in how many of the
    dtype's timing sets the best configuration beats stock outside noise."""
    out = []
    for dtype in _dtypes(facts):
        fs = [f for f in facts if f["dtype"] == dtype]
        best = closest_to_one_gpu(fs)
        beat = [f for f in fs if f["established"] and f["word"] == measures.FASTER]
        with_stock = [f for f in fs if f["word"] != measures.NO_STOCK]
        target = f"; target {best['target']} {best['outcome']}" if best["outcome"] else ""
        out.append(
            Bullet(
                f"{dtype}, closest to one GPU:",
                f"{best['run']} (timing set {best['set']}): {best['eff']} of one GPU ({best['eff_interval']}"
                f"{target}); it {_vs_stock(best)}. " + _beaten(len(beat), len(with_stock), len(fs), dtype),
                anchor,
                LINK_TEXT[TOPIC_TIMING],
            )
        )
    return out


def timing_table(facts: list[dict]) -> Table | None:
    if not facts:
        return None
    rows = [
        {
            "timing set": f["set"],
            "workload": f["workload"],
            "best configuration": f["run"],
            "median step (95 % interval)": f"{f['median']} ({f['interval']})",
            "vs stock DDP": (
                "is stock"
                if f["stock"]
                else f"{f['word']} by {f['diff']}"
                if f["established"]
                else f["word"]
                if f["word"] in (measures.WITHIN_NOISE, measures.NO_STOCK)
                else f"{f['word']}, spread unknown"
            ),
            "of one GPU (interval)": f"{f['eff']} ({f['eff_interval']})",
        }
        for f in sorted(facts, key=lambda f: (f["set"], _dtypes(facts).index(f["dtype"]), f["workload"]))
    ]
    return Table(
        pd.DataFrame(rows),
        "Timing sets: the lowest-median multi-GPU configuration of each (faster or "
        "slower than stock only where the 95 % intervals separate)",
    )


def loss_bullets(facts: list[dict], anchor: str) -> list[Bullet]:
    """Per dtype: how the step span changes against one GPU, which part grows most and in which kernel
    family, over the dtype's campaign sets."""
    out = []
    for dtype in _dtypes(facts):
        fs = [f for f in facts if f["dtype"] == dtype]
        n = len(fs)
        part, k = Counter(f["biggest"] for f in fs).most_common(1)[0]
        grow = [f["diffs"][part] for f in fs if f["biggest"] == part]
        second = Counter(
            max((p for p in f["diffs"] if p != f["biggest"]), key=lambda p: f["diffs"][p]) for f in fs
        ).most_common(1)[0][0]
        fams = Counter(f["family"] for f in fs if f.get("family") and f["biggest"] == part)
        family = ""
        if fams:
            name, c = fams.most_common(1)[0]
            family = f"; mostly {name}{in_of(c, k)}"
        text = (
            f"span vs one GPU {change_range([f['span_ns'] for f in fs])} "
            f"({'one campaign set' if n == 1 else f'{n} sets'}); {part} grows most{in_of(k, n)} "
            f"({change_range(grow)}{family}), then {second} ({change_range([f['diffs'][second] for f in fs])})"
        )
        shorter = [f for f in fs if f["drop"]]
        if shorter:
            drops = Counter(f["drop"] for f in shorter).most_common(1)[0][0]
            text += f"; the span is shorter{in_of(len(shorter), n)} as {drops} drops"
        out.append(
            Bullet(
                f"{dtype}, where the multi-GPU step loses time:", text + ".", anchor, LINK_TEXT[TOPIC_LOSSES]
            )
        )
    return out


def confirm_bullet(facts: list[dict], anchor: str) -> list[Bullet]:
    if not facts:
        return []
    f = facts[-1]
    return [
        Bullet(
            "Recommend → confirm:",
            f"{f['met']} of {f['total']} step times predicted from the stock trace alone lie within {f['target']} "
            f"of the measured step ({f['sets_met']} of {f['sets']} sets with none outside); worst "
            f"{f['worst_error']}: {f['worst_run']} ({f['worst_set']}).",
            anchor,
            LINK_TEXT[TOPIC_CONFIRM],
        )
    ]


CAMPAIGN_WORDS = {
    "stock": "stock DDP itself has the lowest median in {}",
    "faster": "a configuration beats stock outside noise in {}",
    "within noise": "the lowest median is within noise of stock in {}",
    "spread unknown": "a lower median than stock, with no interval to tell it from noise, in {}",
}


def campaign_bullet(facts: list[dict], anchor: str) -> list[Bullet]:
    if not facts:
        return []
    parts = []
    for how, words in CAMPAIGN_WORDS.items():
        fs = [f for f in facts if f["how"] == how]
        if fs:
            parts.append(
                words.format(
                    listing(
                        f["set"]
                        + (
                            ""
                            if how == "stock"
                            else f" at {f['ratio']} stock" + (" (trace time)" if f["trace_time"] else "")
                        )
                        for f in fs
                    )
                )
            )
    return [
        Bullet(
            "Campaign sets (profiled sweeps, un-profiled medians):",
            "; ".join(parts) + ".",
            anchor,
            LINK_TEXT[TOPIC_CAMPAIGN_BEST],
        )
    ]


def recommendation_bullet(facts: list[dict], anchor: str) -> list[Bullet]:
    if not facts:
        return []

    def sets(*outcomes) -> list[str]:
        return [f["set"] for f in facts if f["outcome"] in outcomes]

    parts = [
        words + listing(names)
        for words, names in (("keep stock in ", sets("stock")), ("no recommendation in ", sets("none made")))
        if names
    ]
    changed = sets("not run", "run elsewhere", "inside", "outside")
    if changed:
        detail = [
            words.format(listing(names))
            for words, names in (
                ("{} ran it and measured a step inside the predicted range", sets("inside")),
                ("{} ran it and measured a step outside the predicted range", sets("outside")),
                ("only another set ran the change for {}", sets("run elsewhere")),
                ("no set ran it for {}", sets("not run")),
            )
            if names
        ]
        parts.append(f"change it in {listing(changed)} — {', '.join(detail)}")
    return [
        Bullet(
            "Each campaign set's stock trace recommends:",
            "; ".join(parts) + ".",
            anchor,
            LINK_TEXT[TOPIC_CAMPAIGN_REC],
        )
    ]


def traces_bullet(facts: list[dict], anchor: str) -> list[Bullet]:
    if not facts:
        return []
    overlap = sum(f["overlap"] for f in facts)
    return [
        Bullet(
            "Sets of traces/ (one profiled run per strategy):",
            "the fastest hand-written strategy against torch_ddp: "
            + "; ".join(f"{f['set']}: {f['run']}, {f['ratio']}" for f in facts)
            + (f" (step ranges overlap torch_ddp's in {overlap} of {len(facts)})" if overlap else "")
            + ".",
            anchor,
            LINK_TEXT[TOPIC_TRACES_BEST],
        )
    ]


def set_key(timing: list[dict], campaign: list[dict]) -> str:
    """ "Set codes: timing set AC: XL fp32, 4×256, NVIDIA H200, …; campaign set A: …": the workload of every set
    the bullets name by its code (``timing``: the timing facts the bullets name, ``campaign``: the campaign
    sets' facts), in order of use; "" when none."""
    seen = dict.fromkeys(
        [(f"timing set {f['set']}", f["workload"]) for f in timing if f.get("workload")]
        + [(f"campaign set {f['set']}", f["workload"]) for f in campaign if f.get("workload")]
    )
    return ("Set codes: " + "; ".join(f"{s}: {w}" for s, w in seen) + ".") if seen else ""


def plain_words(named: list[dict]) -> str:
    """The summary's opening sentence, in plain words from the timing bullets' facts (per dtype, the
    configuration closest to one GPU): how much of its one-GPU speed each GPU keeps, and whether that beats
    stock PyTorch DDP outside noise; "" without timing facts."""
    parts = []
    for f in named:
        vs = (
            "it is stock PyTorch DDP itself"
            if f["stock"]
            else f"{f['diff']} {f['word']} than stock PyTorch DDP"
            if f["established"]
            else "not told apart from stock PyTorch DDP by the repeats"
        )
        parts.append(f"in {f['dtype']} each GPU keeps {f['eff']} of the speed one GPU has alone ({vs})")
    if not parts:
        return ""
    return (
        "In plain words: with the best data-parallel configuration measured, "
        + "; ".join(parts)
        + ". The bullets below say where the rest of the time goes and what each set's trace recommends."
    )


def build_summary(sections: list[Section]) -> Summary:
    """The summary of the sections' recorded facts (empty when they recorded none)."""
    out = Summary(table=timing_table(_facts(sections, TOPIC_TIMING)[0]))
    timing = _facts(sections, TOPIC_TIMING)[0]
    named = [closest_to_one_gpu([f for f in timing if f["dtype"] == d]) for d in _dtypes(timing)]
    out.plain = plain_words(named)
    out.key = set_key(
        named, _facts(sections, TOPIC_CAMPAIGN_BEST)[0] + _facts(sections, TOPIC_CAMPAIGN_REC)[0]
    )
    for topic, make in (
        (TOPIC_TIMING, timing_bullets),
        (TOPIC_LOSSES, loss_bullets),
        (TOPIC_CONFIRM, confirm_bullet),
        (TOPIC_CAMPAIGN_BEST, campaign_bullet),
        (TOPIC_CAMPAIGN_REC, recommendation_bullet),
        (TOPIC_TRACES_BEST, traces_bullet),
    ):
        facts, key = _facts(sections, topic)
        if facts:
            out.bullets += [replace(b, topic=topic) for b in make(facts, key)]
    return out
