"""Questions 5–8 (PyTorch DDP reference, contention, scaling, fp32 vs bf16)."""

from __future__ import annotations

import math

import pandas as pd

from ddp_profile.analysis.compare import amdahl_serial_fraction
from ddp_profile.findings.text import Section, compare, ms, num, pct, ranges_overlap, spread


def q5_torch(sets, page, machine) -> Section:
    s = Section("q5", "5. PyTorch DDP as the reference: how close each hand-written strategy gets")
    s.p(f"Machine: {machine}. Ratio = strategy step time ÷ torch_ddp (25 MB buckets) step time of the same "
        "set; below 1 is faster than PyTorch DDP.")
    for title, rs in sets:
        ref = rs.get("torch_ddp")
        if ref is None:
            continue
        rows = []
        for k, r in rs.items():
            if r.world_size < 2:
                continue
            ratio = r.v("step_ns") / ref.v("step_ns")
            rows.append({"run": r.label, "step (median)": ms(r.v("step_ns")),
                         "step min–max": spread(*r.spread["step_ns"]), "÷ torch_ddp": num(ratio, 3),
                         "vs torch_ddp": compare(r.v("step_ns"), ref.v("step_ns"), "faster", "slower", "equal")
                         + ("" if k == "torch_ddp" else
                            " (ranges overlap)" if ranges_overlap(r.spread["step_ns"], ref.spread["step_ns"]) else ""),
                         "report page": page(r), "_ratio": ratio})
        df = pd.DataFrame(rows).sort_values("_ratio")
        s.table(df.drop(columns=["_ratio"]), f"{title}: step time relative to torch_ddp")
        hand = df[df["run"] != "torch_ddp"]
        if len(hand):
            s.p(torch_verdict(title, hand, ref) + " "
                f"torch_ddp overlaps {pct(ref.v('overlap_pct'))} of its NCCL time and leaves "
                f"{ms(ref.v('exposed_comm_ns'))} exposed.")
    return s


def torch_verdict(title: str, hand: pd.DataFrame, ref) -> str:
    """Which hand-written strategies beat torch_ddp, or the closest one when none does; worded from the
    ratios (``hand``: rows sorted by ``_ratio`` = step ÷ torch_ddp step)."""
    faster = hand[hand["_ratio"] < 1.0]
    last = hand.iloc[-1]
    if len(faster):
        b = faster.iloc[0]
        head = (f"{title}: {len(faster)} of {len(hand)} hand-written strategies are faster than torch_ddp's "
                f"{ms(ref.v('step_ns'))} ({', '.join(faster['run'])}); the fastest is {b['run']} at "
                f"{b['÷ torch_ddp']}×")
    else:
        b = hand.iloc[0]
        head = (f"{title}: no hand-written strategy is faster than torch_ddp's {ms(ref.v('step_ns'))}; the "
                f"closest is {b['run']} at {b['÷ torch_ddp']}×")
    return head + f", the slowest {last['run']} at {last['÷ torch_ddp']}×."


