"""Where the multi-GPU step loses its time against one GPU, from the profiled campaign sets.

Per campaign set with a profiled 1-GPU run and a profiled stock torch_ddp run of the same workload, the
critical path of each (``analysis.critical_path``: per step, the parts of the rank that ends it, adding up to
the step span ``span_ns``) as medians over steps, and the difference part by part:

    compute          GPU busy with anything but NCCL: more of it on N GPUs = compute kernels slowed by the
                     NCCL kernels beside them (contention for SMs and memory bandwidth), or extra copies
    exposed transfer NCCL running alone, moving data
    wait             NCCL running alone, waiting for a later peer
    host             GPU idle because the host had not launched the next work yet
    idle             the rest (work issued, not started)

Medians of parts need not add up to the median span; the table says so.

Which compute grows: per kernel family (``analysis.kernel_families``, families ``analysis.kernel_groups.GROUPS``)
the GPU time per step of each step's critical rank (the rank whose parts the critical path shows), summed
over the profiled steps and divided by their number, for the 1-GPU run, the stock run and the set's runs that
differ from stock only in NCCL settings with a channel limit (e.g. ``torch_ddp-25mb-ch2-hiprio``). The
families other than NCCL add up to the critical rank's non-NCCL GPU time per step (a sum of durations: the
critical path's ``compute_ns`` is the union of the same activities, equal when they do not overlap, less the
GEMM time slowed beside an NCCL kernel waiting for a late peer, which the critical path counts as wait).

Opens no file: the runs are ``data.RunData`` with their traces and analyses.
"""

from __future__ import annotations

import pandas as pd

from ddp_profile.analysis.kernel_families import (
    family_on_critical_rank,
    family_per_rank,
    family_steps,
    gemm_contention,
)
from ddp_profile.analysis.kernel_groups import GEMM, GROUPS, MEMORY_BOUND_GROUPS, NCCL_GROUP, WAVE_RATIO
from ddp_profile.findings.campaign import campaign_sets, set_label, stock_reference
from ddp_profile.findings.data import RunData
from ddp_profile.findings.text import (
    TOPIC_LOSSES,
    Section,
    ms,
    pct,
    signed_ms,
    signed_pct_value,
    spread,
)
from ddp_profile.fmt import fmt_duration, fmt_number

PARTS = [
    ("span_ns", "step span"),
    ("compute_ns", "compute"),
    ("exposed_transfer_ns", "exposed transfer"),
    ("wait_ns", "wait"),
    ("host_ns", "host"),
    ("idle_ns", "idle"),
]


def critical_medians(run) -> dict[str, float] | None:
    """{part: median over steps} of the run's critical path, None without one."""
    cp = getattr(run.analysis, "critical_path", None) if run.analysis is not None else None
    if not isinstance(cp, pd.DataFrame) or cp.empty:
        return None
    return {col: float(cp[col].median()) for col, _ in PARTS}


NCCL_KEYS = ("nccl_channels", "nccl_high_priority", "nccl_min_ctas")
"""Run config fields that only set NCCL (``harness.config``): a run differing from stock in these alone is the
same training with NCCL held to fewer channels (CTAs) or given high-priority streams."""
NON_NCCL = "all but NCCL"
"""The row of the family table summing every family but NCCL: the critical rank's non-NCCL GPU time per step."""


def channel_limited(rs, ref) -> list[RunData]:
    """The set's runs that differ from the stock run ``ref`` only in NCCL settings (NCCL_KEYS), with a channel
    limit, on as many GPUs; by channel count, then name."""

    def rest(r):
        return {k: v for k, v in r.config.items() if k not in NCCL_KEYS}

    out = [
        r
        for r in rs
        if r is not ref
        and r.world_size == ref.world_size
        and r.model == ref.model
        and r.dtype == ref.dtype
        and int(r.config.get("nccl_channels") or 0) > 0
        and rest(r) == rest(ref)
    ]
    return sorted(out, key=lambda r: (int(r.config["nccl_channels"]), r.name))


def pairs(runs) -> list[tuple[str, RunData, RunData, list[RunData]]]:
    """(set label, 1-GPU run, stock run, channel-limited runs) per campaign set that profiled the 1-GPU and the
    stock run with the same workload."""
    out = []
    for name, rs in sorted(campaign_sets(runs).items()):
        ref = stock_reference(rs)
        ones = [
            r
            for r in rs
            if r.world_size == 1
            and ref is not None
            and r.model == ref.model
            and r.dtype == ref.dtype
            and r.config.get("batch") == ref.config.get("batch")
        ]
        if ref is not None and ones:
            out.append((set_label(name, True), ones[0], ref, channel_limited(rs, ref)))
    return out


