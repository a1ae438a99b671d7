"""One step identity across ranks: step k is the same training iteration on every rank.

Each rank's steps come with the rank's own numbers (NVTX step numbers, or the order of inferred steps), and
a rank can find one step more or fewer than another (a partial first or last iteration in the capture,
rank 0 evaluating before the first step). Ranks are aligned through the collective sequence: the n-th
collective of a communicator, ``(comm, seq)`` in the collective table, is the same collective on every
rank, so it belongs to the same iteration on every rank.

With R = the lowest rank that has steps (the reference), for every other rank r and step s of r::

    votes(s, t) = #{collectives (comm, seq) launched in step s on r and in step t on R}
    iteration(s) = the t with the most votes (ties: the earliest t)

A step of r with no collective inside (e.g. a micro-step under ``no_sync``) goes to the step of R whose host
range overlaps it most. Two steps of r claiming the same t: the one with more votes keeps it. An iteration
is kept when every rank that has steps has a step in it; the others (partial first and last iterations)
are dropped with a note.

Labels: NVTX step numbers when the steps come from NVTX (the reference rank's numbers; a note says so when
other ranks number the same iterations differently); inferred steps are numbered 0, 1, ... from the first
iteration every rank covers. Without collectives (one rank, or no NCCL kernels) steps align by host time
the same way. Opens no file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

LABEL_COLUMNS = ["rank", "step", "label"]


def _first_per(keys: list[np.ndarray]) -> np.ndarray:
    """Positions of the first row of each distinct key tuple, rows taken in their given order (ascending)."""
    if not len(keys[0]):
        return np.zeros(0, dtype=np.intp)
    order = np.lexsort(keys[::-1])  # stable: equal keys keep their order
    sk = [k[order] for k in keys]
    new = np.ones(len(order), dtype=bool)
    new[1:] = np.any([k[1:] != k[:-1] for k in sk], axis=0)
    return np.sort(order[new])


def common_steps(
    steps: pd.DataFrame, rows: pd.DataFrame | None, inferred: bool
) -> tuple[pd.DataFrame, list[str]]:
    """(LABEL_COLUMNS: every kept (rank, own step number) with its common label; notes).

    ``steps``: every rank's host step ranges (``rank, step, host_start_ns, host_end_ns``, the rank's own
    numbers); ``rows``: the collective rows of every rank (``rank, comm, seq, step``; None without NCCL
    kernels); ``inferred``: the steps were inferred (labels 0, 1, ...), else NVTX numbers are kept."""
    if steps.empty:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in LABEL_COLUMNS}), []
    rank, step = steps["rank"].to_numpy(np.int64), steps["step"].to_numpy(np.int64)
    hs, he = steps["host_start_ns"].to_numpy(np.int64), steps["host_end_ns"].to_numpy(np.int64)
    keep = _first_per([rank, step])
    by_time = np.lexsort((hs[keep], rank[keep]))  # per rank, in time order
    keep = keep[by_time]
    rank, step, hs, he = rank[keep], step[keep], hs[keep], he[keep]
    ranks = np.unique(rank)
    ref = int(ranks[0])
    mine = rank == ref
    # (rank, step, iteration, votes) candidates: the reference's own steps, steps matched by collectives,
    # steps matched by host time (votes 0)
    cand = [(rank[mine], step[mine], step[mine], np.full(int(mine.sum()), np.iinfo(np.int64).max))]
    voted = _by_collectives(rows, ref)
    known = np.isin(
        voted[0], ranks
    )  # rows of a rank without steps here (their steps were set aside) vote not
    voted = tuple(v[known] for v in voted)
    cand.append(voted)
    has_vote = np.zeros(len(rank), dtype=bool)
    if len(voted[0]):
        has_vote = (
            pd.MultiIndex.from_arrays([voted[0], voted[1]]).get_indexer(
                pd.MultiIndex.from_arrays([rank, step])
            )
            >= 0
        )
    left = ~mine & ~has_vote
    if left.any():
        cand.append(_by_time(rank[left], step[left], hs[left], he[left], step[mine], hs[mine], he[mine]))
    c_rank, c_step, c_it, c_votes = (np.concatenate([c[k] for c in cand]) for k in range(4))
    # one step per (rank, iteration): the most votes
    best = np.lexsort((-c_votes, c_it, c_rank))
    c_rank, c_step, c_it, c_votes = c_rank[best], c_step[best], c_it[best], c_votes[best]
    first = _first_per([c_rank, c_it])
    c_rank, c_step, c_it = c_rank[first], c_step[first], c_it[first]
    its, n_ranks = np.unique(c_it, return_counts=True)
    full = its[n_ranks == len(ranks)]
    ok = np.isin(c_it, full)
    if inferred:  # 0, 1, ... in the reference's time order of the kept iterations
        order = step[mine][np.isin(step[mine], full)]
        srt = np.argsort(order, kind="stable")
        lab = srt[np.searchsorted(order[srt], c_it[ok])]
    else:  # the reference's NVTX numbers
        lab = c_it[ok]
    out = pd.DataFrame({"rank": c_rank[ok], "step": c_step[ok], "label": lab.astype(np.int64)})
    out = out.sort_values(["rank", "label"], kind="stable").reset_index(drop=True)
    s = pd.DataFrame({"rank": rank, "step": step, "host_start_ns": hs, "host_end_ns": he})
    notes = (
        _notes(s, out, ref, inferred)
        if len(out) < len(s) or (not inferred and (c_step[ok] != c_it[ok]).any())
        else []
    )
    return out, notes


def _by_collectives(rows: pd.DataFrame | None, ref: int) -> tuple:
    """(rank, step, iteration, votes) arrays: each non-reference step with the reference step sharing the
    most of its collectives (ties: the earliest)."""
    empty = tuple(np.zeros(0, dtype=np.int64) for _ in range(4))
    if rows is None or not len(rows):
        return empty
    has = rows["step"].notna().to_numpy()
    r_rank, comm, seq = (rows[c].to_numpy()[has].astype(np.int64) for c in ("rank", "comm", "seq"))
    r_step = rows["step"].to_numpy(dtype=np.float64, na_value=np.nan)[has].astype(np.int64)
    key = comm * (1 << 40) + seq  # (comm, seq) as one integer: comm is a small stream number
    at_ref = r_rank == ref
    ref_key, first = np.unique(key[at_ref], return_index=True)
    ref_step = r_step[at_ref][first]
    other = ~at_ref
    if not len(ref_key) or not other.any():
        return empty
    k = key[other]
    j = np.clip(np.searchsorted(ref_key, k), 0, len(ref_key) - 1)
    hit = ref_key[j] == k
    o_rank, o_step, o_it = r_rank[other][hit], r_step[other][hit], ref_step[j[hit]]
    if not len(o_rank):
        return empty
    order = np.lexsort((o_it, o_step, o_rank))  # votes = the size of each (rank, step, iteration) run
    a, b, c = o_rank[order], o_step[order], o_it[order]
    new = np.ones(len(a), dtype=bool)
    new[1:] = (a[1:] != a[:-1]) | (b[1:] != b[:-1]) | (c[1:] != c[:-1])
    starts = np.flatnonzero(new)
    votes = np.diff(np.append(starts, len(a)))
    a, b, c = a[starts], b[starts], c[starts]
    pick = np.lexsort((c, -votes, b, a))  # per step: the most votes, then the earliest iteration
    a, b, c, votes = a[pick], b[pick], c[pick], votes[pick]
    first = _first_per([a, b])
    return a[first], b[first], c[first], votes[first].astype(np.int64)


def _by_time(rank, step, hs, he, ref_step, ref_hs, ref_he) -> tuple:
    """(rank, step, iteration, votes = 0) arrays: each given step with the reference step whose host range
    overlaps it most (none: left out)."""
    got = np.full(len(rank), -1, dtype=np.int64)
    if len(ref_step):
        for lo in range(0, len(rank), 4096):  # a (chunk x reference steps) overlap matrix at a time
            hi = min(lo + 4096, len(rank))
            over = np.minimum(he[lo:hi, None], ref_he[None, :]) - np.maximum(hs[lo:hi, None], ref_hs[None, :])
            best = over.argmax(axis=1)
            got[lo:hi] = np.where(over[np.arange(hi - lo), best] > 0, best, -1)
    ok = got >= 0
    return rank[ok], step[ok], ref_step[got[ok]], np.zeros(int(ok.sum()), dtype=np.int64)


def _notes(s: pd.DataFrame, out: pd.DataFrame, ref: int, inferred: bool) -> list[str]:
    notes = []
    kept = pd.MultiIndex.from_frame(out[["rank", "step"]])
    dropped = s.loc[~pd.MultiIndex.from_frame(s[["rank", "step"]]).isin(kept)]
    if len(dropped):
        per = []
        for rank, g in dropped.groupby("rank", sort=True):
            start = s.loc[
                (s["rank"] == rank) & s["step"].isin(out.loc[out["rank"] == rank, "step"]), "host_start_ns"
            ]
            t = g["host_start_ns"].to_numpy()
            first, last = (start.min(), start.max()) if len(start) else (np.inf, -np.inf)
            counts = (
                (int((t < first).sum()), "before the first common step"),
                (int((t > last).sum()), "after the last common step"),
                (int(((t >= first) & (t <= last)).sum()), "between common steps"),
            )
            what = ", ".join(f"{n} {where}" for n, where in counts if n)
            if not inferred:
                what += (
                    " (NVTX step "
                    + ", ".join(str(int(v)) for v in g["step"].to_numpy()[:8])
                    + (", ..." if len(g) > 8 else "")
                    + ")"
                )
            per.append(f"rank {int(rank)}: {what}")
        notes.append(
            f"{len(dropped)} step(s) left out: their iteration is not covered by every rank's steps "
            "(partial first or last iteration of the capture, or work one rank alone did); "
            + "; ".join(per[:8])
            + ("; ..." if len(per) > 8 else "")
        )
    if not inferred and len(out) and (out["step"] != out["label"]).any():
        ranks = sorted(out.loc[out["step"] != out["label"], "rank"].unique().tolist())
        notes.append(
            f"rank(s) {', '.join(map(str, ranks[:8]))} number the same iterations differently in their "
            f"NVTX step ranges (matched by their collectives): steps carry rank {ref}'s numbers"
        )
    return notes


def _lookup(labels: pd.DataFrame, rank: np.ndarray, step: np.ndarray) -> np.ndarray:
    """Each (rank, step)'s position in ``labels``, -1 where it has none. Steps (any int64, e.g. 18-digit
    NVTX numbers) become dense codes first, so (rank, code) fits one int64 key."""
    l_rank, l_step = labels["rank"].to_numpy(np.int64), labels["step"].to_numpy(np.int64)
    uniq, inv = np.unique(np.concatenate([l_step, step]), return_inverse=True)
    width = len(uniq) + 1
    l_key, key = l_rank * width + inv[: len(l_step)], rank * width + inv[len(l_step) :]
    srt = np.argsort(l_key, kind="stable")
    j = np.clip(np.searchsorted(l_key[srt], key), 0, max(len(srt) - 1, 0))
    found = (l_key[srt][j] == key) if len(srt) else np.zeros(len(key), dtype=bool)
    return np.where(found, srt[j] if len(srt) else -1, -1)


def relabel(frame: pd.DataFrame, labels: pd.DataFrame, *, keep_unlabelled: bool = False) -> pd.DataFrame:
    """``frame`` (with ``rank`` and ``step``, the rank's own numbers) with ``step`` = the common label. Rows
    without a label are dropped (a new frame), or with ``keep_unlabelled`` kept with ``step`` = NA (the
    collective rows: changed in place and returned)."""
    if frame is None or not len(frame):
        return frame
    has = frame["step"].notna().to_numpy()
    step = np.where(has, frame["step"].to_numpy(dtype=np.float64, na_value=0), 0).astype(np.int64)
    at = _lookup(labels, frame["rank"].to_numpy(np.int64), step)
    ok = has & (at >= 0)
    got = (
        labels["label"].to_numpy(np.int64)[np.maximum(at, 0)] if len(labels) else np.zeros(len(at), np.int64)
    )
    if keep_unlabelled:  # in place: the collective rows are the caller's own and long
        new = pd.array(np.where(ok, got, 0), dtype="Int64")
        new[~ok] = pd.NA
        frame["step"] = new
        return frame
    out = frame.loc[ok].copy()
    out["step"] = got[ok]
    return out.reset_index(drop=True)


def select(labels: pd.DataFrame, which) -> pd.DataFrame:
    """The labels kept by ``which``: "all"/None, "A:B" (A <= label < B; "A:" and ":B" open), "A" (that
    label) or an iterable of labels. A selection that keeps nothing of a trace with steps, or any selection
    of a trace without steps, is a UsageError naming the trace's labels."""
    from ddp_profile.errors import UsageError

    if which in (None, "all"):
        return labels
    lab = labels["label"].to_numpy(np.int64)
    if isinstance(which, str):
        nums = parse_steps(which)
        if len(nums) == 1:
            keep = lab == nums[0]
        else:
            lo, hi = nums
            keep = (lab >= (lo if lo is not None else np.iinfo(np.int64).min)) & (
                lab < (hi if hi is not None else np.iinfo(np.int64).max)
            )
    else:
        keep = np.isin(lab, np.asarray(list(which), dtype=np.int64))
    if not keep.any():
        shown = which if isinstance(which, str) else ",".join(map(str, which))
        raise UsageError(f"no step in {shown}; the trace has {describe(lab)}")
    return labels.loc[keep].reset_index(drop=True)


def describe(labels) -> str:
    """ "steps 3–7", "steps 0–4, 6, 9–12" or "no steps" (runs of consecutive labels, at most 6 runs shown)."""
    u = np.unique(np.asarray(labels, dtype=np.int64))
    if not len(u):
        return "no steps (see the notes of `ddp-profile analyze`)"
    cuts = np.flatnonzero(np.diff(u) != 1) + 1
    runs = [(int(r[0]), int(r[-1])) for r in np.split(u, cuts)]
    text = [f"{a}–{b}" if b > a else f"{a}" for a, b in runs[:6]]
    return ("step " if len(u) == 1 else "steps ") + ", ".join(text) + (", ..." if len(runs) > 6 else "")


def parse_steps(which: str) -> list[int | None]:
    """``"A:B"``, ``"A:"``, ``":B"`` or ``"A"`` -> [A, B] / [A]: non-negative integers, A < B when both are
    given. Anything else (``5:2``, ``-1:``, ``1:2:3``, 20-digit numbers) is a UsageError: a selection that
    parses but keeps nothing would silently report no steps."""
    from ddp_profile.errors import UsageError

    bad = UsageError(
        f"--steps {which[:40]!r}: use 'all', 'A:B' (steps A <= step < B), 'A:' or ':B' with step "
        "labels 0 <= A < B, or one label"
    )
    parts = which.split(":")
    if len(parts) > 2 or not all(
        p.strip() == "" or (p.strip().isdigit() and len(p.strip()) <= 18) for p in parts
    ):
        raise bad
    if len(parts) == 1 and not parts[0].strip():
        raise bad
    nums = [int(p) if p.strip() else None for p in parts]
    lo, hi = nums[0], nums[-1]
    if len(nums) == 2 and lo is not None and hi is not None and lo >= hi:
        raise bad
    return nums


@dataclass(frozen=True)
class StepSelection:
    """Which steps an analysis covers, as one value (the CLI's ``--step-pattern``, ``--phase`` and ``--steps``,
    declared once in ``commands/options.py``): ``pattern``, a regex for step NVTX range names (None: the
    default patterns, else inference); ``phases``, (phase name, regex) overrides; ``steps``, the labels kept
    ("all", "A:B", "A:", ":B" or "A", :func:`parse_steps`)."""

    pattern: str | None = None
    phases: tuple[tuple[str, str], ...] = ()
    steps: str = "all"

    def analyze_kwargs(self) -> dict:
        """The keyword arguments of ``analysis.analyze`` this selection stands for."""
        return {"step_pattern": self.pattern, "phase_patterns": dict(self.phases), "steps": self.steps}

    def key(self) -> str:
        """A stable text of the selection (a cache key's part)."""
        return json.dumps(
            {"pattern": self.pattern, "phases": [list(p) for p in self.phases], "steps": self.steps}
        )
