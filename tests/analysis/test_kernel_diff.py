"""The cross-rank kernel diff (analysis/kernel_diff.py): extra kernels by name and count, like-for-like time,
on hand-built timelines whose answer is written out."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddp_profile import schema
from ddp_profile.analysis import kernel_diff as kd
from ddp_profile.analysis.kernel_arrays import KernelArrays
from ddp_profile.analysis.steps import spans

MS = 1_000_000


def kernels(rows):
    """KERNEL_COLUMNS from (rank, name, start_ms, end_ms); names starting 'nccl' are NCCL kernels."""
    df = pd.DataFrame(rows, columns=["rank", "name", "start_ns", "end_ns"])
    df["start_ns"] = (df["start_ns"] * MS).astype("int64")
    df["end_ns"] = (df["end_ns"] * MS).astype("int64")
    nccl = df["name"].str.startswith("nccl")
    df["kind"] = np.where(nccl, "nccl", "compute")
    df["launch_ns"] = df["start_ns"] - 1000
    df["pid"], df["device"], df["stream"] = 100 + df["rank"], df["rank"], np.where(nccl, 20, 7)
    df["collective"] = np.where(nccl, "AllReduce", None)
    for c in ("algorithm", "protocol", "dtype", "bytes"):
        df[c] = None
    df["correlation_id"] = np.arange(len(df))
    df["launch_tid"] = df["pid"]
    return df.sort_values(["rank", "start_ns"], kind="stable").reset_index(drop=True)[schema.KERNEL_COLUMNS]


def _job():
    """Three ranks, steps 0 and 1 of 20 ms each ([0, 20), [20, 40)). Every rank runs 'gemm' twice a step;
    rank 2 also runs 'extra_gemm' 4 times a step (1 ms each) before it. The peers' second 'gemm' runs beside
    their waiting all-reduce and takes 3 ms instead of 2 (contention); rank 2's gemms take 2 ms."""
    rows = []
    for step in (0, 1):
        t = 20 * step
        for r in (0, 1):
            rows += [(r, "gemm", t + 1, t + 3), (r, "gemm", t + 4, t + 7), (r, "nccl_ar", t + 5, t + 12)]
        rows += [(2, "extra_gemm", t + 1 + i, t + 2 + i) for i in range(4)]
        rows += [(2, "gemm", t + 5, t + 7), (2, "gemm", t + 8, t + 10), (2, "nccl_ar", t + 10, t + 12)]
    steps = pd.DataFrame(
        {
            "rank": np.repeat([0, 1, 2], 2),
            "step": [0, 1] * 3,
            "start_ns": [t * MS for t in (1, 21) * 3],
            "end_ns": [t * MS for t in (12, 32) * 3],
        }
    )
    return kernels(rows), steps


def test_step_kernel_sums_by_name_and_count():
    k, steps = _job()
    sums = kd.step_kernel_sums(spans(steps), KernelArrays(k))
    assert list(sums.columns) == kd.SUM_COLUMNS
    got = sums.set_index(["rank", "step", "name"])
    # NCCL kernels are not compute: never counted
    assert not sums["name"].str.startswith("nccl").any()
    assert got.loc[(2, 1, "extra_gemm"), ["count", "gpu_ns"]].tolist() == [4, 4 * MS]
    assert got.loc[(0, 0, "gemm"), ["count", "gpu_ns"]].tolist() == [2, 5 * MS]  # 2 ms + 3 ms
    assert got.loc[(2, 0, "gemm"), ["count", "gpu_ns"]].tolist() == [2, 4 * MS]


def test_diff_names_the_extra_kernels_and_compares_shared_ones_like_for_like():
    k, steps = _job()
    sums = kd.step_kernel_sums(spans(steps), KernelArrays(k))
    d = kd.diff(sums, pd.Series([2, 2], index=[0, 1])).set_index("step")
    assert list(d.reset_index().columns) == kd.DIFF_COLUMNS
    # 4 extra_gemm of 1 ms that no peer runs: 4 ms of extra work
    assert d["extra_ns"].tolist() == [4 * MS, 4 * MS]
    # shared gemm: 2 each, rank 2's mean 2 ms against the peers' 2.5 ms: 2 · (2 − 2.5) = −1 ms
    assert d["like_ns"].tolist() == [-1 * MS, -1 * MS]
    assert d.loc[0, "extra_kernels"] == [("extra_gemm", 4, 0.0, 4 * MS)]
    text = kd.evidence(d.loc[0, "extra_kernels"], d.loc[0, "extra_ns"], d.loc[0, "like_ns"])
    assert text.startswith("extra kernels 4.00 ms: extra_gemm ×4 more (other ranks' median ×0) 4.00 ms")


def test_diff_of_alike_ranks_finds_no_extra_work():
    k, steps = _job()
    sums = kd.step_kernel_sums(spans(steps), KernelArrays(k))
    d = kd.diff(sums, pd.Series([0, 1], index=[0, 1])).set_index("step")
    assert d["extra_ns"].tolist() == [0.0, 0.0]
    assert d["extra_kernels"].tolist() == [[], []]
    # a step without a rank, or a rank without peers, gives no row
    assert kd.diff(sums, pd.Series([pd.NA, pd.NA], index=[0, 1], dtype="Int64")).empty
    assert kd.diff(sums.loc[sums["rank"] == 2], pd.Series([2], index=[0])).empty
