"""The committed trace set is what the README promises: every run folder loads, has one rank per GPU of its
world size, NCCL kernels when it has more than one rank, the harness's NVTX ranges, and nothing private
(no environment rows, no captured output, the scrubber's record present)."""

from __future__ import annotations

import json
import lzma
import sqlite3
from pathlib import Path

import pytest

from ddp_profile import nvtx_names
from ddp_profile.nsys.loader import load_trace

TRACES = Path(__file__).resolve().parents[2] / "traces"
# Traces the harness did not make (scripts/foreign/, see scripts/campaign.sh): no harness run record or NVTX
FOREIGN = TRACES / "foreign"
# The what-if ledger (scripts/whatif/): one folder per (rule, job), its ledger.json and the baseline's export
WHATIF = TRACES / "whatif"
RUNS = sorted(
    {
        p.parent
        for p in TRACES.rglob("*.sqlite.xz")  # one file for all ranks, or one per rank
        if FOREIGN not in p.parents and WHATIF not in p.parents
    }
)
FOREIGN_RUNS = sorted({p.parent for p in FOREIGN.rglob("*.sqlite.xz")})
LEDGERS = sorted(WHATIF.glob("*/ledger.json"))


def _raw(path: Path) -> sqlite3.Connection:
    con = sqlite3.connect(":memory:")
    con.deserialize(lzma.decompress(path.read_bytes()))
    return con


def test_trace_set_is_complete():
    names = {p.name for p in RUNS}
    for strategy in [
        "none",
        "naive",
        "flat",
        "overlap",
        "bucketed-1mb",
        "bucketed-10mb",
        "bucketed-25mb",
        "bucketed-100mb",
        "bucketed-1000mb",
        "torch_ddp-25mb",
    ]:
        world = 1 if strategy == "none" else 2
        assert any(n.startswith(f"{strategy}_xl_fp32_{world}x") for n in names), f"set A lacks {strategy}"
        assert any(n.startswith(f"{strategy}_small_fp32_{world}x") for n in names), (
            f"small set lacks {strategy}"
        )
    for strategy in ["none", "naive", "overlap", "bucketed-25mb", "bucketed-100mb", "torch_ddp-25mb"]:
        assert any(n.startswith(f"{strategy}_xl_bf16_") for n in names), f"set B lacks {strategy}"
    total = sum(f.stat().st_size for f in TRACES.rglob("*") if f.is_file())
    assert total < 150 * 2**20, f"traces/ is {total / 2**20:.0f} MiB; the budget is 150 MiB (du -sh)"


@pytest.mark.parametrize("run", RUNS, ids=[str(p.relative_to(TRACES)) for p in RUNS])
def test_committed_run_loads_and_is_scrubbed(run):
    meta = json.loads((run / f"{run.name}.json").read_text())
    exports = sorted(run.glob("*.sqlite.xz"))
    trace = load_trace(run)
    assert len(trace.meta["files"]) == len(exports)
    world = meta["world_size"]
    # one GPU per rank: distinct devices of one process's view, or, for per-node exports (traces/two-node: each
    # node sees its own GPU as device 0), one export file per rank
    assert len(trace.ranks) == world
    assert trace.ranks["device"].nunique() == world or len(exports) == world
    assert set(trace.ranks["rank_source"]) == {"nvtx-marker"}
    assert str(meta["gpu_name"]) in set(trace.ranks["gpu_name"])
    kinds = set(trace.kernels["kind"].astype(str))
    assert "compute" in kinds
    assert ("nccl" in kinds) == (world > 1 and meta["strategy"] != "none")
    ours = trace.nvtx[trace.nvtx["domain"] == nvtx_names.DOMAIN]
    steps = ours[ours["name"].str.startswith(nvtx_names.STEP + " ")]
    assert len(steps) == world * meta["config"]["steps"]
    phases = {nvtx_names.FORWARD, nvtx_names.BACKWARD, nvtx_names.OPTIMIZER}
    if meta["config"].get("cuda_graph"):
        # A graphed step replays kernels captured once before the range: its phase ranges were host-only then,
        # and nsys traced the graph node by node (--cuda-graph-trace=node), so each step has its own kernels.
        assert not phases & set(ours["name"])
        assert len(trace.kernels) > 100 * world * meta["config"]["steps"]
    else:
        assert phases <= set(ours["name"])
    for export in exports:
        _assert_scrubbed(export)


