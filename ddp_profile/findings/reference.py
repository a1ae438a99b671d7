"""Questions 5–8 (PyTorch DDP reference, contention, scaling, fp32 vs bf16)."""

from __future__ import annotations

import math
from collections import Counter

import pandas as pd

from ddp_profile.analysis.compare import amdahl_serial_fraction
from ddp_profile.analysis.launches import IDLE_THRESHOLD_PCT
from ddp_profile.findings.data import MAIN, SCALING, hosts_of, launches_of
from ddp_profile.findings.text import (
    TOPIC_TRACES_BEST,
    Section,
    compare,
    mb,
    ms,
    num,
    pct,
    ranges_overlap,
    spread,
)
from ddp_profile.report import measures
from ddp_profile.report.hosts import HOSTS_FILE


def q5_torch(sets, page, machine, hosts: dict | None = None) -> Section:
    s = Section("q5", "5. PyTorch DDP as the reference: how close each hand-written strategy gets")
    caps = sorted({r.bucket_mb for _, rs in sets for k, r in rs.items() if k == "torch_ddp" and r.bucket_mb})
    cap = f" ({'/'.join(f'{c:g}' for c in caps)} MiB buckets)" if caps else ""
    s.p(
        f"Machine: {machine}. Ratio = strategy step time ÷ torch_ddp{cap} step time of the same "
        "set; below 1 is faster than PyTorch DDP."
    )
    for title, rs in sets:
        ref = rs.get("torch_ddp")
        if ref is None:
            continue
        rows = []
        for k, r in rs.items():
            if r.world_size < 2:
                continue
            ratio = r.v("step_ns") / ref.v("step_ns")
            word = compare(r.v("step_ns"), ref.v("step_ns"), "faster", "slower", "equal")
            overlap = k != "torch_ddp" and ranges_overlap(r.spread["step_ns"], ref.spread["step_ns"])
            rows.append(
                {
                    "run": r.label,
                    "step (median)": ms(r.v("step_ns")),
                    "step min–max": spread(*r.spread["step_ns"]),
                    "÷ torch_ddp": num(ratio, 3),
                    "vs torch_ddp": word + (" (ranges overlap)" if overlap else ""),
                    "report page": page(r),
                    "_ratio": ratio,
                    "_word": word,
                    "_overlap": overlap,
                }
            )
        df = pd.DataFrame(rows).sort_values("_ratio")
        s.table(df.drop(columns=["_ratio", "_word", "_overlap"]), f"{title}: step time relative to torch_ddp")
        hand = df[df["run"] != "torch_ddp"]
        if len(hand):
            top = hand.iloc[0]
            s.add_summary(
                TOPIC_TRACES_BEST,
                set=title,
                run=top["run"],
                ratio=f"{top['÷ torch_ddp']}×",
                word=top["_word"],
                overlap=bool(top["_overlap"]),
            )
            s.p(
                torch_verdict(title, hand, ref) + " "
                f"torch_ddp overlaps {pct(ref.v('overlap_pct'))} of its NCCL time and leaves "
                f"{ms(ref.v('exposed_comm_ns'))} exposed." + cross_host(rs, ref, hosts or {})
            )
    return s


def cross_host(rs, ref, hosts: dict) -> str:
    """ " torch_ddp ran on host X, the other runs on Y: ..." when the hosts file puts the reference on another
    host than runs it is compared with; "" otherwise (or when no hosts file says)."""
    others = {hosts.get(r.run_id) for k, r in rs.items() if r is not ref and r.world_size > 1}
    mine = hosts.get(ref.run_id)
    if mine is None or not others - {mine}:
        return ""
    theirs = ", ".join(
        str(h) if h is not None else "a host not listed" for h in sorted(others - {mine}, key=str)
    )
    return (
        f" torch_ddp ran on {mine}, other runs of this set on {theirs} ({HOSTS_FILE}), so these ratios also "
        "include a change of host."
    )