def run_families(run) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """(``schema.CRITICAL_FAMILY_COLUMNS``, ``schema.FAMILY_COLUMNS``) of the run: GPU time per step by kernel
    family on each step's critical rank, and per rank; None without kernels, steps or a critical path."""
    kernels = getattr(run.trace, "kernels", None)
    steps = getattr(run.analysis, "steps", None)
    cp = getattr(run.analysis, "critical_path", None)
    if not all(isinstance(f, pd.DataFrame) and len(f) for f in (kernels, steps, cp)):
        return None
    per_step = family_steps(kernels, steps)
    crit = family_on_critical_rank(per_step, cp)
    return (crit, family_per_rank(per_step)) if len(crit) else None


def signed_pct(d: float, base: float) -> str:
    """The change ``d`` relative to ``base`` as +12.3 % / −12.3 % (+0.0 % when it rounds to zero); "n/a"
    without a base."""
    return signed_pct_value(100.0 * d / base) if base > 0 else "n/a"


def _totals(crit: pd.DataFrame) -> dict[str, float]:
    """{family: ns per step} with NON_NCCL added."""
    t = dict(zip(crit["family"], crit["gpu_ns_per_step"].astype(float), strict=True))
    t[NON_NCCL] = sum(v for k, v in t.items() if k != NCCL_GROUP)
    return t


def _rank_range(per_rank: pd.DataFrame, family: str) -> str:
    """min–max over ranks of the family's (or NON_NCCL's) ns per step."""
    f = per_rank if family == NON_NCCL else per_rank.loc[per_rank["family"] == family]
    if family == NON_NCCL:
        f = f.loc[f["family"] != NCCL_GROUP]
    v = f.groupby("rank")["gpu_ns_per_step"].sum()
    return spread(float(v.min()), float(v.max()))


def _slowdown(crit1: pd.DataFrame, crit2: pd.DataFrame, families) -> float:
    """Change of the mean time per kernel (%) of ``families`` taken together, each family's change weighted by
    its 1-GPU time: how much slower the kernels run (a family whose kernel count changed brings the mean of all
    its kernels, the extra ones included); NaN when none of them ran on both."""
    a, b = crit1.set_index("family"), crit2.set_index("family")
    fam = [f for f in families if a.at[f, "kernels_per_step"] > 0 and b.at[f, "kernels_per_step"] > 0]
    w = a.loc[fam, "gpu_ns_per_step"].astype(float)
    ratio = b.loc[fam, "mean_ns"].astype(float) / a.loc[fam, "mean_ns"].astype(float) - 1.0
    return 100.0 * float((w * ratio).sum() / w.sum()) if w.sum() > 0 else float("nan")


