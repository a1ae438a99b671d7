"""The verdict: the largest part of the step that a change can remove, what to change, and how much it gains.

From the critical path (``critical_path``: per step, the parts of the rank that ends it, adding up to
``span_ns``, the step's span: end of the rank's previous step to the end of this one), each step's removable
time is split three ways::

    strag  = min(straggler_lead_ns, wait_ns + host_ns + compute_ns)  when one rank is the straggler in at
             least STRAGGLER_STEPS_PCT % of the steps and this step's straggler is that rank, else 0
             (taken from the wait first, then the host, then compute: when the straggler is itself the
             critical rank its lead is in its own host or GPU work, not in a wait)
    comm   = exposed_transfer_ns + wait_ns − min(strag, wait_ns)
    host   = host_ns − min(strag − min(strag, wait_ns), host_ns)

    bound_by     = the largest of communication (comm), host, straggler (strag) by median over steps,
                   among those whose median is at least BOUND_SHARE_PCT % of the median step; else compute
    span_ns      = the median critical-path step span (the denominator of every share here)
    removable_ns = that median;  share_pct = 100 · removable_ns / span_ns
                   (compute: removable_ns 0, share_pct = 100 · median compute_ns / median span_ns)
    spread_ns    = the interquartile range (p75 − p25) of that part over steps
    rank         = the straggler rank (when one rank is the straggler in ≥ STRAGGLER_STEPS_PCT % of steps and
                   its median part is at least ADVICE_MIN_PCT % of the step), else null

``compute`` (the GPU running kernels) is not removable by a configuration change: it is the verdict when no
removable part reaches the share, and then no communication fix follows it.

Advice (:func:`advice`): rules grounded on measured parts, each with ``gain_upper_ns`` (never more than the
critical-path part it removes), ``expected_gain_ns`` (the prediction for the un-profiled job from the rule's
model of the step after the change, ``gains.carry``; at most the bound), ``gain_basis`` and the spread of the
bound over steps (None where the bound is one run-level number, not measured per step: contention, the
recommendation's prediction); only rules whose bound is at least ADVICE_MIN_PCT % of the step are listed,
largest expected gain first. The verdict's what to change and gains come from the first rule of its own kind
(``CATEGORY``), moved to the head of the list, its bound capped at ``removable_ns`` (and, where the cap binds,
its spread that part's ``spread_ns``): the verdict's ``expected_gain_ns`` and ``gain_upper_ns`` are that
rule's, one number in both places. Without a rule of its kind the verdict says what to change in general and
states the removable part as its bound, with no expected gain (None).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddp_profile.analysis import gains
from ddp_profile.analysis import kernel_diff as kd
from ddp_profile.analysis.after_backward import shards
from ddp_profile.analysis.kernel_groups import WAVE_RATIO
from ddp_profile.fmt import fmt_ms

BOUND_SHARE_PCT = 5.0
"""A removable part bounds the step when its median is at least this share of the median step."""
STRAGGLER_STEPS_PCT = 75.0
"""A rank is the job's straggler when it is the step's straggler in at least this share of the steps."""
ADVICE_MIN_PCT = 1.0
"""Advice whose gain bound is below this share of the step is not listed."""
PER_RANK_RATIO = 2.0
"""``per_rank`` lists a metric when its largest per-rank median exceeds this multiple of the smallest (and,
for times, by at least ADVICE_MIN_PCT % of the median step: smaller differences are noise)."""

CATEGORY = {
    "extra_work": "straggler",
    "host_sync": "host",
    "launch_bound": "host",
    "comm_tail": "communication",
    "fsdp_allgather": "communication",
    "param_sync": "communication",
    "straggler_gpu": "straggler",
    "straggler_host": "straggler",
    "straggler": "straggler",
    "contention": "compute",
    "measured": "communication",
    "grad_copy_back": "compute",
    "optimizer_shard": "compute",
}
WITHDRAWN = {
    "contention": "on the what-if ledger's GPT-2 DDP job (4 GPUs) the advised NCCL CTA cap made the step slower, "
    "not faster: the collectives lost more than compute gained",
    "optimizer_shard": "on the what-if ledger's GPT-2 DDP job (4 GPUs) sharding the update "
    "(ZeroRedundancyOptimizer) made the step slower: the parameter broadcast after the step is exposed",
}
"""Rules no longer advised for a job of one's own (the measure stays in the analysis), with the reason: the
what-if ledger's pair showed the lever hurting. The harness's own levers for them (CTA cap with a GEMM carveout,
the sharded update gathered during backward) keep their advice on its traces, where timing sets measured them."""
COPY_BACK_MIN = 8
"""``grad_copy_back`` needs at least this many device-to-device copies after backward per step (median on the
critical rank): DDP's copy-back is one per gradient tensor, a model has many; a few copies are something else."""


