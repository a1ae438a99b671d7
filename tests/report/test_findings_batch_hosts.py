"""Findings wording that depends on batch and host facts, on synthetic runs built in code: q8 compares sets
of different batches per token, its GPU-bound / host-bound sentence and range verdicts follow the numbers,
the intro states each set's batch and torch_ddp's hook from the run JSONs, and traces/hosts.txt decides
which sets the limits call mixed."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from ddp_profile.errors import TraceError
from ddp_profile.findings import intro, run_sets
from ddp_profile.findings import reference as qb
from ddp_profile.findings.data import RunData
from ddp_profile.findings.text import Table, ms
from ddp_profile.report.hosts import read_hosts

MS = 1e6


def fake(
    strategy,
    dtype="fp32",
    batch=4,
    seq=256,
    step=400.0,
    compute=380.0,
    idle=10.0,
    spread=None,
    world=2,
    model="xl",
    comm_pct=10.0,
    bucket=None,
    hook=None,
    set_name="main",
    grad_bytes=8e9,
) -> RunData:
    """A RunData with only the facts the findings read; times in ms."""
    cfg = {
        "strategy": strategy,
        "model": model,
        "batch": batch,
        "seq_len": seq,
        "dtype": dtype,
        "bucket_mb": bucket,
    }
    if hook is not None:
        cfg["ddp_nvtx_hook"] = hook
    world = 1 if strategy == "none" else world
    name = (f"{strategy}-{bucket:g}mb" if bucket else strategy) + f"_{model}_{dtype}_{world}xh200"
    meta = {
        "config": cfg,
        "strategy": strategy,
        "model": model,
        "dtype": dtype,
        "world_size": world,
        "gpu_name": "NVIDIA H200",
    }
    lo, hi = spread or (step * 0.99, step * 1.01)
    analysis = SimpleNamespace(
        steps=pd.DataFrame({"idle_ns": [idle * MS]}), collectives=pd.DataFrame({"dtype": ["f32"]})
    )
    row = {
        "step_ns": step * MS,
        "compute_ns": compute * MS,
        "comm_pct": comm_pct,
        "exposed_comm_ns": MS,
        "overlap_pct": 50.0,
    }
    return RunData(
        set=set_name,
        name=name,
        folder=Path(name),
        meta=meta,
        trace=None,
        analysis=analysis,
        row=row,
        summary={"n_steps": 4},
        spread={"step_ns": (lo * MS, hi * MS)},
        collectives={"bytes_per_step": grad_bytes if world > 1 else 0.0},
    )


def text_of(sec) -> str:
    return " ".join(sec.paragraphs())


def table_of(sec) -> pd.DataFrame:
    return next(b.frame for b in sec.blocks if isinstance(b, Table))


def page(r):
    return f"run-{r.name}.html"


def sets(b_batch=16, b_none_compute=180.0, b_none_idle=10.0, b_spreads=None, b_naive_idle=10.0, **b_kw):
    """Set A (fp32, batch 4×256) and set B (bf16, batch b_batch×256) with none, naive and overlap."""
    a = {
        "none": fake("none", step=400, compute=380, idle=8),
        "naive": fake("naive", step=440, compute=385, comm_pct=8.0, spread=(430, 450)),
        "overlap": fake("overlap", step=420, compute=400, spread=(410, 425)),
    }
    sp = b_spreads or {"naive": (300, 320), "overlap": (240, 260)}
    b = {
        "none": fake("none", "bf16", b_batch, step=200, compute=b_none_compute, idle=b_none_idle, **b_kw),
        "naive": fake(
            "naive",
            "bf16",
            b_batch,
            step=310,
            compute=190,
            comm_pct=20.0,
            spread=sp["naive"],
            idle=b_naive_idle,
        ),
        "overlap": fake("overlap", "bf16", b_batch, step=250, compute=200, spread=sp["overlap"]),
    }
    return a, b


def test_q8_compares_per_token_when_batches_differ():
    a, b = sets(b_batch=16)
    sec = qb.q8_dtype(a, b, page, "m")
    t = text_of(sec)
    a_k, b_k = (
        380 * MS * 1000 / 1024,
        180 * MS * 1000 / 4096,
    )  # compute ns per 1k tokens: 371 ms, 44.0 ms
    assert f"bf16 cuts the 1-GPU compute per token from {ms(a_k)} to {ms(b_k)} per 1k tokens" in t
    assert f"({a_k / b_k:.1f}× less)" in t
    assert "from 380 ms to 180 ms" not in t  # raw step-level compute is not compared across batches
    assert "1-GPU throughput 2,560 → 20,480 tokens/s" in t  # 1024 tok / 0.4 s; 4096 tok / 0.2 s
    assert "Set B's step carries 4× set A's tokens per GPU (16×256 vs 4×256)" in t and "the larger batch" in t
    assert "compare across sets by throughput per GPU" in t
    cols = list(table_of(sec).columns)
    assert "fp32 step (4×256/GPU)" in cols and "bf16 step (16×256/GPU)" in cols
    assert "bf16 tokens/s per GPU" in cols


def test_q8_same_batch_says_so_and_word_flips_when_bf16_costs_more():
    a, b = sets(b_batch=4, b_none_compute=500.0)  # bf16 compute per token above fp32's: the verb flips
    t = text_of(qb.q8_dtype(a, b, page, "m"))
    assert "bf16 raises the 1-GPU compute per token" in t and "× more)" in t
    assert "Set B's step carries" not in t and "step times compare across sets too" in t


def test_q8_gpu_bound_vs_host_bound_follows_idle_share():
    gpu = text_of(qb.q8_dtype(*sets(b_none_idle=20.0), page, "m"))  # 20 / 200 = 10%
    host = text_of(qb.q8_dtype(*sets(b_none_idle=80.0), page, "m"))  # 80 / 200 = 40%
    assert (
        "The 1-GPU bf16 step is GPU-bound: the GPU idles 20.0 ms of its 200 ms (10.0 %, under the 25 %" in gpu
    )
    assert "host/launch-bound" not in gpu
    assert (
        "The 1-GPU bf16 step is host/launch-bound: the GPU idles 80.0 ms of its 200 ms (40.0 %, above" in host
    )
    assert "GPU-bound" not in host
    assert (
        "The multi-GPU bf16 runs idle 3.2 %–4.0 % of their steps; all under the 25 % line" in gpu
    )  # 10/310, 10/250
    busy = text_of(qb.q8_dtype(*sets(b_naive_idle=100.0), page, "m"))  # 100 / 310 = 32.3 %
    assert "naive (32.3 %) is above the line, so its rank includes host-side time" in busy
    # the threshold is a parameter: 10% idle is host-bound under a 5% line
    assert "host/launch-bound" in text_of(qb.q8_dtype(*sets(b_none_idle=20.0), page, "m", idle_pct=5.0))


def test_q8_fastest_two_verdict_follows_the_ranges():
    apart = text_of(qb.q8_dtype(*sets(b_spreads={"naive": (300, 320), "overlap": (240, 260)}), page, "m"))
    close = text_of(qb.q8_dtype(*sets(b_spreads={"naive": (300, 320), "overlap": (240, 305)}), page, "m"))
    head = "fastest two of all its 2 multi-GPU strategies (ranked as on its strategies page)"
    assert f"bf16's {head}, overlap and naive, are separated beyond their step ranges" in apart
    assert f"bf16's {head}, overlap and naive, have overlapping step ranges" in close
    assert f"fp32's {head}, overlap and naive, are separated" in apart  # 410–425 vs 430–450


def test_q8_fastest_two_ranks_the_whole_set_as_its_strategies_page_does():
    """A strategy only set A ran (bucketed 1000 MiB, as in traces/) is left out of the shared ranking but not
    out of set A's fastest two, which follow the page's measures.rank_ns ranking of all of set A's runs."""
    from ddp_profile.report import measures

    a, b = sets()
    a["bucketed-1000"] = fake("bucketed", step=405, compute=390, spread=(400, 408), bucket=1000)
    t = text_of(qb.q8_dtype(a, b, page, "m"))
    big = a["bucketed-1000"].label
    assert "Among the 3 strategies both sets ran, the ranking" in t and f"{big} <" not in t
    page_order = sorted(
        (r for r in a.values() if r.world_size > 1),
        key=lambda r: measures.rank_ns(r.meta, r.v("step_ns"), measures.ranking_basis([r.meta])),
    )
    assert [r.label for r in page_order[:2]] == [big, "overlap"]
    assert (
        "fp32's fastest two of all its 3 multi-GPU strategies (ranked as on its strategies page), "
        f"{big} and overlap, are separated beyond their step ranges"
    ) in t  # 400–408 vs 410–425


