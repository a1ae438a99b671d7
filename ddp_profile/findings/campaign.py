"""Findings from the campaign folder (``traces/campaign/<set>/<run>/``): sharding's memory against its time,
and how the harness's levers compare with stock PyTorch DDP on one machine, un-profiled and profiled.

Every run there was timed twice without nsys (CUDA-event medians, folded into the run JSON as
``unprofiled_step_ms_median`` by ``python -m ddp_profile.harness.timings``) beside its profiled run, on the
same host in the same campaign, so these sections rank by un-profiled time and state the profiler's cost.
Which time ranks a set is :func:`ddp_profile.report.measures.ranking_basis`, the rule the comparison pages
use too (a set where some run lacks the un-profiled median is ranked by trace time, on the pages and here).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ddp_profile.findings.text import (
    TOPIC_CAMPAIGN_BEST,
    TOPIC_CAMPAIGN_REC,
    Section,
    ms,
    pct,
    signed_pct_value,
)
from ddp_profile.findings.timing import workload_key, workload_short
from ddp_profile.report import measures

GIB = float(1 << 30)
SET_TITLES = {
    "A": "XL fp32, batch 4×256 per GPU",
    "B": "XL bf16 autocast, batch 16×256 per GPU",
    "C": "XL fp32, batch 4×256 per GPU, 1 and 4 GPUs",
    "D": "XL fp32, batch 4×256 per GPU",
}


def campaign_sets(runs) -> dict[str, list]:
    """{"A": [RunData...], "B": [...]} of the campaign runs, by the set folder they sit in. A folder whose
    multi-GPU runs have several world sizes becomes one set per size, each with the folder's 1-GPU run:
    ``"C, 2 GPUs"``, ``"C, 4 GPUs"`` (a 4-GPU run is never ranked against a 2-GPU reference)."""
    folders: dict[str, list] = {}
    for r in runs:
        if r.set == "campaign":
            folders.setdefault(r.folder.parent.name, []).append(r)
    out: dict[str, list] = {}
    for name, rs in folders.items():
        sizes = sorted({r.world_size for r in rs if r.world_size > 1})
        if len(sizes) <= 1:
            out[name] = rs
            continue
        for n in sizes:
            out[f"{name}, {n} GPUs"] = [r for r in rs if r.world_size in (1, n)]
    return out


def set_folder(name: str) -> str:
    """The campaign folder of a set name from :func:`campaign_sets` (``"C, 4 GPUs"`` -> ``"C"``)."""
    return name.split(",", 1)[0]


def set_label(name: str, start: bool = False) -> str:
    """How the findings name a campaign set: "campaign set A" (``start``: "Campaign set A"), never "set A",
    which names a top-level set of traces/ (sections 1–8)."""
    return f"{'C' if start else 'c'}ampaign set {name}"


def short_label(name: str) -> str:
    """A set name in a list: ``"A"``, ``"C, 4 GPUs"`` -> ``"C (4 GPUs)"`` (no comma inside one item)."""
    folder = set_folder(name)
    return folder + (f" ({name[len(folder) :].lstrip(', ')})" if name != folder else "")


def set_title(name: str) -> str:
    folder = set_folder(name)
    return SET_TITLES.get(folder, folder) + name[len(folder) :]


def unprofiled_ns(r) -> float:
    return measures.unprofiled_ns(r.meta)


def profiled_ns(r) -> float:
    """The step time the trace measures: median over ranks × steps of step_ns (the GPU window)."""
    return r.v("step_ns")


def repeats_text(r) -> str:
    reps = r.meta.get("unprofiled_repeat_medians_ms") or []
    return " / ".join(f"{x:.1f}" for x in reps if isinstance(x, (int, float)))


def _max_gib(r, column: str) -> float:
    """The run's largest per-rank value of a memory column (measures.MEMORY_KEYS), GiB."""
    return measures.peak_bytes(r.meta, column) / GIB


def exposed_by_kind(r) -> dict[str, float]:
    """Median over (rank, step) of exposed NCCL time per collective kind (comm_kinds), ns."""
    ck = getattr(r.analysis, "comm_kinds", None)
    if ck is None or not len(ck):
        return {}
    g = ck.groupby("collective", observed=True)["exposed_comm_ns"]
    return {str(k): float(v) for k, v in g.median().items()}


def _is_reference(r) -> bool:
    c = r.config
    return (
        r.strategy == "torch_ddp"
        and not c.get("shard_optimizer")
        and not c.get("nccl_channels")
        and not c.get("nccl_high_priority")
        and not c.get("grad_views")
        and not c.get("ddp_comm_hook")
        and not c.get("nccl_min_ctas")
    )