def _spread(v) -> float:
    """Interquartile range over steps (p75 − p25): how much the part moves from step to step, robust to the
    one warm-up step whose span holds the program's start."""
    v = pd.Series(v, dtype=float).dropna()
    return float(v.quantile(0.75) - v.quantile(0.25)) if len(v) else 0.0


def consistent_straggler(steps_straggler: pd.Series) -> int | None:
    """The rank that is the step's straggler in ≥ STRAGGLER_STEPS_PCT % of the steps, else None."""
    s = steps_straggler.dropna()
    if s.empty:
        return None
    counts = s.astype("int64").value_counts()
    return int(counts.index[0]) if 100.0 * counts.iloc[0] / len(s) >= STRAGGLER_STEPS_PCT else None


def split_parts(crit: pd.DataFrame, per_step: pd.DataFrame) -> tuple[pd.DataFrame, int | None]:
    """(per step (crit's rows): span_ns, communication, host, straggler of the module docstring; the job's
    straggler rank or None). ``per_step``: index step, columns straggler_rank, straggler_lead_ns."""
    s = per_step.reindex(crit["step"].to_numpy())
    rank = consistent_straggler(s["straggler_rank"]) if len(s) else None
    wait, host = crit["wait_ns"].to_numpy(float), crit["host_ns"].to_numpy(float)
    compute = crit["compute_ns"].to_numpy(float)
    lead = s["straggler_lead_ns"].to_numpy(float) if len(s) else np.zeros(len(crit))
    mine = (
        (s["straggler_rank"].to_numpy(dtype=float, na_value=np.nan) == rank)
        if rank is not None
        else np.zeros(len(crit), bool)
    )
    strag = np.where(mine & ~np.isnan(lead), np.minimum(np.nan_to_num(lead), wait + host + compute), 0.0)
    from_wait = np.minimum(strag, wait)
    from_host = np.minimum(strag - from_wait, host)
    return pd.DataFrame(
        {
            "step": crit["step"].to_numpy(),
            "span_ns": crit["span_ns"].to_numpy(float),
            "communication": crit["exposed_transfer_ns"].to_numpy(float) + wait - from_wait,
            "host": host - from_host,
            "straggler": strag,
        }
    ), rank


def verdict(crit: pd.DataFrame, per_step: pd.DataFrame, rules: list[dict]) -> dict:
    """The ``verdict`` dict (keys in the module docstring, plus ``advice`` = ``rules``)."""
    out = {
        "bound_by": "compute",
        "removable_ns": 0.0,
        "what_to_change": None,
        "expected_gain_ns": 0.0,
        "gain_upper_ns": 0.0,
        "spread_ns": 0.0,
        "rank": None,
        "share_pct": 0.0,
        "advice": rules,
        "span_ns": None,
    }
    if crit is None or crit.empty:
        out["bound_by"] = None
        out["what_to_change"] = "no steps: no verdict"
        return out
    parts, rank = split_parts(crit, per_step)
    step = float(parts["span_ns"].median())
    out["span_ns"] = step
    med = {k: float(parts[k].median()) for k in ("communication", "host", "straggler")}
    passing = {k: v for k, v in med.items() if step > 0 and 100.0 * v / step >= BOUND_SHARE_PCT}
    # the straggler rank is named when its part is material (at least ADVICE_MIN_PCT % of the step)
    out["rank"] = rank if step > 0 and 100.0 * med["straggler"] / step >= ADVICE_MIN_PCT else None
    if passing:
        k = max(passing, key=lambda name: passing[name])
        out.update(
            bound_by=k, removable_ns=med[k], spread_ns=_spread(parts[k]), share_pct=100.0 * med[k] / step
        )
        mine = [r for r in rules if CATEGORY.get(r["rule"]) == k]  # advice of the verdict's own kind only
        if k == "straggler":  # the rule about the rank the verdict names before another rank's extra work
            mine = [r for r in mine if r["rule"] != "extra_work"] or mine
        if mine:
            # one number per fact: the verdict's rule, capped at the verdict's part, heads the advice list
            # with the gains the verdict states
            upper = min(float(mine[0]["gain_upper_ns"]), med[k])
            first = dict(
                mine[0],
                gain_upper_ns=upper,
                expected_gain_ns=min(float(mine[0].get("expected_gain_ns") or 0.0), upper),
            )
            if (
                float(mine[0]["gain_upper_ns"]) > med[k]
            ):  # capped: the bound is the verdict's part, and so its spread
                first["spread_ns"] = out["spread_ns"]
            out.update(
                what_to_change=first["what_to_change"],
                expected_gain_ns=first["expected_gain_ns"],
                gain_upper_ns=first["gain_upper_ns"],
            )
            out["advice"] = [first] + [r for r in rules if r is not mine[0]]
        else:
            out["what_to_change"] = _GENERIC[k].format(rank=rank)
            out["expected_gain_ns"], out["gain_upper_ns"] = None, med[k]
    else:
        out["removable_ns"] = 0.0
        out["spread_ns"] = _spread(crit["compute_ns"])
        out["share_pct"] = 100.0 * float(crit["compute_ns"].median()) / step if step > 0 else 0.0
        out["what_to_change"] = _GENERIC["compute"]
        out["expected_gain_ns"] = 0.0
        out["advice"] = [r for r in rules if CATEGORY.get(r["rule"]) != "communication"]
    return out


