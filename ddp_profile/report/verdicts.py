"""The sentences every page starts with: computed from the same frames the page shows, so they flip with the
data (no typed numbers). Each function returns escaped HTML paragraphs (or '' when there is nothing to say).

- :func:`strategy_verdict`: which strategy is fastest, by how much vs the next, the slowest and torch_ddp,
  and whether the step-time ranges establish the order.
- :func:`run_verdict`: how much communication, hidden, exposed (wait vs transfer when the analysis has the
  columns), the tail, what bounds the step, and what to change with the evidence.
- :func:`sweep_verdict`: the measured best bucket cap, the model optimum, which to use and why.
"""

from __future__ import annotations

import html
import math

import pandas as pd

from ddp_profile.analysis.verdict import straggler_example
from ddp_profile.report.glossary import fmt_cap, fmt_ms, fmt_pct, missing


def _e(text) -> str:
    return html.escape(str(text), quote=False)


def label(row) -> str:
    """'bucketed 25 MiB ×2'."""
    from ddp_profile.plots.compare import run_label

    return run_label(row)


def _range(row) -> str:
    lo, hi = row.get(_LO, row.get("step_min_ns")), row.get(_HI, row.get("step_max_ns"))
    return f"{fmt_ms(lo, unit=False)}–{fmt_ms(hi)}"


_T, _LO, _HI = "rank_step_ns", "rank_min_ns", "rank_max_ns"
"""The comparison's columns of the step time runs are ranked by (``report.compare.add_run_facts``); a
frame without them (built by hand) is ranked by ``step_ns`` and its min–max."""


def rank_time(row) -> float:
    """The step time a comparison row is ranked by: rank_step_ns when the frame has it, else step_ns."""
    v = row.get(_T)
    return float(v) if v is not None and not missing(v) else float(row.get("step_ns", float("nan")))


def _diff(a_ns: float, b_ns: float) -> str:
    """'12.345 ms (3.4 %)' — b − a, relative to b."""
    d = b_ns - a_ns
    return f"{fmt_ms(abs(d))} ({100.0 * abs(d) / b_ns:.1f} %)" if b_ns else fmt_ms(abs(d))


def _hosts(a, b) -> str:
    """' (but recorded on host-2, not host-1: ...)' when two rows come from different hosts."""
    ha, hb = a.get("host"), b.get("host")
    if ha and hb and ha != hb:
        return (
            f" (but torch_ddp was recorded on {_e(hb)} and the fastest on {_e(ha)}, so the difference "
            "mixes the host with the strategy)"
        )
    return ""


def ranked(comp: pd.DataFrame) -> pd.DataFrame:
    """Multi-GPU rows with a step time, fastest first by the time the run set is ranked by (rank_step_ns:
    un-profiled when every run of the set has it, :mod:`ddp_profile.report.measures`; else step_ns)."""
    ws = pd.to_numeric(comp["world_size"], errors="coerce")
    key = _T if _T in comp else "step_ns"
    return comp[(ws > 1) & comp[key].notna()].sort_values(key, kind="stable").reset_index(drop=True)


def basis_sentence(rows: list[dict]) -> str:
    """Which step time the ranking uses, and (un-profiled) how many runs nsys would reorder."""
    from ddp_profile.report.measures import TRACE, UNPROFILED, basis_text, overhead_span, places_changed

    bases = {x.get("rank_basis") for x in rows} - {None}
    if not bases or bases == {TRACE}:
        lacking = [x for x in rows if missing(x.get("unprofiled_step_ns"))]
        if len(lacking) == len(rows):
            why = "no run here was timed without nsys"
        elif lacking:
            why = (
                f"{len(lacking)} of these {len(rows)} runs ({', '.join(_e(label(x)) for x in lacking[:4])}"
                f"{', …' if len(lacking) > 4 else ''}) were not timed without nsys"
            )
        else:
            why = "not every run of this set (its 1-GPU baseline included) was timed without nsys"
        return f"Ranked by {basis_text(TRACE)}: {why}."
    if bases != {UNPROFILED}:
        return "Ranked by the step time of each run's set (column rank basis)."
    over = [float(x["profiler_overhead_pct"]) for x in rows if not missing(x.get("profiler_overhead_pct"))]
    order = list(range(len(rows)))
    moved = places_changed(order, sorted(order, key=lambda i: float(rows[i].get("step_ns", float("nan")))))
    text = f"Ranked by {basis_text(UNPROFILED)}"
    if over:
        text += f"; profiler overhead {overhead_span(over)} across these runs"
    text += (
        f", and ranked by the profiled trace time {moved} of {len(rows)} runs would change place."
        if moved
        else ", and the profiled trace times give the same order."
    )
    return text