def torch_verdict(title: str, hand: pd.DataFrame, ref) -> str:
    """Which hand-written strategies beat torch_ddp, or the closest one when none does; worded from the
    ratios (``hand``: rows sorted by ``_ratio`` = step ÷ torch_ddp step)."""
    faster = hand[hand["_ratio"] < 1.0]
    last = hand.iloc[-1]
    if len(faster):
        b = faster.iloc[0]
        apart = faster[~faster["_overlap"].astype(bool)] if "_overlap" in faster else faster
        # a lower median whose step range overlaps torch_ddp's is not established as faster: say which are
        claim = "are faster than" if len(apart) == len(faster) else "have a lower median step than"
        head = (
            f"{title}: {len(faster)} of {len(hand)} hand-written strategies {claim} torch_ddp's "
            f"{ms(ref.v('step_ns'))} ({', '.join(faster['run'])})"
        )
        if len(apart) < len(faster):
            head += (
                "; none beyond the step ranges"
                if not len(apart)
                else f"; beyond the step ranges only {', '.join(apart['run'])}"
            )
        head += f"; the fastest is {b['run']} at {b['÷ torch_ddp']}×"
    else:
        b = hand.iloc[0]
        head = (
            f"{title}: no hand-written strategy is faster than torch_ddp's {ms(ref.v('step_ns'))}; the "
            f"closest is {b['run']} at {b['÷ torch_ddp']}×"
        )
    return head + f", the slowest {last['run']} at {last['÷ torch_ddp']}×."


def q6_contention(rs, page, machine) -> Section:
    s = Section("q6", "6. Overlap contention: how much compute slows while NCCL runs")
    base = rs.get("none") or rs.get("naive")
    if base is None:
        s.p("Set A has neither a 1-GPU nor a naive run: nothing to compare against.")
        return s
    s.p(
        f"Machine: {machine}. A compute kernel instance counts as overlapped when NCCL ran during at least half "
        "of it; each overlapped instance is compared with the same kernel alone (same name and position in the "
        "step, from other steps and ranks); lost time is Σ(overlapped duration − that alone median), per rank "
        "and step, over the kernels seen both ways (a lower bound where kernels always overlap NCCL). The "
        "estimate applies each kernel name's slowdown to all of its time under NCCL (the figure the "
        "recommendation weighs against exposed communication)."
    )
    rows = []
    for k, r in rs.items():
        if r.world_size < 2 and k != "none":
            continue
        rows.append(
            {
                "run": r.label,
                "step (median)": ms(r.v("step_ns")),
                "compute": ms(r.v("compute_ns")),
                "compute vs " + base.label: ms(r.v("compute_ns") - base.v("compute_ns")),
                "overlap": pct(r.v("overlap_pct")),
                "slowdown while overlapped": pct(r.contention["slowdown_pct"]),
                "compute lost per step": ms(r.contention["lost_per_step_ns"]),
                "estimated": ms(r.contention["est_lost_per_step_ns"]),
                "report page": page(r),
                "_r": r,
            }
        )
    df = pd.DataFrame(rows)
    s.table(df.drop(columns=["_r"]), "Contention (XL fp32)")
    ov = rs.get("overlap")
    n = rs.get("naive")
    if ov is not None and n is not None and base is not None:
        hidden = n.v("exposed_comm_ns") - ov.v("exposed_comm_ns")
        gain = n.v("step_ns") - ov.v("step_ns")
        lost = ov.contention["est_lost_per_step_ns"]
        s.p(
            f"Compute kernels that overlap NCCL run {pct(ov.contention['slowdown_pct'])} slower (duration-weighted, "
            f"like for like) in the overlap run, losing {ms(ov.contention['lost_per_step_ns'])} of compute per rank "
            f"and step on the kernels also seen alone and an estimated {ms(lost)} in all; its total compute is "
            f"{ms(abs(ov.v('compute_ns') - n.v('compute_ns')))} "
            f"{compare(ov.v('compute_ns'), n.v('compute_ns'), 'below', 'above', 'equal to')} naive's. Overlap hides "
            f"{ms(hidden)} of the communication naive exposes, yet the step is only {ms(gain)} "
            f"{'shorter' if gain >= 0 else 'longer'}; the estimated contention loss accounts for "
            f"{pct(100 * lost / (hidden - gain), 0) if hidden - gain > 0 else 'n/a'} of that shortfall of "
            f"{ms(hidden - gain)}. So contention explains "
            f"{'most' if hidden - gain > 0 and lost >= 0.5 * (hidden - gain) else 'only part'} of why overlapping "
            "is not faster by the full communication it hides; the remainder is not attributed to slowed kernels by "
            "this analysis."
        )
    return s