_GENERIC = {
    "communication": "hide or shrink the exposed communication: overlap it with backward (bucketed DDP), "
    "fewer or larger collectives, or a faster interconnect",
    "host": "keep the GPU fed: fewer host syncs in the loop, fewer launches (a step captured in a CUDA graph, "
    'e.g. torch.compile(mode="reduce-overhead")), a larger batch',
    "straggler": "find why rank {rank} arrives late at the collectives and even it out",
    "compute": "faster kernels (bf16/TF32, fused or compiled kernels) or more GPUs: the GPU is busy with "
    "kernels, and no communication or host change would pay more",
}


def _rule(
    name: str,
    text: str,
    gain: pd.Series,
    evidence: str,
    step_ns: float,
    per_step: bool = True,
    expected: tuple[float, str] | None = None,
) -> dict | None:
    """One advice rule, ``gain_upper_ns`` = the median of ``gain`` over steps. ``per_step`` False: the bound is
    built from one run-level number (not measured step by step), so it has no spread over steps: ``spread_ns``
    None. ``expected``: (expected gain, gain basis) from the rule's model (``gains.carry``), capped at the
    bound; None: the model removes the whole part, GPU time (expected = the bound)."""
    g = float(gain.median()) if len(gain.dropna()) else 0.0
    if not step_ns or 100.0 * g / step_ns < ADVICE_MIN_PCT:
        return None
    e, basis = expected if expected is not None else gains.carry(g, gains.GPU, gains.Profile(step_ns, 0.0))
    return {
        "rule": name,
        "what_to_change": text,
        "expected_gain_ns": min(float(e), g),
        "gain_upper_ns": g,
        "spread_ns": _spread(gain) if per_step else None,
        "gain_basis": basis,
        "evidence": evidence,
    }


def _sync_gain(c: pd.DataFrame, prof: gains.Profile) -> tuple[float, str]:
    """Expected gain of dropping a per-step blocking sync (``host_sync``'s model, docs' advice section). A sync
    empties the GPU's queue once a step: the host must then launch ahead again while the GPU waits, so the step
    is the GPU's own work plus that refill. Without it the host runs ahead and the step is the GPU's own work
    (compute and exposed transfer on the critical path; kernels keep their times under nsys). The refill under
    nsys is the profiler's launch cost too, so the gain is read against the un-profiled step (profiled step less
    the profiler's overhead): ``max(0, step / (1 + o) − (compute + exposed transfer))``. Without the overhead the
    GPU idle awaiting launches stays as measured under nsys, flagged (``gains.carry``)."""
    starved = float((c["host_ns"] + c["idle_ns"]).median())
    if not prof.known:
        return gains.carry(starved, gains.HOST, prof)
    own = float((c["compute_ns"] + c["exposed_transfer_ns"]).median())
    unprofiled = prof.step_ns * 100.0 / (100.0 + prof.overhead_pct)
    return max(0.0, unprofiled - own), (
        "un-profiled: the step less the profiler's overhead "
        f"({prof.overhead_pct:.1f} % of the un-profiled step, run JSON), less the GPU's own work"
    )