def strategy_verdict(comp: pd.DataFrame) -> str:
    from ddp_profile.report.measures import versus

    r = ranked(comp).to_dict("records")
    if not r:
        return "<p>No multi-GPU run with steps here, so no ranking.</p>"
    best = r[0]
    t = rank_time
    # with both intervals recorded and overlapping, the top two are within noise: no "fastest" claim
    within = (
        len(r) > 1
        and _has_ci(best)
        and _has_ci(r[1])
        and not versus(t(best), _ci(best), t(r[1]), _ci(r[1]))[1]
    )
    head = "Lowest median (within noise of the next)" if within else "Fastest"
    out = [f"<b>{head}: {_e(label(best))}</b> at {fmt_ms(t(best))} per step ({_population(best)})."]
    if len(r) > 1:
        nxt, worst = r[1], r[-1]
        s = (
            f"Its median is {_diff(t(best), t(nxt))} below the next, {_e(label(nxt))}{_what(nxt)} "
            if within
            else f"It is {_diff(t(best), t(nxt))} faster than the next, {_e(label(nxt))}{_what(nxt)} "
        )
        s += f"({fmt_ms(t(nxt))}, range {_range(nxt)})"
        if len(r) > 2:
            s += f", and {_diff(t(best), t(worst))} faster than the slowest, {_e(label(worst))}"
        out.append(s + ".")
        b_hi, n_lo = best.get(_HI, best.get("step_max_ns")), nxt.get(_LO, nxt.get("step_min_ns"))
        if _has_ci(best) and _has_ci(nxt):
            out.append(_ci_sentence(best, nxt))
        elif missing(b_hi) or missing(n_lo):
            out.append(
                "No step-time range is recorded for the top two, so whether their steps establish the "
                "order is not known."
            )
        elif b_hi < n_lo:
            out.append(
                "Its slowest step is faster than the next one's fastest step, so these steps establish "
                "the order of the top two."
            )
        else:
            out.append(
                "Their step-time ranges overlap, so these steps do not establish the order of the top "
                f"two: the {fmt_ms(t(nxt) - t(best))} gap is within the step-to-step "
                "spread."
            )
    ddp = [x for x in r if x.get("strategy") == "torch_ddp" and not _pytorch_zero(x)]
    own = [x for x in r if x.get("strategy") in OWN_STRATEGIES]
    if ddp and ddp[0] is not best:
        d = ddp[0]
        out.append(
            f"Against PyTorch DDP ({_e(label(d))}, {fmt_ms(t(d))}): "
            f"{_diff(t(best), t(d))} {_versus(best, d)}{_hosts(best, d)}."
        )
        if own and own[0] is not best:
            o = own[0]
            out.append(
                f"The fastest of ddp-profile's own strategies, {_e(label(o))}, is {_diff(t(o), t(d))} "
                f"{_versus(o, d)} than torch_ddp."
            )
    elif ddp and own:
        out.append(
            f"PyTorch DDP is fastest; the fastest of ddp-profile's own strategies, {_e(label(own[0]))}, "
            f"is {_diff(t(best), t(own[0]))} {_versus(own[0], best)}."
        )
    order = ", ".join(f"{i}. {_e(label(x))} {fmt_ms(t(x))}" for i, x in enumerate(r, 1))
    out.append(f"Ranked: {order}.")
    if "rank_basis" in best:
        out.append(basis_sentence(r))
    return "<p>" + " ".join(out) + "</p>"


_CI_LO, _CI_HI = "rank_ci_low_ns", "rank_ci_high_ns"
"""The un-profiled median's confidence interval (``report.compare.add_run_facts``; NaN where not recorded)."""


def _ci(row) -> tuple[float, float]:
    lo, hi = row.get(_CI_LO), row.get(_CI_HI)
    return (float("nan") if missing(lo) else float(lo), float("nan") if missing(hi) else float(hi))


def _has_ci(row) -> bool:
    return all(math.isfinite(v) for v in _ci(row))


def _ci_text(row) -> str:
    lo, hi = _ci(row)
    return f"{fmt_ms(lo, unit=False)}–{fmt_ms(hi)}"