def q6_contention(rs, page, machine) -> Section:
    s = Section("q6", "6. Overlap contention: how much compute slows while NCCL runs")
    base = rs.get("none") or rs.get("naive")
    if base is None:
        s.p("Set A has neither a 1-GPU nor a naive run: nothing to compare against.")
        return s
    s.p(f"Machine: {machine}. A compute kernel instance counts as overlapped when NCCL ran during at least half "
        "of it; slowdown compares the median duration of the same kernel name overlapped vs alone; lost time is "
        "Σ(overlapped duration − alone median), per rank and step.")
    rows = []
    for k, r in rs.items():
        if r.world_size < 2 and k != "none":
            continue
        rows.append({"run": r.label, "step (median)": ms(r.v("step_ns")), "compute": ms(r.v("compute_ns")),
                     "compute vs " + base.label: ms(r.v("compute_ns") - base.v("compute_ns")),
                     "overlap": pct(r.v("overlap_pct")),
                     "slowdown while overlapped": pct(r.contention["slowdown_pct"]),
                     "compute lost per step": ms(r.contention["lost_per_step_ns"]), "report page": page(r),
                     "_r": r})
    df = pd.DataFrame(rows)
    s.table(df.drop(columns=["_r"]), "Contention (XL fp32)")
    ov = rs.get("overlap")
    n = rs.get("naive")
    if ov is not None and n is not None and base is not None:
        hidden = n.v("exposed_comm_ns") - ov.v("exposed_comm_ns")
        gain = n.v("step_ns") - ov.v("step_ns")
        lost = ov.contention["lost_per_step_ns"]
        s.p(f"Compute kernels that overlap NCCL run {pct(ov.contention['slowdown_pct'])} slower (duration-weighted) "
            f"in the overlap run, losing {ms(lost)} of compute per rank and step; its total compute is "
            f"{ms(abs(ov.v('compute_ns') - n.v('compute_ns')))} "
            f"{compare(ov.v('compute_ns'), n.v('compute_ns'), 'below', 'above', 'equal to')} naive's. Overlap hides "
            f"{ms(hidden)} of the communication naive exposes, yet the step is only {ms(gain)} "
            f"{'shorter' if gain >= 0 else 'longer'}; the contention loss accounts for "
            f"{pct(100 * lost / (hidden - gain), 0) if hidden - gain > 0 else 'n/a'} of that shortfall of "
            f"{ms(hidden - gain)}. So contention explains "
            f"{'most' if hidden - gain > 0 and lost >= 0.5 * (hidden - gain) else 'only part'} of why overlapping "
            "is not faster by the full communication it hides; the remainder is not attributed to slowed kernels by "
            "this analysis.")
    return s


def q7_scaling(srs, page, machine) -> tuple[Section, pd.DataFrame]:
    s = Section("q7", "7. Scaling 1 → 2 → 4 GPUs (separate 4-GPU host)")
    s.p(f"Machine: {machine}. Weak scaling: fixed batch per GPU, so n GPUs process n× the work per step. "
        "Throughput = n · work per GPU / step time; efficiency = throughput ÷ (n × 1-GPU throughput); Amdahl "
        "serial fraction f from S = 1/(f + (1−f)/n) (Karp–Flatt). The 1-GPU runs of one model are the baseline.")
    rows = []
    for r in srs:
        work, unit = r.units_per_rank_step
        rows.append({"model": r.model, "strategy": r.label, "GPUs": r.world_size, "step (median)": ms(r.v("step_ns")),
                     "step min–max": spread(*r.spread["step_ns"]),
                     "throughput": f"{r.world_size * work / (r.v('step_ns') / 1e9):,.0f} {unit}/s",
                     "_thr": r.world_size * work / (r.v("step_ns") / 1e9), "_unit": unit,
                     "comm share": pct(r.v("comm_pct")), "exposed comm": ms(r.v("exposed_comm_ns")),
                     "report page": page(r), "_r": r})
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
    s.table(df[[c for c in df.columns if not c.startswith("_") and c != "report page"] + ["report page"]],
            "Scaling (fp32)")
    s.fig("scaling", "Throughput vs GPUs, each model relative to its 1-GPU throughput, with the ideal line.")
    for m, g in df.groupby("model"):
        four = g[g["GPUs"] == g["GPUs"].max()]
        e = ", ".join(f"{row['strategy']} {row['efficiency']} (f = {row['serial fraction']})"
                      for _, row in four.iterrows())
        r0 = four["_r"].iloc[0]
        s.p(f"{m} at {int(g['GPUs'].max())} GPUs: efficiency {e}; NCCL is {r0.v('comm_pct'):.1f}% of the step "
            f"({ms(r0.v('comm_ns'))}), {ms(r0.v('exposed_comm_ns'))} exposed, against a 1-GPU step of "
            f"{ms(g[g['GPUs'] == 1]['_r'].iloc[0].v('step_ns')) if (g['GPUs'] == 1).any() else 'n/a'}.")
    eff = df[df["GPUs"] == df["GPUs"].max()].groupby("model")["_eff"].mean()
    if len(eff) >= 2:
        lo, hi = eff.idxmin(), eff.idxmax()
        s.p(f"The small-work regime ({lo}, a step of a few ms) scales {compare(eff[lo], eff[hi], 'worse', 'better', 'as well')} "
            f"than the large-batch regime ({hi}): with little compute per step there is nothing to hide the "
            "all-reduce behind and fixed per-collective costs (launch, synchronisation, waiting for the slowest "
            "rank) are a large share of the step; the XL step's hundreds of ms of compute hide nearly all of it.")
    return s, df