def q7_scaling(srs, page, machine) -> tuple[Section, pd.DataFrame]:
    s = Section("q7", "7. Scaling 1 → 2 → 4 GPUs (separate 4-GPU host)")
    s.p(
        f"Machine: {machine}. Weak scaling: fixed batch per GPU, so n GPUs process n× the work per step. "
        "Throughput = n · work per GPU / step time; efficiency = throughput ÷ (n × 1-GPU throughput); Amdahl "
        "serial fraction f from S = 1/(f + (1−f)/n) (Karp–Flatt). The 1-GPU runs of one model are the baseline."
    )
    rows = []
    for r in srs:
        work, unit = r.units_per_rank_step
        rows.append(
            {
                "model": r.model,
                "strategy": r.label,
                "GPUs": r.world_size,
                "step (median)": ms(r.v("step_ns")),
                "step min–max": spread(*r.spread["step_ns"]),
                "throughput": f"{r.world_size * work / (r.v('step_ns') / 1e9):,.0f} {unit}/s",
                "_thr": r.world_size * work / (r.v("step_ns") / 1e9),
                "_unit": unit,
                "comm share": pct(r.v("comm_pct")),
                "exposed comm": ms(r.v("exposed_comm_ns")),
                "report page": page(r),
                "_r": r,
            }
        )
    df = pd.DataFrame(rows)
    if not len(df):
        s.p("No runs in traces/scaling/.")
        return s, df
    df["_eff"] = math.nan
    df["_f"] = math.nan
    for _key, g in df.groupby(["model", "strategy"]):
        one = g[g["GPUs"] == 1]
        if not len(one):
            continue
        t1 = float(one["_thr"].iloc[0])
        for i in g.index:
            sp = df.at[i, "_thr"] / t1
            df.at[i, "_eff"] = 100 * sp / df.at[i, "GPUs"]
            df.at[i, "_f"] = amdahl_serial_fraction(sp, int(df.at[i, "GPUs"]))
    df["efficiency"] = [pct(x) for x in df["_eff"]]
    df["serial fraction"] = [num(x, 3) for x in df["_f"]]
    df = df.sort_values(["model", "strategy", "GPUs"])
    s.table(
        df[[c for c in df.columns if not c.startswith("_") and c != "report page"] + ["report page"]],
        "Scaling (fp32)",
    )
    s.fig("scaling", "Throughput vs GPUs, each model relative to its 1-GPU throughput, with the ideal line.")
    for m, g in df.groupby("model"):
        four = g[g["GPUs"] == g["GPUs"].max()]
        e = ", ".join(
            f"{row['strategy']} {row['efficiency']} (f = {row['serial fraction']})"
            for _, row in four.iterrows()
        )
        r0 = four["_r"].iloc[0]
        s.p(
            f"{m} at {int(g['GPUs'].max())} GPUs: efficiency {e}; NCCL is {pct(r0.v('comm_pct'))} of the step "
            f"({ms(r0.v('comm_ns'))}), {ms(r0.v('exposed_comm_ns'))} exposed, against a 1-GPU step of "
            f"{ms(g[g['GPUs'] == 1]['_r'].iloc[0].v('step_ns')) if (g['GPUs'] == 1).any() else 'n/a'}."
        )
    eff = df[df["GPUs"] == df["GPUs"].max()].groupby("model")["_eff"].mean()
    if len(eff) >= 2:
        lo, hi = eff.idxmin(), eff.idxmax()
        s.p(
            f"The small-work regime ({lo}, a step of a few ms) scales {compare(eff[lo], eff[hi], 'worse', 'better', 'as well')} "
            f"than the large-batch regime ({hi}): with little compute per step there is nothing to hide the "
            "all-reduce behind and fixed per-collective costs (launch, synchronisation, waiting for the slowest "
            "rank) are a large share of the step; the XL step's hundreds of ms of compute hide nearly all of it."
        )
    return s, df