def _ci_sentence(best, nxt) -> str:
    """Whether the top two's confidence intervals separate (both recorded)."""
    from ddp_profile.report.measures import versus

    word, established = versus(rank_time(best), _ci(best), rank_time(nxt), _ci(nxt))
    both = f"({_e(label(best))} {_ci_text(best)}, {_e(label(nxt))} {_ci_text(nxt)})"
    if established:
        return f"Their 95 % confidence intervals {both} do not overlap, so the order of the top two is established."
    return (
        f"Their 95 % confidence intervals {both} overlap: the top two are within noise of each other, so "
        f"the {fmt_ms(abs(rank_time(nxt) - rank_time(best)))} gap between their medians does not establish "
        "their order."
    )


def _versus(a, b) -> str:
    """'faster' / 'slower' than ``b`` where the intervals separate; 'within noise (intervals ... overlap), by
    the medians faster' where they overlap; 'faster (spread unknown: no confidence interval recorded)' where
    either run lacks one."""
    from ddp_profile.report.measures import FASTER, SLOWER, WITHIN_NOISE, versus

    word, established = versus(rank_time(a), _ci(a), rank_time(b), _ci(b))
    if established:
        return word
    by_median = FASTER if rank_time(a) < rank_time(b) else SLOWER if rank_time(a) > rank_time(b) else "equal"
    if word == WITHIN_NOISE:
        return (
            f"{by_median} by the medians but within noise (95 % confidence intervals {_ci_text(a)} and "
            f"{_ci_text(b)} overlap)"
        )
    return f"{by_median} (spread unknown: no confidence interval recorded)"


OWN_STRATEGIES = ("naive", "flat", "overlap", "bucketed")
"""ddp-profile's own DDP implementations; torch_ddp, fsdp (PyTorch FSDP2) and torch_ddp with
``+zero1torch`` (PyTorch's ZeroRedundancyOptimizer) are PyTorch's, anything else is named as it is."""


def _pytorch_zero(row) -> bool:
    return "zero1torch" in str(row.get("variant") or "")


def _what(row) -> str:
    """' (PyTorch FSDP2)' for a PyTorch strategy other than plain DDP, '' otherwise."""
    if row.get("strategy") == "fsdp":
        return " (PyTorch FSDP2)"
    if _pytorch_zero(row):
        return " (PyTorch DDP with ZeroRedundancyOptimizer)"
    return ""


def _population(row) -> str:
    """What the row's ranked time is a median of."""
    from ddp_profile.report.measures import UNPROFILED

    if row.get("rank_basis") == UNPROFILED:
        reps = row.get("unprofiled_repeats")
        n = f"{int(reps)} " if reps is not None and not missing(reps) else ""
        return (
            f"un-profiled: median over {n}runs without nsys, CUDA events, range {_range(row)}; "
            f"{fmt_ms(row.get('step_ns'))} in the profiled trace"
        )
    return f"median over ranks and {int(row.get('n_steps') or 0)} profiled steps; range {_range(row)}"


BOUND_NAMES = {
    "communication": "exposed communication",
    "host": "the host (GPU idle awaiting launches)",
    "straggler": "a straggler",
    "compute": "compute",
}
"""How the verdict's ``bound_by`` (``analysis.verdict``) reads in a sentence."""


def bound_words(verdict: dict) -> str:
    """What bounds the step, naming the straggler rank whenever the verdict names one: 'a straggler, rank 3';
    'the host (GPU idle awaiting launches), with rank 3 the straggler' when the bound is another part but one
    rank is the material straggler (``analysis.verdict``'s ``rank``), so every headline names it."""
    k = str(verdict.get("bound_by"))
    what = BOUND_NAMES.get(k, k)
    rank = verdict.get("rank")
    if rank is None or missing(rank):
        return what
    return f"a straggler, rank {rank}" if k == "straggler" else f"{what}, with rank {rank} the straggler"


def bound_cell(verdict: dict | None) -> str:
    """The verdict in a table cell: 'a straggler, rank 0 (15.537 ms removable)', 'compute'; '–' without."""
    if not verdict or not verdict.get("bound_by"):
        return "–"
    k = verdict["bound_by"]
    what = bound_words(verdict)
    if k != "compute" and not missing(verdict.get("removable_ns")):
        what += f" ({fmt_ms(verdict['removable_ns'])} removable)"
    return what


