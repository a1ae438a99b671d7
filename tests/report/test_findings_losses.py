"""Findings section "where the multi-GPU step loses its time": the critical-path medians of the profiled 1-GPU
and stock runs of a campaign set, part by part. Runs are RunData built in code; expected values follow from the
numbers written here."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from ddp_profile.findings.data import CAMPAIGN, RunData
from ddp_profile.findings.losses import critical_medians, q13_where_lost

MS = 1_000_000


def _run(name, strategy, world, parts_ms, *, batch=16, folder="B"):
    """A campaign run whose critical path has three steps with the given parts (ms) on each; span = their sum."""
    cp = pd.DataFrame(
        [{**{k: v * MS for k, v in parts_ms.items()}, "step": s, "critical_rank": 0} for s in range(3)]
    )
    cp["span_ns"] = cp[["compute_ns", "exposed_transfer_ns", "wait_ns", "host_ns", "idle_ns"]].sum(axis=1)
    meta = {
        "strategy": strategy,
        "world_size": world,
        "model": "xl",
        "dtype": "bf16",
        "config": {"strategy": strategy, "bucket_mb": 25.0, "batch": batch},
    }
    return RunData(
        set=CAMPAIGN,
        name=name,
        folder=Path(f"traces/campaign/{folder}") / name,
        meta=meta,
        trace=None,
        analysis=SimpleNamespace(critical_path=cp),
        row={},
    )


ONE = {"compute_ns": 168, "exposed_transfer_ns": 0, "wait_ns": 0, "host_ns": 97, "idle_ns": 11}
TWO = {"compute_ns": 198, "exposed_transfer_ns": 3, "wait_ns": 3, "host_ns": 25, "idle_ns": 11}


def test_parts_and_their_differences_are_stated_for_the_set():
    runs = [_run("none_xl_bf16_1x", "none", 1, ONE), _run("torch_ddp-25mb_xl_bf16_2x", "torch_ddp", 2, TWO)]
    assert critical_medians(runs[1])["span_ns"] == 240 * MS
    s = q13_where_lost(runs)
    text = " ".join(s.paragraphs())
    assert (
        "Campaign set B (bf16): the 2-GPU step span is 240 ms against 276 ms on one GPU; by part, "
        "compute +30.0 ms, exposed transfer +3.00 ms, wait +3.00 ms, host −72.0 ms, idle +0.000 ms; "
        "the largest growth is compute; the span is 36.0 ms shorter on 2 GPUs because host drops by "
        "72.0 ms, more than compute grows."
    ) in text
    # a longer span on 2 GPUs gets no such clause
    longer = [
        _run("none_xl_bf16_1x", "none", 1, dict(ONE, host_ns=20)),
        _run("torch_ddp-25mb_xl_bf16_2x", "torch_ddp", 2, TWO),
    ]
    assert "shorter on" not in " ".join(q13_where_lost(longer).paragraphs())


def test_no_section_without_a_matching_one_gpu_run():
    # the 1-GPU run has another batch: not the same workload, so no pair and no section
    runs = [
        _run("none_xl_bf16_1x", "none", 1, ONE, batch=8),
        _run("torch_ddp-25mb_xl_bf16_2x", "torch_ddp", 2, TWO),
    ]
    assert q13_where_lost(runs) is None


# ---- which compute grows: kernel families on the critical rank -------------------------------------------------

US = 1_000
STEP_US = 1_000  # each synthetic step's GPU window is [s * STEP_US, (s + 1) * STEP_US)


def _traced(name, strategy, world, per_step_us, *, channels=0, folder="B"):
    """A campaign run with a kernel table: every step of every rank runs, back to back from the window's start,
    the kernels ``per_step_us`` lists as (name, kind, count, µs each); rank 0 is critical on every step."""
    rows, steps = [], []
    for rank in range(world):
        for s in range(3):
            t = s * STEP_US * US
            steps.append({"rank": rank, "step": s, "start_ns": t, "end_ns": t + STEP_US * US})
            for kname, kind, count, us in per_step_us:
                for _ in range(count):
                    rows.append(
                        {
                            "rank": rank,
                            "pid": 10 + rank,
                            "device": rank,
                            "stream": 7,
                            "start_ns": t,
                            "end_ns": t + us * US,
                            "name": kname,
                            "kind": kind,
                            "launch_ns": t - US,
                        }
                    )
                    t += us * US
    run = _run(name, strategy, world, TWO if world > 1 else ONE, folder=folder)
    run.meta["config"]["nccl_channels"] = channels
    run.meta["config"]["nccl_high_priority"] = bool(channels)
    run.trace = SimpleNamespace(kernels=pd.DataFrame(rows))
    cp = run.analysis.critical_path
    run.analysis = SimpleNamespace(critical_path=cp, steps=pd.DataFrame(steps))
    return run


GEMM_K, ELEM_K, NCCL_K = "nvjet_sm90_tst_128x256", "vectorized_elementwise_kernel", "ncclDevKernel_AllReduce"
ONE_GPU = [(GEMM_K, "compute", 4, 25), (ELEM_K, "compute", 10, 5)]  # GEMM 100 µs, elementwise 50 µs per step


def _text(s) -> str:
    return " ".join(s.paragraphs())


def _family_table(s):
    from ddp_profile.findings.text import Table

    return next(b.frame for b in s.blocks if isinstance(b, Table) and "by kernel family" in b.caption)


def test_family_table_and_its_sentence_follow_the_numbers():
    one = _traced("none_xl_bf16_1x", "none", 1, ONE_GPU)
    # GEMMs 25 -> 35 µs (+40 %), elementwise 5 -> 5.5 µs (+10 %): GEMM grows most and slows most per kernel
    gemm_slow = _traced(
        "torch_ddp-25mb_xl_bf16_2x",
        "torch_ddp",
        2,
        [(GEMM_K, "compute", 4, 35), (ELEM_K, "compute", 10, 5.5), (NCCL_K, "nccl", 1, 30)],
    )
    s = q13_where_lost([one, gemm_slow])
    t = _family_table(s).set_index("family")
    assert t.loc["GEMM", "1 GPU"] == "0.100 ms" and t.loc["GEMM", "2 GPUs"] == "0.140 ms"
    assert t.loc["GEMM", "difference"] == "+0.040 ms" and t.loc["GEMM", "difference %"] == "+40.0 %"
    assert t.loc["all but NCCL", "difference"] == "+0.045 ms"  # 40 + 5 µs
    assert t.loc["NCCL", "2 GPUs"] == "0.030 ms"
    assert t.loc["elementwise (incl. copies, casts)", "kernels per step"] == "10 → 10"
    text = _text(s)
    assert "the largest contributor is GEMM, 88.9 % of the growth" in text  # 40 of 45 µs
    assert "+40.0 % for GEMMs" in text and "GEMMs slowing more" in text
    assert "HBM bandwidth shared with the NCCL kernels running beside them" not in text
    # elementwise 5 -> 9 µs (+80 %), GEMMs 25 -> 26 µs (+4 %): now the memory-bound kernels grow and slow most
    mem_slow = _traced(
        "torch_ddp-25mb_xl_bf16_2x",
        "torch_ddp",
        2,
        [(GEMM_K, "compute", 4, 26), (ELEM_K, "compute", 10, 9), (NCCL_K, "nccl", 1, 30)],
    )
    text = _text(q13_where_lost([one, mem_slow]))
    assert (
        "the largest contributor is elementwise (incl. copies, casts), 90.9 % of the growth" in text
    )  # 40 of 44
    assert "memory-bound kernels slowing more points at HBM bandwidth" in text
    assert "GEMMs slowing more" not in text


def test_a_channel_limited_run_gets_its_own_columns_and_sentence():
    one = _traced("none_xl_bf16_1x", "none", 1, ONE_GPU)
    stock = _traced(
        "torch_ddp-25mb_xl_bf16_2x",
        "torch_ddp",
        2,
        [(GEMM_K, "compute", 4, 35), (ELEM_K, "compute", 10, 5), (NCCL_K, "nccl", 1, 30)],
    )
    ch2 = _traced(
        "torch_ddp-25mb-ch2-hiprio_xl_bf16_2x",
        "torch_ddp",
        2,
        [(GEMM_K, "compute", 4, 30), (ELEM_K, "compute", 10, 5), (NCCL_K, "nccl", 1, 60)],
        channels=2,
    )
    s = q13_where_lost([one, stock, ch2])
    from ddp_profile.findings.text import Table

    limited = next(b.frame for b in s.blocks if isinstance(b, Table) and "fewer channels" in b.caption)
    row = limited.set_index("family").loc["all but NCCL"]
    assert (
        row["stock vs 1 GPU"] == "+0.040 ms (+26.7 %)"
        and row["2 channels, high priority vs 1 GPU"] == "+0.020 ms (+13.3 %)"
    )
    assert (
        "with 2 channels, high priority the change is +0.020 ms (+13.3 %), 0.020 ms less than stock's "
        "+0.040 ms: NCCL held to fewer channels (CTAs) shrinks the compute kernels' slowdown"
    ) in _text(s)
    # a channel-limited run slower than stock gets no such conclusion
    ch2_slow = _traced(
        "torch_ddp-25mb-ch2-hiprio_xl_bf16_2x",
        "torch_ddp",
        2,
        [(GEMM_K, "compute", 4, 40), (ELEM_K, "compute", 10, 5), (NCCL_K, "nccl", 1, 60)],
        channels=2,
    )
    text = _text(q13_where_lost([one, stock, ch2_slow]))
    assert "0.020 ms more than stock's" in text and "shrinks" not in text


def _cell_ms(v: str) -> float:
    return float(v.replace("+", "").replace("−", "-").replace(",", "").split(" ms")[0])


def _half_step(v: str) -> float:
    """Half the last shown digit of a cell: what 3 significant digits may round away."""
    num = v.split(" ms")[0]
    return 0.5 * 10.0 ** -(len(num.split(".")[1]) if "." in num else 0)


def test_real_set_b_section_carries_the_family_table():
    """Campaign set B (2 x H200, XL bf16), the committed traces: the table's 'all but NCCL' row is the critical
    path's compute part (mean over steps; its union equals the sum of durations on these traces), its family
    rows add up to it, the sentence names the family whose growth the table shows largest, and the rendered
    Markdown carries the table."""
    from ddp_profile.findings.data import load_run
    from ddp_profile.findings.render import to_markdown

    root = Path(__file__).resolve().parents[2] / "traces" / "campaign" / "B"
    runs = [
        load_run(CAMPAIGN, root / n)
        for n in (
            "none_xl_bf16_1xh200",
            "torch_ddp-25mb_xl_bf16_2xh200",
            "torch_ddp-25mb-ch2-hiprio_xl_bf16_2xh200",
        )
    ]
    s = q13_where_lost(runs)
    t = _family_table(s).set_index("family")
    for col, run in (("1 GPU", runs[0]), ("2 GPUs", runs[1])):
        crit = run.analysis.critical_path
        compute, wait = float(crit["compute_ns"].mean()) / 1e6, float(crit["wait_ns"].mean()) / 1e6
        total = t.loc["all but NCCL", col]
        # the kernels' durations: the compute part, plus the GEMM time slowed beside a waiting NCCL kernel that
        # the critical path counts as wait (none on one GPU)
        slack = _half_step(total) + 1e-9
        assert compute - slack <= _cell_ms(total) <= compute + (wait if col == "2 GPUs" else 0.0) + slack
        cells = t.drop(index=["all but NCCL", "NCCL"])[col]
        slack = _half_step(total) + sum(map(_half_step, cells)) + 1e-9
        assert cells.map(_cell_ms).sum() == pytest.approx(_cell_ms(total), abs=slack)
    growth = t.drop(index=["all but NCCL", "NCCL"])["difference"].map(_cell_ms)
    assert growth.sum() > 0
    assert f"the largest contributor is {growth.idxmax()}," in _text(s)
    assert "with 2 channels, high priority the change is" in _text(s)
    md = to_markdown("t", [], [s], [])
    assert (
        "GPU time per step by kernel family on the critical rank, none_xl_bf16_1xh200 and "
        "torch_ddp-25mb_xl_bf16_2xh200" in md
    )
    assert "| family | 1 GPU | 2 GPUs | difference | difference % |" in md


def test_signed_changes_that_round_to_zero_carry_no_minus():
    from ddp_profile.findings.losses import signed_pct
    from ddp_profile.findings.text import signed_ms

    assert signed_ms(-2 * MS) == "−2.00 ms" and signed_ms(2 * MS) == "+2.00 ms"
    assert signed_ms(-1) == "+0.000 ms"  # 1 ns shows as 0.000 ms: no "−0.000"
    assert signed_pct(-1, 1000.0) == "−0.1 %" and signed_pct(-0.1, 1000.0) == "+0.0 %"
    assert signed_pct(5, 0) == "n/a"


def test_summary_says_per_dtype_which_part_grows_and_why_a_span_is_shorter():
    """One summary bullet per dtype over its campaign sets, from the section's own differences: set B's span is
    36 ms shorter (276 → 240) though compute grows 30 ms, because host drops 72 ms; set E (its 1-GPU host only
    20 ms) grows 40 ms. It links to the section."""
    from ddp_profile.findings.summary import build_summary

    runs = [
        _run("none_xl_bf16_1x", "none", 1, ONE),
        _run("torch_ddp-25mb_xl_bf16_2x", "torch_ddp", 2, TWO),
        _run("none_xl_bf16_1x", "none", 1, dict(ONE, host_ns=20), folder="E"),
        _run("torch_ddp-25mb_xl_bf16_2x", "torch_ddp", 2, TWO, folder="E"),
    ]
    s = q13_where_lost(runs)
    (b,) = build_summary([s]).bullets
    assert (b.lead, b.anchor) == ("bf16, where the multi-GPU step loses time:", "losses")
    assert b.text == (
        "span vs one GPU −36.0 to +41.0 ms (2 sets); compute grows most in 2 of 2 "
        "(+30.0 ms), then exposed transfer (+3.00 ms); the span is shorter in 1 of 2 as host drops."
    )

    (b1,) = build_summary([q13_where_lost(runs[:2])]).bullets
    assert b1.text == (
        "span vs one GPU −36.0 ms (one campaign set); compute grows most (+30.0 ms), then "
        "exposed transfer (+3.00 ms); the span is shorter as host drops."
    )