HOST_BOUND_IDLE_PCT = IDLE_THRESHOLD_PCT  # one line for q8 and `ddp-profile launches` (analysis/launches.py)
"""Above this share of the 1-GPU step with the GPU idle, the step is called host/launch-bound: the GPU waits
for the host a quarter of the time, so host overhead, not GPU work, orders the strategies."""


def batches(rs) -> list[str]:
    """The distinct per-GPU batches (``RunData.batch_label``) of a set, in order of first appearance."""
    return list(dict.fromkeys(r.batch_label for r in rs.values()))


def per_k(r, ns: float) -> float:
    """ns per 1000 units of work per GPU (tokens for language models)."""
    work = r.units_per_rank_step[0]
    return ns * 1000.0 / work if work > 0 else math.nan


def per_gpu_throughput(r) -> float:
    """Units of work per second per GPU: work per rank-step ÷ median step time."""
    return r.units_per_rank_step[0] / (r.v("step_ns") / 1e9)


def _cost(r, uniform: bool) -> float:
    """The ranking key: step time when the set has one batch, else time per unit of work."""
    return r.v("step_ns") if uniform else per_k(r, r.v("step_ns"))


def _cost_spread(r, uniform: bool) -> tuple[float, float]:
    lo, hi = r.spread["step_ns"]
    return (lo, hi) if uniform else (per_k(r, lo), per_k(r, hi))


def idle_share(r) -> tuple[float, float]:
    """(median GPU idle per step, its share of the median step in %)."""
    idle = float(r.analysis.steps["idle_ns"].median()) if len(r.analysis.steps) else math.nan
    return idle, 100.0 * idle / r.v("step_ns")


def multi_idle(rs, idle_pct: float) -> str:
    """The GPU idle share of a set's multi-GPU runs, and which are above the host-bound line: their rank
    carries host-side time (launches, synchronisation) as well as GPU work."""
    shares = {r.label: idle_share(r)[1] for r in rs.values() if r.world_size > 1}
    if not shares:
        return ""
    high = [k for k, v in sorted(shares.items(), key=lambda kv: -kv[1]) if v > idle_pct]
    head = f"The multi-GPU bf16 runs idle {pct(min(shares.values()))}–{pct(max(shares.values()))} of their steps; "
    if not high:
        return head + f"all under the {idle_pct:g} % line. "
    return head + (
        f"{', '.join(f'{k} ({pct(shares[k])})' for k in high)} "
        f"{'is' if len(high) == 1 else 'are'} above the line, so "
        f"{'its rank includes' if len(high) == 1 else 'their ranks include'} host-side time "
        "(launches, synchronisation) beyond GPU work. "
    )


def page_ranking(rs, uniform: bool = True) -> list:
    """The set's multi-GPU runs, fastest first, as its strategies page ranks them: by
    :func:`measures.rank_ns` under the set's :func:`measures.ranking_basis` (the trace's median step unless
    every run was also timed without nsys). A set that mixes batches is ranked by time per unit of work."""
    basis = measures.ranking_basis(r.meta for r in rs.values())
    multi = [r for r in rs.values() if r.world_size > 1]
    if not uniform:
        return sorted(multi, key=lambda r: per_k(r, r.v("step_ns")))
    return sorted(multi, key=lambda r: measures.rank_ns(r.meta, r.v("step_ns"), basis))


def fastest_two(name: str, rs, uniform: bool) -> str:
    """Whether the two fastest multi-GPU strategies of the whole set (:func:`page_ranking`, the ranking of
    its strategies page, including strategies the other set did not run) are separated beyond their step
    ranges."""
    multi = page_ranking(rs, uniform)
    if len(multi) < 2:
        return f"{name} has fewer than two multi-GPU strategies to separate"
    x, y = multi[0], multi[1]
    if uniform and measures.ranking_basis(r.meta for r in rs.values()) == measures.UNPROFILED:
        sep = not ranges_overlap(measures.unprofiled_range_ns(x.meta), measures.unprofiled_range_ns(y.meta))
    else:
        sep = not ranges_overlap(_cost_spread(x, uniform), _cost_spread(y, uniform))
    return (
        f"{name}'s fastest two of all its {len(multi)} multi-GPU strategies (ranked as on its strategies "
        f"page), {x.label} and {y.label}, "
        + (
            "are separated beyond their step ranges"
            if sep
            else "have overlapping step ranges, so their order is not established"
        )
    )