def bound_by(summary: dict, launch_bound: bool | None, verdict: dict | None = None) -> tuple[str, str]:
    """(what bounds the step, why). With the analysis' ``verdict`` (``analysis.verdict``: the largest
    removable part of the critical path), its bound_by, share, spread, what to change and expected gain.
    Without one (an analysis made before verdicts existed): launches when the launch check says so, else the
    largest of compute, exposed communication and idle (medians of the step table)."""
    if verdict and verdict.get("bound_by"):
        k = verdict["bound_by"]
        what = bound_words(verdict)
        if k == "compute":
            why = (
                f"compute is {fmt_pct(verdict.get('share_pct'))} of the {fmt_ms(verdict.get('span_ns'))} "
                "critical-path step span; no removable part "
                "(exposed communication, waiting, host) reaches the verdict's threshold"
            )
        else:
            why = (
                f"removable {fmt_ms(verdict.get('removable_ns'))} per step, {fmt_pct(verdict.get('share_pct'))} "
                f"of the {fmt_ms(verdict.get('span_ns'))} critical-path step span, spread "
                f"{fmt_ms(verdict.get('spread_ns'))} over steps"
            )
        if verdict.get("what_to_change"):
            why += f"; what to change: {verdict['what_to_change']}"
            if k != "compute" and "gain_upper_ns" not in verdict:  # from before expected gains: one bound
                why += f" (expected gain up to {fmt_ms(verdict.get('expected_gain_ns'))})"
            elif k != "compute" and missing(verdict.get("expected_gain_ns")):
                why += f" (up to {fmt_ms(verdict.get('gain_upper_ns'))} per step; no model predicts more closely)"
            elif k != "compute":
                why += (
                    f" (expected gain {fmt_ms(verdict.get('expected_gain_ns'))} per step, up to "
                    f"{fmt_ms(verdict.get('gain_upper_ns'))})"
                )
        return what, why
    step = float(summary.get("step_ns") or 0)
    raw = {
        "compute": summary.get("compute_ns"),
        "communication": summary.get("exposed_comm_ns"),
        "idle gaps (host or launches)": summary.get("idle_ns"),
    }
    parts: dict[str, float] = {k: float(v) for k, v in raw.items() if v is not None and not missing(v)}
    if launch_bound:
        return "kernel launches", "the launch check finds most steps launch-bound (see below)"
    if not parts or not step:
        return "unknown", "no step metrics"
    k = max(parts, key=lambda name: parts[name])
    pct = {n: 100 * v / step for n, v in parts.items()}
    if "communication" in pct and not missing(summary.get("exposed_comm_pct")):
        pct["communication"] = float(summary["exposed_comm_pct"])
    names = {
        "compute": "compute",
        "communication": "exposed communication",
        "idle gaps (host or launches)": "idle gaps",
    }
    share = ", ".join(f"{names[n]} {fmt_pct(v)}" for n, v in pct.items())
    return names[k], f"share of the step: {share}"


def wait_sentence(steps: pd.DataFrame) -> str:
    """' — rank R waits X ms per step for the slower rank, Y ms transferring' per rank, not pooled: the
    rank whose median exposed wait is largest is named (ranks differ most there)."""
    per = steps.groupby("rank")[["exposed_wait_ns", "exposed_transfer_ns"]].median()
    r = per["exposed_wait_ns"].idxmax() if per["exposed_wait_ns"].notna().any() else per.index[0]
    text = f" — rank {int(r)} waits {fmt_ms(per.loc[r, 'exposed_wait_ns'])} per step for a later rank"
    if len(per) > 1:
        others = per.drop(index=r)["exposed_wait_ns"]
        text += f" (other ranks {fmt_ms(others.median())})"
    return text + f", {fmt_ms(per['exposed_transfer_ns'].median())} transferring"


def straggler_sentence(steps: pd.DataFrame, verdict: dict | None) -> str:
    """'Rank R arrives last at the collectives (cause host in N of M steps: <evidence>).' when the verdict
    names a straggler rank, else ''."""
    if not verdict or verdict.get("rank") is None or "straggler_cause" not in steps:
        return ""
    r = int(verdict["rank"])
    per_step = steps.groupby("step")[
        ["straggler_rank", "straggler_lead_ns", "straggler_cause", "straggler_evidence"]
    ].first()
    mine = per_step[per_step["straggler_rank"] == r]
    if mine.empty:
        return ""
    cause = mine["straggler_cause"].mode().iloc[0]
    n = int((mine["straggler_cause"] == cause).sum())
    example = straggler_example(mine, cause)
    text = (
        f"Rank {r} arrives last at the step's collectives in {len(mine)} of {len(per_step)} steps, "
        f"median {fmt_ms(mine['straggler_lead_ns'].median())} after the first rank; cause {_e(cause)} in {n}"
    )
    return text + (f" (e.g. {_e(example)})." if example else ".")