def q8_dtype(a, b, page, machine) -> Section:
    s = Section("q8", "8. fp32 vs bf16: how the ranking of strategies changes")
    s.p(f"Machine: {machine}. Set A (XL fp32) vs set B (XL bf16 autocast), strategies present in both.")
    keys = [k for k in b if k in a]
    if not keys:
        s.p("Sets A and B share no strategy: nothing to rank.")
        return s
    rank_a = sorted(keys, key=lambda k: a[k].v("step_ns"))
    rank_b = sorted(keys, key=lambda k: b[k].v("step_ns"))
    rows = [{"strategy": b[k].label, "fp32 step": ms(a[k].v("step_ns")), "fp32 rank": rank_a.index(k) + 1,
             "bf16 step": ms(b[k].v("step_ns")), "bf16 min–max": spread(*b[k].spread["step_ns"]),
             "bf16 rank": rank_b.index(k) + 1, "bf16 compute": ms(b[k].v("compute_ns")),
             "bf16 idle": ms(float(b[k].analysis.steps["idle_ns"].median())),
             "bf16 comm share": pct(b[k].v("comm_pct")), "bf16 exposed": ms(b[k].v("exposed_comm_ns")),
             "report page": page(b[k])} for k in keys]
    s.table(pd.DataFrame(rows).sort_values("bf16 rank"), "Ranking by median step time")
    same = rank_a == rank_b
    s.p(f"The ranking {'is unchanged' if same else 'changes'}: fp32 order {' < '.join(a[k].label for k in rank_a)}; "
        f"bf16 order {' < '.join(b[k].label for k in rank_b)}.")
    if "none" in keys and "naive" in keys:
        ca, cb = a["none"].v("compute_ns"), b["none"].v("compute_ns")
        dts = sorted({str(x) for x in b["naive"].analysis.collectives["dtype"].dropna().unique()}) \
            if "naive" in b else []
        s.p(f"bf16 cuts the 1-GPU compute per step from {ms(ca)} to {ms(cb)} ({ca / cb:.1f}× less) while the "
            f"all-reduces move {'/'.join(dts) or 'unknown-dtype'} data (NCCL kernel names of the bf16 naive run), so communication becomes a far larger share of "
            f"the GPU's work (e.g. naive: {pct(a['naive'].v('comm_pct'))} → {pct(b['naive'].v('comm_pct'))} of the "
            f"step). But the bf16 steps are not GPU-bound: the GPU idles "
            f"{ms(float(b['none'].analysis.steps['idle_ns'].median()))} of the 1-GPU step, and the step-to-step "
            f"spread is wide (1 GPU: {spread(*b['none'].spread['step_ns'])}), so the bf16 order mostly reflects host "
            f"overhead and noise; "
            + ("the ranges of the fastest two overlap" if ranges_overlap(b[rank_b[0]].spread["step_ns"],
                                                                       b[rank_b[1]].spread["step_ns"])
               else "the fastest two are separated beyond their ranges") + ".")
    return s


def limits(runs) -> Section:
    s = Section("limits", "How thin the data is")
    nsteps = sorted({int(r.summary.get("n_steps") or 0) for r in runs})
    s.p(f"Each run has {'–'.join(str(x) for x in (nsteps[0], nsteps[-1]))} measured steps after warm-up; medians "
        "are over ranks × steps and min–max spreads are over the same rows. Each configuration ran once on one "
        "host (no repeat runs), on NVIDIA H200 rather than the H100 the assignment assumes; the 4-GPU scaling "
        "runs come from a different host than sets small/A/B, so they are never compared with them. Differences "
        "smaller than the spreads shown are not established by these traces.")
    return s
