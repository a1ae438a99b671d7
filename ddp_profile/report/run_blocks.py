"""Blocks of the run page that answer before they describe: the analysis's verdict with its advice, a per-rank
summary (per-rank values where ranks differ), the critical path per step, communication by collective kind ×
phase, and memory per GPU. Each block is '' when the run has nothing to show in it (no empty scaffolding).
"""

from __future__ import annotations

import pandas as pd

from ddp_profile.report.answer_text import (
    critical_path_of,
    per_rank_of,
    phases_inferred,  # noqa: F401  (the run page imports it from here with the other blocks)
    rank_summary,
    verdict_lines,
    verdict_of,
)
from ddp_profile.report.glossary import fmt_ms, header
from ddp_profile.report.html import esc, table
from ddp_profile.report.runs import Run


def own_job(run: Run) -> bool:
    """A trace without the harness's run JSON (the user's own job): no strategy recorded."""
    return not run.meta.get("strategy")


def answer_block(run: Run) -> str:
    """The analysis's advice rules (what to change, each with its upper-bound gain, spread and evidence; the
    verdict box above the page states what bounds the step and the first change) and the per-rank summary;
    '' when the analysis has neither."""
    a = run.analysis
    lines = verdict_lines(verdict_of(a))
    items = "".join(f"<li>{esc(x.strip().removeprefix('- '))}</li>" for x in lines if x.startswith("  - "))
    head = (
        (
            "<h2>What to change</h2><p>Rules that apply to this trace, from its measured parts, largest expected "
            "gain first: each with its expected gain per step for the job without the profiler, its upper bound, "
            "the spread over steps and how the rule fared in the what-if ledger "
            f"(re-runs with the change applied):</p><ul class='advice'>{items}</ul>"
        )
        if items
        else ""
    )
    ranks = rank_summary(a)
    differ = per_rank_of(a)
    block = ""
    if len(ranks) > 1 or differ:
        note = ""
        if differ:
            names = ", ".join(header(k)[0] for k in sorted(differ))  # the columns' labels, not their keys
            note = (
                f"<p class='note'>Ranks differ by more than 2× in {esc(names)}: read these per-rank values, "
                "not the pooled medians of the headline.</p>"
            )
        block = table(ranks, "Per rank (medians over each rank's steps)") + note
    return head + block


def critical_path_block(run: Run) -> str:
    """The critical path per step (the analysis's ``critical_path`` section: parts add up to the step)."""
    cp = critical_path_of(run.analysis)
    if cp is None:
        return ""
    cp = cp.rename(columns={"idle_ns": "rest_ns"})  # not the step table's idle_ns: what the other parts leave
    return (
        "<h2>Critical path</h2><p>Per step, the rank whose work ends the step and where its time went "
        "over the step's span (from the end of that rank's previous step to the end of this one: the "
        "iteration as the training loop sees it); its parts add up to the step span. The verdict's "
        f"shares divide this table's median step span, {fmt_ms(cp['span_ns'].median())}; the headline's step "
        "time is the GPU window alone, without the idle before it.</p>"
        + table(cp, "Critical path per step", max_rows=64)
    )


KIND_PARTS = (
    "comm_ns",
    "exposed_comm_ns",
    "wait_ns",
    "exposed_wait_ns",
    "forward_ns",
    "backward_ns",
    "optimizer_ns",
    "after_backward_ns",
)


def comm_kinds_table(comm_kinds: pd.DataFrame | None) -> pd.DataFrame:
    """Per collective kind: launches per step and the medians over (rank, step) rows of its NCCL time,
    exposed part, waiting and the time in each phase (``analysis.comm_kinds``)."""
    if comm_kinds is None or not len(comm_kinds):
        return pd.DataFrame()
    c = comm_kinds
    cols = [x for x in KIND_PARTS if x in c]
    g = c.groupby("collective", sort=False)
    out = g[cols].median()
    out.insert(0, "kernels_per_step", g["count"].median())
    out = out.reset_index().sort_values("comm_ns", ascending=False)
    return out.loc[:, [col for col in out.columns if out[col].notna().any()]]


def comm_kinds_block(run: Run) -> str:
    df = comm_kinds_table(getattr(run.analysis, "comm_kinds", None))
    if not len(df):
        return ""
    return (
        "<h2>Communication by collective kind and phase</h2><p>NCCL time per collective kind, split by "
        "the phase whose GPU window it runs in (after backward: after the step's last backward kernel); "
        "each column is its own median over rank × step, so the phase columns need not add up to the "
        "comm column: a median of parts is not a part of the median, NCCL time between phase windows falls "
        "in none of them, and with micro-steps one phase's window may hold another phase's kernels.</p>"
        + table(df, "Communication by collective kind × phase (separate medians, not a breakdown)")
    )


def memory_table(run: Run) -> pd.DataFrame:
    """Per rank: its GPU and that GPU's memory (the trace), and the peak allocated / reserved memory and
    optimizer state the run JSON records for the rank (when it does)."""
    from ddp_profile.report.measures import MEMORY_KEYS

    t = run.trace
    ranks, gpus = getattr(t, "ranks", None), getattr(t, "gpus", None)
    if ranks is None or not len(ranks):
        return pd.DataFrame()
    r = ranks[["rank", "file", "device", "gpu_name"]].dropna(subset=["rank"]).drop_duplicates("rank")
    r = r.astype({"rank": "int64"}).sort_values("rank")
    if gpus is not None and len(gpus) and "memory_bytes" in gpus:
        g = gpus[["file", "device", "memory_bytes"]].astype({"file": str})
        r = r.astype({"file": str}).merge(g, on=["file", "device"], how="left")
    out = pd.DataFrame({"rank": r["rank"].to_numpy(), "gpu": r["gpu_name"].to_numpy()})
    if "memory_bytes" in r:
        out["memory_bytes"] = pd.to_numeric(r["memory_bytes"], errors="coerce").to_numpy()
    for col, key in MEMORY_KEYS.items():
        vals = run.meta.get(key)
        if isinstance(vals, list) and vals:
            out[col] = [vals[i] if 0 <= i < len(vals) else None for i in out["rank"]]
    return out.loc[:, [c for c in out.columns if out[c].notna().any()]]


CAPTION_RECORDED = "GPU, its memory and the run JSON's peaks, per rank"


def memory_block(run: Run) -> str:
    df = memory_table(run)
    if not len(df):
        return ""
    recorded = any(c in df for c in ("peak_allocated_bytes", "peak_reserved_bytes"))
    why = (
        ""
        if recorded
        else " The trace holds only each GPU's memory size, not the job's peaks."
        if own_job(run)
        else " The run JSON records no peak memory for this run (the harness writes it)."
    )
    return (
        "<h2>Memory per GPU</h2>"
        + table(
            df,
            "GPU, its memory and the run JSON's peaks, per rank"
            if recorded
            else "GPU and its memory, per rank",
        )
        + (f"<p class='note'>{esc(why.strip())}</p>" if why else "")
    )
