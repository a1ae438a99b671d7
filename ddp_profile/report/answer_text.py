"""The answer first: the analysis's verdict (what bounds the step, what to change) and a compact per-rank
summary, as plain lines and small frames that the terminal (``ddp-profile analyze``) and the run page both
show. Everything here reads what the analysis computed (``verdict``, ``per_rank``, ``critical_path``, the
step and rank tables); an analysis without those parts gets no verdict lines, never invented ones.

Numbers go through :mod:`ddp_profile.fmt` (ms with 3 decimals, % with 1).
"""

from __future__ import annotations

import functools
import json
from importlib import resources

import pandas as pd

from ddp_profile.fmt import fmt_ms, fmt_number, fmt_pct, missing

SMALL_PCT = 5.0
"""Advice (after the verdict's own) expected to gain less than this share of the step is listed in one line of
"smaller items", by rule and expected gain."""
LEDGER_SUMMARY = "whatif_ledger.json"
"""The ledger's per-rule summary, package data beside this module (``ddp_profile.ledger`` writes it)."""

# Per-rank summary: medians over the rank's steps of these step-table columns (those the table has).
RANK_COLUMNS = (
    "step_ns",
    "span_ns",
    "compute_ns",
    "exposed_comm_ns",
    "exposed_wait_ns",
    "exposed_transfer_ns",
    "comm_tail_ns",
    "idle_ns",
)


INFERRED_NOTES = ("inferred from the launching thread", "steps inferred from the GPU trace")
"""Fragments of the analysis's notes saying the steps or phases were inferred, not read from NVTX."""


def phases_inferred(analysis) -> bool:
    """Whether the analysis inferred the steps or their phases (no NVTX ranges for them): the timeline and
    the Perfetto export then label those ranges "inferred", never "NVTX"."""
    return any(f in str(n) for n in (getattr(analysis, "notes", None) or []) for f in INFERRED_NOTES)


def _attr(obj, name):
    """``obj.name`` (called when it is a method); None when absent."""
    v = getattr(obj, name, None)
    return v() if callable(v) else v


def verdict_of(analysis) -> dict | None:
    """The analysis's verdict dict ({bound_by, removable_ns, what_to_change, expected_gain_ns, spread_ns,
    rank, share_pct, advice}), or None when this analysis has none."""
    v = _attr(analysis, "verdict")
    return v if isinstance(v, dict) and v.get("bound_by") else None


def per_rank_of(analysis) -> dict:
    """{metric: {rank: value}} for metrics whose ranks differ more than 2× ({} when none or absent)."""
    v = _attr(analysis, "per_rank")
    return v if isinstance(v, dict) else {}


def critical_path_of(analysis) -> pd.DataFrame | None:
    cp = getattr(analysis, "critical_path", None)
    return cp if isinstance(cp, pd.DataFrame) and len(cp) else None


def verdict_lines(v: dict | None) -> list[str]:
    """The verdict as sentences: what bounds the step and by how much (for compute: its share, nothing
    removable), what to change with its gain and spread, then each advice rule. [] without a verdict.
    Words as the run page's verdict (``report.verdicts.BOUND_NAMES``)."""
    from ddp_profile.report.verdicts import bound_words

    if not v:
        return []
    bound = str(v.get("bound_by"))
    of_step = (
        f" of the {fmt_ms(v['span_ns'])} critical-path step span"
        if not missing(v.get("span_ns"))
        else " of the step"
    )
    head = f"Bound by {bound_words(v)}"
    if bound == "compute":
        if not missing(v.get("share_pct")):
            head += (
                f": compute is {fmt_pct(v['share_pct'])}{of_step}; nothing removable reaches the threshold"
            )
    elif not missing(v.get("removable_ns")):
        head += f": {fmt_ms(v['removable_ns'])} per step removable"
        if not missing(v.get("share_pct")):
            head += f" ({fmt_pct(v['share_pct'])}{of_step})"
    lines = [head + "."]
    what = v.get("what_to_change")
    if what:
        tail = ""
        if bound != "compute":
            tail = _verdict_gain(v, what)
        lines.append(f"What to change: {what.rstrip('.')}{tail}.")
    small = []
    for i, a in enumerate(v.get("advice") or []):
        if not isinstance(a, dict) or not a.get("what_to_change"):
            continue
        rule = f"[{a['rule']}] " if a.get("rule") else ""
        if i and _small(a, v.get("span_ns")):
            small.append(f"{rule}{fmt_ms(a['expected_gain_ns'])}")
            continue
        ev = f"; evidence: {a['evidence']}" if a.get("evidence") else ""
        basis = f"; gain basis: {a['gain_basis']}" if a.get("gain_basis") else ""
        nums = advice_numbers(a)
        lines.append(f"  - {rule}{a['what_to_change']}" + (f" ({nums})" if nums else "") + basis + ev)
    if small:
        lines.append(
            f"  - smaller items (expected gain under {fmt_pct(SMALL_PCT)} of the step each): "
            + ", ".join(small)
        )
    return lines


