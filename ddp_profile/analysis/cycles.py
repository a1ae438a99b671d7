"""Optimizer steps inferred from the gradient-synchronisation cycle, and the periodic extra work
found in them.

Per process, s = its compute and NCCL kernels in launch order; ``main`` = launched from the main thread
(thread id = process id). PyTorch runs backward on autograd threads, with DDP's and FSDP's gradient hooks::

    backward run  = a maximal run of s of compute kernels from other threads than main (NCCL kernels and
                    copies do not break a run; one main-thread compute kernel does); runs under a quarter
                    of the median run's kernels are no runs (a stray thread's launch)
    gradient collectives = AllReduce / ReduceScatter kernels launched from other threads than main (else,
                    when none is, from main: the harness's naive and flat strategies), each belonging to
                    the last run launched before it
    sync run      = a run owning a gradient collective (every run when the process has no collective)
    micro-steps   = the runs of a cycle: those after the previous sync run, up to its own sync run

**Optimizer every N cycles** (:func:`update_cycle`). A job may reduce gradients after every micro-batch and
update only every N (DeepSpeed with gradient accumulation: no ``no_sync``). Then every run is a sync run, and
a gradient cycle is a micro-step. The update's kernels (``Sequence.update``: the optimizer group of
``kernel_groups``, multi_tensor_apply, by name) tell them apart: where some sync runs' stretches hold update
kernels and others hold none, only the former end a step, the others count as the step's micro-steps (as
``no_sync`` runs do). Where every stretch holds them, each cycle is a step; where none does (an optimizer
whose kernels no pattern names), each cycle is taken as a step and the note says that a step may then be a
micro-step (``Cycles.rule``).

After each sync run, the *stretch* up to the next run's first kernel holds the optimizer (its gradients'
consumers), then whatever the loop does between steps, then the next cycle's first forward. In the modal
sync stretch (the most frequent kernel sequence, length L) the optimizer is its first c kernels and the
forward its last f:

1. c: the offset (1 <= c < L) with the largest median host launch gap before it over the stretches of
   that sequence, among main-thread kernels after the stretch's last gradient collective, not the
   stretch's first main-thread kernel (the gap before it is the host waiting for the gradients), a gap
   counted 0 where it was a wait for the gradients (the host stopped before backward's GPU work ended
   and launched within SYNC_SLACK_NS of the end of all earlier work, itself within SYNC_SLACK_NS of
   backward's: a NaN check on the loss); restricted to the offsets where the most longer stretches may
   have their extra kernels inserted (between their longest common prefix and suffix with the modal
   one), when at least MIN_VOTES of them agree, and, with f known, to c <= L - f;
2. f: with gradient accumulation, the longest common suffix of the modal sync stretch and the modal
   stretch between a non-sync run and the next run (that one holds the next forward, perhaps after the
   loop's per-micro-step work). Else L - c, unless a later offset j has a median gap at least
   SECOND_GAP_RATIO times the median gap from j on and SECOND_GAP_SHARE of c's: the loop's own work
   before the forward (a broadcast, data made on the GPU) ends there, f = L - j.

A stretch opening with the modal optimizer and closing with the modal forward ends the step after the
former and starts the next at the latter: what lies between (the loop's work between iterations, extra
work every N steps) is in no step, and kernels beyond the modal stretch are that step's extra work. A
stretch matching one end only is cut there; neither, at the last occurrence of the modal forward's first
FORWARD_HEAD kernels (at most half of them; else f kernels before the next run). Either way a step ends no
earlier than the last update kernel (``Sequence.update``) before the next forward: a first optimizer call
that initialises its state launches more kernels than the modal one. Step k runs from the start of its
first micro-step's forward to the end of its optimizer. The first cycle is a step when the
f kernels before its first run are the modal forward and it has the modal micro-step count; the last
when at least LAST_OPTIMIZER_SHARE of the modal optimizer's kernels open its stretch (ending there).
A first cycle with the modal micro-step count whose forward is not the modal one (a compiled job's first
iteration: compilation and autotuning) is a step too, from the host's first compilation pause before its
forward's first kernel (:func:`_compile_start`). Anything else before the first cut (warm-up, rank 0's
evaluation) is no step. Fewer than two sync runs,
or no backward run: no cycle (``infer`` falls back to the period of the whole sequence).

**Extra work** (per step): kernels beyond the modal sequence, inside the step (:func:`extra_work`: the
step's sequence against the modal step's, the kernels between their longest common prefix and suffix
when the step is longer) plus those after it (its stretch against the modal stretch, likewise):
``extra_kernels`` = their count beyond the modal lengths, ``extra_gpu_ns`` = Σ their GPU durations;
``extra_host_ns`` = host period (first launch to the next step's first launch) − the median period,
where that exceeds max(10 % of the median, 5 · MAD), else 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_RUN_SHARE = 0.25
MAX_COMPARED = 256  # longer stretches compared against the modal one (each a few numpy calls)
MIN_VOTES = 2  # longer stretches that must agree on where their extra kernels go
SECOND_GAP_RATIO = 10.0  # a gap this many times the forward's median gap, and at least SECOND_GAP_SHARE
SECOND_GAP_SHARE = 0.2  # of the cut's, ends the loop's own work before the forward
COMPILE_PAUSE_STEPS = 10  # a host pause this many steps long before a compiled first iteration is compilation
FORWARD_HEAD = 8  # kernels of the modal forward whose last occurrence starts an irregular stretch's forward
LAST_OPTIMIZER_SHARE = 0.9  # the trace's last optimizer: at least this share of the modal one's kernels
SYNC_SLACK_NS = 100_000  # a launch this soon after all earlier GPU work ended follows a wait for it
HOST_EXTRA_SHARE = 0.1
HOST_EXTRA_MADS = 5.0


@dataclass
class Sequence:
    """One process's compute and NCCL kernels in launch order (positions ``sel`` into the kernel arrays)."""

    sel: np.ndarray
    codes: np.ndarray
    lt: np.ndarray
    main: np.ndarray
    compute: np.ndarray
    grad: np.ndarray
    start: np.ndarray
    end: np.ndarray
    update: np.ndarray | None = None  # kernels of the optimizer's update (kernel_groups.OPTIMIZER), by name


