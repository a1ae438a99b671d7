"""NCCL time per collective kind (``comm_kinds``), gradient tail vs parameter sync,
exposed communication split into waiting for the slowest peer and transfer, the job-level tail, and one
population per summary. Known answers on exports built in code (derivations beside them), invariants on the
committed real traces."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ddp_profile import nvtx_names as nn
from ddp_profile import schema
from ddp_profile.analysis import JSON_SECTIONS, analyze
from ddp_profile.analysis.kernel_groups import kind_of
from ddp_profile.cli import main
from ddp_profile.nsys.loader import load_trace
from ddp_profile.nsys.names import parse_nccl

TRACES = Path(__file__).resolve().parents[2] / "traces"
US = 1_000  # ns per µs: the construction below is written in µs
T0 = 1_000_000

AG = "ncclDevKernel_AllGather_RING_LL"
RS = "ncclKernel_ReduceScatter_RING_LL_Sum_float"  # old (< 2.19) naming, C type name
BC = "ncclDevKernel_Broadcast_RING_LL"


def _zero_fsdp_run(build_export, name="mixed.sqlite"):
    """Two ranks, one step, an FSDP/ZeRO-like mix of AllGather, ReduceScatter and Broadcast (µs from T0).

    Host ranges (main thread): step 0 [0, 1000], forward [0, 300], backward [300, 560], optimizer [560, 900].
    GPU, NCCL all on stream 17 (one communicator: kernels pair across ranks in issue order), compute on 7:

        kernel  kind        rank 0      rank 1      launched at
        AG1     AllGather   [10, 30)    same        5    (forward)
        F1      compute     [30, 100)   same        6
        AG2     AllGather   [80, 120)   same        7
        F2      compute     [120, 200)  same        8
        B1      compute     [310, 400)  same        305  (backward)
        RS1     RedScatter  [380, 420)  same        306
        B2      compute     [420, 500)  [420, 520)  307  (rank 1's backward is slower)
        RS2     RedScatter  [500, 560)  [520, 560)  308  (rank 0 waits for rank 1 from 500 to 520)
        O1      compute     [570, 600)  same        562  (optimizer)
        BC      Broadcast   [600, 650)  same        565  (ZeRO-1: updated parameters after the step)
    """
    rows = {0: [], 1: []}
    for r in (0, 1):
        b2_end, rs2_start = (500, 500) if r == 0 else (520, 520)
        rows[r] = [
            (AG, 17, 10, 30, 5),
            ("fwd_gemm", 7, 30, 100, 6),
            (AG, 17, 80, 120, 7),
            ("fwd_gemm", 7, 120, 200, 8),
            ("bwd_gemm", 7, 310, 400, 305),
            (RS, 17, 380, 420, 306),
            ("bwd_gemm", 7, 420, b2_end, 307),
            (RS, 17, rs2_start, 560, 308),
            ("adam", 7, 570, 600, 562),
            (BC, 17, 600, 650, 565),
        ]
    k = {
        c: []
        for c in (
            "pid",
            "device",
            "stream",
            "start",
            "end",
            "name",
            "correlation_id",
            "launch_start",
            "launch_tid",
        )
    }
    n = {c: [] for c in ("pid", "tid", "start", "end", "text", "event_type", "domain", "payload")}
    for r, rr in rows.items():
        pid = 100 + r
        for i, (name, stream, s, e, launch) in enumerate(rr):
            for c, v in (
                ("pid", pid),
                ("device", r),
                ("stream", stream),
                ("start", T0 + s * US),
                ("end", T0 + e * US),
                ("name", name),
                ("correlation_id", i + 1),
                ("launch_start", T0 + launch * US),
                ("launch_tid", pid),
            ):
                k[c].append(v)
        for text, s, e, et, payload in (
            (f"{nn.RANK_MARKER} {r}/2", -500, -1, 34, r),
            (f"{nn.STEP} 0", 0, 1000, 59, 0),
            (nn.FORWARD, 0, 300, 59, -1),
            (nn.BACKWARD, 300, 560, 59, -1),
            (nn.OPTIMIZER, 560, 900, 59, -1),
        ):
            for c, v in (
                ("pid", pid),
                ("tid", pid),
                ("start", T0 + s * US),
                ("end", -1 if e < 0 else T0 + e * US),
                ("text", text),
                ("event_type", et),
                ("domain", nn.DOMAIN),
                ("payload", payload),
            ):
                n[c].append(v)
    return build_export(
        name,
        processes=[{"pid": 100, "device": 0}, {"pid": 101, "device": 1}],
        kernels={c: np.asarray(v) for c, v in k.items()},
        nvtx={c: np.asarray(v) for c, v in n.items()},
    )


def test_kind_names():
    assert [
        kind_of(parse_nccl(x)[0])
        for x in (
            AG,
            RS,
            BC,
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
            "ncclDevKernel_SendRecv",
            "ncclDevKernel_Reduce_Sum_f32_RING_LL",
            "ncclDevKernel_AllToAll",
        )
    ] == ["AllGather", "ReduceScatter", "Broadcast", "AllReduce", "SendRecv", "other", "AllToAll"]
    assert kind_of(None) == "other" and kind_of("all_gather") == "AllGather"


def test_known_answer_mixed_collectives(build_export):
    res = analyze(load_trace(_zero_fsdp_run(build_export)))
    s = res.steps.set_index("rank")
    assert list(res.steps.columns) == schema.STEP_SECTION_COLUMNS
    # Rank 0. C = [30,100) [120,200) [310,400) [420,500) [570,600); N = AG1 20 + AG2 40 + RS1 40 + RS2 60
    # + BC 50 = 210; C∩N = AG2∩F1 [80,100) + RS1∩B1 [380,400) = 40 -> exposed 170.
    # Waiting: only RS2, [500, 520) (rank 1 arrives at 520), no compute then -> exposed_wait 20, transfer 150.
    # backward_end = 500 (B2). Gradient collectives RS1, RS2 end last at 560 -> comm_tail 60; the Broadcast
    # ending at 650 is not tail (the old definition said 150): param_sync = |BC ∩ [500, 650)| = 50, all
    # exposed. exposed_allgather = |AG \ C| before 500 = AG1 20 + AG2's [100,120) 20 = 40.
    # Rank 1: B2 ends 520, RS2 [520,560) -> comm 190, exposed 150, wait 0, comm_tail 40.
    # Job tail: last gradient end on any rank 560 − latest backward end 520 = 40, on both rows.
    want = {
        0: dict(
            comm_ns=210,
            overlap_ns=40,
            exposed_comm_ns=170,
            exposed_wait_ns=20,
            exposed_transfer_ns=150,
            backward_end_ns=T0 + 500 * US,
            comm_tail_ns=60,
            param_sync_ns=50,
            exposed_param_sync_ns=50,
            exposed_allgather_ns=40,
            job_comm_tail_ns=40,
        ),
        1: dict(
            comm_ns=190,
            overlap_ns=40,
            exposed_comm_ns=150,
            exposed_wait_ns=0,
            exposed_transfer_ns=150,
            backward_end_ns=T0 + 520 * US,
            comm_tail_ns=40,
            param_sync_ns=50,
            exposed_param_sync_ns=50,
            exposed_allgather_ns=40,
            job_comm_tail_ns=40,
        ),
    }
    for r, cols in want.items():
        for c, v in cols.items():
            assert s.loc[r, c] == pytest.approx(v if c == "backward_end_ns" else v * US), (r, c)
    k = res.comm_kinds
    assert list(k.columns) == schema.COMM_KIND_COLUMNS
    k0 = k[k["rank"] == 0].set_index("collective")
    assert list(k0.index) == ["AllGather", "ReduceScatter", "Broadcast"]  # KINDS order
    # GPU phase windows of rank 0: forward [10, 200) (AG1..F2), backward [310, 500) (its compute, B1 and B2:
    # RS1 40 inside, RS2 after it), optimizer [570, 650) (O1, BC). after backward = [500, 650).
    exp = {
        "AllGather": (2, 60, 40, 0, 0, 60, 0, 0, 0),
        "ReduceScatter": (2, 100, 80, 20, 20, 0, 40, 0, 60),
        "Broadcast": (1, 50, 50, 0, 0, 0, 0, 50, 50),
    }
    cols = [
        "count",
        "comm_ns",
        "exposed_comm_ns",
        "wait_ns",
        "exposed_wait_ns",
        "forward_ns",
        "backward_ns",
        "optimizer_ns",
        "after_backward_ns",
    ]
    for kind, vals in exp.items():
        got = k0.loc[kind, cols].to_numpy(float)
        assert got.tolist() == [vals[0]] + [v * US for v in vals[1:]], kind
    # Kinds never run at once here: Σ over kinds = the step's union.
    tot = k.groupby("rank")[["comm_ns", "exposed_comm_ns"]].sum()
    assert (tot["comm_ns"] == s["comm_ns"]).all() and (tot["exposed_comm_ns"] == s["exposed_comm_ns"]).all()
    sm = res.summary()
    # Two rows: Σ exposed_wait / Σ exposed = 20 / (170 + 150).
    assert sm["exposed_wait_pct_of_exposed"] == pytest.approx(100 * 20 / 320)
    assert sm["job_comm_tail_ns"] == 40 * US and sm["comm_tail_ns"] == 50 * US  # median of 60, 40
    assert sm["param_sync_ns"] == 50 * US and sm["exposed_allgather_ns"] == 40 * US
    js = res.to_json_dict()
    assert "comm_kinds" in JSON_SECTIONS and len(js["comm_kinds"]) == len(k) == 6
    json.dumps(js, allow_nan=False)


def test_overlapping_kinds_sum_exceeds_union(build_export):
    """Two kinds at the same time on one rank (an AllGather on one stream under a ReduceScatter on another):
    each kind counts the shared time, the step's union counts it once, so Σ kinds ≥ comm_ns."""
    k = {
        "pid": [7] * 3,
        "device": [0] * 3,
        "stream": [7, 17, 18],
        "start": [1_000, 1_100, 1_150],
        "end": [1_200, 1_300, 1_250],
        "name": ["gemm", AG, RS],
        "correlation_id": [1, 2, 3],
        "launch_start": [900, 910, 920],
    }
    n = {
        "pid": [7, 7],
        "tid": [7, 7],
        "start": [500, 800],
        "end": [-1, 2_000],
        "text": [f"{nn.RANK_MARKER} 0/1", f"{nn.STEP} 0"],
        "event_type": [34, 59],
        "domain": [nn.DOMAIN] * 2,
        "payload": [0, 0],
    }
    res = analyze(
        load_trace(
            build_export(
                processes=[{"pid": 7, "device": 0}],
                kernels={c: np.asarray(v) for c, v in k.items()},
                nvtx={c: np.asarray(v) for c, v in n.items()},
            )
        )
    )
    # AG [1100,1300) 200, RS [1150,1250) 100: union 200; Σ kinds 300. Compute [1000,1200) covers AG's first
    # 100 and RS's first 50: exposed AG 100, RS 50, union exposed = [1200,1300) = 100.
    kinds = res.comm_kinds.set_index("collective")
    assert kinds.loc["AllGather", "comm_ns"] == 200 and kinds.loc["ReduceScatter", "comm_ns"] == 100
    assert (
        kinds.loc["AllGather", "exposed_comm_ns"] == 100
        and kinds.loc["ReduceScatter", "exposed_comm_ns"] == 50
    )
    assert res.steps.loc[0, "comm_ns"] == 200 and res.steps.loc[0, "exposed_comm_ns"] == 100
    # No backward range: tail, param sync and after_backward are missing; exposed AllGather over the step.
    assert np.isnan(res.steps.loc[0, "comm_tail_ns"]) and np.isnan(res.steps.loc[0, "param_sync_ns"])
    assert np.isnan(res.steps.loc[0, "job_comm_tail_ns"]) and res.steps.loc[0, "exposed_allgather_ns"] == 100
    assert kinds["after_backward_ns"].isna().all()


def test_summary_one_population(ddp_run):
    """synth_ddp_run: 2 ranks × 3 steps × 3 all-reduces of 8 µs, 2 of 3 hidden. Steps 1: -> 2 steps."""
    truth = ddp_run(n_ranks=2, n_steps=3)
    res = analyze(load_trace(truth["path"]), steps="1:")
    sm = res.summary()
    assert sm["population"] == "steps" and sm["n_steps"] == 2 and sm["n_ranks"] == 2
    assert sm["n_collectives"] == 2 * 2 * 3 and sm["trace_n_collectives"] == truth["n_nccl"] == 18
    assert sm["overlap_pct"] == pytest.approx(100 * 2 / 3) and sm["trace_overlap_pct"] == pytest.approx(
        100 * 2 / 3
    )
    # All ranks start every all-reduce together: no waiting, all exposed time is transfer.
    assert sm["wait_pct_of_comm"] == 0 and sm["exposed_wait_ns"] == 0
    assert sm["exposed_transfer_ns"] == truth["per_step"]["exposed_comm_ns"]
    assert sm["param_sync_ns"] == 0 and sm["job_comm_tail_ns"] == sm["comm_tail_ns"]


def test_cli_section(build_export, capsys):
    path = _zero_fsdp_run(build_export)
    assert main(["analyze", str(path), "--format", "json", "--section", "comm_kinds"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (
        set(out) == {"version", "summary", "notes", "verdict", "per_rank", "clock_alignment", "comm_kinds"}
        and len(out["comm_kinds"]) == 6
    )
    assert main(["analyze", str(path), "--format", "csv", "--section", "comm_kinds"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == ",".join(schema.COMM_KIND_COLUMNS)


REAL = [
    "naive_xl_fp32_2xh200",
    "overlap_xl_fp32_2xh200",
    "bucketed-25mb_xl_fp32_2xh200",
    "torch_ddp-25mb_xl_fp32_2xh200",
    "bucketed-100mb_xl_bf16_2xh200",
]


@pytest.mark.parametrize("run", REAL)
def test_real_trace_invariants(run):
    res = analyze(load_trace(TRACES / run))
    s = res.steps
    assert len(s) and s["exposed_transfer_ns"].ge(0).all() and s["exposed_wait_ns"].ge(0).all()
    # exposed_wait ⊆ exposed comm, so the split is exact.
    assert (s["exposed_wait_ns"] + s["exposed_transfer_ns"] == s["exposed_comm_ns"]).all()
    # Every NCCL kernel of these runs is an all-reduce: one kind, Σ over kinds = the union, no param sync,
    # and the gradient-only tail is the tail of all NCCL kernels.
    k = res.comm_kinds
    assert set(k["collective"]) == {"AllReduce"}
    tot = k.set_index(["rank", "step"])[["comm_ns", "exposed_comm_ns"]]
    st = s.set_index(["rank", "step"])
    assert (tot["comm_ns"] == st["comm_ns"]).all() and (tot["exposed_comm_ns"] == st["exposed_comm_ns"]).all()
    assert (
        k["count"] == res.collectives.groupby(["rank", "step"]).size().reindex(tot.index).to_numpy()
    ).all()
    assert (s["param_sync_ns"] == 0).all() and (s["exposed_param_sync_ns"] == 0).all()
    assert (s["exposed_allgather_ns"] == 0).all()
    assert (k["after_backward_ns"] <= k["comm_ns"]).all()
    # The job tail is one number per step; it never exceeds the largest per-rank tail of that step.
    g = s.groupby("step")
    assert (g["job_comm_tail_ns"].nunique() == 1).all()
    assert (g["job_comm_tail_ns"].first() <= g["comm_tail_ns"].max() + 1e-9).all()
    sm = res.summary()
    assert sm["population"] == "steps" and 0 <= sm["exposed_wait_pct_of_exposed"] <= 100
    assert sm["n_collectives"] == len(res.collectives.dropna(subset=["step"]))


def test_unknown_kind_is_noted_and_not_tail():
    """An NCCL kernel whose collective is not a known kind is 'other': in comm_ns, not in the tail."""
    from test_analysis import kernels, nvtx, trace

    k = kernels(
        [
            (0, 100, 7, 1000, 1100, "b1", "compute", 40, 2),
            (0, 100, 17, 1100, 1300, "ncclDevKernel_Generic", "nccl", 50, 2),
        ]
    )
    k["collective"] = [None, "Generic"]
    n = nvtx(
        [
            (0, 100, 1, nn.DOMAIN, f"{nn.STEP} 0", 0, 100, 0, 0),
            (0, 100, 1, nn.DOMAIN, nn.BACKWARD, 30, 80, 1, None),
        ]
    )
    res = analyze(trace(k, n))
    # backward_end = 1100; the only NCCL kernel is not a gradient collective: tail 0, comm 200.
    assert res.steps.loc[0, "comm_tail_ns"] == 0 and res.steps.loc[0, "comm_ns"] == 200
    assert res.comm_kinds["collective"].tolist() == ["other"]
    assert any("no known collective kind" in note and "ncclDevKernel_Generic" in note for note in res.notes)


def test_sharded_optimizer_broadcasts_take_their_bytes_from_the_param_sync_ranges():
    """ZeRO-1 (ours) wraps each owner's parameter broadcast in 'param_sync b<k> r<owner> <bytes>B': the
    Broadcast rows get those bytes (and a bus bandwidth), and one step's broadcasts carry every parameter
    once (the run JSON's param_bytes); the all-reduces keep theirs."""
    trace = load_trace(TRACES / "campaign" / "A" / "bucketed-100mb+zero1_xl_fp32_2xh200")
    coll = analyze(trace).collectives
    kind = coll["collective"].astype(str)
    bc, ar = coll.loc[kind == "Broadcast"], coll.loc[kind == "AllReduce"]
    assert len(bc) and bc["bytes"].notna().all() and (bc["busbw_gb_per_s"] > 0).all()
    assert ar["bytes"].notna().all()
    per_step = bc.groupby(["rank", "step"])["bytes"].sum()
    assert (per_step == trace.run["param_bytes"]).all(), per_step.unique()