def _ms(ns: float) -> str:
    return fmt_ms(ns)


def straggler_example(steps: pd.DataFrame, cause: str) -> str | None:
    """``'step N: <evidence>'`` of the step whose straggler lead is the median (the lower middle) among the
    ``steps`` (one row per step, indexed by step label, ``schema.STEP_STRAGGLER_COLUMNS``) whose cause is
    ``cause`` and whose evidence is known; None without one. The one example the verdict, its rule and the
    run page quote, so they quote the same step."""
    sel = steps[
        (steps["straggler_cause"] == cause).to_numpy() & steps["straggler_evidence"].notna().to_numpy()
    ]
    if sel.empty:
        return None
    sel = sel.sort_values("straggler_lead_ns", kind="stable")
    at = (len(sel) - 1) // 2
    return f"step {int(sel.index[at])}: {sel['straggler_evidence'].iloc[at]}"


def _straggler_rule(
    crit: pd.DataFrame, per_step: pd.DataFrame, step: float, prof: gains.Profile | None = None
) -> dict | None:
    """``straggler_host``, ``straggler_gpu`` (its commonest known cause over its steps) or ``straggler`` (no
    known cause) for the job's straggler rank. Bound = its part of the critical path (:func:`split_parts`), and
    so is the expected gain: once it arrives with the first rank the step no longer waits for it, carried as a
    difference between ranks whatever the cause (docs' advice section: on the what-if ledger's host straggler,
    subtracting the next latest rank's lead, under nsys largely the profiler's own spread between hosts, and
    scaling a host cause's lead as host time each predicted a fraction of the measured gain). Evidence = its
    median step's."""
    parts, rank = split_parts(crit, per_step)
    if rank is None:
        return None
    g = per_step.reindex(crit["step"].to_numpy())
    mine = g[g["straggler_rank"].to_numpy(dtype=float, na_value=np.nan) == rank]
    causes = mine["straggler_cause"].dropna()
    causes = causes[causes != "unknown"]
    cause = causes.mode().iloc[0] if len(causes) else None
    part = pd.Series(parts["straggler"].to_numpy())
    expected = gains.carry(
        float(part.median()) if len(part) else 0.0, gains.LEAD, prof or gains.Profile(step, 0.0)
    )
    if cause is None:
        if not step or 100.0 * float(part.median()) / step < BOUND_SHARE_PCT:
            return None  # a small lead that no cause explains is not advice (alike ranks' arrival order)
        return _rule(
            "straggler",
            _GENERIC["straggler"].format(rank=rank),
            part,
            f"rank {rank} arrives last in {len(mine)} of {len(g)} steps; no cause accounts for half its lead",
            step,
            expected=expected,
        )
    example = straggler_example(mine, cause)
    evidence = (
        f"rank {rank} arrives last, cause {cause} in {len(causes[causes == cause])} of {len(g)} steps"
        + (f"; e.g. {example}" if example else "")
    )
    if cause == "gpu":
        text = (
            f"even out the GPU work: rank {rank} runs kernels its peers do not (the evidence names them: "
            "work only one rank does each step, such as a metric or an EMA update, or a data or model "
            "imbalance); move it out of the step, do it every N steps, or spread it over the ranks"
        )
    else:  # one remedy whatever the steps selected show: the evidence says which half applies
        text = (
            f"rank {rank}'s host falls behind its peers': drop its per-step host sync where the evidence names "
            "one (log every N steps, no .item() in the loop), else find what its main thread does that theirs "
            "does not (logging, data loading, rank-0-only work, a sleep or a wait)"
        )
    return _rule(f"straggler_{cause}", text, part, evidence, step, expected=expected)