def _family_table(
    s: Section, label: str, one: RunData, ref: RunData, limited: list[RunData], fams: dict
) -> dict[str, str]:
    """Add the set's family table(s) and sentence to ``s``; return the fact for the summary: the family that
    grows most, when one grows."""
    c1, c2 = fams[one.name][0], fams[ref.name][0]
    t1, t2 = _totals(c1), _totals(c2)
    n = ref.world_size
    k1, k2 = c1.set_index("family"), c2.set_index("family")
    order = [f for f in GROUPS if f != NCCL_GROUP and (t1[f] > 0 or t2[f] > 0)] + [NON_NCCL, NCCL_GROUP]
    rows = []
    for f in order:
        d = t2[f] - t1[f]
        per_kernel = f != NON_NCCL
        rows.append(
            {
                "family": f,
                "1 GPU": ms(t1[f]),
                f"{n} GPUs": ms(t2[f]),
                "difference": signed_ms(d),
                "difference %": signed_pct(d, t1[f]),
                "kernels per step": (
                    f"{fmt_number(k1.at[f, 'kernels_per_step'])} → {fmt_number(k2.at[f, 'kernels_per_step'])}"
                )
                if per_kernel
                else "",
                "mean per kernel": (
                    f"{fmt_duration(k1.at[f, 'mean_ns'])} → {fmt_duration(k2.at[f, 'mean_ns'])}"
                    if per_kernel
                    else ""
                ),
                f"{n} GPUs, min–max over ranks": _rank_range(fams[ref.name][1], f),
            }
        )
    s.table(
        pd.DataFrame(rows),
        f"{label}: GPU time per step by kernel family on the critical rank, {one.name} and {ref.name}",
    )
    grow = {f: t2[f] - t1[f] for f in order if f not in (NON_NCCL, NCCL_GROUP)}
    total = t2[NON_NCCL] - t1[NON_NCCL]
    ranked = sorted(grow, key=lambda f: -grow[f])
    top = ranked[0]
    shown = [f for f in ranked[:3] if grow[f] > 0] or ranked[:3]  # the three that grow most
    parts = ", ".join(f"{f} {signed_ms(grow[f])} ({signed_pct(grow[f], t1[f])})" for f in shown)
    text = (
        f"{label}: on the critical rank, the non-NCCL GPU time (kernels, memcpys, memsets) is "
        f"{ms(t2[NON_NCCL])} per step on {n} GPUs against {ms(t1[NON_NCCL])} on one ({signed_ms(total)}, "
        f"{signed_pct(total, t1[NON_NCCL])}); by family {parts}"
    )
    if total > 0 and grow[top] > 0:
        text += f"; the largest contributor is {top}, {pct(100.0 * grow[top] / total)} of the growth"
    more = [f for f in ranked if k2.at[f, "kernels_per_step"] > k1.at[f, "kernels_per_step"] and grow[f] > 0]
    if more:
        text += "; " + ", ".join(
            f"{f} runs {fmt_number(k2.at[f, 'kernels_per_step'])} kernels per step against "
            f"{fmt_number(k1.at[f, 'kernels_per_step'])}"
            for f in more
        )
        text += " on one GPU (part of that growth is more kernels, not slower ones)"
    mem, gemm = _slowdown(c1, c2, MEMORY_BOUND_GROUPS), _slowdown(c1, c2, [GEMM])
    if total > 0 and pd.notna(mem) and pd.notna(gemm):
        mixed = [
            f for f in MEMORY_BOUND_GROUPS if k2.at[f, "kernels_per_step"] != k1.at[f, "kernels_per_step"]
        ]
        text += (
            f". The mean time per kernel changes by {signed_pct(gemm, 100.0)} for GEMMs and by "
            f"{signed_pct(mem, 100.0)} for the memory-bound kernels ({', '.join(MEMORY_BOUND_GROUPS)}; "
            "families weighted by their 1-GPU time"
            + (f"; the mean of {' and '.join(mixed)} includes its extra kernels" if mixed else "")
            + ")"
        )
        text += (
            ": the memory-bound kernels slowing more points at HBM bandwidth shared with the NCCL kernels "
            "running beside them"
            if mem > gemm
            else ": the compute-bound GEMMs slowing more points at the SMs (and caches) the NCCL kernels hold "
            "beside them rather than at HBM bandwidth shared with NCCL"
        )
    s.p(text + ".")
    if limited:
        _limited_table(s, label, one, ref, limited, fams, t1, total)
    return {"family": top} if grow[top] > 0 else {}


def tag(r: RunData) -> str:
    """ "2 channels, high priority" (NCCL's) from the run's config."""
    c = r.config
    return (
        f"{int(c['nccl_channels'])} channels"
        + (", high priority" if c.get("nccl_high_priority") else "")
        + (f", min {int(c['nccl_min_ctas'])} CTAs" if c.get("nccl_min_ctas") else "")
    )


def _limited_table(s: Section, label, one, ref, limited, fams, t1, total) -> None:
    """The family growth of the channel-limited runs against the 1-GPU run, beside stock's."""
    runs = [ref, *limited]
    tot = {r.name: _totals(fams[r.name][0]) for r in runs}
    order = [f for f in GROUPS if f != NCCL_GROUP and any(t[f] > 0 for t in [t1, *tot.values()])]
    order += [NON_NCCL, NCCL_GROUP]
    rows = []
    for f in order:
        row = {"family": f, "1 GPU": ms(t1[f])}
        for r in runs:
            name = "stock" if r is ref else tag(r)
            d = tot[r.name][f] - t1[f]
            row[name] = ms(tot[r.name][f])
            row[f"{name} vs 1 GPU"] = f"{signed_ms(d)} ({signed_pct(d, t1[f])})"
        rows.append(row)
    s.table(
        pd.DataFrame(rows),
        f"{label}: the same with NCCL held to fewer channels ({', '.join(r.name for r in limited)})",
    )
    said = []
    for r in limited:
        g = tot[r.name][NON_NCCL] - t1[NON_NCCL]
        than = (
            "as stock's"
            if g == total
            else f"{ms(abs(total - g))} {'less' if g < total else 'more'} than stock's {signed_ms(total)}"
        )
        said.append(f"with {tag(r)} the change is {signed_ms(g)} ({signed_pct(g, t1[NON_NCCL])}), {than}")
    if all(tot[r.name][NON_NCCL] - t1[NON_NCCL] < total for r in limited):
        said[-1] += (
            ": NCCL held to fewer channels (CTAs) shrinks the compute kernels' slowdown"
            + (
                ", but does not remove it"
                if all(tot[r.name][NON_NCCL] > t1[NON_NCCL] for r in limited)
                else ""
            )
            + (
                "; these runs also give NCCL high-priority streams"
                if any(r.config.get("nccl_high_priority") for r in limited)
                else ""
            )
        )
    s.p(
        f"{label}: the non-NCCL GPU time per step on the critical rank against one GPU: "
        + "; ".join(said)
        + "."
    )