def step_times_sentence(step_ns, n_steps: int, meta: dict | None) -> str:
    """The run's step time in the trace and, when its JSON has one, un-profiled beside it (with the
    profiler's overhead as the harness measured it), so later comparisons can say which one they use."""
    from ddp_profile.report import measures

    text = f"Median step {fmt_ms(step_ns)} in the trace (over {n_steps} profiled steps and every rank)"
    unprof = measures.unprofiled_ns(meta)
    if missing(unprof):
        return text + "."
    reps = measures.unprofiled_repeats(meta)
    over = measures.profiler_overhead_pct(meta)
    text += (
        f"; {fmt_ms(unprof)} un-profiled (median of "
        f"{f'{int(reps)} ' if not missing(reps) else ''}runs without nsys, CUDA events"
    )
    if not missing(over):
        text += f"; profiler overhead {fmt_pct(over)}"
    return text + ")."


def _is_ratio(pct, part, whole) -> bool:
    """Whether ``pct`` (as shown, one decimal) is 100 · part / whole of the two values shown beside it."""
    if missing(pct) or part is None or missing(part) or not whole:
        return True
    return abs(float(pct) - 100 * float(part) / float(whole)) < 0.1


def run_verdict(
    summary: dict,
    steps: pd.DataFrame | None,
    launch_bound: bool | None,
    advice: str,
    world_size,
    meta: dict | None = None,
    verdict: dict | None = None,
    per_rank: dict | None = None,
) -> str:
    """Two paragraphs. The answer: what bounds the step (``verdict``: the analysis' verdict) and what to
    change (a measured comparison's ``advice`` follows it), the straggler. Then the measurements: step time
    (trace, and un-profiled when ``meta``, the run JSON, has it), communication, hidden, exposed (wait per
    rank vs transfer), tail; ``per_rank`` ({metric: {rank: value}} where ranks differ > 2×) replaces the
    pooled communication and exposed medians by each rank's."""
    step = summary.get("step_ns")
    if missing(step):
        return "<p>No profiled steps in this run, so no verdict.</p>"
    n = int(summary.get("n_steps") or 0)
    # the answer first: what bounds the step, what to change, who is waited for; the measurements after it
    what, why = bound_by(summary, launch_bound, verdict)
    first = [f"The step is bound by <b>{_e(what)}</b> ({_e(why)})."]
    if advice:
        first.append(advice)
    if steps is not None and (strag := straggler_sentence(steps, verdict)):
        first.append(strag)
    out = [step_times_sentence(step, n, meta)]
    comm = float(summary.get("comm_ns") or 0.0)
    if world_size and int(world_size) > 1 and comm > 0:
        hidden, exposed = summary.get("overlap_ns"), summary.get("exposed_comm_ns")
        # the hidden share the headline shows (comm hidden (%)) when the summary states it: one value per fact
        # a share that is not the ratio of the two medians beside it says how it was taken
        share, ex_pct = summary.get("overlap_pct"), summary.get("exposed_comm_pct")
        share_text = (
            f"{100 * (hidden or 0) / comm:.0f} %"
            if missing(share)
            else fmt_pct(share)
            if _is_ratio(share, hidden, comm)
            else f"{fmt_pct(share)} of all communication, pooled over ranks and steps"
        )
        ex_text = (
            f"{fmt_pct(ex_pct)} of the step"
            if _is_ratio(ex_pct, exposed, step)
            else f"median share of the step {fmt_pct(ex_pct)}"
        )
        # where ranks differ > 2x (``per_rank``), each rank's value, not a pooled median no rank has
        pr = per_rank or {}

        def ranks_ms(values):  # 'rank 0 0.302 ms, rank 1 21.816 ms'
            return ", ".join(
                f"rank {r} {fmt_ms(x)}" for r, x in sorted(values.items(), key=lambda kv: int(kv[0]))
            )

        comm_text = (
            f"Communication takes {ranks_ms(pr['comm_ns'])} per step (ranks differ > 2×)"
            if pr.get("comm_ns")
            else f"Communication takes {fmt_ms(comm)} per step"
        )
        ex_all = (
            f"{ranks_ms(pr['exposed_comm_ns'])}"
            if pr.get("exposed_comm_ns")
            else f"{fmt_ms(exposed)} ({ex_text})"
        )
        s = f"{comm_text}; {fmt_ms(hidden)} of it ({share_text}) is hidden under compute and {ex_all} is exposed"
        if (
            steps is not None
            and len(steps)
            and {"exposed_wait_ns", "exposed_transfer_ns"} <= set(steps.columns)
        ):
            s += wait_sentence(steps)
        tail = summary.get("comm_tail_ns")
        if tail is None or tail != tail:  # NaN: no backward phase in the steps (e.g. a CUDA graph's ranges)
            s += ". The comm tail after the last backward kernel is unknown: no backward phase was found in the steps"
        else:
            s += f". The comm tail after the last backward kernel is {fmt_ms(tail)}"
            if steps is not None and "job_comm_tail_ns" in steps:
                s += f" ({fmt_ms(steps['job_comm_tail_ns'].median())} after the last rank's backward)"
        out.append(s + ".")
    elif world_size and int(world_size) > 1:
        out.append("No NCCL kernels were found in the steps.")
    else:
        out.append("One GPU: no communication.")
    return "<p>" + " ".join(first) + "</p><p>" + " ".join(out) + "</p>"