def stock_reference(rs: list):
    refs = [r for r in rs if _is_reference(r) and r.world_size > 1]
    return refs[0] if refs else None


def _one_gpu(rs: list):
    ones = [r for r in rs if r.world_size == 1]
    return ones[0] if ones else None


def q9_sharding(sets: dict, page_for, machines: dict[str, str]) -> Section:
    s = Section("sharding", "Sharding: memory saved vs time paid")
    s.p(
        "Sharded runs against stock torch_ddp of the same campaign set (one folder of traces/campaign/); memory is the peak "
        "over ranks of torch.cuda.max_memory_allocated / max_memory_reserved after set-up, optimizer state is "
        "the bytes of this rank's optimizer tensors; step times are un-profiled CUDA-event medians."
    )
    for name, rs in sorted(sets.items()):
        ref = stock_reference(rs)
        sharded = [r for r in rs if r.config.get("shard_optimizer") or r.strategy == "fsdp"]
        if ref is None or not sharded:
            continue
        rows = []
        for r in [ref, *sharded]:
            kinds = exposed_by_kind(r)
            rows.append(
                {
                    "run": r.name,
                    "step (un-profiled)": ms(unprofiled_ns(r)),
                    "vs torch_ddp": pct(100.0 * (unprofiled_ns(r) / unprofiled_ns(ref) - 1)),
                    "peak allocated GiB": round(_max_gib(r, "peak_allocated_bytes"), 2),
                    "peak reserved GiB": round(_max_gib(r, "peak_reserved_bytes"), 2),
                    "optimizer state GiB/GPU": round(_max_gib(r, "optimizer_state_bytes"), 2),
                    **{f"exposed {k}": ms(v) for k, v in sorted(kinds.items())},
                    "report page": page_for(r),
                }
            )
        s.p(f"{set_label(name, True)} ran on {machines.get(name, 'an unrecorded machine')}.")
        table = pd.DataFrame(rows).fillna("–")  # runs expose different collective kinds: link column last
        s.table(
            table[[c for c in table.columns if c != "report page"] + ["report page"]],
            f"{set_label(name, True)} ({set_title(name)})",
        )
        for r in sharded:
            d_opt = _max_gib(ref, "optimizer_state_bytes") - _max_gib(r, "optimizer_state_bytes")
            d_mem = _max_gib(ref, "peak_allocated_bytes") - _max_gib(r, "peak_allocated_bytes")
            dt = unprofiled_ns(r) - unprofiled_ns(ref)
            kinds = exposed_by_kind(r)
            param = {k: v for k, v in kinds.items() if k in ("AllGather", "Broadcast")}
            why = (
                ", ".join(f"{ms(v)} of exposed {k}" for k, v in param.items()) + " per step (profiled)"
                if param
                else "no parameter collective exposed"
            )
            s.p(
                f"{set_label(name, True)}: {r.name} holds {d_opt:.2f} GiB {'less' if d_opt >= 0 else 'more'} optimizer state "
                f"and peaks {abs(d_mem):.2f} GiB {'lower' if d_mem >= 0 else 'higher'} in allocated memory per GPU "
                f"than {ref.name}, and its step is {ms(abs(dt))} {'slower' if dt >= 0 else 'faster'} "
                f"({pct(100.0 * dt / unprofiled_ns(ref))}): {why}."
            )
    return s


def rank_time(rs: list):
    """(basis, time): the step time (ns) a campaign set's runs are ranked by, :func:`measures.rank_ns` under
    the set's :func:`measures.ranking_basis` (un-profiled when every run of the set has it), as on its
    comparison page."""
    basis = measures.ranking_basis(r.meta for r in rs)

    def t(r) -> float:
        return measures.rank_ns(r.meta, profiled_ns(r), basis)

    return basis, t