@dataclass
class Cycles:
    """Steps as (first, last) positions into the sequence, their micro-step counts and the cut used."""

    first: np.ndarray
    last: np.ndarray
    micro_steps: np.ndarray
    forward_kernels: int
    optimizer_kernels: int
    after_kernels: np.ndarray
    after_gpu_ns: np.ndarray
    rule: str = "gradient-sync cycles"
    """Which rule cut the steps: every gradient-synchronisation cycle, or the optimizer's update every N."""
    first_irregular: bool = False
    """The first step's forward is not the modal one (compilation, autotuning): it starts where the
    compilation before the modal forward's first kernel began (:func:`_compile_start`)."""


def segment_hashes(codes: np.ndarray, first: np.ndarray, last: np.ndarray, seed: int = 7) -> np.ndarray:
    """One uint64 hash per segment codes[first..last] (inclusive; all non-empty): Σ R1[code]·R2[offset]
    with wrapping arithmetic, so equal sequences hash equal and different ones almost never do."""
    if len(first) == 0:
        return np.zeros(0, dtype=np.uint64)
    lens = (last - first + 1).astype(np.int64)
    rng = np.random.default_rng(seed)
    r1 = rng.integers(1, 1 << 62, size=int(codes.max()) + 2, dtype=np.uint64)
    r2 = rng.integers(1, 1 << 62, size=int(lens.max()) + 1, dtype=np.uint64)
    starts = np.cumsum(lens) - lens
    offset = np.arange(int(lens.sum())) - np.repeat(starts, lens)
    pos = np.repeat(first, lens) + offset
    terms = r1[codes[pos]] * r2[offset]
    return np.add.reduceat(terms, starts) + r2[lens] * np.uint64(1_000_003)


def _common(a: np.ndarray, b: np.ndarray, from_end: bool) -> int:
    """Length of the longest common prefix (or suffix) of two code arrays."""
    n = min(len(a), len(b))
    x, y = (a[len(a) - n :][::-1], b[len(b) - n :][::-1]) if from_end else (a[:n], b[:n])
    diff = np.flatnonzero(x != y)
    return int(diff[0]) if diff.size else n


def _occurrences(codes: np.ndarray, gram: np.ndarray) -> np.ndarray:
    """Starts of the occurrences of ``gram`` in ``codes`` (none when ``gram`` is empty)."""
    k = len(gram)
    if k == 0 or len(codes) < k:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero((np.lib.stride_tricks.sliding_window_view(codes, k) == gram).all(axis=1))


