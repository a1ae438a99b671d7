"""Ground truth for the real-job exports in ``traces/foreign/<job>/``, shared by the tests.

Two sources, neither of them ``ddp_profile.analysis``:

- ``truth.json``: the program's own CUDA-event timings (``scripts/foreign/gpt_loop.py``,
  ``hf_trainer_job.py``, ``lightning_job.py`` document the fields).
- :func:`gradient_syncs`: an independent measure of the comm tail read from the raw export with plain
  ``sqlite3``. Per rank (= the order of the CUDA device ids, as torchrun binds local rank r to GPU r):

  * a *gradient collective* is an NCCL AllReduce or ReduceScatter kernel launched from a thread other than
    the process's main thread (DDP's bucket hooks and FSDP's post-backward hooks run on the autograd
    thread; a loss all-reduce for logging or a gradient-norm all-reduce for clipping is launched from the
    main thread and is not one);
  * a *backward compute kernel* is any other kernel (not NCCL; memcpy / memset are not in the kernel table)
    launched from a non-main thread;
  * where a process launches no such collective from another thread (DeepSpeed reduces from the main thread
    once backward is done), its gradient collectives are the main thread's AllReduce / ReduceScatter kernels
    launched after a backward kernel and before the next optimizer kernel (``multi_tensor_apply``) — a
    gradient-norm all-reduce for clipping, before the update, is then among them;
  * the gradient collectives are cut into *syncs*, one per optimizer step (one per micro-step where every
    micro-step reduces, as DeepSpeed's do): a sync ends where the main thread launches a kernel between two
    gradient collectives (by host launch time: the main thread is blocked in ``backward()`` while the
    autograd thread launches a step's reductions); main-thread reductions form one sync per backward they
    follow;
  * per sync: ``update_end_ns`` = end of the last optimizer kernel (``multi_tensor_apply``: foreach and fused
    optimizers) the main thread launched after its last gradient collective and before both the next sync's
    first and the main thread's next AllGather / Broadcast (the next forward's parameter gathers; DDP's
    buffer broadcast), leaving out one launched right before an AllGather (FSDP2's copy of the parameters
    into the gather's input is a ``multi_tensor_apply`` kernel too); NaN where none (a micro-step whose
    gradients were reduced but not applied);
  * per sync: ``tail_ns`` = end of its last gradient collective − end of the last backward compute
    kernel launched after the previous sync's last collective launch and before this sync's last
    collective launch (DDP's copy-back of the reduced buckets into ``.grad`` is launched after that and is
    left out). DDP's copy of gradients into a bucket just before its all-reduce counts as compute here; it
    ends microseconds before the all-reduce starts.

Traces are read once per process (``functools.cache``): loading and analysing all eight takes ~10 s.
"""

from __future__ import annotations

import functools
import json
import lzma
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ddp_profile.analysis import Analysis, analyze
from ddp_profile.nsys.loader import load_trace

FOREIGN = Path(__file__).resolve().parents[2] / "traces" / "foreign"
# Every foreign job that wrote the programs' truth.json (the older ones have program.json instead).
JOBS = sorted(p.parent.name for p in FOREIGN.glob("*/truth.json"))

_KERNELS = """
SELECT k.deviceId AS device, k.start AS start_ns, k.end AS end_ns, s.value AS name,
       r.start AS launch_ns, (r.globalTid & 16777215) = ((r.globalTid >> 24) & 16777215) AS main_thread
FROM CUPTI_ACTIVITY_KIND_KERNEL AS k
JOIN StringIds AS s ON s.id = k.shortName
JOIN CUPTI_ACTIVITY_KIND_RUNTIME AS r
  ON r.correlationId = k.correlationId AND (r.globalTid >> 24) = (k.globalPid >> 24)
"""


