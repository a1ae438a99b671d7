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

import numpy as np
import pandas as pd

LABEL_COLUMNS = ["rank", "step", "label"]


def common_steps(steps: pd.DataFrame, rows: pd.DataFrame | None, inferred: bool) -> tuple[pd.DataFrame, list[str]]:
    """(LABEL_COLUMNS: every kept (rank, own step number) with its common label; notes).

    ``steps``: every rank's host step ranges (``rank, pid, step, host_start_ns, host_end_ns``, the rank's own
    numbers); ``rows``: the collective rows of every rank (``rank, comm, seq, step``; None without NCCL
    kernels); ``inferred``: the steps were inferred (labels 0, 1, ...), else NVTX numbers are kept."""
    if steps.empty:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in LABEL_COLUMNS}), []
    s = steps[["rank", "step", "host_start_ns", "host_end_ns"]].drop_duplicates(["rank", "step"])
    s = s.astype({"rank": "int64", "step": "int64"}).sort_values(["rank", "host_start_ns"], kind="stable")
    ranks = np.unique(s["rank"].to_numpy())
    ref = int(ranks[0])
    theirs = s.loc[s["rank"] != ref]
    mine = s.loc[s["rank"] == ref]
    assigned = _by_collectives(theirs, rows, ref)
    assigned = _by_time(theirs, mine, assigned)
    # the reference rank's own steps are the iterations
    assigned = pd.concat([pd.DataFrame({"rank": ref, "step": mine["step"].to_numpy(), "iteration": mine["step"].to_numpy(),
                                        "votes": np.iinfo(np.int64).max}), assigned], ignore_index=True)
    assigned = assigned.sort_values(["rank", "iteration", "votes"], ascending=[True, True, False], kind="stable")
    assigned = assigned.drop_duplicates(["rank", "iteration"])  # one step per rank and iteration
    cover = assigned.groupby("iteration")["rank"].nunique()
    full = cover.index[cover.to_numpy() == len(ranks)]
    kept = assigned.loc[assigned["iteration"].isin(full)]
    order = mine.loc[mine["step"].isin(full), "step"].to_numpy()  # iterations in the reference's time order
    if inferred:
        label_of = dict(zip(order.tolist(), range(len(order)), strict=True))
    else:
        label_of = {int(t): int(t) for t in order}
    out = pd.DataFrame({"rank": kept["rank"].to_numpy(np.int64), "step": kept["step"].to_numpy(np.int64),
                        "label": kept["iteration"].map(label_of).to_numpy(np.int64)})
    out = out.sort_values(["rank", "label"], kind="stable").reset_index(drop=True)
    return out, _notes(s, out, ref, inferred)


def _by_collectives(theirs: pd.DataFrame, rows: pd.DataFrame | None, ref: int) -> pd.DataFrame:
    """(rank, step, iteration, votes): the reference step sharing the most collectives with each step."""
    empty = pd.DataFrame({"rank": pd.Series(dtype="int64"), "step": pd.Series(dtype="int64"),
                          "iteration": pd.Series(dtype="int64"), "votes": pd.Series(dtype="int64")})
    if rows is None or not len(rows) or theirs.empty:
        return empty
    r = rows.loc[rows["step"].notna(), ["rank", "comm", "seq", "step"]]
    at_ref = r.loc[r["rank"] == ref].drop_duplicates(["comm", "seq"]).rename(columns={"step": "iteration"})
    other = r.loc[r["rank"] != ref]
    if at_ref.empty or other.empty:
        return empty
    m = other.merge(at_ref[["comm", "seq", "iteration"]], on=["comm", "seq"], how="inner")
    if m.empty:
        return empty
    votes = m.groupby(["rank", "step", "iteration"], sort=True).size().rename("votes").reset_index()
    # most votes first, then the earliest iteration: one iteration per step
    votes = votes.sort_values(["rank", "step", "votes", "iteration"], ascending=[True, True, False, True],
                              kind="stable").drop_duplicates(["rank", "step"])
    return votes.astype("int64").reset_index(drop=True)


def _by_time(theirs: pd.DataFrame, mine: pd.DataFrame, assigned: pd.DataFrame) -> pd.DataFrame:
    """``assigned`` plus the steps it lacks (no collective shared with the reference), each given the
    reference step whose host range overlaps it most (none: left out); votes 0, so a step matched by its
    collectives keeps its iteration."""
    done = pd.MultiIndex.from_frame(assigned[["rank", "step"]]) if len(assigned) else None
    left = theirs if done is None else theirs.loc[~pd.MultiIndex.from_frame(theirs[["rank", "step"]]).isin(done)]
    if left.empty or mine.empty:
        return assigned
    rs, re_ = mine["host_start_ns"].to_numpy(np.int64), mine["host_end_ns"].to_numpy(np.int64)
    ls, le = left["host_start_ns"].to_numpy(np.int64), left["host_end_ns"].to_numpy(np.int64)
    got = np.full(len(left), -1, dtype=np.int64)
    for lo in range(0, len(left), 4096):  # a (chunk x reference steps) overlap matrix at a time
        hi = min(lo + 4096, len(left))
        over = np.minimum(le[lo:hi, None], re_[None, :]) - np.maximum(ls[lo:hi, None], rs[None, :])
        best = over.argmax(axis=1)
        got[lo:hi] = np.where(over[np.arange(hi - lo), best] > 0, best, -1)
    ok = got >= 0
    extra = pd.DataFrame({"rank": left["rank"].to_numpy(np.int64)[ok], "step": left["step"].to_numpy(np.int64)[ok],
                          "iteration": mine["step"].to_numpy(np.int64)[got[ok]], "votes": 0})
    return pd.concat([assigned, extra], ignore_index=True) if len(assigned) else extra