def _last_occurrence(codes: np.ndarray, gram: np.ndarray) -> int:
    """Start of the last occurrence of ``gram`` in ``codes`` (-1 when none, or when ``gram`` is empty)."""
    hit = _occurrences(codes, gram)
    return int(hit[-1]) if hit.size else -1


def _first_occurrence(codes: np.ndarray, gram: np.ndarray) -> int:
    """Start of the first occurrence of ``gram`` in ``codes`` (-1 when none, or when ``gram`` is empty)."""
    hit = _occurrences(codes, gram)
    return int(hit[0]) if hit.size else -1


def runs(seq: Sequence) -> tuple[np.ndarray, np.ndarray]:
    """(first, last) positions of the backward runs (module docstring)."""
    bw = np.flatnonzero(~seq.main & seq.compute)
    if bw.size == 0:
        return bw, bw
    key = np.cumsum(seq.main & seq.compute)[bw]
    new = np.r_[True, key[1:] != key[:-1]]
    first, last = bw[new], bw[np.r_[new[1:], True]]
    size = np.diff(np.r_[np.flatnonzero(new), bw.size])
    keep = size >= max(2.0, MIN_RUN_SHARE * float(np.median(size)))
    return first[keep], last[keep]


def _modal(h: np.ndarray) -> int:
    """Index of the first element holding the most frequent value of ``h``."""
    uniq, inverse, counts = np.unique(h, return_inverse=True, return_counts=True)
    return int(np.flatnonzero(np.ravel(inverse) == int(np.argmax(counts)))[0])


def _cut_offsets(
    seq: Sequence, a0: np.ndarray, a1: np.ndarray, b0: np.ndarray, b1: np.ndarray
) -> tuple[int, int] | None:
    """(c, f): the optimizer's end and the forward's length in the modal sync stretch (module docstring).
    ``a0``, ``a1``: closed sync stretches; ``b0``, ``b1``: stretches after non-sync runs."""
    codes = seq.codes
    ha = segment_hashes(codes, a0, a1)
    m = _modal(ha)
    n_a = int(a1[m] - a0[m] + 1)
    modal = codes[a0[m] : a1[m] + 1]
    if n_a < 2:
        return None
    f = 0
    ok_b = b1 >= b0
    if ok_b.any():
        b0, b1 = b0[ok_b], b1[ok_b]
        mb = _modal(segment_hashes(codes, b0, b1))
        f = _common(modal, codes[b0[mb] : b1[mb] + 1], True)
    accumulated = 0 < f < n_a
    f = f if accumulated else 0
    same = a0[np.flatnonzero(ha == ha[m])][:, None] + np.arange(n_a)
    gap = np.diff(seq.lt, prepend=seq.lt[0]).astype(float)
    # A host that stopped before the backward's GPU work ended and resumed as soon as all queued work had
    # ended, that work ending soon after backward's, was waiting for the gradients (a sync, e.g. a NaN
    # check on the loss), not at the loop's boundary.
    done = np.r_[seq.start[0], np.maximum.accumulate(seq.end)[:-1]]  # end of the work launched before each
    bwd_end = done[a0[np.flatnonzero(ha == ha[m])]][:, None]
    prev_lt = np.r_[seq.lt[0], seq.lt[:-1]]
    waited = (
        (prev_lt[same] < bwd_end)
        & (seq.lt[same] >= done[same])
        & (seq.lt[same] - done[same] < SYNC_SLACK_NS)
        & (done[same] - bwd_end < SYNC_SLACK_NS)
    )
    med = np.median(np.where(waited, 0.0, gap[same]), axis=0)
    eligible = seq.main[a0[m] : a1[m] + 1].copy()
    # Not the first main-thread kernel after backward (the gap before it is the host waiting for the
    # gradients), nor before the stretch's last gradient collective.
    first_main = np.flatnonzero(eligible)
    eligible[: first_main[0] + 1 if first_main.size else 1] = False
    g = np.flatnonzero(seq.grad[a0[m] : a1[m] + 1])
    if g.size:
        eligible[: g[-1] + 1] = False
    votes = np.zeros(n_a + 1, dtype=np.int64)  # longer stretches whose insertion may lie at each offset
    for i in np.flatnonzero((a1 - a0 + 1) > n_a)[:MAX_COMPARED]:
        s = codes[a0[i] : a1[i] + 1]
        lo, hi = max(1, n_a - _common(s, modal, True)), min(n_a - 1, _common(s, modal, False))
        if lo <= hi:
            votes[lo] += 1
            votes[hi + 1] -= 1
    votes = np.cumsum(votes)[:n_a]
    window = votes == votes.max() if votes.max() >= MIN_VOTES else np.ones(n_a, dtype=bool)
    before_fwd = np.arange(n_a) <= n_a - f if f else np.ones(n_a, dtype=bool)
    for allowed in (
        eligible & window & before_fwd,
        eligible & before_fwd,
        eligible & window,
        eligible,
        np.r_[False, np.ones(n_a - 1, dtype=bool)],
    ):
        if allowed.any():
            c = int(np.argmax(np.where(allowed, med, -np.inf)))
            f = min(f, n_a - c) if f else n_a - c
            if not accumulated and n_a - f + 1 < n_a:
                # The loop's own work before the forward (a broadcast, data on the GPU) ends at a second,
                # clearly larger gap: the forward starts after it.
                j = n_a - f + 1 + int(np.argmax(med[n_a - f + 1 :]))
                if (
                    med[j] >= SECOND_GAP_RATIO * max(float(np.median(med[j:])), 1.0)
                    and med[j] >= SECOND_GAP_SHARE * med[c]
                ):
                    f = n_a - j
            return c, f
    return None