def test_q8_ranks_per_token_when_a_set_mixes_batches():
    a, b = sets(b_batch=16)
    t = text_of(qb.q8_dtype(a, b, page, "m"))  # one batch: by step time, overlap 250 ms < naive 310 ms
    assert "ranked by step time within a set" in t and "bf16 order none < overlap < naive" in t
    # overlap at 4×256: 250 ms / 1024 tok = 244 ms per 1k tokens; naive 310 ms / 4096 tok = 75.7 ms
    b["overlap"] = fake("overlap", "bf16", 4, step=250, compute=200, spread=(240, 260))
    sec = qb.q8_dtype(a, b, page, "m")
    t = text_of(sec)
    assert "ranked by time per unit of work" in t and "bf16 order none < naive < overlap" in t
    assert "time per unit of work" in next(blk.caption for blk in sec.blocks if isinstance(blk, Table))


def test_intro_states_each_sets_batch_and_torch_ddp_hook(tmp_path):
    runs = [
        fake("none", batch=8, seq=64, model="small"),
        fake("naive", batch=8, seq=64, model="small"),
        fake("naive", batch=4),
        fake("naive", "bf16", 16),
        fake("torch_ddp", bucket=25, hook=False),
        fake("torch_ddp", "bf16", 16, bucket=25, hook=True),
        fake("torch_ddp", model="small", batch=8, seq=64, bucket=25),
    ]
    text = " ".join(intro(tmp_path, runs))
    assert "small = model small fp32, batch 8×64 per GPU" in text
    assert "A = XL fp32, batch 4×256 per GPU" in text and "B = XL bf16 autocast, batch 16×256 per GPU" in text
    assert "ran stock PyTorch DDP (no comm hook)" in text and "ran DDP with the opt-in NVTX comm hook" in text
    assert "do not record whether the hook was on" in text
    assert "host not recorded" in text  # no hosts.txt in tmp_path
    assert "campaign sets" not in text  # no campaign runs
    camp = [fake("torch_ddp", bucket=25, set_name="campaign")]
    camp[0].folder = Path("campaign/A") / camp[0].name
    assert (
        "1 in " + tmp_path.as_posix() + "/campaign/ (campaign set A, apart from sets small/A/B), "
        "each also timed" in " ".join(intro(tmp_path, runs + camp))
    )