@dataclass
class Job:
    name: str
    truth: dict
    analysis: Analysis
    syncs: pd.DataFrame  # gradient_syncs(): rank, sync, last_coll_end_ns, last_backward_end_ns, tail_ns,
    # update_end_ns
    arrivals: pd.DataFrame  # last_arrivals(): index, last_rank

    def true_iter_ms(self) -> np.ndarray:
        """Every rank's every iteration time (ms), iteration 0 (warm-up, compilation) included."""
        return np.array([it["iter_ms"] for rank in self.truth["iterations"] for it in rank], dtype=float)

    def true_period_ms(self) -> np.ndarray:
        """Every rank's start-to-start time of consecutive iterations (ms, from ``gpu_start_ms``)."""
        return np.array(
            [
                b["gpu_start_ms"] - a["gpu_start_ms"]
                for rank in self.truth["iterations"]
                for a, b in zip(rank, rank[1:], strict=False)
            ],
            dtype=float,
        )

    def span_pairs(self) -> pd.DataFrame:
        """(rank, step, span_ms, true_ms) for each rank's steps after its first: the analysis's ``span_ns``
        against the program's own period of that iteration, end event to end event (``gpu_start_ms +
        iter_ms`` of it minus the previous iteration's). Steps pair with the program's last iterations (a step
        the analysis leaves out is an early one: warm-up, compilation; the ``count`` check bounds how many)."""
        rows = []
        for rank, g in self.analysis.steps.groupby("rank"):
            its = self.truth["iterations"][int(rank)]
            ends = np.array([it["gpu_start_ms"] + it["iter_ms"] for it in its])
            g = g.sort_values("step")
            span = g["span_ns"].to_numpy(dtype=float)[1:] / 1e6
            period = np.diff(ends)[len(ends) - 1 - len(span) :]
            rows.append(
                pd.DataFrame(
                    {"rank": int(rank), "step": g["step"].to_numpy()[1:], "span_ms": span, "true_ms": period}
                )
            )
        return pd.concat(rows, ignore_index=True)

    def true_iterations(self) -> int:
        return min(len(rank) for rank in self.truth["iterations"])


def raw_kernels(export: Path) -> pd.DataFrame:
    """Kernels of the raw export with their launching thread (main or not) and rank (device order)."""
    con = sqlite3.connect(":memory:")
    try:
        con.deserialize(lzma.decompress(export.read_bytes()))
        df = pd.read_sql_query(_KERNELS, con)
    finally:
        con.close()
    df["rank"] = df["device"].rank(method="dense").astype(int) - 1
    df["nccl"] = df["name"].str.startswith("nccl")
    reduce = df["nccl"] & df["name"].str.contains("AllReduce|ReduceScatter")
    df["gradient"] = reduce & (df["main_thread"] == 0)
    for _, k in df.groupby("rank"):
        if df.loc[k.index, "gradient"].any():
            continue
        # DeepSpeed reduces from the main thread once backward is done: a main-thread reduction launched
        # after a backward kernel and before the next optimizer kernel or backward kernel.
        bw = np.sort(k.loc[(k["main_thread"] == 0) & ~k["nccl"], "launch_ns"].to_numpy())
        upd = np.sort(
            k.loc[
                (k["main_thread"] == 1) & k["name"].str.contains("multi_tensor_apply"), "launch_ns"
            ].to_numpy()
        )
        cand = k[reduce.loc[k.index] & (k["main_thread"] == 1)]
        t = cand["launch_ns"].to_numpy()
        prev = np.searchsorted(bw, t) - 1
        after_bw = bw[np.maximum(prev, 0)]
        next_upd = np.searchsorted(upd, after_bw, "right")
        ok = (prev >= 0) & ((next_upd >= upd.size) | (upd[np.minimum(next_upd, max(upd.size - 1, 0))] > t))
        df.loc[cand.index[ok], "gradient"] = True
    return df