@dataclass
class UpdateCycle:
    """Which gradient cycles end an optimizer step (:func:`update_cycle`)."""

    sync: np.ndarray
    """Per backward run: the optimizer's update follows it (it ends an optimizer step)."""
    every: int
    """Gradient cycles per update, the most frequent count (1: every cycle ends with the update)."""
    told: bool
    """Whether any kernel of the update was seen after a gradient cycle (else the cycles could not be told
    apart from optimizer steps)."""


def update_cycle(seq: Sequence, rf: np.ndarray, rl: np.ndarray, sync: np.ndarray) -> UpdateCycle:
    """The gradient cycles after which the optimizer updates (module docstring, "Optimizer every N cycles").

    A sync run's *stretch* runs from just after it to the next run's first kernel (the sequence's end after
    the last run). Where some stretches hold update kernels (``seq.update``) and others hold none, only the
    runs whose stretch holds them end a step: the others are micro-steps whose gradients were reduced too
    (DeepSpeed reduces every micro-batch). Where every stretch holds them, or none does, ``sync`` is
    returned unchanged (``told`` says which). Reusable for one process's sequence with its runs."""
    ks = np.flatnonzero(sync)
    if seq.update is None or ks.size == 0:
        return UpdateCycle(sync, 1, False)
    lo = rl[ks] + 1
    hi = np.where(ks + 1 < rf.size, rf[np.minimum(ks + 1, rf.size - 1)], len(seq.codes))
    cum = np.r_[0, np.cumsum(seq.update.astype(np.int64))]
    has = cum[np.maximum(hi, lo)] - cum[lo] > 0
    if has.all() or not has.any():
        return UpdateCycle(sync, 1, bool(has.any()))
    out = np.zeros_like(sync)
    out[ks[has]] = True
    gaps = np.diff(np.flatnonzero(has))
    every = int(np.bincount(gaps).argmax()) if gaps.size else int(has.size)
    return UpdateCycle(out, every, True)