def _small(a: dict, span_ns) -> bool:
    """An advice rule (not the verdict's own) whose expected gain is under SMALL_PCT of the step span."""
    gain = a.get("expected_gain_ns")
    if missing(span_ns) or not span_ns or gain is None or missing(gain):
        return False
    return 100.0 * float(gain) / float(span_ns) < SMALL_PCT


def _verdict_gain(v: dict, what: str) -> str:
    """' — expected gain X per step (up to Y, spread over steps Z; ledger ...)' for the verdict's change."""
    gain = v.get("expected_gain_ns")
    head_rule = (v.get("advice") or [None])[0]
    own = isinstance(head_rule, dict) and head_rule.get("what_to_change") == what
    # the spread of that gain: its rule's (the advice's head, as the rule line below states it), else, for
    # generic advice whose bound is the removable part, the part's
    spread = head_rule.get("spread_ns") if own else v.get("spread_ns")
    extra = [] if missing(spread) else [f"spread over steps {fmt_ms(spread)}"]
    if "gain_upper_ns" not in v:  # an analysis from before expected gains: its one number is a bound
        return (
            ""
            if missing(gain)
            else f" — expected gain up to {fmt_ms(gain)} per step" + (f" ({extra[0]})" if extra else "")
        )
    upper = v.get("gain_upper_ns")
    if gain is None or missing(gain):
        return f" — up to {fmt_ms(upper)} per step, no model predicts more closely" + (
            f" ({extra[0]})" if extra else ""
        )
    if own:
        extra.append(ledger_text(head_rule.get("rule")))
    return (
        f" — expected gain {fmt_ms(gain)} per step (up to {fmt_ms(upper)}"
        + "".join(f", {x}" for x in extra)
        + ")"
    )


def advice_numbers(a: dict) -> str:
    """'expected 1.2 ms, ≤ 2.0 ms, spread 0.1 ms, ledger: ...' of one advice rule ('gain ≤ …' for an analysis
    from before expected gains)."""
    if "expected_gain_ns" not in a:
        gain = "" if missing(a.get("gain_upper_ns")) else f"gain ≤ {fmt_ms(a['gain_upper_ns'])}"
    else:
        gain = f"expected {fmt_ms(a['expected_gain_ns'])}, ≤ {fmt_ms(a.get('gain_upper_ns'))}"
    spread = "" if missing(a.get("spread_ns")) else f"spread {fmt_ms(a['spread_ns'])}"
    ledger = ledger_text(a.get("rule")) if "expected_gain_ns" in a else ""
    return ", ".join(x for x in (gain, spread, ledger) if x)


@functools.cache
def _ledger_rules() -> dict:
    """The committed what-if ledger's summary per advice rule (``ddp_profile/report/whatif_ledger.json``,
    written by ``python -m ddp_profile.ledger``); {} when it cannot be read."""
    try:
        data = json.loads(resources.files("ddp_profile.report").joinpath(LEDGER_SUMMARY).read_text())
    except (OSError, ValueError):
        return {}
    rules = data.get("rules") if isinstance(data, dict) else None
    return rules if isinstance(rules, dict) else {}