def q8_dtype(a, b, page, machine, idle_pct: float = HOST_BOUND_IDLE_PCT) -> Section:
    s = Section("q8", "8. fp32 vs bf16: how the ranking of strategies changes")
    keys = [k for k in b if k in a]
    ba, bb = batches(a), batches(b)
    s.p(
        f"Machine: {machine}. Set A (XL fp32, batch {' / '.join(ba) or 'n/a'} per GPU) vs set B (XL bf16 autocast, "
        f"batch {' / '.join(bb) or 'n/a'} per GPU), strategies present in both. "
        + (
            "Each set has one batch, so strategies are ranked by step time within a set; "
            if len(ba) == 1 and len(bb) == 1
            else "A set mixes batches, so strategies are ranked by time per unit of work; "
        )
        + (
            "the sets' batches differ, so compare across sets by throughput per GPU and time per 1k tokens, not by "
            "step time."
            if ba != bb
            else "both sets have the same batch, so step times compare across sets too."
        )
    )
    if not keys:
        s.p("Sets A and B share no strategy: nothing to rank.")
        return s
    ua, ub = len(ba) == 1, len(bb) == 1
    rank_a = sorted(keys, key=lambda k: _cost(a[k], ua))
    rank_b = sorted(keys, key=lambda k: _cost(b[k], ub))
    unit = b[keys[0]].units_per_rank_step[1]
    rows = [
        {
            "strategy": b[k].label,
            f"fp32 step ({a[k].batch_label}/GPU)": ms(a[k].v("step_ns")),
            "fp32 rank": rank_a.index(k) + 1,
            f"fp32 {unit}/s per GPU": f"{per_gpu_throughput(a[k]):,.0f}",
            f"bf16 step ({b[k].batch_label}/GPU)": ms(b[k].v("step_ns")),
            "bf16 min–max": spread(*b[k].spread["step_ns"]),
            "bf16 rank": rank_b.index(k) + 1,
            f"bf16 {unit}/s per GPU": f"{per_gpu_throughput(b[k]):,.0f}",
            "bf16 compute": ms(b[k].v("compute_ns")),
            "bf16 idle": ms(idle_share(b[k])[0]),
            "bf16 comm share": pct(b[k].v("comm_pct")),
            "bf16 exposed": ms(b[k].v("exposed_comm_ns")),
            "report page": page(b[k]),
        }
        for k in keys
    ]
    s.table(
        pd.DataFrame(rows).sort_values("bf16 rank"),
        f"Ranking within each set by {'median step time' if ua and ub else 'time per unit of work'}; "
        f"throughput = {unit} per GPU per step ÷ median step time",
    )
    same = rank_a == rank_b
    s.p(
        f"Among the {len(keys)} strategies both sets ran, the ranking {'is unchanged' if same else 'changes'}: "
        f"fp32 order {' < '.join(a[k].label for k in rank_a)}; "
        f"bf16 order {' < '.join(b[k].label for k in rank_b)}."
    )
    if "none" in keys:
        na, nb = a["none"], b["none"]
        ca, cb = per_k(na, na.v("compute_ns")), per_k(nb, nb.v("compute_ns"))
        wa, wb = na.units_per_rank_step[0], nb.units_per_rank_step[0]
        dts = (
            sorted({str(x) for x in b["naive"].analysis.collectives["dtype"].dropna().unique()})
            if "naive" in keys and b["naive"].analysis.collectives is not None
            else []
        )
        text = (
            f"bf16 {compare(cb, ca, 'cuts', 'raises', 'leaves')} the 1-GPU compute per {unit[:-1]} from "
            f"{ms(ca)} to {ms(cb)} per 1k {unit} ({max(ca, cb) / min(ca, cb):.1f}× "
            f"{compare(cb, ca, 'less', 'more', 'the same')}); 1-GPU throughput "
            f"{per_gpu_throughput(na):,.0f} → {per_gpu_throughput(nb):,.0f} {unit}/s"
        )
        if wa != wb:
            text += (
                f". Set B's step carries {wb / wa:g}× set A's {unit} per GPU ({nb.batch_label} vs "
                f"{na.batch_label}), so this ratio combines bf16 with the "
                f"{compare(wb, wa, 'smaller', 'larger', 'same')} batch"
            )
        if "naive" in keys:
            text += (
                f". The all-reduces move {'/'.join(dts) or 'unknown-dtype'} data (NCCL kernel names of the bf16 "
                f"naive run), {mb(b['naive'].collectives['bytes_per_step'])} per step against "
                f"{mb(a['naive'].collectives['bytes_per_step'])} in fp32, so communication is a "
                f"{compare(b['naive'].v('comm_pct'), a['naive'].v('comm_pct'), 'smaller', 'larger', 'unchanged')} "
                f"share of the step (naive: {pct(a['naive'].v('comm_pct'))} → {pct(b['naive'].v('comm_pct'))})"
            )
        s.p(text + ".")
        idle, share = idle_share(nb)
        lo, hi = nb.spread["step_ns"]
        verdict = (
            f"The 1-GPU bf16 step is host/launch-bound: the GPU idles {ms(idle)} of its {ms(nb.v('step_ns'))} "
            f"({pct(share)}, above the {idle_pct:g} % line used here; fp32: {pct(idle_share(na)[1])}), so host "
            "overhead orders the bf16 "
            "strategies as much as communication does"
            if share > idle_pct
            else f"The 1-GPU bf16 step is GPU-bound: the GPU idles {ms(idle)} of its {ms(nb.v('step_ns'))} "
            f"({pct(share)}, under the {idle_pct:g} % line used here; fp32: {pct(idle_share(na)[1])}), so "
            "bf16 compute itself is not held back by the host"
        )
        s.p(
            f"{verdict}. Its steps range {spread(lo, hi)} ({pct(100 * (hi - lo) / nb.v('step_ns'))} of the median). "
            + multi_idle(b, idle_pct)
            + f"{fastest_two('fp32', a, ua)}; {fastest_two('bf16', b, ub)}."
        )
    return s


