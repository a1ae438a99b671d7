"""steps.rank_cover: a rank's long kernel sets summed a chunk of rows at a time give the same window coverage,
totals and small sets as the whole sets (KernelArrays.rank_sets); comm_kinds' exposed waits when the wait
intervals are not within the rank's NCCL kernels (C itself, not C ∩ N)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ddp_profile import intervals as iv
from ddp_profile import schema
from ddp_profile.analysis import steps
from ddp_profile.analysis.kernel_arrays import COMPUTE, NCCL, KernelArrays


def _random_kernels(seed: int, n_ranks: int = 3, per_rank: int = 400) -> pd.DataFrame:
    """Rank-sorted rows, start-sorted within a rank (the loader's order); three streams, so kernels of
    every class overlap, touch and nest."""
    rng = np.random.default_rng(seed)
    parts = []
    for r in range(n_ranks):
        start = np.sort(rng.integers(0, 20 * per_rank, per_rank))
        parts.append(
            pd.DataFrame(
                {
                    "rank": np.full(per_rank, r, dtype=np.int32),
                    "pid": np.full(per_rank, 100 + r, dtype=np.int32),
                    "device": np.full(per_rank, r, dtype=np.int32),
                    "stream": rng.integers(0, 3, per_rank).astype(np.int32),
                    "start_ns": start,
                    "end_ns": start + rng.integers(-2, 60, per_rank),
                    "kind": rng.choice(
                        ["compute", "nccl", "memcpy", "memset"], per_rank, p=[0.6, 0.2, 0.1, 0.1]
                    ),
                }
            )
        )
    k = pd.concat(parts, ignore_index=True)
    k["name"] = k["kind"]
    k["collective"] = np.where(k["kind"] == "nccl", "AllReduce", None)
    k["launch_ns"] = k["start_ns"] - 5
    for c in ("algorithm", "protocol", "dtype", "bytes", "launch_tid"):
        k[c] = None
    k["correlation_id"] = np.arange(len(k))
    return schema.select(k, schema.KERNEL_COLUMNS)


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 15])
def test_rank_cover_in_chunks_equals_the_whole_sets(chunk):
    karr = KernelArrays(_random_kernels(chunk))
    ref = KernelArrays(karr.frame)
    ws = np.array([0, 100, 2_000, 5_000, 7_990, 3_000], dtype=np.int64)
    we = np.array([8_100, 900, 2_000, 6_100, 9_000, 2_500], dtype=np.int64)  # an empty and an inverted window
    for rank in range(3):
        cov, sets = steps.rank_cover(karr, rank, ws, we, chunk=chunk)
        whole = ref.rank_sets(rank)
        for name in (COMPUTE, NCCL, "copy", "all", "overlap"):
            assert cov[name].tolist() == iv.covered_by_normalized(ws, we, *whole[name]).tolist(), name
        for name in (NCCL, "overlap"):
            assert sets[name][0].tolist() == whole[name][0].tolist()
            assert sets[name][1].tolist() == whole[name][1].tolist()
        assert karr.rank_totals(rank) == ref.rank_totals(rank)


def test_waits_outside_the_nccl_kernels_are_exposed_against_compute():
    """One rank: compute [0, 100), AllReduce [200, 300); a collective table (from elsewhere) whose wait
    interval [50, 80) lies in the compute kernel, outside every NCCL kernel. Over the step [0, 400)::

        exposed_wait_ns = |Wt| − |Wt ∩ C| = 30 − 30 = 0

    (C ∩ N, which stands for C when the waits are within N, would give 30 − 0)."""
    k = _random_kernels(0, n_ranks=1, per_rank=2)
    k["start_ns"], k["end_ns"] = [0, 200], [100, 300]
    k["kind"] = pd.Categorical(["compute", "nccl"])
    k["collective"] = [None, "AllReduce"]
    karr = KernelArrays(k)
    phases = pd.DataFrame(
        {
            "rank": [0],
            "pid": [100],
            "step": [0],
            "phase": ["step"],
            "start_ns": [0],
            "end_ns": [400],
            "host_start_ns": [-10],
            "host_end_ns": [500],
        }
    )
    coll = pd.DataFrame(
        {
            "rank": [0],
            "collective": ["AllReduce"],
            "start_ns": [50],
            "wait_ns": [30],
            "step": pd.array([0], dtype="Int64"),
        }
    )
    out, kinds = steps.step_tables(phases, karr, coll)
    assert out.loc[0, "exposed_wait_ns"] == 0
    assert out.loc[0, "comm_ns"] == 100 and out.loc[0, "exposed_comm_ns"] == 100
    assert kinds.loc[0, "wait_ns"] == 30 and kinds.loc[0, "exposed_wait_ns"] == 0
