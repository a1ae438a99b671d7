"""Cross-rank truth on imperfect captures, from a committed real per-rank job (two H200 processes, one export
each; rank 1 arrives last in every step). Damaged copies are built in a tmp dir (the committed files are only
read): one rank's clock 2 ms, 150 ms (more than two steps) and 3 s (more than the capture) off, one capture
starting two iterations late,
a rank without CUDA API rows, with every kernel name missing, without its NCCL kernels. Each must give the
undamaged job's straggler, lead and wait/transfer split within 0.1 ms, or leave them empty, with a note naming
what was corrected or is unknown.
"""

from __future__ import annotations

import lzma

import numpy as np
import pandas as pd
import pytest
from damaged_exports import (
    TRACES,
    copy_run,
    drop_api,
    drop_kernel_names,
    drop_nccl_kernels,
    drop_nvtx_ranges,
    drop_process_nccl_kernels,
    rank_file,
    shift_clock,
    start_late,
    step_start,
)

from ddp_profile.analysis import analyze, clocks
from ddp_profile.analysis.collectives import _uncalled_waits, match_collectives
from ddp_profile.nsys.loader import load_trace

RUN = "two-node/bucketed-25mb_small_fp32_2xh200"
TOL_NS = 100_000  # 0.1 ms
COLS = ["straggler_lead_ns", "exposed_wait_ns", "exposed_transfer_ns"]


def _late(path):
    start_late(path, step_start(path, 5) - 1_000)


DAMAGE = {
    "clock +2 ms": lambda p: shift_clock(p, 2_000_000),
    "clock +150 ms": lambda p: shift_clock(p, 150_000_000),
    "clock +3 s": lambda p: shift_clock(p, 3_000_000_000),  # more than the whole capture: files apart in time
    "capture two steps late": _late,
    "no CUDA API rows": drop_api,
    "no kernel names": drop_kernel_names,
    "no NCCL kernels": drop_nccl_kernels,
}
NOTE = {
    "clock +2 ms": "rank 1 by -2",
    "clock +150 ms": "rank 1 by -150 ms",
    "clock +3 s": "rank 1 by -3,000 ms",
    "capture two steps late": "rank 1's capture starts 36 collective(s) later than rank 0's",
    "no CUDA API rows": "rank 1: no CUDA API rows",
    "no kernel names": "rank 1: 8585 kernel(s) have no name",
    "no NCCL kernels": "rank(s) 1 ran no NCCL kernel",
}


def _analysis(folder):
    return analyze(load_trace(folder))


@pytest.fixture(scope="module")
def undamaged(tmp_path_factory):
    return _analysis(copy_run(RUN, tmp_path_factory.mktemp("undamaged")))


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_capture_gives_the_undamaged_answers_or_says_unknown(damage, undamaged, tmp_path):
    folder = copy_run(RUN, tmp_path / "run")
    DAMAGE[damage](rank_file(folder, 1))
    got = _analysis(folder)
    assert any(NOTE[damage] in n for n in got.notes), got.notes
    assert not any("cannot happen" in n for n in got.notes), got.notes
    want = undamaged.steps.set_index(["rank", "step"])
    have = got.steps.set_index(["rank", "step"])
    assert set(have.index) <= set(want.index) and len(have) >= 6  # the late capture keeps its 3 common steps
    want = want.loc[have.index]
    assert (want["straggler_rank"] == 1).all()  # the truth: rank 1 arrives last in every step
    for col in COLS:
        a, b = have[col].to_numpy(float), want[col].to_numpy(float)
        known = ~np.isnan(a)
        assert (np.abs(a[known] - b[known]) <= TOL_NS).all(), (col, a, b)
    straggler = have["straggler_rank"]
    if damage in ("no kernel names", "no NCCL kernels"):  # rank 1's collectives unseen: stated unknown
        assert straggler.isna().all() and have[COLS].isna().all().all()
    else:
        assert (straggler == 1).all() and not have[COLS].isna().any().any()


