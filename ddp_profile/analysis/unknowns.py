"""What a rank's capture lacks, and which of its numbers are then unknown rather than 0.

A rank stays in every table whatever its export lacks; what cannot be measured is left empty (NaN) and a note
says why. Per rank, from its kernels (``rank_gaps``):

- **no launch times** (its export has no CUDA API rows): kernels cannot be tied to the host steps that
  launched them; its collectives take the step of the same collective on its peers, and its host time
  (GPU idle awaiting launches) and straggler cause are unknown;
- **unnamed kernels** (the string table lacks their names; more than :data:`UNNAMED_SHARE` of its kernels):
  compute cannot be told from NCCL, so every number that splits its GPU time by kind is unknown
  (:data:`KIND_COLUMNS`);
- **no NCCL kernels while its peers have some**: its communication is unknown (:data:`COMM_COLUMNS`), and so
  is every rank's wait for it: the wait/transfer split is unknown on every rank, and no lead is measured
  against it.

Opens no file.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ddp_profile.analysis import identity as ident
from ddp_profile.analysis import windows as win
from ddp_profile.analysis.kernel_arrays import KernelArrays, ints

UNNAMED_SHARE = 0.01
"""A rank with more than this share of unnamed kernels has its by-kind numbers unknown."""
COMM_COLUMNS = [
    "comm_ns",
    "overlap_ns",
    "exposed_comm_ns",
    "idle_ns",
    "comm_tail_ns",
    "comm_pct",
    "exposed_comm_pct",
    "exposed_wait_ns",
    "exposed_transfer_ns",
    "param_sync_ns",
    "exposed_param_sync_ns",
    "exposed_allgather_ns",
]
"""Step columns unknown for a rank whose NCCL kernels are missing (idle counts their time as idle)."""
KIND_COLUMNS = ["compute_ns", "copy_ns", *COMM_COLUMNS]
"""Step columns unknown for a rank whose kernels have no names."""
SPLIT_COLUMNS = ["exposed_wait_ns", "exposed_transfer_ns"]
RANK_COMM_COLUMNS = ["comm_ns", "overlap_ns", "exposed_comm_ns", "overlap_pct"]
RANK_KIND_COLUMNS = ["compute_ns", *RANK_COMM_COLUMNS]


@dataclass
class RankGaps:
    """Per rank of a part: kernels, unnamed kernels, NCCL kernels, and kernels with a launch time."""

    n: dict[int, int]
    unnamed: dict[int, int]
    nccl: dict[int, int]
    launched: dict[int, int]


def rank_gaps(karr: KernelArrays) -> RankGaps:
    """Counts per rank from a part's ``KernelArrays``: all kernels, kind 'unknown', NCCL, launch time known."""
    rank = np.asarray(karr.rank, dtype=np.int64)
    kind = karr.frame["kind"] if karr.frame is not None and "kind" in karr.frame else None
    unknown = (
        (kind == "unknown").to_numpy(dtype=bool) if kind is not None else np.zeros(len(rank), dtype=bool)
    )

    def count(mask) -> dict[int, int]:
        return {
            int(r): int(n) for r, n in pd.Series(np.asarray(mask, dtype=np.int64)).groupby(rank).sum().items()
        }

    return RankGaps(
        n=count(np.ones(len(rank))),
        unnamed=count(unknown),
        nccl=count(karr.is_nccl),
        launched=count(np.asarray(karr.launch) >= 0),
    )


def merge(gaps: list[RankGaps]) -> RankGaps:
    out = RankGaps({}, {}, {}, {})
    for g in gaps:
        for name in ("n", "unnamed", "nccl", "launched"):
            getattr(out, name).update(getattr(g, name))
    return out


def nameless(g: RankGaps) -> list[int]:
    return sorted(r for r, n in g.n.items() if n and g.unnamed.get(r, 0) > UNNAMED_SHARE * n)


def silent(g: RankGaps) -> list[int]:
    """Ranks without NCCL kernels (and with names) while another rank has some."""
    if not any(g.nccl.values()):
        return []
    return sorted(r for r, n in g.n.items() if n and not g.nccl.get(r) and r not in nameless(g))


def unlaunched(g: RankGaps) -> list[int]:
    """Ranks none of whose kernels has a launch time, while another rank's have."""
    if not any(g.launched.values()):
        return []
    return sorted(r for r, n in g.n.items() if n and not g.launched.get(r))


def _ranks(ranks: list[int]) -> str:
    return (
        ("rank " if len(ranks) == 1 else "ranks ")
        + ", ".join(map(str, ranks[:8]))
        + (" ..." if len(ranks) > 8 else "")
    )


def notes(g: RankGaps) -> list[str]:
    out = []
    if nameless(g):
        r = nameless(g)
        n = sum(g.unnamed[x] for x in r)
        out.append(
            f"{_ranks(r)}: {n} kernel(s) have no name (the export's string table lacks them): NCCL kernels "
            "cannot be told from compute there, so compute, communication, idle and the wait/transfer split "
            "of those ranks are unknown (left empty), and so is every rank's wait for them"
        )
    # ranks without NCCL kernels: the collective table's note (``collectives.match_collectives``)
    if unlaunched(g):
        out.append(
            f"{_ranks(unlaunched(g))}: no CUDA API rows (no launch times): their collectives take the step "
            "of the same collective on the other ranks, their steps are the host step ranges, and their host "
            "time and straggler cause are unknown"
        )
    return out