def ledger_text(rule) -> str:
    """How the rule fared in the what-if ledger: 'ledger: confirmed within X % on N jobs', 'ledger: within
    tolerance on K of N jobs (largest miss …)', or 'ledger: no entry yet'."""
    s = _ledger_rules().get(str(rule)) if rule else None
    if isinstance(s, dict) and s.get("withdrawn"):
        return f"ledger: withdrawn for jobs of one's own ({s['withdrawn']})"
    if not isinstance(s, dict) or not s.get("pairs"):
        return "ledger: no entry yet"
    n, k = int(s["pairs"]), int(s.get("within", 0))
    jobs = f"{n} job{'s' if n != 1 else ''}"
    miss_pct, miss_ms = float(s.get("worst_miss_pct", 0.0)), float(s.get("worst_miss_ms", 0.0)) * 1e6
    if k == n:
        how = f"{fmt_pct(miss_pct)}" if miss_pct <= 25.0 else f"{fmt_ms(miss_ms)}"
        return f"ledger: confirmed within {how} on {jobs}"
    return f"ledger: within tolerance on {k} of {jobs} (largest miss {fmt_ms(miss_ms)})"


def rank_summary(analysis) -> pd.DataFrame:
    """One row per rank: medians over its steps of :data:`RANK_COLUMNS` (ns), the steps it was the
    straggler in (``straggler_steps``, when the step table names stragglers) and the share of its
    collectives it reached last (``last_arrival_pct``, when the rank table has it). Empty without steps."""
    s = getattr(analysis, "steps", None)
    if s is None or not len(s):
        return pd.DataFrame()
    cols = [c for c in RANK_COLUMNS if c in s]
    num = s[["rank", *cols]].apply(pd.to_numeric, errors="coerce")
    out = num.groupby("rank", sort=True)[cols].median().reset_index()
    out.insert(1, "steps", s.groupby("rank", sort=True)["step"].nunique().to_numpy())
    if "straggler_rank" in s:
        per_step = s.dropna(subset=["straggler_rank"]).drop_duplicates("step")
        counts = per_step["straggler_rank"].astype("int64").value_counts()
        out["straggler_steps"] = [int(counts.get(int(r), 0)) for r in out["rank"]]
    ro = getattr(analysis, "rank_overlap", None)
    if ro is not None and "last_arrival_pct" in ro:
        la = ro.set_index("rank")["last_arrival_pct"]
        out["last_arrival_pct"] = [la.get(r) for r in out["rank"]]
    out["rank"] = out["rank"].astype("int64")
    return out


def value_text(key: str, v) -> str:
    """A summary value with its unit: ``_ns`` as ms, ``_pct`` as %, others as numbers."""
    if key.endswith("_ns"):
        return fmt_ms(v)
    if "pct" in key:
        return fmt_pct(v)
    return fmt_number(v)


def summary_name(key: str) -> str:
    """'step_ns' -> 'step', 'comm_pct' -> 'comm_share', 'wait_pct_of_comm' -> 'wait_share_of_comm' (the
    value carries the unit; a share keeps a name of its own, so 'comm=' is never both ms and %)."""
    return key[:-3] if key.endswith("_ns") else key.replace("_pct", "_share")


def per_rank_text(key: str, values: dict) -> str:
    """'rank 0 1.377 ms, rank 1 0.534 ms' (ranks in order)."""
    return ", ".join(
        f"rank {r} {value_text(key, x)}" for r, x in sorted(values.items(), key=lambda kv: int(kv[0]))
    )


def other_per_rank(summary: dict, per_rank: dict) -> list[tuple[str, str]]:
    """(key, per-rank text) for the metrics whose ranks differ > 2× that the summary does not hold."""
    return [
        (k, per_rank_text(k, v))
        for k, v in per_rank.items()
        if k not in summary and isinstance(v, dict) and v
    ]


def summary_pairs(summary: dict, per_rank: dict) -> list[tuple[str, str]]:
    """(key, text) per summary number; a metric in ``per_rank`` (ranks differ > 2×) shows each rank's value
    instead of the pooled median."""
    out = []
    for k, v in summary.items():
        if k in per_rank and isinstance(per_rank[k], dict) and per_rank[k]:
            out.append((k, per_rank_text(k, per_rank[k]) + " (ranks differ > 2×)"))
        else:
            out.append((k, value_text(k, v)))
    return out
