"""The memory-lean grouping of the per-kernel analyses against plain pandas references, on random kernel
tables that cross the functions' chunk boundaries: same numbers, whatever the grouping machinery."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from ddp_profile import intervals as iv
from ddp_profile import memory
from ddp_profile.analysis import KernelArrays
from ddp_profile.analysis.contention import contention
from ddp_profile.analysis.kernel_arrays import int_groups, pair_groups, rank_used_several_devices, row_runs
from ddp_profile.analysis.overlap import kernel_overlap, kernel_sums, overlapped_by_other_class


def random_kernels(seed: int, n: int, n_names: int, n_pids: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    pid = rng.integers(100, 100 + n_pids, n).astype(np.int32)
    device = (pid - 100 + rng.integers(0, 2, n)).astype(np.int32)  # some pids on two devices
    start = rng.integers(0, 50 * n, n).astype(np.int64)
    end = start + rng.integers(0, 400, n)  # some zero-length kernels
    kind = rng.choice(np.array(["compute", "nccl", "memcpy"], dtype=object), n, p=[0.6, 0.3, 0.1])
    names = np.array([f"k{i}" for i in range(n_names)], dtype=object)
    name = names[rng.integers(0, n_names, n)]
    name[rng.random(n) < 0.02] = None  # unnamed kernels are in no name group
    return pd.DataFrame(
        {
            "rank": pid - 100,
            "pid": pid,
            "device": device,
            "stream": np.int32(7),
            "start_ns": start,
            "end_ns": end,
            "name": pd.Categorical(name),
            "kind": pd.Categorical(kind),
            "launch_ns": pd.array([pd.NA] * n, "Int64"),
        }
    )


def reference_covered(k: pd.DataFrame) -> np.ndarray:
    out = np.zeros(len(k), dtype=np.int64)
    for _, g in k.groupby(["pid", "device"]):
        comp, nccl = g[g["kind"] == "compute"], g[g["kind"] == "nccl"]
        if len(comp) and len(nccl):
            out[nccl.index] = iv.covered_length(
                nccl["start_ns"], nccl["end_ns"], comp["start_ns"], comp["end_ns"]
            )
            out[comp.index] = iv.covered_length(
                comp["start_ns"], comp["end_ns"], nccl["start_ns"], nccl["end_ns"]
            )
    return out


@pytest.mark.parametrize(("seed", "n_names"), [(0, 5), (1, 90), (2, 300)])
def test_overlap_and_contention_match_pandas_groupby(seed, n_names):
    k = random_kernels(seed, 3000, n_names)
    karr = KernelArrays(k)
    covered = overlapped_by_other_class(karr)
    np.testing.assert_array_equal(covered, reference_covered(k))

    # Per (kind, name): count, total and overlapped ns, in the order of the function's own sort.
    got = kernel_overlap(karr, covered, chunk=256).set_index(["kind", "name"])
    sel = k.assign(dur=k["end_ns"] - k["start_ns"], cov=covered)
    sel = sel[sel["kind"].isin(["compute", "nccl"]) & sel["name"].notna()]
    ref = sel.groupby(["kind", "name"], observed=True).agg(
        count=("dur", "size"), total_ns=("dur", "sum"), overlapped_ns=("cov", "sum")
    )
    ref.index = ref.index.set_levels([ref.index.levels[0].astype(object), ref.index.levels[1].astype(object)])
    got_named = got[got.index.get_level_values("name").notna()]
    pd.testing.assert_frame_equal(
        got_named[["count", "total_ns", "overlapped_ns"]].sort_index(),
        ref.astype(np.int64).sort_index(),
        check_names=False,
        check_index_type=False,
    )
    # Unnamed kernels form one group per kind, as before.
    unnamed = sel.shape[0] + int(((k["kind"].isin(["compute", "nccl"])) & k["name"].isna()).sum())
    assert int(got["count"].sum()) == unnamed

    # Contention: named compute kernels alone (covered 0) vs overlapped (covered >= half of a positive duration).
    comp = sel[sel["kind"] == "compute"]
    alone = comp[comp["cov"] == 0].groupby("name", observed=True)["dur"].agg(["size", "median"])
    over = (
        comp[(comp["dur"] > 0) & (2 * comp["cov"] >= comp["dur"])]
        .groupby("name", observed=True)["dur"]
        .agg(["size", "median", "sum"])
    )
    both = alone.merge(over, left_index=True, right_index=True, suffixes=("_a", "_o"))
    both = both[(both["size_a"] >= 3) & (both["size_o"] >= 3)]
    ct = contention(karr, covered).set_index("name")
    assert set(ct.index) == set(both.index.astype(object))
    for name, row in both.iterrows():
        assert ct.loc[name, "n_alone"] == row["size_a"] and ct.loc[name, "n_overlapped"] == row["size_o"]
        assert ct.loc[name, "alone_median_ns"] == row["median_a"]
        assert ct.loc[name, "overlapped_median_ns"] == row["median_o"]
        assert ct.loc[name, "lost_ns"] == pytest.approx(
            max(0.0, row["sum"] - row["size_o"] * row["median_a"])
        )


@pytest.mark.parametrize(("seed", "sparse"), [(4, False), (5, False), (6, True), (7, True)])
def test_overlap_of_loader_ordered_kernels_matches_covered_length(seed, sparse):
    # The loader's order, (rank, start) with one (pid, device) per rank: each group is one run of rows,
    # sorted by start, and takes the path that only queries the compute kernels near NCCL (found from the
    # kernels' running end, or from the starts alone when NCCL is sparse). Long kernels, zero-length ones
    # and NCCL kernels that overlap each other included; small chunks cross boundaries.
    k = random_kernels(seed, 4000, 6, n_pids=3)
    rng = np.random.default_rng(seed)
    k["device"] = k["pid"] - 100
    if sparse:  # NCCL kernels 1 in ~60
        k["kind"] = k["kind"].where((k["kind"] != "nccl") | (rng.random(len(k)) < 0.05), "compute")
    else:
        k.loc[rng.random(len(k)) < 0.01, "end_ns"] += 20_000  # a few long kernels
    k = k.sort_values(["rank", "start_ns"], kind="stable").reset_index(drop=True)
    karr = KernelArrays(k)
    assert row_runs(karr.pid, karr.device) is not None
    for chunk in (7, 64, 1 << 17):  # NCCL intervals grouped by row chunk: many groups, a few, one
        np.testing.assert_array_equal(overlapped_by_other_class(karr, chunk=chunk), reference_covered(k))
    # Same rows, one group's order broken (the per-row path for that group only): same values.
    swapped = k.copy()
    swapped.loc[[0, 1], ["start_ns", "end_ns"]] = swapped.loc[[1, 0], ["start_ns", "end_ns"]].to_numpy()
    np.testing.assert_array_equal(
        overlapped_by_other_class(KernelArrays(swapped), chunk=64), reference_covered(swapped)
    )


def test_kernel_sums_keep_the_order_of_first_appearance_across_chunks():
    # Names that first appear in later chunks (and unnamed kernels) come after the earlier ones, in row order.
    k = random_kernels(7, 2000, 40)
    k["name"] = pd.Categorical(
        np.where(np.arange(len(k)) < 1000, k["name"].astype(object).str[:2], k["name"].astype(object))
    )
    karr = KernelArrays(k)
    covered = overlapped_by_other_class(karr)
    for chunk in (7, 256, 1 << 18):
        got = kernel_sums(karr, covered, chunk=chunk)
        sel = k.loc[k["kind"].isin(["compute", "nccl"]), ["kind", "name"]].astype(object)
        first = sel.drop_duplicates().reset_index(drop=True)
        assert got[["kind", "name"]].astype(object).equals(first)


def test_row_runs_are_the_pair_groups_when_each_pair_is_one_run():
    a = np.array([1, 1, 1, 2, 2, 3], dtype=np.int32)
    b = np.array([0, 0, 0, 0, 1, 1], dtype=np.int32)
    for chunk in (1, 2, 1 << 18):
        assert row_runs(a, b, chunk=chunk) == [(0, 3), (3, 4), (4, 5), (5, 6)]
        assert [list(range(lo, hi)) for lo, hi in row_runs(a, b, chunk=chunk)] == sorted(
            g.tolist() for g in pair_groups(a, b)
        )
    assert row_runs(np.array([1, 2, 1]), np.array([0, 0, 0])) is None  # pair 1 comes back
    assert row_runs(np.arange(10), np.zeros(10), max_runs=4) is None
    assert row_runs(np.zeros(0, np.int32), np.zeros(0, np.int32)) == []


@pytest.mark.parametrize(
    "n_pids", [2, 40]
)  # 40 pids x up to 2 devices: past max_groups, int_groups takes over
def test_pair_groups_partition_rows_like_int_groups(n_pids):
    k = random_kernels(3, 5000, 4, n_pids=n_pids)
    a, b = k["pid"].to_numpy(), k["device"].to_numpy()
    mine = sorted(tuple(g.tolist()) for g in pair_groups(a, b, max_groups=16))
    theirs = sorted(tuple(g.tolist()) for g in int_groups(a, b))
    assert mine == theirs
    assert sum(len(g) for g in mine) == len(k)
    assert all(list(g) == sorted(g) for g in mine)  # row order kept inside each group


def _threshold_in_child(env_extra: dict) -> str:
    code = "from ddp_profile import memory; print(memory.map_large_arrays())"
    env = {k: v for k, v in os.environ.items() if k not in ("DDP_PROFILE_MALLOC", "MALLOC_MMAP_THRESHOLD_")}
    return subprocess.run(
        [sys.executable, "-c", code], env=env | env_extra, capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_allocator_setting_is_applied_and_can_be_declined():
    assert _threshold_in_child({}) == "True"
    assert _threshold_in_child({"DDP_PROFILE_MALLOC": "keep"}) == "False"
    assert _threshold_in_child({"MALLOC_MMAP_THRESHOLD_": "131072"}) == "False"
    memory.return_freed_memory()  # callable anywhere, changes nothing visible


@pytest.mark.parametrize("seed", range(6))
def test_rank_used_several_devices_matches_pandas(seed):
    # Rank-sorted frames take the row runs, others the hashed keys: both as a pandas nunique per rank.
    k = random_kernels(seed, 500, 3, n_pids=4)
    if seed % 2:
        k["device"] = k["rank"]
    if seed % 3 == 0:
        k.loc[k.index[::97], "device"] += 1
    for frame in (k, k.sort_values("rank", kind="stable").reset_index(drop=True)):
        ref = bool(frame.groupby("rank")["device"].nunique().gt(1).any())
        assert rank_used_several_devices(frame, KernelArrays(frame)) == ref
