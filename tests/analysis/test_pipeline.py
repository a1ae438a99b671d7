"""One analysis pipeline (a trace loaded here and per-rank files on Dask give the same
JSON, with and without NVTX), and one step identity across ranks (the same labels on every rank, step k the
same iteration everywhere).

Local vs Dask runs on the smaller committed traces of every kind (one file for all ranks, per-rank files on
one node and on two, foreign programs without the harness's NVTX), each also with every NVTX row deleted
(a copy; the input is never touched). The label check runs on every committed trace."""

from __future__ import annotations

import json
import lzma
import sqlite3
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ddp_profile import schema
from ddp_profile.analysis import KernelArrays, analyze
from ddp_profile.analysis.pipeline import labelled_steps
from ddp_profile.analysis.windows import phase_windows
from ddp_profile.commands.analyze import render
from ddp_profile.nsys.loader import load_trace

TRACES = Path(__file__).resolve().parents[2] / "traces"
ALL_RUNS = sorted({p.parent for p in TRACES.rglob("*.sqlite.xz")})
# Every committed run, each as recorded and
# with its NVTX removed: ~2.5 min for the ~75 runs on 2 cores.
LOCAL_VS_DASK = [str(r.relative_to(TRACES)) for r in ALL_RUNS]


def _json(trace, **kw) -> dict:
    return json.loads(render(analyze(trace, **kw), "json", None))


def _without_nvtx(run: Path, dst: Path, *, keep_every: int = 1) -> Path:
    """A copy of the run folder's exports with every NVTX row deleted (the run JSON is left behind: the
    harness's record would say what NVTX no longer does); ``keep_every`` > 1 also keeps only every n-th
    kernel (a few kernels per rank: too few to infer a step from)."""
    dst.mkdir(parents=True, exist_ok=True)
    for f in sorted(run.glob("*.sqlite.xz")):
        out = dst / f.name.removesuffix(".xz")
        mem = sqlite3.connect(":memory:")
        mem.deserialize(lzma.decompress(f.read_bytes()))
        if mem.execute("SELECT 1 FROM sqlite_master WHERE name = 'NVTX_EVENTS'").fetchone():
            mem.execute("DELETE FROM NVTX_EVENTS")
        if keep_every > 1:
            mem.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid % ? != 0", (keep_every,))
        mem.commit()
        disk = sqlite3.connect(out)
        mem.backup(disk)
        disk.close()
        mem.close()
    return dst


@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("ddp_profile.distributed")
    pytest.importorskip("dask.distributed")
    c = distributed.make_client(workers=2, processes=False)
    yield c
    distributed.close_client(c)


@pytest.mark.parametrize("nvtx", [True, False], ids=["nvtx", "no-nvtx"])
@pytest.mark.parametrize("name", LOCAL_VS_DASK)
def test_local_and_dask_give_the_same_json(name, nvtx, client, tmp_path):
    from ddp_profile import distributed

    run = TRACES / name
    if not run.exists():
        pytest.skip(f"{run} not present")
    path = run if nvtx else _without_nvtx(run, tmp_path / "run")
    local = _json(load_trace(path))
    trace = distributed.load_trace(path, client=client)
    try:
        remote = _json(trace)
    finally:
        trace.close()
    assert local == remote
    if not nvtx and len(local["steps"]):  # steps were inferred, on both paths
        assert any("inferred" in n for n in local["notes"])


def test_no_steps_at_all_on_both_paths(client, tmp_path):
    """Per-rank files where no step is found (NVTX gone, a kernel sequence that does not repeat): the same
    JSON on both paths, no traceback (the Dask path used to end in 'str' object has no attribute
    'memory_usage'), and a --steps selection is a usage error naming no steps."""
    from ddp_profile import distributed
    from ddp_profile.errors import UsageError

    run = TRACES / "per-rank/bucketed-25mb_small_fp32_2xh200"
    if not run.exists():
        pytest.skip(f"{run} not present")
    path = _without_nvtx(run, tmp_path / "run", keep_every=2003)
    local = _json(load_trace(path))
    assert local["steps"] == [] and local["summary"]["population"] == "trace"
    trace = distributed.load_trace(path, client=client)
    try:
        assert _json(trace) == local
        with pytest.raises(UsageError, match="no step in 1:; the trace has no steps"):
            analyze(trace, steps="1:")
    finally:
        trace.close()