def _notes(s: pd.DataFrame, out: pd.DataFrame, ref: int, inferred: bool) -> list[str]:
    notes = []
    kept = pd.MultiIndex.from_frame(out[["rank", "step"]])
    dropped = s.loc[~pd.MultiIndex.from_frame(s[["rank", "step"]]).isin(kept)]
    if len(dropped):
        per = []
        for rank, g in dropped.groupby("rank", sort=True):
            k = out.loc[out["rank"] == rank]
            start = s.loc[(s["rank"] == rank) & s["step"].isin(k["step"]), "host_start_ns"]
            t0 = start.min() if len(start) else np.inf
            before = int((g["host_start_ns"] < t0).sum())
            what = f"{before} before the first common step, {len(g) - before} after it or between"
            if not inferred:
                what += " (NVTX step " + ", ".join(str(int(v)) for v in g["step"].to_numpy()[:8]) + \
                        (", ..." if len(g) > 8 else "") + ")"
            per.append(f"rank {int(rank)}: {what}")
        notes.append(f"{len(dropped)} step(s) left out: their iteration is not covered by every rank's steps "
                     "(partial first or last iteration of the capture, or work one rank alone did); "
                     + "; ".join(per[:8]) + ("; ..." if len(per) > 8 else ""))
    if not inferred and len(out) and (out["step"] != out["label"]).any():
        ranks = sorted(out.loc[out["step"] != out["label"], "rank"].unique().tolist())
        notes.append(f"rank(s) {', '.join(map(str, ranks[:8]))} number the same iterations differently in their "
                     f"NVTX step ranges (matched by their collectives): steps carry rank {ref}'s numbers")
    return notes


def relabel(frame: pd.DataFrame, labels: pd.DataFrame, *, keep_unlabelled: bool = False) -> pd.DataFrame:
    """``frame`` (with ``rank`` and ``step``, the rank's own numbers) with ``step`` = the common label. Rows
    without a label are dropped, or with ``keep_unlabelled`` kept with ``step`` = NA (collective rows)."""
    if frame is None or not len(frame):
        return frame
    has = frame["step"].notna().to_numpy()
    key = pd.MultiIndex.from_arrays([frame["rank"].to_numpy(np.int64),
                                     np.where(has, frame["step"].to_numpy(dtype=float, na_value=-1), -1).astype(np.int64)])
    lookup = pd.Series(labels["label"].to_numpy(np.int64),
                       index=pd.MultiIndex.from_frame(labels[["rank", "step"]].astype("int64")))
    got = lookup.reindex(key).to_numpy()
    ok = ~np.isnan(got.astype(float)) & has
    if keep_unlabelled:
        step = pd.array(np.where(ok, got, 0).astype(np.int64), dtype="Int64")
        step[~ok] = pd.NA
        return frame.assign(step=step)
    out = frame.loc[ok].copy()
    out["step"] = got[ok].astype(np.int64)
    return out.reset_index(drop=True)


def select(labels: pd.DataFrame, which) -> pd.DataFrame:
    """The labels kept by ``which``: "all"/None, "A:B" (A <= label < B; "A:" and ":B" open), "A" (that
    label) or an iterable of labels. A selection that keeps nothing of a trace with steps, or any selection
    of a trace without steps, is a UsageError naming the trace's labels."""
    from ddp_profile.analysis.windows import parse_steps
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
            keep = (lab >= (lo if lo is not None else np.iinfo(np.int64).min)) & \
                   (lab < (hi if hi is not None else np.iinfo(np.int64).max))
    else:
        keep = np.isin(lab, np.asarray(list(which), dtype=np.int64))
    if not keep.any():
        shown = which if isinstance(which, str) else ",".join(map(str, which))
        raise UsageError(f"no step in {shown}; the trace has {describe(lab)}")
    return labels.loc[keep].reset_index(drop=True)


def describe(labels) -> str:
    """"steps 3–7", "steps 0–4, 6, 9–12" or "no steps" (runs of consecutive labels, at most 6 runs shown)."""
    u = np.unique(np.asarray(labels, dtype=np.int64))
    if not len(u):
        return "no steps (see the notes of `ddp-profile analyze`)"
    cuts = np.flatnonzero(np.diff(u) != 1) + 1
    runs = [(int(r[0]), int(r[-1])) for r in np.split(u, cuts)]
    text = [f"{a}–{b}" if b > a else f"{a}" for a, b in runs[:6]]
    return ("step " if len(u) == 1 else "steps ") + ", ".join(text) + (", ..." if len(runs) > 6 else "")