def sweep_verdict(
    curve_caps: list[float],
    step_ns: list[float],
    tails_ns: list[float],
    b_star_mib,
    default_cap: float | None = 25.0,
    ddp: dict | None = None,
    spread: dict | None = None,
) -> str:
    """Recommendation first: measured best cap (by step time), the model's b*, which to use and why."""
    pts = [(c, t, tl) for c, t, tl in zip(curve_caps, step_ns, tails_ns, strict=False) if not missing(t)]
    if not pts:
        return "<p>No bucketed run with steps here, so no recommendation.</p>"
    best = min(pts, key=lambda p: p[1])
    worst = max(pts, key=lambda p: p[1])
    caps = sorted(p[0] for p in pts)
    out = [
        f"<b>Use a bucket cap of {fmt_cap(best[0])}</b>: it measured the shortest step, "
        f"{fmt_ms(best[1])} (comm tail {fmt_ms(best[2])}), {_diff(best[1], worst[1])} faster than the "
        f"slowest cap ({fmt_cap(worst[0])})."
    ]
    if spread:
        nxt = sorted(pts, key=lambda p: p[1])[1] if len(pts) > 1 else None
        lo, hi = spread.get(best[0], (None, None))
        if nxt is not None and hi is not None and nxt[0] in spread:
            if hi < spread[nxt[0]][0]:
                out.append(
                    f"Its slowest step beats the fastest step of the runner-up ({fmt_cap(nxt[0])}), so "
                    "the order is established."
                )
            else:
                out.append(
                    f"Its step range ({fmt_ms(lo, unit=False)}–{fmt_ms(hi)}) overlaps the runner-up's "
                    f"({fmt_cap(nxt[0])}: {fmt_ms(spread[nxt[0]][0], unit=False)}–"
                    f"{fmt_ms(spread[nxt[0]][1])}), so the order of the top two is not established."
                )
    dflt = [p for p in pts if default_cap is not None and p[0] == default_cap]
    if dflt and dflt[0] is not best:
        out.append(
            f"It is {_diff(best[1], dflt[0][1])} per step faster than the default {fmt_cap(default_cap)}."
        )
    if b_star_mib is not None and not missing(b_star_mib) and math.isfinite(b_star_mib):
        near = min(caps, key=lambda c: abs(math.log(c / b_star_mib)) if c > 0 else math.inf)
        if near == best[0]:
            why = (
                f"The cost model's optimum b* = {b_star_mib:,.0f} MiB is nearest to that measured cap, so "
                "model and measurement agree."
            )
        else:
            lo = max([c for c in caps if c <= b_star_mib], default=None)
            hi = min([c for c in caps if c >= b_star_mib], default=None)
            between = (
                f"between the measured caps {fmt_cap(lo)} and {fmt_cap(hi)}"
                if lo and hi
                else "outside the measured caps"
            )
            why = (
                f"The cost model's optimum b* = {b_star_mib:,.0f} MiB lies {between} and was not measured; "
                "the measurement wins because the model leaves out launch delays and the slowdown of the "
                "last buckets beside the gradient copy-back (see the model's error below). Measure "
                f"{b_star_mib:,.0f} MiB before preferring it."
            )
        out.append(why)
    if ddp and not missing(ddp.get("step_ns")):
        out.append(f"PyTorch DDP at {fmt_cap(ddp.get('bucket_mb'))} measured {fmt_ms(ddp['step_ns'])}.")
    return "<p>" + " ".join(out) + "</p>"