def test_dask_selects_by_label_too(client):
    from ddp_profile import distributed

    run = TRACES / "per-rank/bucketed-25mb_small_fp32_2xh200"
    if not run.exists():
        pytest.skip(f"{run} not present")
    labels = sorted({r["step"] for r in _json(load_trace(run))["steps"]})
    want = f"{labels[1]}:"
    trace = distributed.load_trace(run, client=client)
    try:
        remote = _json(trace, steps=want)
    finally:
        trace.close()
    assert remote == _json(load_trace(run), steps=want)
    assert sorted({r["step"] for r in remote["steps"]}) == labels[1:]


def _check_identity(trace, steps, where: str) -> None:
    """Every rank has the same labels, and step k's GPU window on one rank overlaps step k's on every other
    (the windows the analysis measures: each step's kernels, by launch time; host ranges of inferred first
    steps are estimates)."""
    if steps.empty:
        return
    per_rank = {r: tuple(sorted(g["step"].tolist())) for r, g in steps.groupby("rank")}
    assert len(set(per_rank.values())) == 1, f"{where}: labels differ across ranks: {per_rank}"
    gpu = phase_windows(steps, steps.iloc[:0], KernelArrays(trace.kernels))
    g = gpu.groupby("step").agg(latest_start=("start_ns", "max"), earliest_end=("end_ns", "min"))
    apart = g.index[(g["latest_start"] >= g["earliest_end"]).to_numpy()].tolist()
    assert not apart, f"{where}: step(s) {apart} do not overlap in time across ranks"


@pytest.mark.parametrize("run", ALL_RUNS, ids=[str(p.relative_to(TRACES)) for p in ALL_RUNS])
def test_no_step_label_differs_across_ranks(run):
    """On every committed trace, with its NVTX steps and with them removed (steps inferred)."""
    trace = load_trace(run)
    for which, t in (
        ("nvtx", trace),
        ("inferred", replace(trace, nvtx=schema.empty_frame(schema.NVTX_COLUMNS))),
    ):
        steps, _, _ = labelled_steps(t)
        _check_identity(t, steps, f"{run.name} ({which})")
        if which == "inferred" and len(steps):
            assert steps["step"].min() == 0  # numbered from the first iteration every rank ran


@pytest.fixture(scope="module")
def shifted():
    """A committed DDP run with its NVTX removed and rank 1's compute kernels of its first step deleted (its
    capture missed that iteration's compute; its collectives, hence their issue order, stay): rank 0 then
    finds one step more than rank 1, before the others, as when rank 0 alone works before the loop. Returns
    (analysis with NVTX, analysis of the altered trace)."""
    run = TRACES / "torch_ddp-25mb_small_fp32_2xh200"
    if not run.exists():
        pytest.skip(f"{run} not present")
    trace = load_trace(run)
    ref = analyze(trace)
    p = ref.phases
    first = p.loc[(p["rank"] == 1) & (p["phase"] == "step")].sort_values("step").iloc[0]
    k = trace.kernels
    drop = (
        (k["rank"] == 1)
        & (k["kind"] != "nccl")
        & (k["launch_ns"] >= first["host_start_ns"])
        & (k["launch_ns"] <= first["host_end_ns"])
    )
    assert drop.sum() > 1000
    altered = replace(
        trace, kernels=k.loc[~drop].reset_index(drop=True), nvtx=schema.empty_frame(schema.NVTX_COLUMNS)
    )
    return ref, analyze(altered)