def _extra_work_rule(
    extra: pd.DataFrame | None, crit: pd.DataFrame, straggler: dict | None, step: float
) -> dict | None:
    """``extra_work``: the rank whose kernels its peers do not run (``kernel_diff.every_rank``) take the most GPU
    time, median over steps, unless the straggler rule already names that work (``straggler_gpu``). Model:
    without them that rank's GPU reaches the collectives that much earlier; under a profiler that slows
    another rank's host the trace may name that rank the straggler, while without it the extra work paces
    the step. Expected = bound = the median extra time (GPU time: carried as measured)."""
    if extra is None or extra.empty or (straggler is not None and straggler["rule"] == "straggler_gpu"):
        return None
    steps = crit["step"].to_numpy()
    per = extra.pivot_table(index="step", columns="rank", values="extra_ns", aggfunc="sum").reindex(steps)
    med = per.fillna(0.0).median()
    if med.empty or not float(med.max()) > 0:
        return None
    rank = int(med.idxmax())
    mine = extra.loc[extra["rank"] == rank].sort_values("extra_ns", kind="stable")
    ex = mine.iloc[(len(mine) - 1) // 2]
    n = int((per[rank].fillna(0.0) > 0).sum())
    evidence = (
        f"rank {rank} runs kernels its peers do not in {n} of {len(steps)} steps; e.g. step {int(ex['step'])}: "
        + kd.evidence(ex["extra_kernels"], float(ex["extra_ns"]), float(ex["like_ns"]))
    )
    text = (
        f"move rank {rank}'s extra GPU work out of the step: it runs kernels its peers do not (the evidence names "
        "them: a metric, an EMA update, work only one rank does), so its collectives start later than theirs; "
        "do it every N steps, or spread it over the ranks"
    )
    gain = pd.Series(per[rank].fillna(0.0).to_numpy())
    return _rule("extra_work", text, gain, evidence, step)


def _critical_rows(c: pd.DataFrame, after: pd.DataFrame | None) -> pd.DataFrame | None:
    """The critical rank's ``after`` rows (``schema.AFTER_BACKWARD_COLUMNS``) by step, in ``c``'s order."""
    if after is None or after.empty:
        return None
    return after.set_index(["rank", "step"]).reindex(
        pd.MultiIndex.from_arrays([c["critical_rank"].to_numpy(), c.index.to_numpy()])
    )


def _captured_share(got: pd.DataFrame | None, index: pd.Index) -> pd.Series | None:
    """Per step (``index``): the share of the critical rank's launches a CUDA graph of the model's forward and
    backward would replay (``launch_bound``'s model): its compute kernels up to the last backward kernel, less
    one per gradient that DDP's reducer copies into its bucket from the gradient hooks, outside the graph
    (as many as the copies back into ``.grad`` after backward; none with bucket views, which copy neither
    way), over every GPU activity of the step. None without backward ends (no rows)."""
    if got is None or "captured_kernels" not in got or not got["step_kernels"].notna().any():
        return None
    total = pd.Series(got["step_kernels"].to_numpy(float), index=index)
    cap = pd.Series(
        got["captured_kernels"].to_numpy(float) - got["copies"].fillna(0).to_numpy(float), index=index
    )
    return (cap.clip(lower=0.0) / total.where(total > 0)).clip(upper=1.0).fillna(1.0)


def _copy_back_rule(c: pd.DataFrame, got: pd.DataFrame | None, step: float) -> dict | None:
    """``grad_copy_back`` from the critical rank's copies after backward (``c``: the critical path by step)."""
    if got is None:
        return None
    n, t = got["copies"].astype("float64"), pd.Series(got["copy_ns"].to_numpy(float), index=c.index)
    if not n.notna().any() or float(n.median()) < COPY_BACK_MIN:
        return None
    return _rule(
        "grad_copy_back",
        "if this is PyTorch DDP: DistributedDataParallel(..., gradient_as_bucket_view=True) "
        "makes each .grad a view of its all-reduce bucket, so the averaged buckets are no longer copied back "
        "into .grad after backward",
        np.minimum(t.fillna(0.0), c["compute_ns"]),
        f"{int(n.median())} device-to-device copies ({_ms(t.median())}) run after the last backward kernel "
        "each step on the critical rank: one per gradient is DDP's copy of the averaged buckets into .grad",
        step,
    )


def _optimizer_shard_rule(
    c: pd.DataFrame, got: pd.DataFrame | None, world: int, step: float, harness: bool = True
) -> dict | None:
    """``optimizer_shard`` from the critical rank's optimizer kernels after backward: every rank of a job that
    does not shard (``after_backward.shards``) runs the whole update; sharded over ``world`` ranks each runs 1/world of it, so the gain
    bound is (1 − 1/world) of their time."""  # noqa: E501
    if got is None or world < 2 or shards(got):
        return None
    n, t = (
        got["optimizer_kernels"].astype("float64"),
        pd.Series(got["optimizer_ns"].to_numpy(float), index=c.index),
    )
    if not n.notna().any() or float(n.median()) < 1:
        return None
    return _rule(
        "optimizer_shard",
        f"shard the optimizer update over the {world} ranks and hide the parameter gather "
        f"behind compute: each rank reduce-scatters each gradient, updates its 1/{world} slice of the "
        "parameter, and the slices are all-gathered while other work runs (FSDP2's fully_shard(..., "
        "reshard_after_forward=False) gathers them during the next forward"
        + (
            "; this harness's overlap --sharded-update updates each slice from its gradient hook and gathers "
            "it during backward"
            if harness
            else ""
        )
        + (
            "; on 2 GPUs its --peer-copy-allreduce moves both exchanges onto copy engines, so no NCCL kernel "
            "takes SMs beside the backward"
            if harness and world == 2
            else ""
        )
        + "); a sharded step that broadcasts after the optimizer instead (plain ZeroRedundancyOptimizer) "
        "exposes that broadcast",
        np.minimum(t.fillna(0.0) * (1.0 - 1.0 / world), c["compute_ns"]),
        f"{int(n.median())} optimizer kernels ({_ms(t.median())}) run after the last backward kernel each "
        f"step on the critical rank, and every one of the {world} ranks runs the whole update",
        step,
    )


def advice(
    crit: pd.DataFrame,
    steps: pd.DataFrame,
    per_step: pd.DataFrame,
    sync_per_step: pd.Series,
    contention_ns: float,
    recommendation: pd.DataFrame | None,
    gemm_ratio: float = float("nan"),
    after_backward: pd.DataFrame | None = None,
    overhead_pct: float = float("nan"),
    harness: bool = True,
    last_grad_ns: pd.Series | None = None,
    extra_work: pd.DataFrame | None = None,
    drains_per_step: pd.Series | None = None,
) -> list[dict]:
    """The advice rules, largest expected gain first. ``steps``: the step table (critical rank's rows are used);
    ``sync_per_step``: per step, the host-wait call time on the critical rank's main thread within its span;
    ``contention_ns``: compute lost to contention per rank-step (``contention.contention_per_step_ns``);
    ``gemm_ratio``: the GEMMs' median time beside NCCL over alone, like for like
    (``kernel_families.gemm_wave_ratio``): from ``kernel_groups.WAVE_RATIO`` the contention advice is the
    GEMM SM carveout, since fewer NCCL channels alone still leave the GEMMs a second wave. ``after_backward``:
    ``schema.AFTER_BACKWARD_COLUMNS`` (``after_backward.after_backward``): from COPY_BACK_MIN copies a step on
    the critical rank, the ``grad_copy_back`` rule, gain bound = their time; with optimizer kernels after
    backward and no sharding collective in the job, the ``optimizer_shard`` rule, gain bound = (1 − 1/N) of
    their time over N ranks. ``overhead_pct``: the profiler's overhead on this job (``gains.overhead_pct``,
    NaN when unknown), for the host rules' expected gains; ``harness``: the trace is the harness's (its
    options may be named); ``last_grad_ns``: per step, the critical rank's last gradient collective's
    duration (what bucketing leaves after backward); ``extra_work``: ``kernel_diff.every_rank`` (the
    ``extra_work`` rule); ``drains_per_step``: per step, the calls on the critical rank's main thread that empty
    the GPU's queue (stream or device syncs, copies to the host): in more than half the steps, ``host_sync``'s
    model is the queue's refill (:func:`_sync_gain`)."""
    if crit is None or crit.empty:
        return []
    step = float(crit["span_ns"].median())
    c = crit.set_index("step")
    prof = gains.Profile(step, float(c["host_ns"].median()), overhead_pct)
    row = (
        steps.set_index(["rank", "step"]).reindex(
            pd.MultiIndex.from_arrays([crit["critical_rank"].to_numpy(), crit["step"].to_numpy()])
        )
        if len(steps)
        else None
    )
    comm = c["exposed_transfer_ns"] + c["wait_ns"]
    host = c["host_ns"]
    out: list[dict | None] = []
    sync = sync_per_step.reindex(c.index).fillna(0.0)
    if row is not None:

        def col(name):
            return (
                pd.Series(row[name].to_numpy(float), index=c.index)
                if name in row
                else pd.Series(np.zeros(len(c)), index=c.index)
            )

        tail = np.minimum(col("job_comm_tail_ns").fillna(col("comm_tail_ns")).fillna(0.0), comm)
        last = (
            last_grad_ns.reindex(c.index).fillna(0.0)
            if last_grad_ns is not None
            else pd.Series(0.0, index=c.index)
        )
        left = float(np.maximum(0.0, tail - last).median())  # the last bucket still runs after backward
        out.append(
            _rule(
                "comm_tail",
                "overlap the gradient collectives with backward and shrink what is left "
                "after it: bucketed all-reduce during backward, a smaller last bucket or bucket_cap_mb",
                tail,
                f"gradient collectives run {_ms(tail.median())} past the last backward kernel; "
                f"the last one takes {_ms(last.median())}",
                step,
                expected=gains.carry(left, gains.GPU, prof),
            )
        )
        ag = np.minimum(col("exposed_allgather_ns").fillna(0.0), comm)
        out.append(
            _rule(
                "fsdp_allgather",
                "prefetch FSDP's parameter AllGather (forward/backward prefetch) or "
                "reshard_after_forward=False",
                ag,
                f"exposed AllGather before backward ends {_ms(ag.median())} per step",
                step,
            )
        )
        ps = np.minimum(col("exposed_param_sync_ns").fillna(0.0), comm)
        out.append(
            _rule(
                "param_sync",
                "overlap or bucket the parameter sync after the optimizer step (ZeRO's "
                "broadcast of updated shards)",
                ps,
                f"exposed parameter AllGather/Broadcast after backward {_ms(ps.median())} per step",
                step,
            )
        )
    hs = np.minimum(sync, host)
    drains = (drains_per_step if drains_per_step is not None else pd.Series(dtype=float)).reindex(c.index)
    synced = bool(len(drains)) and float((drains.fillna(0.0) > 0).mean()) > 0.5
    starved = host + c["idle_ns"]
    out.append(
        _rule(
            "host_sync",
            "drop the per-step host sync: log every N steps, avoid .item() / "
            ".cpu() / synchronize in the loop",
            starved if synced else hs,
            (
                f"main thread of the critical rank empties the GPU's queue (stream/device sync or copy to the "
                f"host) in {100.0 * float((drains.fillna(0.0) > 0).mean()):.0f} % of the steps, waiting "
                f"{_ms(sync.median())} per step; after each the GPU idles until the host's launches run ahead "
                f"again ({_ms(starved.median())} per step under nsys)"
                if synced
                else f"main thread of the critical rank waits {_ms(sync.median())} per step in sync/copy "
                f"calls; its GPU idles {_ms(host.median())} awaiting launches"
            ),
            step,
            expected=_sync_gain(c, prof) if synced else gains.carry(float(hs.median()), gains.HOST, prof),
        )
    )
    launch = host - hs
    got = _critical_rows(c, after_backward)
    share = _captured_share(got, c.index)
    captured = launch * share if share is not None else launch
    out.append(
        _rule(
            "launch_bound",
            "launch fewer kernels: capture the forward and backward in a CUDA graph "
            '(torch.compile(mode="reduce-overhead") on the model, or torch.cuda.CUDAGraph around a static '
            "step), so one launch replays them all; plain torch.compile (default mode) still launches kernel "
            "by kernel; a larger batch gives each launch more work",
            launch,
            f"GPU idle awaiting launches {_ms(host.median())} per step, {_ms(sync.median())} "
            "of it explained by host syncs"
            + (
                f"; a graph of the forward and backward would replay {100.0 * float(share.median()):.0f} % of "
                "the step's launches (the optimizer's and DDP's stay)"
                if share is not None
                else "; no backward phase found, so the share of launches a graph would take is not known"
            ),
            step,
            expected=gains.carry(float(captured.median()), gains.HOST, prof),
        )
    )
    strag = _straggler_rule(crit, per_step, step, prof) if per_step is not None and len(per_step) else None
    out += [strag, _extra_work_rule(extra_work, crit, strag, step)]
    if contention_ns > 0:
        text, evidence = (
            (
                "give compute its SMs back: fewer NCCL channels (NCCL_MAX_NCHANNELS) or high-priority "
                "NCCL streams"
            ),
            f"compute kernels lose {_ms(contention_ns)} per rank-step running beside NCCL",
        )
        if gemm_ratio >= WAVE_RATIO:
            text = (
                "fit the GEMMs beside NCCL in one wave: hold NCCL to N CTAs (e.g. 8: NCCL_MAX_CTAS or the process "
                "group's max_ctas) and the GEMMs to the other SMs (torch._C._set_sm_carveout_experimental(N) "
                "with torch.backends.cuda.preferred_blas_library('cublaslt'))"
            )
            evidence += (
                f"; GEMMs beside NCCL take {gemm_ratio:.2f}× their time alone (like for like), the mark of "
                "persistent GEMMs pushed into a second wave"
            )
        out.append(
            _rule(
                "contention",
                text,
                pd.Series(np.minimum(contention_ns, c["compute_ns"])),
                evidence,
                step,
                per_step=False,
            )
        )  # one run-level estimate (contention.contention_per_step_ns)
    out.append(_copy_back_rule(c, got, step))
    world = int(steps["rank"].nunique()) if len(steps) and "rank" in steps else 1
    out.append(_optimizer_shard_rule(c, got, world, step, harness))
    if recommendation is not None and len(recommendation):
        first = recommendation.iloc[0]
        m = first.get("measured_step_ns")
        gain = first.get("predicted_gain_ns")
        if gain is not None and not pd.isna(gain) and float(gain) > 0 and first.get("flags"):
            out.append(
                _rule(
                    "measured" if m is not None and not pd.isna(m) else "comm_tail",
                    f"run with {first['flags']}",
                    pd.Series([min(float(gain), float(comm.median()))]),
                    f"{first.get('basis')}",
                    step,
                    per_step=False,
                )
            )  # one prediction for the run
    rules = [r for r in out if r is not None and (harness or r["rule"] not in WITHDRAWN)]
    return sorted(rules, key=lambda r: (-r["expected_gain_ns"], -r["gain_upper_ns"]))


PER_RANK_METRICS = [
    "step_ns",
    "compute_ns",
    "comm_ns",
    "exposed_comm_ns",
    "exposed_wait_ns",
    "exposed_transfer_ns",
    "idle_ns",
]
"""Step-table metrics :func:`per_rank` compares across ranks (besides the critical path's ``host_ns`` and
``last_arrival_pct``)."""


def differing_ranks(frame: pd.DataFrame, metrics: list[str], floor: float = 0.0) -> dict:
    """{metric: {rank: median over the rank's rows}} for the ``metrics`` of ``frame`` (a ``rank`` column, any
    rows per rank) whose largest per-rank median exceeds PER_RANK_RATIO × the smallest and by at least
    ``floor`` (same unit): where one pooled median would hide a rank."""
    if frame is None or frame.empty or frame["rank"].nunique() < 2:
        return {}
    med = frame.groupby("rank")[[m for m in metrics if m in frame]].median()
    out = {}
    for m in med.columns:
        v = med[m].dropna()
        if len(v) < 2:
            continue
        lo, hi = float(v.min()), float(v.max())
        if hi - lo >= floor and hi > PER_RANK_RATIO * lo:
            out[m] = {int(r): float(x) for r, x in v.items()}
    return out


def per_rank(steps: pd.DataFrame, paths: pd.DataFrame | None, ranks: pd.DataFrame) -> dict:
    """The JSON ``per_rank``: :func:`differing_ranks` over the step table's PER_RANK_METRICS and the critical
    path's ``host_ns`` (times: differing by at least ADVICE_MIN_PCT % of the median step) and the rank
    table's ``last_arrival_pct`` (``ranks``: the ranks section)."""
    if steps is None or steps.empty:
        return {}
    floor = ADVICE_MIN_PCT / 100.0 * float(steps["step_ns"].median())
    out = differing_ranks(steps, PER_RANK_METRICS, floor)
    if paths is not None and len(paths):
        out.update(differing_ranks(paths, ["host_ns"], floor))
    if "last_arrival_pct" in ranks:
        out.update(differing_ranks(ranks, ["last_arrival_pct"]))
    return out
