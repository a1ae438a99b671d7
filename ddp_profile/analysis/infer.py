"""Steps and phases inferred from the GPU trace itself, for traces without step / phase NVTX ranges.

**Steps** (per process, :func:`infer_steps`): the gradient-synchronisation cycles of ``cycles`` (one
optimizer step each: its micro-steps' forward and backward, the gradient collectives, the optimizer;
extra work reported per step by ``cycles.extra_work``). When the process shows no cycle (no kernel
launched from another thread than the main one, or fewer than two backward runs owning a gradient
collective), the period of its kernel sequence instead. Let s = the names of the process's compute and
NCCL kernels in launch order (copies and memsets are left out of s: data-loader threads launch them at
varying points). Then

1. *Period* P (kernels per step): the smallest lag L (MIN_PERIOD <= L <= len(s)/2) whose match fraction
   m(L) = mean_i [s_i = s_(i+L)] is within PERIOD_SLACK of the best lag's. m is estimated for every lag at
   once with one FFT (names mapped to random unit complex numbers z: Re Σ z_i·conj(z_(i+L)) = matches +
   zero-mean noise), then recomputed exactly for the shortlisted lags. Repeats inside a step (a
   transformer's layers) match only part of the step (m ≈ 0.8 on our XL model), the step's period ≈ 1,
   and multiples of P are not smaller than P (but work inserted every N steps makes N steps the period:
   hence the cycles first).
2. *Cut* (where a step starts within the period): in each period-long stretch of s, the kernel with the
   largest host gap before it (launch time minus the previous kernel's launch time) among kernels
   launched from the main thread (launch thread id = process id) right after another main-thread
   kernel; the stretches vote with the 8 names that follow (the most frequent 8-gram wins).
3. *Anchors*: the k-gram of names starting at that offset (k grown until it occurs at most once per
   period); each occurrence starts a step, so a kernel inserted in one step shifts no later boundary.
   A segment between two anchors is a step when its length is within STEP_LENGTH_SLACK of P; the last
   one ends where the k-gram ending the period last occurs. What precedes the first anchor (warm-up,
   initialisation) is no step.

*Host ranges* (either way): a step's host range runs from just after the largest launch gap (any kind,
copies included) between the previous step's last kernel and its first kernel, to just before the next
step's; the first and last steps get the median lead / trail of the others. They are then projected onto
the GPU by launch time exactly like NVTX steps. Step index = order within the process.

**Phases** (per step, :func:`infer_phases`), from the launching thread (``main`` = the process's main
thread, tid = pid; PyTorch runs backward, DDP's and FSDP's gradient hooks on autograd threads), one
forward and one backward range per micro-step (a backward run of ``cycles``: compute kernels launched
from other threads)::

    backward  = the run's first .. last compute launch (projected on compute kernels only: windows)
    forward   = the step start (first micro-step) or just after the previous run's last launch .. just
                before the run's first launch (left out when nothing was launched there)
    optimizer = just after the last run, the last launch from another thread (DDP's bucket copies) and
                the last gradient collective in the step .. step end

A step with no backward run gets no phase.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddp_profile import schema
from ddp_profile.analysis import cycles as cy
from ddp_profile.analysis.kernel_arrays import KernelArrays, ints
from ddp_profile.analysis.kernel_groups import GRADIENT, OPTIMIZER, name_group, rows_of
from ddp_profile.analysis.windows import NO_NVTX_RANGES, NO_STEP_RANGE, RANGE_COLUMNS, find_steps
from ddp_profile.fmt import fmt_ms

MIN_PERIOD = 3
MIN_STEPS = 2
PERIOD_SLACK = 0.05
STEP_LENGTH_SLACK = 0.1
MAX_SHORTLIST = 64
MAX_ANCHOR = 64


def match_fraction(codes: np.ndarray, lag: int) -> float:
    """Exact m(L): the fraction of positions i whose name equals the name ``lag`` positions later."""
    return float(np.mean(codes[:-lag] == codes[lag:])) if 0 < lag < len(codes) else 0.0


def estimated_match(codes: np.ndarray, seed: int = 0) -> np.ndarray:
    """m(L) for every lag L (index L), estimated with one FFT of random unit phases per name."""
    n = len(codes)
    rng = np.random.default_rng(seed)
    theta = 2 * np.pi * rng.random(int(codes.max()) + 1)
    nf = 1 << int(np.ceil(np.log2(max(2 * n, 2))))
    # Re(z_i conj z_j) = cos_i cos_j + sin_i sin_j: two real transforms and one inverse.
    fc, fs = np.fft.rfft(np.cos(theta)[codes], nf), np.fft.rfft(np.sin(theta)[codes], nf)
    ac = np.fft.irfft(fc.real**2 + fc.imag**2 + fs.real**2 + fs.imag**2, nf)[:n]
    return ac / np.maximum(n - np.arange(n), 1)


def find_period(codes: np.ndarray) -> tuple[int | None, float]:
    """(P, m(P)): the step period of a name sequence (module docstring, step 1), None when none repeats
    at least MIN_STEPS times."""
    n = len(codes)
    hi = n // MIN_STEPS
    if hi < MIN_PERIOD:
        return None, 0.0
    m = estimated_match(codes)[: hi + 1]
    m[:MIN_PERIOD] = -np.inf
    # The FFT's noise is ~1/sqrt(n - L): shortlist generously, then decide on exact fractions.
    short = np.flatnonzero(m >= m.max() - 0.15 - 3 / np.sqrt(max(n - hi, 1)))[:MAX_SHORTLIST]
    exact = np.array([match_fraction(codes, int(lag)) for lag in short])
    if exact.size == 0 or exact.max() < 0.5:
        return None, float(exact.max()) if exact.size else 0.0
    best = exact.max()
    i = int(np.flatnonzero(exact >= best - PERIOD_SLACK)[0])
    return int(short[i]), float(exact[i])


def _gram_hits(codes: np.ndarray, at: int, k: int, forward: bool = True) -> np.ndarray:
    """Positions where the k names starting (forward) or ending (not forward) at index ``at`` recur."""
    n = len(codes)
    first = at if forward else at - k + 1
    hit = np.ones(n, dtype=bool)
    for j in range(k):
        shifted = np.zeros(n, dtype=bool)
        if first + j < 0 or first + j >= n:
            return np.zeros(0, dtype=np.int64)
        eq = codes[j:] == codes[first + j]  # hit[i] needs codes[i + j] == target[j]
        shifted[: n - j] = eq
        hit &= shifted
    starts = np.flatnonzero(hit)
    return starts if forward else starts + k - 1


def _anchors(codes: np.ndarray, at: int, period: int, forward: bool) -> np.ndarray:
    """Occurrences of the shortest k-gram at ``at`` that recurs at most once per period."""
    for k in range(1, min(MAX_ANCHOR, period) + 1):
        hits = _gram_hits(codes, at, k, forward)
        if hits.size and (hits.size == 1 or np.diff(hits).min() >= period // 2):
            return hits
    return _gram_hits(codes, at, min(MAX_ANCHOR, period), forward)


def _cut_reference(codes: np.ndarray, lt: np.ndarray, main: np.ndarray, period: int) -> int:
    """Index of one step's first kernel (module docstring, step 2). In each period-long window, the
    eligible kernel with the largest launch gap before it; those windows vote with the names that follow
    (a kernel inserted in one step shifts the windows' alignment, not the names at the boundary)."""
    n = len(codes)
    nper = n // period
    gap = np.diff(lt, prepend=lt[0]).astype(float)
    gap[0] = -1.0
    # Inside a main-thread run, not at its first kernel: the gap before a run's first kernel is the host
    # waiting for backward (DDP's finalize waits for the last all-reduce), not the loop's boundary.
    inside = main & np.roll(main, 1)
    inside[0] = main[0]
    for eligible in (inside, main, np.ones(n, dtype=bool)):
        if eligible.any():
            break
    g = np.where(eligible, gap, -np.inf)[: nper * period].reshape(nper, period)
    idx = g.argmax(axis=1) + np.arange(nper) * period
    k = min(8, period)
    idx = idx[idx + k <= n]
    if idx.size == 0:
        return 0
    gram = np.zeros(idx.size, dtype=np.uint64)  # the k names as one hash (wrapping arithmetic)
    for j in range(k):
        gram = gram * np.uint64(1_000_003) + codes[idx + j].astype(np.uint64)
    uniq, inverse, counts = np.unique(gram, return_inverse=True, return_counts=True)
    voters = idx[np.ravel(inverse) == int(np.argmax(counts))]
    return int(voters[len(voters) // 2])


def _segments(
    codes: np.ndarray, lt: np.ndarray, main: np.ndarray, period: int
) -> tuple[np.ndarray, np.ndarray]:
    """(first, last) kernel index of each step (module docstring, steps 2-3)."""
    n = len(codes)
    ref = _cut_reference(codes, lt, main, period)
    if ref + period > n:
        ref -= period
    if ref < 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    slack = max(1, int(round(STEP_LENGTH_SLACK * period)))
    starts = _chain(_anchors(codes, ref, period, forward=True), period, slack)
    ends = (
        _anchors(codes, ref + period - 1, period, forward=False) if ref + period - 1 < n else np.zeros(0, int)
    )
    ok = np.abs(np.diff(starts) - period) <= slack
    first, last = starts[:-1][ok], starts[1:][ok] - 1
    if starts.size:
        a = int(starts[-1])
        fin = ends[np.abs(ends - (a + period - 1)) <= slack]
        if fin.size:
            first = np.append(first, a)
            last = np.append(last, int(fin[np.argmin(np.abs(fin - (a + period - 1)))]))
    return first.astype(np.int64), last.astype(np.int64)


def _chain(hits: np.ndarray, period: int, slack: int) -> np.ndarray:
    """Anchor occurrences one period apart: from the first, repeatedly the occurrence nearest one period
    later (within ``slack``), else the next one beyond it (a step of another length: the chain resumes).
    One loop turn per step; equal to ``hits`` when the anchor occurs once per period."""
    if hits.size <= 1 or (np.diff(hits) >= period - slack).all():
        return hits
    out = [int(hits[0])]
    while True:
        target = out[-1] + period
        i = int(np.searchsorted(hits, target - slack, "left"))
        if i >= hits.size:
            break
        j = np.arange(i, int(np.searchsorted(hits, target + slack, "right")))
        out.append(int(hits[j[np.argmin(np.abs(hits[j] - target))]]) if j.size else int(hits[i]))
    return np.asarray(out, dtype=np.int64)


def _host_bounds(
    first: np.ndarray, last: np.ndarray, lt: np.ndarray, all_lt: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Host [start, end] per step (module docstring, step 4); ``all_lt``: sorted launches of every kind.
    A lead or trail never reaches past the neighbouring kernel (of the sequence) outside the steps."""
    hs, he = lt[first].copy(), lt[last].copy()
    adj = np.flatnonzero(first[1:] == last[:-1] + 1)  # step i and i + 1 touch: cut at the largest gap
    if adj.size:
        a, c = lt[last[adj]], lt[first[adj + 1]]
        ia = np.searchsorted(all_lt, a, "left")
        ic = np.maximum(np.searchsorted(all_lt, c, "left"), ia + 1)
        gaps = np.diff(all_lt, append=all_lt[-1])
        lens = ic - ia
        pos = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens) + np.repeat(ia, lens)
        grp = np.repeat(np.arange(adj.size), lens)
        order = np.lexsort((-gaps[pos], grp))  # per group, the largest gap first
        best = pos[order[np.r_[0, np.cumsum(lens)[:-1]]]]
        cut = np.minimum(all_lt[best] + 1, c)
        trail, lead = int(np.median(cut - 1 - he[adj])), int(np.median(hs[adj + 1] - cut))
        he[adj], hs[adj + 1] = cut - 1, cut
    else:
        trail = lead = 0
    open_start = np.ones(len(first), dtype=bool)
    open_start[adj + 1] = False
    open_end = np.ones(len(first), dtype=bool)
    open_end[adj] = False
    floor = np.where(first > 0, lt[np.maximum(first - 1, 0)] + 1, np.minimum(all_lt[0], hs))
    ceil = np.where(last + 1 < len(lt), lt[np.minimum(last + 1, len(lt) - 1)] - 1, he + trail)
    hs = np.where(open_start, np.maximum(hs - lead, floor), hs)
    he = np.where(open_end, np.minimum(he + trail, ceil), he)
    return hs, he


def _main_thread(pid: int, tid: np.ndarray) -> np.ndarray:
    """Launches from the main thread (tid = pid; else the thread that launched the first kernel)."""
    if (tid == pid).any():
        return tid == pid
    return tid == tid[0] if len(tid) else np.zeros(0, dtype=bool)


STEP_FACTS = ["extra_kernels", "extra_gpu_ns", "extra_host_ns"]


def sequence(karr: KernelArrays, p, kinds: np.ndarray, tid_all: np.ndarray, grad: np.ndarray) -> cy.Sequence:
    """Process ``p``'s kernels selected by ``kinds`` (with a launch time) in launch order."""
    sel = np.flatnonzero((karr.pid == p) & kinds & (karr.launch >= 0))
    sel = sel[np.argsort(karr.launch[sel], kind="stable")]
    return cy.Sequence(
        sel=sel,
        codes=np.maximum(karr.name_code[sel].astype(np.int64), 0),
        lt=karr.launch[sel],
        main=_main_thread(int(p), tid_all[sel]),
        compute=karr.is_compute[sel],
        grad=grad[sel],
        start=karr.start[sel],
        end=karr.end[sel],
        update=update_mask(karr)[sel],
    )


def update_mask(karr: KernelArrays) -> np.ndarray:
    """Per kernel: a compute kernel of the optimizer's update (kernel_groups.OPTIMIZER, by its short name)."""

    def compute():
        by_name = np.array(
            [name_group(n) == OPTIMIZER for n in karr.name_values()], dtype=bool
        )  # last: no name
        return by_name[karr.name_code.astype(np.int64)] & karr.is_compute

    return karr.memo("update_mask", compute)


def _gradient_mask(karr: KernelArrays) -> np.ndarray:
    grad = np.zeros(len(karr.launch), dtype=bool)
    grad[rows_of(karr, GRADIENT)] = True
    return grad


def infer_steps(karr: KernelArrays) -> tuple[pd.DataFrame, list[str]]:
    """Step host ranges (RANGE_COLUMNS + STEP_FACTS, phase "step", step = order within the process): the
    gradient-synchronisation cycles of each process (``cycles``), else the period of its kernel sequence
    (module docstring). Returns (frame, notes)."""
    frame = karr.frame
    tid_all = ints(frame["launch_tid"], -1) if "launch_tid" in frame else np.full(len(frame), -1, np.int64)
    kern = (karr.is_compute | karr.is_nccl) & (karr.name_code >= 0)
    grad = _gradient_mask(karr)
    parts, found = [], []
    for p in pd.unique(karr.pid[karr.launch >= 0]):
        seq = sequence(karr, p, kern, tid_all, grad)
        if seq.sel.size < MIN_PERIOD * MIN_STEPS:
            continue
        rank = int(karr.rank[seq.sel[0]])
        cyc = cy.find_cycles(seq) if (tid_all[seq.sel] >= 0).any() else None
        if cyc is not None:
            first, last = cyc.first, cyc.last
            micro = int(np.median(cyc.micro_steps))
            found.append(
                f"rank {rank}: {first.size} steps of {micro} micro-step(s) cut by {cyc.rule} (forward "
                f"{cyc.forward_kernels} kernels after the optimizer's {cyc.optimizer_kernels})"
            )
            if cyc.first_irregular:
                found.append(
                    f"rank {rank}: step 0's forward is not the others' ({cyc.last[0] - cyc.first[0] + 1} "
                    "kernels in the step: compilation and autotuning launch kernels of their own in a "
                    "compiled job's first iteration); it is its own step, from the host's first pause for "
                    "compilation before the others' first forward kernel"
                )
        else:
            period, match = find_period(seq.codes)
            if period is None:
                continue
            first, last = _segments(seq.codes, seq.lt, seq.main, period)
            if first.size == 0:
                continue
            found.append(
                f"rank {rank}: {first.size} steps of {period} kernels (repeat match {100 * match:.0f} %, "
                "no gradient-sync cycle seen)"
            )
        all_lt = np.sort(karr.launch[(karr.pid == p) & (karr.launch >= 0)])
        hs, he = _host_bounds(first, last, seq.lt, all_lt)
        ek, eg, eh = cy.extra_work(seq, first, last)
        if cyc is not None:  # and what follows each step before the next one's forward
            ek, eg = ek + cyc.after_kernels, eg + cyc.after_gpu_ns
        parts.append(
            pd.DataFrame(
                {
                    "rank": rank,
                    "pid": int(p),
                    "step": np.arange(first.size, dtype=np.int64),
                    "phase": "step",
                    "host_start_ns": hs,
                    "host_end_ns": he,
                    "extra_kernels": ek,
                    "extra_gpu_ns": eg,
                    "extra_host_ns": eh,
                }
            )
        )
    if not parts:
        return schema.empty_frame(RANGE_COLUMNS + STEP_FACTS), [
            "no step NVTX ranges, and no repeating kernel sequence to infer steps from: per-step metrics are "
            "missing (wrap each step in an NVTX range, e.g. torch.cuda.nvtx.range_push(f'step {i}'))"
        ]
    out = (
        pd.concat(parts, ignore_index=True)
        .sort_values(["rank", "step"], kind="stable")
        .reset_index(drop=True)
    )
    note = (
        "steps inferred from the GPU trace (no closed NVTX range matches the step pattern): each step is one "
        "optimizer step (its micro-steps' forward and backward, the gradient collectives, the optimizer), "
        "cut between the optimizer's last kernel and the next forward's first; steps are numbered from 0 at "
        "the first iteration every rank ran; " + "; ".join(found)
    )
    return out, [note]


def extra_work_notes(steps: pd.DataFrame) -> list[str]:
    """One note per rank naming its steps with extra work (cycles.extra_work), by the step labels common to
    every rank (the step table, after the labels are set): kernels and GPU ms, host ms."""
    if steps.empty or "extra_kernels" not in steps:
        return []
    ek = steps["extra_kernels"].fillna(0).to_numpy()
    eh = steps["extra_host_ns"].fillna(0).to_numpy()
    eg = steps["extra_gpu_ns"].fillna(0).to_numpy()
    ranks, labels = steps["rank"].to_numpy(), steps["step"].to_numpy()
    hit = np.flatnonzero((ek > 0) | (eh > 0))
    out = []
    for rank in np.unique(ranks[hit]):
        at = hit[ranks[hit] == rank]
        parts = []
        for i in at[:20]:
            k, g, h = int(ek[i]), float(eg[i]), float(eh[i])
            what = [f"{k} extra kernels, {fmt_ms(g)} on the GPU"] if k > 0 else []
            what += [f"{fmt_ms(h)} longer on the host"] if h > 0 else []
            parts.append(f"step {int(labels[i])}: " + ", ".join(what))
        more = f" (and {at.size - 20} more)" if at.size > 20 else ""
        out.append(
            f"rank {int(rank)}: extra work beside the modal step (logging, evaluation, checkpointing...): "
            + "; ".join(parts)
            + more
        )
    return out


def infer_phases(steps: pd.DataFrame, karr: KernelArrays, nvtx: pd.DataFrame | None = None) -> pd.DataFrame:
    """forward / backward / optimizer host ranges (RANGE_COLUMNS) of each step from the launching thread
    (module docstring): one forward and one backward range per micro-step. ``nvtx`` is not read (kept for
    callers; autograd NVTX ranges run on the same autograd threads the launches tell)."""
    if steps.empty or "launch_tid" not in karr.frame:
        return schema.empty_frame(RANGE_COLUMNS)
    tid_all = ints(karr.frame["launch_tid"], -1)
    grad = _gradient_mask(karr)
    cols: dict[str, list] = {c: [] for c in RANGE_COLUMNS}
    for p, sg in steps.groupby("pid", sort=False):
        seq = sequence(karr, p, np.ones(len(karr.launch), dtype=bool), tid_all, grad)
        if not (tid_all[seq.sel] >= 0).any():
            continue
        sg = sg.sort_values("host_start_ns", kind="stable")
        hs, he = ints(sg["host_start_ns"]), ints(sg["host_end_ns"])
        rank, step = sg["rank"].to_numpy(), sg["step"].to_numpy()
        rf, rl = cy.runs(seq)
        if rf.size == 0:
            continue
        lt = seq.lt
        j = np.searchsorted(hs, lt[rf], "right") - 1
        ok = (j >= 0) & (lt[rf] <= he[np.maximum(j, 0)])
        rf, rl, j = rf[ok], rl[ok], j[ok]
        if rf.size == 0:
            continue
        first_in_step = np.r_[True, j[1:] != j[:-1]]
        last_in_step = np.r_[first_in_step[1:], True]
        # A later micro-step's forward opens after the previous run and whatever other threads launched
        # after it (gradient collectives of a job that reduces every micro-step, DeepSpeed's).
        off = lt[~seq.main]
        k = np.searchsorted(off, lt[rf], "left") - 1
        after_prev = np.maximum(lt[np.r_[rl[0], rl[:-1]]], off[np.maximum(k, 0)] if off.size else 0)
        f0 = np.where(first_in_step, hs[j], after_prev + 1)
        f1 = lt[rf] - 1
        launched = np.searchsorted(lt, f1, "right") > np.searchsorted(lt, f0, "left")
        # The optimizer opens after everything other threads (DDP's bucket copies) and the gradient
        # collectives launched up to the step's end.
        js, b_last = j[last_in_step], rl[last_in_step]
        tail = np.zeros(js.size, dtype=np.int64)
        grad_off = seq.grad & ~seq.main
        for mask in (~seq.main, grad_off if grad_off.any() else seq.grad):
            t = lt[mask]
            k = np.searchsorted(t, he[js], "right") - 1
            tail = np.where(k >= 0, np.maximum(tail, t[np.maximum(k, 0)] if t.size else 0), tail)
        o0 = np.maximum(lt[b_last], tail) + 1
        o_ok = o0 <= he[js]
        for phase, keep, jj, start, end in (
            ("forward", launched & (f0 <= f1), j, f0, f1),
            ("backward", np.ones(j.size, bool), j, lt[rf], lt[rl]),
            ("optimizer", o_ok, js, o0, he[js]),
        ):
            cols["rank"].append(rank[jj[keep]])
            cols["pid"].append(np.full(int(keep.sum()), int(p)))
            cols["step"].append(step[jj[keep]])
            cols["phase"].append(np.full(int(keep.sum()), phase, dtype=object))
            cols["host_start_ns"].append(start[keep])
            cols["host_end_ns"].append(end[keep])
    if not cols["rank"]:
        return schema.empty_frame(RANGE_COLUMNS)
    return pd.DataFrame({c: np.concatenate(v) for c, v in cols.items()})[RANGE_COLUMNS]


def steps_from_trace(
    nvtx: pd.DataFrame | None, karr: KernelArrays, step_pattern: str | None = None
) -> tuple[pd.DataFrame, list[str], bool]:
    """Step host ranges from NVTX (``windows.find_steps``), else inferred from the kernel sequence when the
    kernels have launch times. Returns (frame, notes, inferred)."""
    steps, notes = find_steps(nvtx, step_pattern)
    if not steps.empty or len(karr.launch) == 0 or (karr.launch < 0).all():
        return steps, notes, False
    inferred, inf_notes = infer_steps(karr)
    if inferred.empty:
        return steps, notes + inf_notes, False
    # keep why NVTX gave no steps (e.g. step ranges that were never closed) beside how they were inferred;
    # not "no range matches / no ranges: per-step metrics are missing", which the inferred steps contradict
    notes = [n for n in notes if not n.startswith((NO_STEP_RANGE, NO_NVTX_RANGES))]
    return inferred, notes + inf_notes, True