def gemm_waves(run) -> str:
    """A sentence on the run's GEMMs beside NCCL, like for like (``kernel_families.gemm_contention``), or "" when no GEMM
    ran both beside NCCL and alone often enough to compare."""
    row = gemm_contention(getattr(run.analysis, "contention", None))
    if row is None or not row["baseline_ns"] > 0:
        return ""
    text = (
        f"the GEMMs of {run.name} that ran beside an NCCL kernel took {pct(row['slowdown_pct'])} longer than the "
        f"same GEMMs alone (like for like, {int(row['n_overlapped'])} instances of {int(row['names'])} kernel names; "
        f"median ratio {row['median_ratio']:.2f}×)."
    )
    if row["median_ratio"] >= WAVE_RATIO:
        text += (
            " A ratio near 2 is the signature of waves: cuBLAS's Hopper GEMMs are persistent (one CTA per SM), "
            "so the SMs an NCCL kernel holds push their last CTAs into a second wave. `--gemm-sm-carveout N` "
            "with `--nccl-channels N` (harness, cuBLASLt's SM-count target) sizes the GEMMs to the SMs NCCL "
            "leaves free."
        )
    return text


def q13_where_lost(runs) -> Section | None:
    """The section, None when no campaign set has both profiled runs."""
    found: list[tuple[str, RunData, RunData, list[RunData], dict[str, float], dict[str, float]]] = []
    for label, one, ref, limited in pairs(runs):
        a, b = critical_medians(one), critical_medians(ref)
        if a is not None and b is not None:
            found.append((label, one, ref, limited, a, b))
    if not found:
        return None
    s = Section("losses", "Where the multi-GPU step loses its time against one GPU")
    s.p(
        "Critical path of the profiled 1-GPU run and of the profiled stock torch_ddp run of each campaign set "
        "(per step, the parts of the rank whose step ends last, adding up to its step span; medians over the "
        "profiled steps, which need not add up to the median span). More compute on N GPUs is compute kernels "
        "slowed by the NCCL kernels running beside them (or extra copy kernels); host is the GPU idle because "
        "the host had not launched the next work yet. Which compute grows: the GPU time per step of each kernel "
        "family (by kernel name; memcpy and memset as copy) on each step's critical rank, summed over the "
        "profiled steps and divided by their number (so the families add up to the row 'all but NCCL'; a sum "
        "of kernel durations, equal to the compute part where kernels do not run at once, plus the GEMM time "
        "slowed beside an NCCL kernel waiting for a late peer, which the critical path counts as wait), for the "
        "stock run "
        "and for the set's runs that differ from it only in an NCCL channel limit."
    )
    for label, one, ref, limited, a, b in found:
        rows = [
            {
                "part": name,
                "1 GPU": ms(a[col]),
                f"{ref.world_size} GPUs": ms(b[col]),
                "difference": signed_ms(b[col] - a[col]),
            }
            for col, name in PARTS
        ]
        s.table(
            pd.DataFrame(rows),
            f"{label}: {ref.model} {ref.dtype}, critical path of {one.name} and {ref.name}",
        )
        diffs = {name: b[col] - a[col] for col, name in PARTS[1:]}
        biggest = max(diffs, key=lambda k: diffs[k])
        clause = (
            f"{label} ({ref.dtype}): the {ref.world_size}-GPU step span is {ms(b['span_ns'])} against "
            f"{ms(a['span_ns'])} on one GPU; by part, "
            + ", ".join(f"{name} {signed_ms(d)}" for name, d in diffs.items())
            + f"; the largest growth is {biggest}"
        )
        drop = min(diffs, key=lambda k: diffs[k])
        shorter = b["span_ns"] < a["span_ns"] and diffs[drop] < 0
        if shorter:  # a shorter span needs its reason beside the growth
            clause += (
                f"; the span is {ms(a['span_ns'] - b['span_ns'])} shorter on {ref.world_size} GPUs because "
                f"{drop} drops by {ms(-diffs[drop])}, more than {biggest} grows"
            )
        s.p(clause + ".")
        fams = {r.name: f for r in (one, ref, *limited) if (f := run_families(r)) is not None}
        grown = (
            _family_table(s, label, one, ref, [r for r in limited if r.name in fams], fams)
            if one.name in fams and ref.name in fams
            else {}
        )
        waves = gemm_waves(ref)
        if waves:
            s.p(f"{label} ({ref.dtype}): {waves}")
        s.add_summary(
            TOPIC_LOSSES,
            set=label,
            dtype=ref.dtype,
            span_ns=b["span_ns"] - a["span_ns"],
            diffs=diffs,
            biggest=biggest,
            drop=drop if shorter else "",
            **grown,
        )
    return s