def test_inferred_steps_are_the_same_iteration_on_every_rank(shifted):
    """Step k is one iteration on every rank (its GPU windows overlap), rank 0's extra first step is left out
    with a note instead of shifting its numbers, and the job-level tail (each step's latest rank) is the NVTX
    run's: before the identity, rank 0's steps 0-2 did not overlap rank 1's steps 0-2 in time."""
    ref, inf = shifted
    s = inf.steps
    per_rank = {r: sorted(g["step"]) for r, g in s.groupby("rank")}
    assert len(per_rank) == 2 and per_rank[0] == per_rank[1] == list(range(len(ref.steps) // 2 - 1))
    g = s.groupby("step").agg(a=("start_ns", "max"), b=("end_ns", "min"))
    assert (g["a"] < g["b"]).all()
    assert any("left out" in n and "rank 0: 1 before the first common step" in n for n in inf.notes)
    want, got = ref.summary()["job_comm_tail_ns"], inf.summary()["job_comm_tail_ns"]
    assert want is not None and got is not None
    assert abs(got - want) <= 0.05 * want  # measured: 0.228 vs 0.226 ms
    # the collective table's steps are the same labels: every collective of an iteration carries one step
    c = inf.collectives
    first_use = c.groupby(["rank", "stream"])["start_ns"].transform("min")  # a rank's streams by first use
    c = c.assign(comm=first_use.groupby(c["rank"]).rank(method="dense")).dropna(subset=["step"])
    assert len(c) and (c.groupby(["comm", "seq"])["step"].nunique() == 1).all()


def _synthetic(extra_on: int):
    """Two ranks, four iterations of two all-reduces each (comm 1, seq 2k and 2k + 1 in iteration k), 100 ns
    apart; rank ``extra_on`` also finds a step of its own before the loop (evaluation), with no collective."""
    import pandas as pd

    steps, rows = [], []
    for rank in (0, 1):
        extra = rank == extra_on
        if extra:
            steps.append((rank, 0, -100, -10))
        for k in range(4):
            own = k + int(extra)
            steps.append((rank, own, 100 * k + rank, 100 * k + 90 + rank))
            rows += [(rank, 1, 2 * k, own), (rank, 1, 2 * k + 1, own)]
    s = pd.DataFrame(steps, columns=["rank", "step", "host_start_ns", "host_end_ns"]).assign(
        pid=lambda d: d["rank"]
    )
    return s, pd.DataFrame(rows, columns=["rank", "comm", "seq", "step"])


@pytest.mark.parametrize("extra_on", [0, 1])
def test_a_rank_with_one_more_step_is_not_shifted(extra_on):
    """Rank 0 (the reference) or rank 1 finds one step more (its own work before the loop): the extra step is
    left out with a note, and no rank's steps are numbered one ahead of the other's."""
    from ddp_profile.analysis.identity import common_steps

    steps, rows = _synthetic(extra_on)
    got, notes = common_steps(steps, rows, inferred=True)
    by_rank = {r: g.sort_values("step")[["step", "label"]].values.tolist() for r, g in got.groupby("rank")}
    shift = {r: int(r == extra_on) for r in (0, 1)}
    for r in (0, 1):
        assert by_rank[r] == [[k + shift[r], k] for k in range(4)]
    assert any("left out" in n and f"rank {extra_on}: 1 before" in n for n in notes)


def test_nvtx_numbers_stay_the_labels():
    """NVTX steps keep the user's numbers; ranks numbering the same iterations differently get the reference
    rank's numbers, with a note."""
    from ddp_profile.analysis.identity import common_steps

    steps, rows = _synthetic(extra_on=-1)
    got, notes = common_steps(
        steps.assign(step=steps["step"] + 3), rows.assign(step=rows["step"] + 3), inferred=False
    )
    assert sorted(got["label"].unique()) == [3, 4, 5, 6] and not notes
    off = steps["rank"] == 1
    got, notes = common_steps(
        steps.assign(step=np.where(off, steps["step"] + 10, steps["step"] + 3)),
        rows.assign(step=np.where(rows["rank"] == 1, rows["step"] + 10, rows["step"] + 3)),
        inferred=False,
    )
    assert got.loc[got["rank"] == 1].sort_values("step")["label"].tolist() == [3, 4, 5, 6]
    assert any("number the same iterations differently" in n for n in notes)


def test_collectives_of_a_rank_without_steps_do_not_vote():
    """Only rank 0 has steps here (another rank's were set aside): rank 1's collective rows, still carrying
    its own step numbers, neither count as covering an iteration nor drop rank 0's steps."""
    import pandas as pd

    from ddp_profile.analysis.identity import common_steps

    steps = pd.DataFrame(
        {
            "rank": 0,
            "step": [3, 4, 5, 6],
            "host_start_ns": [0, 100, 200, 300],
            "host_end_ns": [90, 190, 290, 390],
        }
    )
    rows = pd.DataFrame(
        {"rank": [0] * 4 + [1] * 4, "comm": 1, "seq": [0, 1, 2, 3] * 2, "step": [3, 4, 5, 6, 0, 1, 2, 3]}
    )
    got, notes = common_steps(steps, rows, inferred=False)
    assert got["label"].tolist() == [3, 4, 5, 6] and (got["rank"] == 0).all() and not notes
