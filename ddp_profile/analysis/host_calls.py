"""The main thread's kernel launches and synchronisation calls per rank: the timeline's CPU rows.

From the CUDA API calls (``schema.API_CALL_COLUMNS``, read by ``nsys.api.load_api_calls``): a call is a
*launch* when the nsys layer gave it kind "launch"; a *sync* (the host waiting for the GPU) is one of
the host-wait calls the nsys layer classified (``waits``: ``schema.HOST_WAIT_COLUMNS``, synchronize calls and
copies to the host, as ``.item()`` makes) or, without them, a call of kind "sync". The
rank's *main thread* is the thread whose id is its process id when that thread launches kernels (the
training loop's; autograd's backward threads launch too, often more, and they are left out so the row reads
as the loop), else the thread that made most of its launches. Other calls are dropped.

Output (:data:`HOST_CALL_COLUMNS`): one row per call, sorted by (rank, start_ns); ``kind`` is "launch" or
"sync". ``steps`` (optional: the analysis's phase rows of phase "step", with GPU and host windows) keeps only
calls that start inside a step's host-or-GPU window of that rank, so a page holds the steps it shows and
nothing else.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddp_profile import intervals as iv
from ddp_profile.analysis.kernel_groups import of_kind

HOST_CALL_COLUMNS = ["rank", "tid", "kind", "name", "start_ns", "end_ns"]


def main_thread_calls(
    api: pd.DataFrame | None, steps: pd.DataFrame | None = None, waits: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Launch and sync calls of each rank's main thread (module docstring); empty frame when none."""
    empty = pd.DataFrame(
        {c: pd.Series(dtype="object" if c in ("kind", "name") else "int64") for c in HOST_CALL_COLUMNS}
    )
    if api is None or not len(api):
        return empty
    a = api.dropna(subset=["rank", "start_ns", "end_ns"])
    if not len(a):
        return empty
    launch = of_kind(a, "launch")
    classified = waits is not None and len(waits) > 0
    sync = np.zeros(len(a), bool) if classified else of_kind(a, "sync")
    keep = launch | sync
    a, launch, sync = a.loc[keep], launch[keep], sync[keep]
    if not len(a):
        return empty
    cols = ["rank", "tid"] + (["pid"] if "pid" in a else [])
    counts = a.loc[launch].groupby(cols, observed=True).size().reset_index(name="n")
    if not len(counts):
        return empty
    own = (
        (counts["tid"] == counts["pid"]).astype(int) if "pid" in counts else 0
    )  # the process's own thread first
    main = counts.assign(own=own).sort_values(["rank", "own", "n"], ascending=[True, False, False])
    main = main.drop_duplicates("rank")[["rank", "tid"]].astype("int64")
    calls = pd.DataFrame(
        {
            "rank": a["rank"].astype("int64").to_numpy(),
            "tid": a["tid"].astype("int64").to_numpy(),
            "kind": np.where(sync, "sync", "launch"),
            "name": a["name"].astype("object").to_numpy(),
            "start_ns": a["start_ns"].astype("int64").to_numpy(),
            "end_ns": a["end_ns"].astype("int64").to_numpy(),
        }
    )
    if classified and waits is not None:
        w = waits.dropna(subset=["rank"])
        calls = pd.concat(
            [
                calls,
                pd.DataFrame(
                    {
                        "rank": w["rank"].astype("int64").to_numpy(),
                        "tid": w["tid"].astype("int64").to_numpy(),
                        "kind": "sync",
                        "name": w["name"].astype("object").to_numpy(),
                        "start_ns": w["start_ns"].astype("int64").to_numpy(),
                        "end_ns": w["end_ns"].astype("int64").to_numpy(),
                    }
                ),
            ],
            ignore_index=True,
        )
    mine = pd.MultiIndex.from_frame(calls[["rank", "tid"]]).isin(pd.MultiIndex.from_frame(main))
    out = calls.loc[mine].reset_index(drop=True)
    if steps is not None and len(steps):
        out = _in_steps(out, steps)
    return out.sort_values(["rank", "start_ns"], kind="stable").reset_index(drop=True)


def _in_steps(calls: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Calls starting inside [min(host, GPU start), max(host, GPU end)] of one of their rank's steps: per rank,
    the steps' closed windows merged into sorted disjoint ones (``intervals.normalize`` of [lo, hi + 1)), and
    each call's start looked up among them (``np.searchsorted``)."""
    keep = np.zeros(len(calls), dtype=bool)
    st = steps.assign(
        lo=steps[["start_ns"] + (["host_start_ns"] if "host_start_ns" in steps else [])].min(axis=1),
        hi=steps[["end_ns"] + (["host_end_ns"] if "host_end_ns" in steps else [])].max(axis=1),
    )
    st = st.dropna(subset=["lo", "hi"])
    s_rank, lo, hi = st["rank"].to_numpy(np.int64), st["lo"].to_numpy(np.int64), st["hi"].to_numpy(np.int64)
    c_rank, t = calls["rank"].to_numpy(), calls["start_ns"].to_numpy()
    for rank in np.unique(s_rank).tolist():
        sel = np.flatnonzero(c_rank == rank)
        if not sel.size:
            continue
        mine = (s_rank == rank) & (lo <= hi)
        w0, w1 = iv.normalize(lo[mine], hi[mine] + 1)
        at = np.searchsorted(w0, t[sel], "right") - 1
        keep[sel] = (at >= 0) & (t[sel] < w1[np.maximum(at, 0)])
    return calls.loc[keep]