def launch_line(name: str, rs: dict) -> str:
    """Whether set ``name``'s 1-GPU run (``none``, else any 1-GPU run) is launch-bound, from its launch
    diagnosis (:func:`~ddp_profile.findings.data.launches_of`): steps launch-bound and the medians behind
    the call. Launch-bound when most steps are, the rule ``LaunchAnalysis.verdicts`` applies per rank."""
    one = rs.get("none") or next((r for r in rs.values() if r.world_size == 1), None)
    if one is None:
        return f"set {name} has no 1-GPU run to check"
    res = launches_of(one)
    if isinstance(res, str) or res.steps.empty:
        why = res if isinstance(res, str) else "; ".join(res.notes) or "no steps found"
        return f"set {name}'s 1-GPU run ({one.label}) has no launch-bound check: {why}"
    sm = res.summary()
    n, bound = sm["n_steps"], sm["launch_bound_steps"]
    steps = "steps" if res.steps["rank"].nunique() == 1 else "rank-steps"
    medians = (
        f"median GPU idle {pct(sm['idle_pct'])}, host {num(sm['host_us_per_launch'], 1)} µs per launch vs "
        f"GPU {num(sm['gpu_us_per_kernel'], 1)} µs per kernel"
    )
    if 2 * bound > n:
        return (
            f"set {name}'s 1-GPU run is launch-bound in {bound} of {n} {steps} ({medians}), so host-side "
            f"launch overhead, not GPU work alone, paces set {name}'s steps and with them its strategy ranking"
        )
    return f"set {name}'s 1-GPU run is not launch-bound ({bound} of {n} {steps} launch-bound; {medians})"