def test_read_hosts_parses_and_rejects(tmp_path):
    assert read_hosts(tmp_path) == {}
    fixture = Path(__file__).resolve().parents[1] / "data" / "findings_hosts.txt"
    (tmp_path / "hosts.txt").write_text(fixture.read_text())
    h = read_hosts(tmp_path)
    assert h["overlap_small_fp32_2xh200"] == "host-a" and h["torch_ddp-25mb_small_fp32_2xh200"] == "host-b"
    assert len(h) == 7
    (tmp_path / "hosts.txt").write_text("naive_small_fp32_2xh200 host-a\nlonely_name\n")
    with pytest.raises(TraceError, match=r"hosts.txt:2: expected '<run folder> <host label>'"):
        read_hosts(tmp_path)


def test_limits_and_q5_name_the_set_that_mixes_hosts():
    small = [fake(s, model="small", batch=4, seq=128) for s in ("none", "naive", "overlap")] + [
        fake("torch_ddp", model="small", batch=4, seq=128, bucket=25)
    ]
    xl = [fake("naive"), fake("torch_ddp", bucket=25)]
    runs = small + xl
    ss = run_sets(runs)
    one = {r.run_id: "host-1" for r in small} | {r.run_id: "host-2" for r in xl}
    mixed = dict(one, **{small[-1].run_id: "host-2"})
    t_one = text_of(qb.limits(runs, one, ss))
    t_mixed = text_of(qb.limits(runs, mixed, ss))
    t_none = text_of(qb.limits(runs, {}, ss))
    assert "set small ran on host-1" in t_one and "set A ran on host-2" in t_one and "mixes" not in t_one
    assert (
        "set small mixes hosts: torch_ddp on host-2, its other 3 runs on host-1, so set small's comparisons "
        "with torch_ddp include a change of host"
    ) in t_mixed
    assert "do not name the host" in t_none and "mixes" not in t_none
    # campaign folders are named by their own label, apart from the main sets of the same letter
    camp = {
        "A": [fake("torch_ddp", bucket=25, set_name="campaign")],
        "B": [fake("naive", set_name="campaign")],
    }
    chosts = dict(one, **{r.run_id: "host-9" for rs in camp.values() for r in rs})
    t_camp = text_of(qb.limits(runs, chosts, ss, None, camp))
    assert "set A ran on host-2" in t_camp and "campaign sets A and B ran on host-9" in t_camp
    q5_one = text_of(qb.q5_torch([("Set small", ss["small"])], page, "m", one))
    q5_mixed = text_of(qb.q5_torch([("Set small", ss["small"])], page, "m", mixed))
    assert "change of host" not in q5_one
    assert "torch_ddp ran on host-2, other runs of this set on host-1" in q5_mixed


def test_scaling_prose_writes_percentages_as_the_tables_do():
    """q7's sentence states NCCL's share of the step as '24.9 %' (space before the sign, as the table's comm
    share column), never '24.9%'."""
    import re

    srs = [
        fake("torch_ddp", world=w, step=s, bucket=25, comm_pct=c)
        for w, s, c in ((1, 400, 0.0), (4, 420, 24.94))
    ]
    text = text_of(qb.q7_scaling(srs, page, "m")[0])
    assert "NCCL is 24.9 % of the step" in text
    assert not re.search(r"\d%", text), re.search(r".{30}\d%", text)