@pytest.mark.parametrize("damage", ["no CUDA API rows", "no kernel names"])
def test_a_rank_whose_steps_cannot_be_inferred_stays_with_its_peers_boundaries(damage, tmp_path):
    """Without NVTX (steps inferred), a rank without launch threads or kernel names finds no steps of its own:
    it stays in the steps, the per-rank table and the summary, on rank 0's aligned boundaries."""
    folder = copy_run(RUN, tmp_path / "run")
    for rank in (0, 1):
        drop_nvtx_ranges(rank_file(folder, rank))
    undamaged = _analysis(folder)
    DAMAGE[damage](rank_file(folder, 1))
    got = _analysis(folder)
    assert got.summary()["n_ranks"] == 2 and sorted(got.rank_overlap["rank"]) == [0, 1]
    assert any("rank 1: no steps of their own were found" in n and "rank 0's" in n for n in got.notes), (
        got.notes
    )
    mine = got.steps[got.steps["rank"] == 1].set_index("step")
    ref = got.steps[got.steps["rank"] == 0].set_index("step")
    assert len(mine) == len(ref) == len(undamaged.steps) // 2
    want = undamaged.steps.set_index(["rank", "step"])
    have = got.steps.set_index(["rank", "step"])
    for col in COLS:
        a, b = have[col].to_numpy(float), want.loc[have.index, col].to_numpy(float)
        known = ~np.isnan(a)
        assert (np.abs(a[known] - b[known]) <= TOL_NS).all(), (col, a, b)
        assert known.all() == (damage == "no CUDA API rows"), (col, a)


def test_a_rank_without_nccl_kernels_is_not_cut_into_micro_steps(tmp_path):
    """A gradient-accumulation job (4 micro-steps per step, one file for both ranks, no NVTX) whose rank 1 lost
    its NCCL kernels: rank 1's steps are rank 0's cycles, not its micro-steps, so its step lengths stay those of
    the undamaged job's rank 1 (median within 10 %); its communication and every wait are left empty."""
    folder = tmp_path / "run"
    folder.mkdir()
    path = folder / "gpt-accum.sqlite"
    path.write_bytes(lzma.decompress((TRACES / "foreign/gpt-accum/gpt-accum.sqlite.xz").read_bytes()))
    undamaged = _analysis(folder)
    drop_process_nccl_kernels(path, 1)
    got = _analysis(folder)
    assert any("rank(s) 1 ran no NCCL kernel" in n for n in got.notes) and got.summary()["n_ranks"] == 2
    n_steps = got.steps.groupby("rank")["step"].nunique()
    assert n_steps[1] == n_steps[0] == undamaged.steps["step"].nunique()
    before = undamaged.steps.loc[undamaged.steps["rank"] == 1, "step_ns"].median()
    after = got.steps.loc[got.steps["rank"] == 1, "step_ns"].median()
    assert abs(after / before - 1) < 0.1, (after, before)
    mine = got.steps[got.steps["rank"] == 1]
    assert (
        mine[["comm_ns", "exposed_wait_ns"]].isna().all().all() and got.steps["straggler_rank"].isna().all()
    )
    assert mine["extra_kernels"].isna().all()  # rank 0's extra work is not lent with its boundaries


def test_four_ranks_one_clock_off_and_another_capture_late(tmp_path):
    """The 4-process two-node job: rank 2's clock 3 ms off and rank 3's capture two steps late, at once. The
    common steps keep the undamaged straggler of every step, and its lead and wait/transfer split within 0.1 ms."""
    run = "two-node/bucketed-25mb_small_fp32_4xh100"
    undamaged = _analysis(copy_run(run, tmp_path / "ok")).steps.set_index(["rank", "step"])
    folder = copy_run(run, tmp_path / "damaged")
    shift_clock(rank_file(folder, 2), 3_000_000)
    _late(rank_file(folder, 3))
    got = _analysis(folder)
    assert any("rank 2 by -3.0" in n for n in got.notes) and any(
        "rank 3's capture starts" in n for n in got.notes
    )
    have = got.steps.set_index(["rank", "step"])
    want = undamaged.loc[have.index]
    assert len(have) == 12 and (have["straggler_rank"] == want["straggler_rank"]).all()
    for col in COLS:
        assert (np.abs(have[col].to_numpy(float) - want[col].to_numpy(float)) <= TOL_NS).all(), col