def q10_beat_ddp(sets: dict, page_for, machines: dict[str, str]) -> Section:
    s = Section("beat-ddp", "How to beat PyTorch DDP on each machine")
    s.p(
        "Every configuration ran twice without nsys and once under nsys in one campaign; "
        "stock torch_ddp (25 MiB buckets, NCCL defaults) is the untouched reference. Ratio and efficiency use "
        "un-profiled medians; 'compute' is the time compute kernels covered per step (|C∩W|: it grows when NCCL "
        "takes SMs and memory bandwidth from them) and 'exposed comm' is NCCL time not hidden by compute, both "
        "medians over ranks × steps of the profiled trace."
    )
    for name, rs in sorted(sets.items()):
        ref, one = stock_reference(rs), _one_gpu(rs)
        # the basis is the whole campaign folder's (all its world sizes), as its comparison pages use
        basis, t = rank_time([r for k, v in sets.items() if set_folder(k) == set_folder(name) for r in v])
        multi = [r for r in rs if r.world_size > 1 and np.isfinite(t(r))]
        if ref is None or not multi:
            continue
        n_gpus = max(r.world_size for r in multi)
        s.p(f"{set_label(name, True)} ran on {machines.get(name, 'an unrecorded machine')}.")
        rows = []
        for r in sorted(multi, key=t):
            over = r.meta.get("profiler_overhead_pct")
            rows.append(
                {
                    "run": r.name,
                    "un-profiled step": ms(unprofiled_ns(r)),
                    "95 % interval": interval_text(r),
                    "repeats (ms)": repeats_text(r),
                    "vs stock torch_ddp": f"{t(r) / t(ref):.3f}×",
                    f"{n_gpus}-GPU efficiency": pct(100.0 * t(one) / t(r)) if one else "–",
                    "profiled step (trace)": ms(profiled_ns(r)),
                    "profiler overhead": pct(over) if isinstance(over, (int, float)) else "–",
                    "compute": ms(r.v("compute_ns")),
                    "exposed comm": ms(r.v("exposed_comm_ns")),
                    "report page": page_for(r),
                }
            )
        s.table(pd.DataFrame(rows), f"{set_label(name, True)} ({set_title(name)}), fastest first")
        ranked = sorted(multi, key=t)
        best = ranked[0]
        ratio = t(best) / t(ref)
        eff = 100.0 * t(one) / t(best) if one else math.nan
        ahead = _against(best, ranked[1], basis) if len(ranked) > 1 else ("", True)
        s.p(
            f"{set_label(name, True)}: the {'fastest configuration' if ahead[1] else 'lowest median'} is "
            f"{best.name} at {ms(t(best))} per step, {ratio:.3f}× stock torch_ddp ({ms(t(ref))})"
            + (f" and {pct(eff)} {n_gpus}-GPU efficiency against the 1-GPU run's {ms(t(one))}" if one else "")
            + (
                " (ranked by the profiled trace time: not every run of this set was timed without nsys)"
                if basis == measures.TRACE
                else ""
            )
            + ". "
            + (f"Against the runner-up, {ranked[1].name}, it is {ahead[0]}. " if len(ranked) > 1 else "")
            + (f"Against stock torch_ddp it is {_against(best, ref, basis)[0]}. " if best is not ref else "")
            + _one_gpu_note(one, basis)
            + _lever_evidence(ref, best, t, one, multi)
        )
        s.p(_ranking_sentence(name, sorted(multi, key=t), basis))
        others = {n: o for n, o in sets.items() if n != name and set_folder(n) != set_folder(name)}
        text, outcome = _prediction(name, ref, rs, others)
        s.p(text)
        vs_ref = _against(best, ref, basis)
        how = (
            "stock"
            if best is ref
            else "faster"
            if vs_ref[1]
            else "within noise"
            if vs_ref[0].startswith(measures.WITHIN_NOISE)
            else "spread unknown"
        )
        if len(multi) > 1:  # a set that profiled stock alone compares nothing
            s.add_summary(
                TOPIC_CAMPAIGN_BEST,
                set=short_label(name),
                run=best.name,
                ratio=f"{ratio:.3f}×",
                trace_time=basis == measures.TRACE,
                how=how,
                workload=workload_short(workload_key(ref)),
            )
        s.add_summary(
            TOPIC_CAMPAIGN_REC,
            set=short_label(name),
            outcome=outcome,
            workload=workload_short(workload_key(ref)),
        )
    return s


def interval_text(r) -> str:
    """The un-profiled median's 95 % interval, or 'not recorded' (run JSONs older than the interleaved-repeats protocol)."""
    lo, hi = measures.ci_ns(r.meta)
    return f"{ms(lo)[:-3]}–{ms(hi)}" if math.isfinite(lo) and math.isfinite(hi) else "not recorded"