def find_cycles(seq: Sequence) -> Cycles | None:
    """Optimizer steps of one process (module docstring), None when the sequence shows no cycle."""
    rf, rl = runs(seq)
    if rf.size < 2:
        return None
    g = np.flatnonzero(seq.grad)
    off_main = g[~seq.main[g]]
    g = off_main if off_main.size else g
    sync = np.zeros(rf.size, dtype=bool)
    if g.size:
        owner = np.searchsorted(rf, g, "right") - 1
        sync[owner[owner >= 0]] = True
    else:
        sync[:] = True
    upd = update_cycle(seq, rf, rl, sync)
    sync = upd.sync
    rule = (
        f"the optimizer's update, seen after one gradient cycle in {upd.every}"
        if upd.every > 1
        else "gradient-sync cycles, each followed by the optimizer's update"
        if upd.told
        else "gradient-sync cycles (no optimizer kernel recognised after them: a step may be a micro-step)"
    )
    ks = np.flatnonzero(sync)
    if ks.size < 2:
        return None
    closed = ks[ks + 1 < rf.size]
    if closed.size == 0:
        return None
    a0, a1 = rl[closed] + 1, rf[closed + 1] - 1
    plain = np.flatnonzero(~sync[:-1])
    cf = _cut_offsets(seq, a0[a1 >= a0], a1[a1 >= a0], rl[plain] + 1, rf[plain + 1] - 1)
    if cf is None:
        return None
    c, f = cf
    ha = segment_hashes(seq.codes, a0[a1 >= a0], a1[a1 >= a0])
    m = int(np.flatnonzero(a1 >= a0)[_modal(ha)])
    modal = seq.codes[a0[m] : a1[m] + 1]
    fwd, opt = modal[len(modal) - f :], modal[:c]
    # After each closed sync stretch: the step ends c kernels after the sync run (the modal optimizer) and
    # the next starts f kernels before the next run (the modal forward); what lies between (the loop's own
    # work between iterations, extra work) is in no step. A stretch matching only one end is cut there.
    end_at = np.empty(closed.size, dtype=np.int64)
    cut = np.empty(closed.size, dtype=np.int64)
    gap_k = np.zeros(closed.size, dtype=np.int64)
    gap_ns = np.zeros(closed.size, dtype=np.int64)
    dur = seq.end - seq.start
    for i, (x0, x1) in enumerate(zip(a0, a1, strict=True)):
        length = x1 - x0 + 1
        sm = length >= f and (seq.codes[x1 + 1 - f : x1 + 1] == fwd).all()
        pm = length >= c and (seq.codes[x0 : x0 + c] == opt).all()
        if sm and pm and x0 + c <= x1 + 1 - f:
            end_at[i], cut[i] = x0 + c - 1, x1 + 1 - f
        elif sm:
            cut[i] = x1 + 1 - f
            end_at[i] = cut[i] - 1
        elif pm:
            end_at[i] = x0 + c - 1
            cut[i] = end_at[i] + 1
        else:  # the forward starts at the last occurrence of its first kernels, else f kernels before the run
            at_fwd = _last_occurrence(seq.codes[x0 + 1 : x1 + 1], fwd[: min(FORWARD_HEAD, (f + 1) // 2)])
            cut[i] = x0 + 1 + at_fwd if at_fwd >= 0 else max(x0 + 1, x1 + 1 - f)
            end_at[i] = cut[i] - 1
        if seq.update is not None:  # an optimizer longer than the modal one (its first call) ends with it
            limit = x1 + 1 - min(f, length) if pm and not sm else cut[i]  # where the next forward starts
            later = np.flatnonzero(seq.update[x0 : max(limit, x0)])
            if later.size and x0 + later[-1] > end_at[i]:
                end_at[i] = x0 + int(later[-1])
                cut[i] = max(cut[i], end_at[i] + 1)
        if length > len(modal):  # extra kernels: where this stretch departs from the modal one
            s_ = seq.codes[x0 : x1 + 1]
            p, q = _common(s_, modal, False), _common(s_, modal, True)
            lo, hi = (
                (x0 + p, x1 + 1 - q)
                if p + q < length
                else (x0 + min(p, c), x0 + min(p, c) + length - len(modal))
            )
            gap_k[i], gap_ns[i] = length - len(modal), int(dur[lo:hi].sum())
    # Cycle of sync run ks[j]: its first run is the one after ks[j - 1] (the first run for j = 0).
    first_run = np.r_[0, ks[:-1] + 1]
    micro = ks - first_run + 1
    modal_micro = int(np.median(micro))
    starts = np.full(ks.size, -1, dtype=np.int64)
    ends = np.full(ks.size, -1, dtype=np.int64)
    at = np.searchsorted(ks, closed)
    ends[at] = end_at
    starts[at[at + 1 < ks.size] + 1] = cut[at + 1 < ks.size]
    after_k, after_ns = np.zeros(ks.size, dtype=np.int64), np.zeros(ks.size, dtype=np.int64)
    after_k[at], after_ns[at] = gap_k, gap_ns
    x = rf[0] - f
    first_irregular = False
    if x >= 0 and micro[0] == modal_micro and (seq.codes[x : rf[0]] == fwd).all():
        starts[0] = x
    elif micro[0] == modal_micro and f and ends[0] >= 0:
        # A first iteration whose forward is not the modal one (torch.compile's: compilation and autotuning
        # launch kernels between the forward's own) is a step of its own, from the last launch of the modal
        # forward's first kernel before its backward, where that kernel occurs once in the modal stretch.
        head = fwd[0]
        if int(np.count_nonzero(modal == head)) == 1:
            hits = np.flatnonzero(seq.codes[: rf[0]] == head)
            if hits.size:
                starts[0], first_irregular = _compile_start(seq, int(hits[-1]), starts, ends), True
    last_sync = ks[-1]
    if last_sync + 1 >= rf.size:  # the trace ends after this cycle's optimizer (most of the modal one)
        x0 = rl[last_sync] + 1
        p = _common(seq.codes[x0:], opt, False)
        if p >= max(1.0, LAST_OPTIMIZER_SHARE * c):
            ends[-1] = x0 + p - 1
            if seq.update is not None:  # and no earlier than its last update kernel before a next forward
                nxt = _first_occurrence(seq.codes[x0:], fwd[: min(FORWARD_HEAD, (f + 1) // 2)])
                later = np.flatnonzero(seq.update[x0 : x0 + nxt if nxt >= 0 else len(seq.codes)])
                if later.size:
                    ends[-1] = max(ends[-1], x0 + int(later[-1]))
    ok = (starts >= 0) & (ends >= starts)
    if ok.sum() < 2:
        return None
    return Cycles(
        first=starts[ok],
        last=ends[ok],
        micro_steps=micro[ok],
        forward_kernels=f,
        optimizer_kernels=c,
        after_kernels=after_k[ok],
        after_gpu_ns=after_ns[ok],
        rule=rule,
        first_irregular=first_irregular and bool(ok[0]),
    )


def _compile_start(seq: Sequence, anchor: int, starts: np.ndarray, ends: np.ndarray) -> int:
    """Where a compiled job's first iteration starts, given the last launch of the modal forward's first
    kernel before its backward (``anchor``, after its own autotuning). Compilation pauses the host for
    seconds: a launch gap over COMPILE_PAUSE_STEPS times the median host span of the other steps. The
    iteration starts at the first launch after the earliest such pause reached going back from ``anchor``
    without crossing an NCCL kernel (the job's set-up collectives are not in it)."""
    ok = (starts >= 0) & (ends >= starts)
    if not ok.any():
        return anchor
    period = float(np.median(seq.lt[ends[ok]] - seq.lt[starts[ok]]))
    gap = np.diff(seq.lt[: anchor + 1], prepend=seq.lt[0])
    paused = np.flatnonzero(gap > COMPILE_PAUSE_STEPS * period)
    nccl = np.r_[
        0, np.cumsum(~seq.compute)
    ]  # NCCL kernels (the sequence's non-compute ones) before each position
    start = anchor
    for j in paused[::-1]:
        if nccl[start] - nccl[j] > 0:
            break
        start = int(j)
    return start


def extra_work(
    seq: Sequence, first: np.ndarray, last: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(extra_kernels, extra_gpu_ns, extra_host_ns) per step (module docstring)."""
    k = len(first)
    ek, eg, eh = np.zeros(k, np.int64), np.zeros(k, np.int64), np.zeros(k, np.int64)
    if k == 0:
        return ek, eg, eh
    h = segment_hashes(seq.codes, first, last)
    m = _modal(h)
    modal = seq.codes[first[m] : last[m] + 1]
    lens = last - first + 1
    dur = seq.end - seq.start
    for i in np.flatnonzero((h != h[m]) & (lens > len(modal))):
        s = seq.codes[first[i] : last[i] + 1]
        p, q = _common(s, modal, False), _common(s, modal, True)
        lo, hi = first[i] + p, last[i] + 1 - q
        if hi <= lo:  # prefix and suffix overlap: the extra kernels lie where they meet
            lo, hi = (
                first[i] + min(p, len(s) - len(modal)),
                first[i] + min(p, len(s) - len(modal)) + len(s) - len(modal),
            )
            lo = max(lo, first[i])
        ek[i] = lens[i] - len(modal)
        eg[i] = int(dur[lo:hi].sum())
    # Host period: first launch to the next step's first launch (the last step: its span plus the others'
    # median period beyond their span).
    span = (seq.lt[last] - seq.lt[first]).astype(float)
    if k > 1:
        period = (seq.lt[first[1:]] - seq.lt[first[:-1]]).astype(float)
        span = np.r_[period, span[-1] + float(np.median(period - span[:-1]))]
    med = float(np.median(span))
    mad = float(np.median(np.abs(span - med)))
    over = span - med
    eh = np.where(over > max(HOST_EXTRA_SHARE * med, HOST_EXTRA_MADS * mad), over, 0).astype(np.int64)
    return ek, eg, eh