def borrowed_steps(
    ref_host: pd.DataFrame, ref_gpu: pd.DataFrame, rank: int, pid: int, launched: bool
) -> pd.DataFrame:
    """The reference rank's labelled steps (RANGE_COLUMNS, aligned clocks) lent to ``rank`` (process ``pid``):
    its host ranges when the rank has launch times (its kernels are then projected by launch, as its own steps'
    would be), else the reference's GPU windows (a range without launches is its own GPU window)."""
    out = ref_host.assign(
        rank=rank, pid=pid, **{c: np.nan for c in ref_host.columns if c.startswith("extra_")}
    )
    out = out.reset_index(drop=True)  # the reference's extra work is not this rank's
    if not launched and ref_gpu is not None and len(ref_gpu):
        win = ref_gpu.set_index("step")
        at = win.index.get_indexer(out["step"].to_numpy())
        ok = at >= 0
        hs, he = out["host_start_ns"].to_numpy(np.int64).copy(), out["host_end_ns"].to_numpy(np.int64).copy()
        hs[ok], he[ok] = win["start_ns"].to_numpy(np.int64)[at[ok]], win["end_ns"].to_numpy(np.int64)[at[ok]]
        out = out.assign(host_start_ns=hs, host_end_ns=he)
    return out


def borrowed_note(ranks: list[int], ref: int) -> str:
    return (
        f"{_ranks(ranks)}: no steps of their own were found (see the other notes): their steps are rank {ref}'s, "
        "on the aligned clock (its host step ranges, or its GPU step windows for a rank without launch times), "
        f"so their step times are rank {ref}'s boundaries, not their own"
    )


def rank_pids(karr: KernelArrays) -> dict:
    """rank -> the process of its first kernel."""
    if not len(karr.rank):
        return {}
    ranks, first = np.unique(np.asarray(karr.rank, dtype=np.int64), return_index=True)
    return {int(r): int(karr.pid[i]) for r, i in zip(ranks, first, strict=True)}


def gpu_steps(host_steps: pd.DataFrame, karr: KernelArrays) -> pd.DataFrame | None:
    """rank, step (own number), start_ns, end_ns: each host step's GPU window (``windows.project``)."""
    if host_steps is None or host_steps.empty:
        return None
    gs, ge, _ = win.project(host_steps, karr.start, karr.end, karr.launch, karr.pid)
    return pd.DataFrame(
        {"rank": ints(host_steps["rank"]), "step": ints(host_steps["step"]), "start_ns": gs, "end_ns": ge}
    )


def borrow_steps(
    found: list, labelled: list[pd.DataFrame], labels: pd.DataFrame, notes: list[str]
) -> list[pd.DataFrame]:
    """A rank that ran GPU work but whose steps were not found (no launch threads, unnamed kernels) gets the
    reference rank's aligned step boundaries (:func:`borrowed_steps`), never its own micro-steps."""
    have = {int(r) for s in labelled if not s.empty for r in s["rank"].unique()}
    if not have:
        return labelled
    ref = min(have)
    ref_host = next(s[s["rank"] == ref] for s in labelled if not s.empty and (s["rank"] == ref).any())
    gpu = pd.concat([p.gpu_steps for p in found if p.gpu_steps is not None], ignore_index=True)
    ref_gpu = ident.relabel(gpu[gpu["rank"] == ref], labels)
    gaps = merge([p.gaps for p in found if p.gaps is not None])
    lent = []
    for i, p in enumerate(found):
        lacking = [r for r in p.ranks if r not in have and r in p.rank_pids]
        if not lacking:
            continue
        extra = [
            borrowed_steps(ref_host, ref_gpu, r, p.rank_pids[r], bool(gaps.launched.get(r))) for r in lacking
        ]
        labelled[i] = (
            pd.concat([labelled[i], *extra], ignore_index=True)
            if not labelled[i].empty
            else pd.concat(extra, ignore_index=True)
        )
        lent += lacking
    if lent:
        notes.append(borrowed_note(sorted(lent), ref))
    return labelled


def without_silent(own: list[pd.DataFrame], found: list) -> list[pd.DataFrame]:
    """Each part's inferred steps less those of ranks without NCCL kernels while peers have some: inference cuts
    steps at gradient-sync cycles, so what it cut on such a rank are its micro-steps (they borrow instead)."""
    quiet = silent(merge([p.gaps for p in found if p.gaps is not None]))
    return [s.loc[~s["rank"].isin(quiet)].reset_index(drop=True) if quiet and not s.empty else s for s in own]


def blank(steps: pd.DataFrame, rank_overlap: pd.DataFrame, g: RankGaps) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The step and rank tables with what is unknown left empty (NaN), per the module docstring."""
    no_name, no_nccl = nameless(g), silent(g)
    if not no_name and not no_nccl:
        return steps, rank_overlap

    def wipe(df: pd.DataFrame, ranks: list[int] | None, cols: list[str]) -> pd.DataFrame:
        if df is None or df.empty:
            return df
        rows = df["rank"].isin(ranks).to_numpy() if ranks is not None else np.ones(len(df), dtype=bool)
        if not rows.any():
            return df
        return df.assign(**{c: np.where(rows, np.nan, df[c].to_numpy(dtype=float)) for c in cols if c in df})

    steps = wipe(steps, no_name, KIND_COLUMNS)
    steps = wipe(steps, no_nccl, COMM_COLUMNS)
    steps = wipe(steps, None, SPLIT_COLUMNS)  # every rank's wait is for the unseen ranks too
    rank_overlap = wipe(rank_overlap, no_name, RANK_KIND_COLUMNS)
    rank_overlap = wipe(rank_overlap, no_nccl, RANK_COMM_COLUMNS)
    return steps, rank_overlap


def waits_unknown(g: RankGaps) -> bool:
    """Whether no collective's wait can be called: a rank ran NCCL kernels unseen (missing or unnamed)."""
    return bool(nameless(g) or silent(g)) and any(g.nccl.values())