def _against(a, b, basis: str) -> tuple[str, bool]:
    """(clause, established): ``a`` against ``b`` by :func:`measures.versus` on un-profiled medians and their
    intervals — 'faster than b (95 % intervals ... do not overlap)', 'within noise of b (... overlap)', or by
    the medians with the spread unknown (no interval, or a set ranked by trace time)."""
    if basis != measures.UNPROFILED:
        return "compared by trace time only; spread unknown", False
    word, established = measures.versus(
        unprofiled_ns(a), measures.ci_ns(a.meta), unprofiled_ns(b), measures.ci_ns(b.meta)
    )
    both = f"95 % intervals {interval_text(a)} and {interval_text(b)}"
    if established:
        return f"{word} ({both} do not overlap)", True
    if word == measures.WITHIN_NOISE:
        return f"within noise ({both} overlap)", False
    return (
        f"{word} by the medians; spread unknown (no confidence interval recorded, "
        f"{int(measures.unprofiled_repeats(a.meta)) if math.isfinite(measures.unprofiled_repeats(a.meta)) else '?'} "
        "repeats)"
    ), False


def _one_gpu_note(one, basis: str) -> str:
    """What nsys did to the 1-GPU reference's step (its run JSON's ``profiler_overhead_pct``), and which of its
    times the efficiency uses; "" without a 1-GPU run or an overhead record."""
    over = one.meta.get("profiler_overhead_pct") if one is not None else None
    if not isinstance(over, (int, float)):
        return ""
    text = (
        f"The 1-GPU run's profiled step is {ms(profiled_ns(one))} against {ms(unprofiled_ns(one))} without "
        f"nsys (profiler overhead {pct(over)}), "
    )
    if basis == measures.UNPROFILED:
        return (
            text + "so its profiled step is inflated by nsys and the efficiency uses the un-profiled time. "
        )
    return text + "and the efficiency here is on profiled times, so it carries that inflation. "


def _lever_evidence(ref, best, t, one=None, multi=()) -> str:
    """Why the best run is what it is; ``t`` is the set's step time (un-profiled, or the trace's where not every
    run was timed without nsys)."""
    if best is ref:
        text = (
            "No lever beat the reference in this set."
            if len(multi) > 1
            else "Stock torch_ddp is the only multi-GPU configuration profiled in this set."
        )
        if one is not None:
            gap = t(ref) - t(one)
            text += (
                f" The trace shows where its {ms(gap)} over one GPU goes: compute covers {ms(ref.v('compute_ns'))} "
                f"per step against {ms(one.v('compute_ns'))} on one GPU (kernels slowed while NCCL shares the "
                f"GPU), and {ms(ref.v('exposed_comm_ns'))} of communication is exposed."
            )
        others = [r for r in multi if r is not ref and r.config.get("nccl_channels")]
        if others:
            worst = max(others, key=lambda r: r.v("exposed_comm_ns"))
            text += (
                f" Fewer NCCL channels do not pay here: {worst.name} exposes {ms(worst.v('exposed_comm_ns'))} "
                f"of communication per step (compute {ms(worst.v('compute_ns'))}), so the all-reduces no "
                "longer finish under the backward pass."
            )
        return text
    c_ref, c_best = ref.v("compute_ns"), best.v("compute_ns")
    exp_ref, exp_best = ref.v("exposed_comm_ns"), best.v("exposed_comm_ns")
    return (
        f"In the traces, compute covers {ms(c_best)} per step against {ms(c_ref)} for the reference "
        f"({'less' if c_best < c_ref else 'more'} time lost to sharing the GPU with NCCL), while exposed "
        f"communication goes from {ms(exp_ref)} to {ms(exp_best)}."
    )


def _ranking_sentence(name: str, ranked: list, basis: str = measures.UNPROFILED) -> str:
    """``ranked``: the set's multi-GPU runs, fastest first by its ranking time (``basis``)."""
    if basis != measures.UNPROFILED:
        return (
            f"{set_label(name, True)}: not every configuration was timed without nsys, so it is ranked by trace time and "
            "how nsys changes the order is not known."
        )
    unprof = [r.name for r in ranked]
    prof = [r.name for r in sorted(ranked, key=profiled_ns)]
    span = measures.overhead_span(r.meta.get("profiler_overhead_pct") for r in ranked) or "not recorded"
    if unprof == prof:
        return (
            f"{set_label(name, True)}: profiler overhead {span} across configurations; the ranking under nsys is the "
            "same as without it."
        )
    return (
        f"{set_label(name, True)}: profiler overhead {span} across configurations, and the ranking under nsys differs "
        f"from the un-profiled one ({measures.places_changed(unprof, prof)} of {len(unprof)} configurations "
        "change place): rank by un-profiled time."
    )


PREDICTION_OUTCOMES = ("none made", "stock", "not run", "run elsewhere", "inside", "outside")
"""What became of a campaign set's recommendation (:func:`_prediction`'s second value): none made, the stock
configuration itself, run by no set, run only by another set of the same workload, run in the set with the
measured step inside / outside the predicted range."""