def limits(
    runs,
    hosts: dict | None = None,
    sets: dict | None = None,
    machines: dict | None = None,
    campaign: dict | None = None,
) -> Section:
    """What the data cannot show. ``hosts``: :func:`~ddp_profile.report.hosts.read_hosts`; ``sets``: the
    main run sets {"small" | "A" | "B": {key: run}}; ``machines``: {set: machine line} of main and scaling;
    ``campaign``: {campaign folder: [runs]} (named "campaign set <folder>", apart from the main sets)."""
    s = Section("limits", "How thin the data is")
    hosts, sets, machines = hosts or {}, sets or {}, machines or {}
    nsteps = sorted({int(r.summary.get("n_steps") or 0) for r in runs})
    configs = Counter(
        (r.set, r.strategy, r.model, r.dtype, r.world_size, r.bucket_mb, r.batch_label) for r in runs
    )
    repeated = sum(n > 1 for n in configs.values())
    gpus = sorted({str(r.meta.get("gpu_name")) for r in runs if r.meta.get("gpu_name")})
    s.p(
        f"Each run has {'–'.join(str(x) for x in (nsteps[0], nsteps[-1]))} measured steps after warm-up; medians "
        "are over ranks × steps and min–max spreads are over the same rows. "
        + (
            "Each configuration was profiled once (no repeated traces)"
            if not repeated
            else f"{repeated} of {len(configs)} configurations were profiled more than once"
        )
        + f", on {' and '.join(gpus) or 'unrecorded GPUs'}"
        + ("" if any("H100" in g for g in gpus) else " rather than the H100 the assignment assumes")
        + ". Differences smaller than the spreads shown are not established by these traces."
    )
    reps = [len(r.meta.get("unprofiled_repeat_medians_ms") or []) for r in runs]
    timed = [n for n in reps if n > 0]
    if timed:
        s.p(
            f"Besides their profiled run, {len(timed)} of {len(runs)} runs (the campaign's) were also timed "
            f"{'–'.join(str(x) for x in sorted({min(timed), max(timed)}))} times without nsys (CUDA-event medians "
            "in the run JSON); those sections rank by that un-profiled time and give each repeat."
        )
    checked = [launch_line(name, rs) for name, rs in sets.items() if rs]
    if checked:
        from ddp_profile.analysis.launches import IDLE_THRESHOLD_PCT

        s.p(
            f"Launch-bound check of each set's 1-GPU run (`ddp-profile launches`: a step is launch-bound when "
            f"the GPU idles more than {IDLE_THRESHOLD_PCT:g} % of it and the host takes longer per kernel launch "
            "than the GPU per kernel): " + "; ".join(checked) + "."
        )
    if hosts:
        single: dict = {}
        mixed = []
        groups = [("set", name, rs) for name, rs in sets.items()]
        groups += [("campaign set", name, rs) for name, rs in (campaign or {}).items()]
        for kind, name, rs in groups:
            g = hosts_of(rs, hosts) if rs else {}
            labels = {h: h if h is not None else "a host not listed" for h in g}
            if len(g) == 1:
                single.setdefault((labels[next(iter(g))], kind), []).append(name)
            elif g:
                major, *minor = list(g)
                moved = [r.label for h in minor for r in g[h]]
                mixed.append(
                    f"{kind} {name} mixes hosts: "
                    + "; ".join(f"{', '.join(r.label for r in g[h])} on {labels[h]}" for h in minor)
                    + f", its other {len(g[major])} runs on {labels[major]}, so {kind} {name}'s comparisons with "
                    f"{' and '.join(moved)} include a change of host"
                )
        parts = [
            f"{kind}{'s' if len(n) > 1 else ''} {' and '.join(n)} ran on {h}"
            for (h, kind), n in single.items()
        ] + mixed
        s.p(f"Hosts ({HOSTS_FILE} beside the traces): " + "; ".join(parts) + ".")
    else:
        s.p(
            f"The run JSONs do not name the host; no {HOSTS_FILE} beside the traces says which runs shared one "
            "(one line per run: '<run folder> <host label>')."
        )
    scal = [r for r in runs if r.set == SCALING]
    if scal:
        ws = max(r.world_size for r in scal)
        m_main, m_scal = machines.get(MAIN, ""), machines.get(SCALING, "")
        why = (
            f"a different host ({m_scal.split(' on ')[0]} against {m_main.split(' on ')[0]} in the machine "
            "records)"
            if m_main.split(" on ")[0] != m_scal.split(" on ")[0]
            else "a separate campaign"
        )
        s.p(
            f"The scaling runs (up to {ws} GPUs, {SCALING}/) come from {why}, so they are never compared with "
            "sets small/A/B."
        )
    return s