def test_corrections_are_in_the_json_and_follow_the_damage(undamaged, tmp_path):
    base = undamaged.clock_alignment
    assert base["several_files"] and base["residual_ns"]["1"] < 50_000, base  # ends agree within tens of µs
    folder = copy_run(RUN, tmp_path / "run")
    shift_clock(rank_file(folder, 1), 2_000_000)
    got = _analysis(folder)
    head = got.to_json_dict()["clock_alignment"]
    assert head["corrected_ns"]["1"] - base["corrected_ns"].get("1", 0) == 2_000_000
    assert head["residual_ns"] == base["residual_ns"] and head["n_dropped"] == {}


def test_one_file_for_every_rank_is_never_moved():
    """Ranks of one export share nsys' session clock: nothing is corrected, no clock note."""
    res = _analysis(TRACES / "naive_small_fp32_2xh200")
    assert res.clock_alignment["corrected_ns"] == {} and not res.clock_alignment["several_files"]
    assert not any("clocks" in n for n in res.notes)


# ---- the pieces, on small made-up sequences ------------------------------------------------------------------


def _rows(rank, start, end, seq=None, name="AllReduce"):
    n = len(start)
    return pd.DataFrame(
        {
            "rank": rank,
            "pid": 10 + rank,
            "device": rank,
            "stream": 7,
            "comm": 1,
            "seq": np.arange(n) if seq is None else seq,
            "step": pd.array([pd.NA] * n, dtype="Int64"),
            "collective": name,
            "algorithm": "RING",
            "protocol": "LL",
            "dtype": "f32",
            "bytes": pd.array([1 << 20] * n, dtype="Int64"),
            "start_ns": np.asarray(start, np.int64),
            "end_ns": np.asarray(end, np.int64),
            "launch": np.asarray(start, np.int64) - 50,
            "duration_ns": np.asarray(end, np.int64) - np.asarray(start, np.int64),
            "bucket": pd.array([pd.NA] * n, dtype="Int64"),
            "_has": False,
        }
    )


def test_pairing_finds_a_late_capture_by_the_constant_end_difference():
    """Identical collectives every 1 ms with jittered steps: rank 1's capture misses the first 3 and its clock
    is 0.6 ms ahead. Only the right shift makes the end differences constant."""
    rng = np.random.default_rng(0)
    ends = np.cumsum(1_000_000 + rng.integers(-40_000, 40_000, 40))
    r0 = _rows(0, ends - 200_000, ends)
    r1 = _rows(1, ends[3:] - 100_000 + 600_000, ends[3:] + 600_000 + rng.integers(-500, 500, 37))
    kept, al = clocks.pair(pd.concat([r0, r1], ignore_index=True), {0: False, 1: True})
    assert al.shifts == {1: 3} and al.n_dropped == {0: 3} and abs(al.corrected_ns[1] - 600_000) < 1_000
    assert al.residual_ns[1] < 1_000 and len(kept) == 74


def test_a_collective_ending_before_its_peer_starts_is_named_and_its_wait_not_called():
    r0 = _rows(0, [0, 10_000], [5_000, 20_000])
    r1 = _rows(
        1, [6_000, 11_000], [9_000, 20_000]
    )  # collective 0: rank 0 ended at 5 µs, rank 1 began at 6 µs
    notes: list[str] = []
    table = match_collectives([pd.concat([r0, r1], ignore_index=True)], notes)
    assert sum("1 of 2 collectives end on one rank before a peer's kernel" in n for n in notes) == 1, notes
    assert table["_wait_unknown"].tolist() == [True, False, True, False]


def test_a_lead_within_the_residual_names_no_straggler():
    per_step = pd.DataFrame(
        {
            "straggler_rank": pd.array([1, 0], dtype="Int64"),
            "straggler_lead_ns": [30_000.0, 5_000.0],
            "straggler_cause": ["host", "gpu"],
            "straggler_evidence": ["a", "b"],
        }
    )
    out = clocks.refuse_leads(per_step, 10_000)
    assert out["straggler_rank"].tolist()[0] == 1 and out["straggler_rank"].isna().tolist() == [False, True]
    assert (
        out["straggler_cause"].tolist() == ["host", "unknown"]
        and "within the clock residual" in out.iloc[1, 3]
    )
    wait = _uncalled_waits(
        np.array([0, 8_000, 0, 50_000]), np.array([8_000, 0, 50_000, 0]), np.array([0, 0, 1, 1]), 10_000
    )
    assert wait.tolist() == [True, True, False, False]  # within 10 µs: not called; 50 µs apart: called