def _prediction_sentence(name: str, ref, rs: list, others: dict | None = None) -> str:
    """The recommendation from ``ref``'s trace against the set's run of exactly that configuration; without
    one, the sets of ``others`` ({name: runs}) that ran it at the same GPU count on the same GPU are named."""
    return _prediction(name, ref, rs, others)[0]


def _prediction(name: str, ref, rs: list, others: dict | None = None) -> tuple[str, str]:
    """(:func:`_prediction_sentence`, its outcome as one of :data:`PREDICTION_OUTCOMES`), from the same values."""
    rec = getattr(ref.analysis, "recommendation", None)
    if rec is None or not len(rec):
        return (
            f"{set_label(name, True)}: the analysis of {ref.name} makes no recommendation (see its report "
            "page).",
            "none made",
        )
    head = rec.iloc[0]
    flags = str(head["flags"])
    if config_matches(ref.config, head):  # the stock run's own configuration: nothing to run
        return (
            f"{set_label(name, True)}: from the stock run's trace alone, `ddp-profile analyze --section "
            f"recommendation` recommends keeping the stock configuration (`{flags}`): neither a larger "
            "bucket cap nor the NCCL-channel lever is predicted to gain (see the stock run's page for the "
            "figures weighed)."
        ), "stock"
    match = [r for r in rs if r is not ref and config_matches(r.config, head)]
    pred, upper = float(head["predicted_step_ns"]), float(head["upper_gain_ns"])
    text = (
        f"{set_label(name, True)}: from the stock run's trace alone, `ddp-profile analyze --section "
        f"recommendation` recommends `{flags}` and predicts {ms(pred)} per profiled step from the bucket model"
        + (
            f", down to {ms(pred - upper)} if the lever removed all compute lost to contention"
            if np.isfinite(upper)
            else ""
        )
        + ". "
    )
    if not match:
        elsewhere = [
            n
            for n, o in (others or {}).items()
            if any(same_workload(r, ref) and config_matches(r.config, head) for r in o)
        ]
        return text + (
            "This set has no run of exactly that configuration"
            + (
                f"; {' and '.join(map(set_label, elsewhere))} ran it beside its own stock run, on the same GPU type "
                "and workload (see there)."
                if elsewhere
                else "."
            )
        ), "run elsewhere" if elsewhere else "not run"
    m = match[0]
    err = 100.0 * (profiled_ns(m) - pred) / profiled_ns(m)
    within = np.isfinite(upper) and pred - upper <= profiled_ns(m) <= pred
    inside = "falls inside" if within else "falls outside"
    return text + (
        f"Measured: {ms(profiled_ns(m))} profiled ({ms(unprofiled_ns(m))} un-profiled); the bucket-model "
        f"prediction is off by {signed_pct_value(err)} of the measured step, and the measurement "
        f"{inside} the predicted range."
    ), "inside" if within else "outside"


WORKLOAD_KEYS = ("gpu_name", "world_size")
WORKLOAD_CONFIG = ("model", "dtype", "batch", "seq_len", "optimizer", "tf32")
"""Run-JSON facts (top level, and in its ``config``) two runs must share for one to stand in for the other."""


def same_workload(a, b) -> bool:
    """Same GPU type and count, model, dtype, per-GPU batch, sequence length and optimizer."""
    return all(a.meta.get(k) == b.meta.get(k) for k in WORKLOAD_KEYS) and all(
        (a.config or {}).get(k) == (b.config or {}).get(k) for k in WORKLOAD_CONFIG
    )


OTHER_LEVERS = (
    "shard_optimizer",
    "grad_views",
    "overlap_optimizer",
    "grad_reduce_dtype",
    "first_bucket_mb",
    "ddp_comm_hook",
    "nccl_min_ctas",
    "peer_copy_allreduce",
)
"""Harness levers the recommender never sets: a run with any of them on is not the recommended one."""


def config_matches(config: dict, rec) -> bool:
    """Whether a run's harness config is the configuration a recommendation row names, field by field
    (``analysis.recommend.CONFIG_FIELDS``: strategy, bucket cap, NCCL channels and priority), with none of
    the :data:`OTHER_LEVERS` on."""
    mb = rec.get("bucket_mb")
    return (
        config.get("strategy") == rec.get("strategy")
        and (mb is None or pd.isna(mb) or float(config.get("bucket_mb") or 0) == float(mb))
        and int(config.get("nccl_channels") or 0) == int(rec.get("nccl_channels") or 0)
        and bool(config.get("nccl_high_priority")) == bool(rec.get("nccl_high_priority"))
        and not any(config.get(k) for k in OTHER_LEVERS)
    )