def _assert_scrubbed(export: Path) -> None:
    con = _raw(export)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "DDP_PROFILE_SCRUB" in tables
    if "META_DATA_CAPTURE" in tables:
        assert (
            con.execute("SELECT count(*) FROM META_DATA_CAPTURE WHERE name LIKE '%ENV%'").fetchone()[0] == 0
        )
    for table in ("TARGET_INFO_SYSTEM_ENV", "ProcessStreams"):
        if table in tables:
            assert con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0] == 0
    blob = lzma.decompress(export.read_bytes())
    for needle in (b"/root/", b"/home/", b"/tmp/", b"/work/", b"PATH=", b"HOSTNAME="):
        assert needle not in blob, f"{export.name} still holds {needle!r}"


@pytest.mark.parametrize("run", FOREIGN_RUNS, ids=[p.name for p in FOREIGN_RUNS])
def test_committed_foreign_trace_loads_and_is_scrubbed(run):
    """A foreign program's trace: the ground truth the program wrote (program.json: step times per rank; the
    real-job programs' truth.json: every iteration per rank) and scrubbed exports that load."""
    if (run / "program.json").exists():
        program = json.loads((run / "program.json").read_text())
        assert program["world_size"] >= 1 and program["steps"] >= 1
    else:
        truth = json.loads((run / "truth.json").read_text())
        assert truth["world_size"] >= 1 and len(truth["iterations"]) == truth["world_size"]
        assert all(len(per_rank) >= 1 for per_rank in truth["iterations"])
    trace = load_trace(run)
    assert len(trace.kernels) > 0
    for export in sorted(run.glob("*.sqlite.xz")):
        _assert_scrubbed(export)


@pytest.mark.parametrize("ledger", LEDGERS, ids=[p.parent.name for p in LEDGERS])
def test_committed_whatif_pair_loads_and_is_scrubbed(ledger):
    """A what-if pair: its folder is named <rule>--<job>, the repeats alternate baseline and changed with CUDA-event
    step times, and the baseline's export (in this folder or a sibling's) loads, is scrubbed and has the ranks
    its profiled truth has."""
    pair = json.loads(ledger.read_text())
    assert ledger.parent.name == f"{pair['rule']}--{pair['job']}"
    variants = [r["variant"] for r in sorted(pair["repeats"], key=lambda r: r["order"])]
    assert variants[:2] == ["baseline", "changed"] and len(variants) >= 10
    assert variants == ["baseline", "changed"] * (len(variants) // 2)
    assert all(len(r["step_ms"]) >= 1 and min(r["step_ms"]) > 0 for r in pair["repeats"])
    export = (ledger.parent / pair["profiled"]).resolve()
    assert WHATIF.resolve() in export.parents and export.name.endswith(".sqlite.xz")
    assert len(pair["profiled_truth_step_ms"]) == pair["world_size"]
    trace = load_trace(export.parent)
    assert len(trace.ranks) == pair["world_size"]
    assert len(trace.kernels) > 0
    _assert_scrubbed(export)


TWO_NODE = sorted(p for p in (TRACES / "two-node").iterdir() if p.is_dir())


@pytest.mark.parametrize("run", TWO_NODE, ids=[p.name for p in TWO_NODE])
def test_two_node_runs_are_one_job_on_one_clock(run):
    """Two torchrun agents as two nodes, one nsys session (and clock) per rank: the loader shifts each file by
    its session start, so the same all-reduce ends within 100 µs on every rank although the sessions started
    milliseconds apart (an all-reduce cannot finish on one rank long before the others have joined)."""
    from ddp_profile.analysis import analyze

    meta = json.loads((run / f"{run.name}.json").read_text())
    trace = load_trace(run)
    offsets = [f["offset_ns"] for f in trace.meta["files"]]
    assert len(offsets) == meta["world_size"] == len(trace.ranks) >= 2
    assert max(offsets) - min(offsets) > 1_000_000, offsets  # sessions 1 ms+ apart: alignment is not a no-op
    coll = analyze(trace).collectives
    per_seq = coll.groupby("seq")
    assert (per_seq["rank"].nunique() == meta["world_size"]).all()  # every collective matched on all ranks
    spread = per_seq["end_ns"].agg(lambda s: s.max() - s.min())
    assert spread.max() < 100_000, spread.max()