def gradient_syncs(kernels: pd.DataFrame) -> pd.DataFrame:
    """One row per rank and gradient synchronisation (see the module docstring)."""
    rows = []
    for rank, k in kernels.groupby("rank"):
        k = k.sort_values("launch_ns")
        grad = k[k["gradient"]]
        main_launches = np.sort(k.loc[k["main_thread"] == 1, "launch_ns"].to_numpy())
        launches = grad["launch_ns"].to_numpy()
        backward = k[(k["main_thread"] == 0) & ~k["nccl"]]
        if (grad["main_thread"] == 1).all():  # main-thread reductions: one sync per backward they follow
            sync_id = np.unique(
                np.searchsorted(np.sort(backward["launch_ns"].to_numpy()), launches), return_inverse=True
            )[1]
        else:  # a new sync starts where a main-thread launch falls between two consecutive gradient collectives
            between = np.searchsorted(main_launches, launches[1:]) > np.searchsorted(
                main_launches, launches[:-1]
            )
            sync_id = np.concatenate([[0], np.cumsum(between)])
        main = k[k["main_thread"] == 1]
        feeds_gather = np.r_[
            main["nccl"].to_numpy()[1:] & main["name"].str.contains("AllGather").to_numpy()[1:], False
        ]
        # FSDP2 copies parameters into the all-gather's input with a multi_tensor_apply kernel launched just
        # before it: that one is the next forward's, not the update's
        update = main[main["name"].str.contains("multi_tensor_apply").to_numpy() & ~feeds_gather]
        param = np.sort(
            k.loc[
                (k["main_thread"] == 1) & k["nccl"] & k["name"].str.contains("AllGather|Broadcast"),
                "launch_ns",
            ].to_numpy()
        )
        previous_last_launch = -np.inf
        groups = list(grad.groupby(sync_id))
        for i, (sync, g) in enumerate(groups):
            last_launch = g["launch_ns"].max()
            bw = backward[
                (backward["launch_ns"] > previous_last_launch) & (backward["launch_ns"] < last_launch)
            ]
            previous_last_launch = last_launch
            last_bw = bw["end_ns"].max() if len(bw) else np.nan
            until = groups[i + 1][1]["launch_ns"].min() if i + 1 < len(groups) else np.inf
            p = np.searchsorted(param, last_launch, "right")  # the next forward's parameter gathers
            until = min(until, param[p]) if p < param.size else until
            upd = update[(update["launch_ns"] > last_launch) & (update["launch_ns"] < until)]
            rows.append(
                {
                    "rank": rank,
                    "sync": sync,
                    "last_coll_end_ns": g["end_ns"].max(),
                    "last_backward_end_ns": last_bw,
                    "tail_ns": g["end_ns"].max() - last_bw,
                    "update_end_ns": upd["end_ns"].max() if len(upd) else np.nan,
                }
            )
    return pd.DataFrame(rows)


@functools.cache
def job(name: str) -> Job:
    folder = FOREIGN / name
    export = folder / f"{name}.sqlite.xz"
    truth = json.loads((folder / "truth.json").read_text())
    kernels = raw_kernels(export)
    return Job(name, truth, analyze(load_trace(export)), gradient_syncs(kernels), last_arrivals(kernels))


def step_windows(analysis: Analysis) -> pd.DataFrame:
    """GPU start / end of every (rank, step) from the phases frame's ``step`` rows."""
    ph = analysis.phases
    return ph[ph["phase"] == "step"][["rank", "step", "start_ns", "end_ns"]].reset_index(drop=True)


def phase_shares(analysis: Analysis) -> pd.DataFrame:
    """Per (rank, step): forward and backward GPU time (summed over their rows) as a share of the step."""
    ph = analysis.phases.assign(dur=lambda d: d["end_ns"] - d["start_ns"])
    per = ph.pivot_table(index=["rank", "step"], columns="phase", values="dur", aggfunc="sum", fill_value=0)
    for phase in ("step", "forward", "backward"):
        if phase not in per:
            per[phase] = 0
    return pd.DataFrame(
        {
            "forward_pct": 100 * per["forward"] / per["step"],
            "backward_pct": 100 * per["backward"] / per["step"],
        }
    ).reset_index()


def tails_by_step(j: Job) -> pd.DataFrame:
    """Each analysis (rank, step) with its ``comm_tail_ns`` and the independent tail of the last sync whose
    last gradient collective ends inside the step's GPU window (NaN where none does)."""
    win = step_windows(j.analysis).merge(
        j.analysis.steps[["rank", "step", "comm_tail_ns"]], on=["rank", "step"]
    )
    indep = []
    for row in win.itertuples():
        s = j.syncs[
            (j.syncs["rank"] == row.rank)
            & (j.syncs["last_coll_end_ns"] >= row.start_ns)
            & (j.syncs["last_coll_end_ns"] <= row.end_ns)
        ]
        indep.append(s.sort_values("last_coll_end_ns")["tail_ns"].iloc[-1] if len(s) else np.nan)
    return win.assign(independent_tail_ns=indep)


def last_arrivals(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per rank's n-th gradient collective (the same collective on every rank, as each rank launches them in
    the same order): which rank's kernel started last, i.e. arrived last. Columns: index, last_rank."""
    per_rank = [
        g.sort_values("launch_ns")["start_ns"].to_numpy()
        for _, g in kernels[kernels["gradient"]].groupby("rank")
    ]
    n = min(len(s) for s in per_rank)
    starts = np.stack([s[:n] for s in per_rank])
    return pd.DataFrame({"index": np.arange(n), "last_rank": starts.argmax(axis=0)})
