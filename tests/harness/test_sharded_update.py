"""``overlap`` with ``sharded_update`` on CPU with gloo, world size 2 (one spawn for every case), and the peer
copies on 3 and 4 ranks (one more spawn).

Each rank reduce-scatters each gradient, updates its half of the parameter and all-gathers the halves
(``strategies/sharded_update.py``). With an element-wise optimizer that must train bitwise like plain
``overlap``: the same mean gradient reaches every element and the same update runs on it. A parameter whose
element count is odd cannot be halved: it is all-reduced and updated whole on both ranks.
"""

from __future__ import annotations

import argparse
import json
import lzma
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from spawned import result_path, spawn_results  # tests/harness/ is on sys.path
from torch import nn

from ddp_profile.harness.bench import add_arguments, config_from_args
from ddp_profile.harness.config import run_name
from ddp_profile.harness.models import build_model
from ddp_profile.harness.strategies import create
from ddp_profile.harness.strategies.sharded_update import ShardedUpdate
from ddp_profile.harness.train import loss_fn, optimizer_state_bytes, run_steps

BATCH, SEQ, STEPS, WARMUP = 2, 8, 3, 1
SGD_LR, ADAMW_LR = 0.5, 1e-2
# (case id, model, sharded, optimizer, peer copies)
CASES = [
    ("tiny-adamw", "tiny", False, "adamw", False),
    ("tiny-adamw-shardupd", "tiny", True, "adamw", False),
    ("tiny-adamw-shardupd-peercopy", "tiny", True, "adamw", True),
    ("tiny-sgd-shardupd", "tiny", True, "sgd", False),
    ("odd-adamw", "odd", False, "adamw", False),
    ("odd-adamw-shardupd", "odd", True, "adamw", False),
    ("odd-adamw-shardupd-peercopy", "odd", True, "adamw", True),
]


def make_optimizer(kind: str, params):
    return torch.optim.SGD(params, lr=SGD_LR) if kind == "sgd" else torch.optim.AdamW(params, lr=ADAMW_LR)


def odd_model() -> nn.Module:
    """Two linear layers; the last bias has 3 elements, which two ranks cannot halve."""
    return nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3))


def batches(model_name: str, rank: int, world_size: int) -> list[tuple]:
    gen = torch.Generator().manual_seed(7)
    out = []
    for _ in range(WARMUP + STEPS):
        if model_name == "tiny":
            tokens = torch.randint(0, 97, (BATCH * world_size, SEQ + 1), generator=gen)
            x, y = tokens[:, :-1], tokens[:, 1:]
        else:
            x, y = (
                torch.randn(BATCH * world_size, 4, generator=gen),
                torch.randn(BATCH * world_size, 3, generator=gen),
            )
        out.append((x[rank * BATCH : (rank + 1) * BATCH], y[rank * BATCH : (rank + 1) * BATCH]))
    return out


def build(model_name: str) -> nn.Module:
    torch.manual_seed(100)
    return build_model("tiny") if model_name == "tiny" else odd_model()


def train(
    model_name: str, sharded: bool, kind: str, rank: int = 0, world_size: int = 1, peer_copy: bool = False
) -> dict:
    model = build(model_name)
    factory = (lambda params: make_optimizer(kind, params)) if sharded else None
    strategy = create("overlap", model, optimizer_factory=factory, peer_copy_allreduce=peer_copy)
    optimizer = strategy.optimizer if sharded else make_optimizer(kind, list(model.parameters()))
    run_steps(strategy, optimizer, batches(model_name, rank, world_size), torch.device("cpu"), warmup=WARMUP)
    strategy.remove_hooks()
    return {
        "final": [p.detach().clone() for p in model.parameters()],
        "layout": strategy.layout(),
        "state_bytes": optimizer_state_bytes(optimizer),
        "grads": [None if p.grad is None else p.grad.clone() for p in model.parameters()],
    }


def _worker(info, outdir: str) -> None:
    torch.set_num_threads(1)
    for case_id, model_name, sharded, kind, peer_copy in CASES:
        torch.save(
            train(model_name, sharded, kind, info.rank, info.world_size, peer_copy),
            result_path(outdir, case_id, info.rank),
        )
        dist.barrier()


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return spawn_results(tmp_path_factory.mktemp("sharded_update"), _worker, [c[0] for c in CASES])


@pytest.mark.parametrize("model_name", ["tiny", "odd"])
@pytest.mark.parametrize("variant", ["shardupd", "shardupd-peercopy"])
def test_sharded_update_trains_bitwise_like_plain_overlap(results, model_name, variant):
    """NCCL-style collectives (gloo here) or peer copies (gloo send/recv standing in for the copy engine):
    the same two addends reach every element, so the same parameters come out."""
    for rank in (0, 1):
        sharded, plain = (
            results[(f"{model_name}-adamw-{variant}", rank)],
            results[(f"{model_name}-adamw", rank)],
        )
        assert len(sharded["final"]) == len(plain["final"])
        for a, b in zip(sharded["final"], plain["final"], strict=True):
            assert torch.equal(a, b), (model_name, rank)
    # and training moved the parameters (a no-op update would also agree with itself across ranks)
    assert any(
        not torch.equal(a, b)
        for a, b in zip(
            results[("tiny-adamw-shardupd", 0)]["final"],
            train("tiny", False, "adamw", 0, 1)["final"],
            strict=True,
        )
    )


def test_sharded_update_with_sgd_trains_like_one_process_on_the_whole_batch(results):
    model = build("tiny")
    full = [
        (
            torch.cat([batches("tiny", r, 2)[i][0] for r in (0, 1)]),
            torch.cat([batches("tiny", r, 2)[i][1] for r in (0, 1)]),
        )
        for i in range(WARMUP + STEPS)
    ]
    run_steps(
        create("none", model),
        make_optimizer("sgd", list(model.parameters())),
        full,
        torch.device("cpu"),
        warmup=WARMUP,
    )
    expected = [p.detach() for p in model.parameters()]
    for rank in (0, 1):
        for a, b in zip(results[("tiny-sgd-shardupd", rank)]["final"], expected, strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_each_rank_keeps_optimizer_state_for_its_part_only(results):
    for model_name in ("tiny", "odd"):
        sharded, plain = results[(f"{model_name}-adamw-shardupd", 0)], results[(f"{model_name}-adamw", 0)]
        layout = sharded["layout"]["sharded_update"]
        params = build(model_name).parameters()
        odd = [p.numel() for p in params if p.numel() % 2]
        assert layout["whole_params"] == len(odd) == (1 if model_name == "odd" else 0)
        # AdamW keeps two fp32 moments per element plus a step counter per tensor: halves, except whole tensors
        total = sum(p.numel() for p in build(model_name).parameters())
        owned = (total - sum(odd)) // 2 + sum(odd)
        assert layout["owned_param_bytes"] == owned * 4
        tensors = layout["split_params"] + layout["whole_params"]
        assert tensors == len(list(build(model_name).parameters()))
        assert (
            sharded["state_bytes"] == 4 * tensors + 2 * 4 * owned
        )  # a 4-byte step count per part, two moments
        assert plain["state_bytes"] == 4 * tensors + 2 * 4 * total
    assert results[("tiny-adamw", 0)]["layout"]["sharded_update"] is None


def test_peer_copies_carry_every_split_parameter_and_nccl_none_of_them(results):
    for model_name, split in (("tiny", len(list(build("tiny").parameters()))), ("odd", 3)):
        layout = results[(f"{model_name}-adamw-shardupd-peercopy", 0)]["layout"]["sharded_update"]
        assert layout["split_params"] == split
        peer = layout["peer_copy"]
        assert peer["parts"] == split and peer["transport"].startswith("gloo send/recv")
        assert peer["symmetric_bytes"] == 0  # no symmetric memory off the GPU
        halves = sum(p.numel() for p in build(model_name).parameters() if p.numel() % 2 == 0) // 2
        assert peer["recv_bytes"] == halves * 4
    assert results[("tiny-adamw-shardupd", 0)]["layout"]["sharded_update"]["peer_copy"] is None


def test_peer_copies_need_two_ranks_or_more(tmp_path):
    from ddp_profile.errors import ConfigError
    from ddp_profile.harness.strategies.peer_copy import symmetric_rendezvous
    from ddp_profile.harness.strategies.peer_shards import PeerShards

    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        with pytest.raises(ConfigError, match="need at least 2 ranks, not 1"):
            PeerShards({0: nn.Parameter(torch.zeros(4))}, None)
        # GPU tensors over a gloo group (--backend gloo): one clear line before any symmetric memory is touched
        with pytest.raises(ConfigError, match="need an NCCL process group, not 'gloo'"):
            symmetric_rendezvous(torch.zeros(4), dist.group.WORLD)
    finally:
        dist.destroy_process_group()


def test_one_rank_steps_every_part_whole():
    sharded, plain = train("odd", True, "adamw"), train("odd", False, "adamw")
    assert sharded["layout"]["sharded_update"]["split_params"] == 0
    for a, b in zip(sharded["final"], plain["final"], strict=True):
        assert torch.equal(a, b)


def test_zero_grad_clears_parameter_and_part_gradients():
    model = odd_model()
    update = ShardedUpdate(
        list(model.parameters()), lambda ps: make_optimizer("sgd", ps), rank=0, world_size=1
    )
    loss_fn(model(torch.randn(2, 4)), torch.randn(2, 3)).backward()
    for part in update.parts:
        part.owned.grad = part.param.grad
    update.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())
    update.zero_grad()
    assert all(part.param.grad is None and part.owned.grad is None for part in update.parts)


def parse(*argv: str):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return config_from_args(parser.parse_args(["--model", "tiny", "--seq-len", "32", *argv]))


def test_cli_flag_sets_the_lever_and_the_run_name():
    cfg = parse("--strategy", "overlap", "--reduce-avg", "--sharded-update")
    assert cfg.sharded_update and cfg.reduce_avg
    assert run_name(cfg, 2, "h100") == "overlap-avg-shardupd_tiny_fp32_2xh100"
    cfg = parse(
        "--strategy",
        "overlap",
        "--reduce-avg",
        "--sharded-update",
        "--sharded-update-normal-priority",
        "--peer-copy-allreduce",
    )
    assert cfg.sharded_update_normal_priority and cfg.peer_copy_allreduce
    assert run_name(cfg, 2, "h100") == "overlap-avg-shardupd-updnormal-peercopy_tiny_fp32_2xh100"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--strategy", "overlap", "--peer-copy-allreduce"), "without sharded_update"),
        (("--strategy", "overlap", "--sharded-update-normal-priority"), "needs sharded_update"),
        (("--strategy", "torch_ddp", "--peer-copy-allreduce"), "bucketed or to overlap"),
    ],
)
def test_levers_of_the_sharded_update_need_it(argv, message):
    from ddp_profile.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        parse(*argv)


def test_normal_priority_is_recorded_in_the_layout():
    model = odd_model()
    update = ShardedUpdate(
        list(model.parameters()),
        lambda ps: make_optimizer("sgd", ps),
        rank=0,
        world_size=1,
        high_priority=False,
    )
    assert update.layout()["side_stream_priority"] == "normal"
    assert (
        ShardedUpdate(
            list(model.parameters()), lambda ps: make_optimizer("sgd", ps), rank=0, world_size=1
        ).layout()["side_stream_priority"]
        == "high"
    )


def test_each_all_gather_is_launched_after_the_next_reduce_scatter(monkeypatch):
    """NCCL runs collectives in launch order on one stream: an all-gather launched right after its part's update
    would hold every later reduce-scatter behind that update. Order: RS(0) RS(1) AG(0) RS(2) AG(1) ..., the
    last all-gather at finish(); a whole (odd-sized) parameter is all-reduced and gathers nothing."""
    from ddp_profile.harness.strategies import sharded_update

    calls: list[str] = []

    class Done:
        def wait(self):
            return True

    def record(name):
        def launch(output, tensor, *args, **kwargs):
            calls.append(f"{name}{sizes[tensor.numel() if name != 'AG' else output.numel()]}")
            return Done()

        return launch

    model = odd_model()  # weight 24, bias 6, weight 18, bias 3 (odd: whole)
    params = list(model.parameters())
    sizes = {p.numel(): i for i, p in enumerate(params)}
    monkeypatch.setattr(sharded_update, "reduce_scatter", record("RS"))
    monkeypatch.setattr(sharded_update, "all_gather", record("AG"))
    monkeypatch.setattr(
        sharded_update.dist,
        "all_reduce",
        lambda tensor, **kw: calls.append(f"AR{sizes[tensor.numel()]}") or Done(),
    )
    monkeypatch.setattr(sharded_update.dist, "get_rank", lambda group=None: 0)
    update = ShardedUpdate(params, lambda ps: make_optimizer("sgd", ps), rank=0, world_size=2)
    loss_fn(model(torch.randn(2, 4)), torch.randn(2, 3)).backward()
    for index in (3, 2, 1, 0):  # the order backward finishes them: last layer first
        update.launch(index, dist.ReduceOp.SUM)
    assert calls == ["AR3", "RS2", "RS1", "AG2", "RS0", "AG1"]
    update.finish()
    assert calls[-1] == "AG0" and len(calls) == 7


# 3 and 4 ranks in one 4-process spawn (four processes already share CI's two cores): the N-rank offsets (part j
# of a parameter to rank j, the N - 1 receive slots, the all-gather into every peer) exactly on all 4 ranks and on
# a group of the last 3 (group ranks differ from global ranks there), and training on 4 ranks. The odd model's
# layers divide only partly by 4, so that run mixes split and whole tensors.
WIDE = 4
WIDE_CASES = [c for c in CASES if c[1] == "odd"]
SUM_PARAM_SIZES = (24, 6, 18, 3, 12)


def _exact_sums(group) -> dict:
    """PeerShards alone over ``group``, integer-valued gradients (fp32 sums exact in any order): per part the
    reduced part, then the parameters after each rank wrote its own part and the all-gather pushes ran."""
    from ddp_profile.harness.strategies.peer_shards import PeerShards

    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    params = {i: nn.Parameter(torch.zeros(n)) for i, n in enumerate(SUM_PARAM_SIZES) if n % world_size == 0}
    shards = PeerShards(params, group)
    reduced, previous = {}, None
    for index in reversed(list(params)):  # hook order: last layer first
        grad = torch.arange(params[index].numel(), dtype=torch.float32) * (rank + 1) + 100 * rank
        if previous is not None:  # the owner's update of the previous part: its own values, rank-stamped
            slot = shards.slots[previous]
            slot.flat()[slot.mine] = 1000 * (rank + 1) + torch.arange(slot.count, dtype=torch.float32)
        reduced[index] = shards.reduce(index, grad, 0.5, previous).clone()
        previous = index
    slot = shards.slots[previous]
    slot.flat()[slot.mine] = 1000 * (rank + 1) + torch.arange(slot.count, dtype=torch.float32)
    shards.flush(previous)
    return {
        "rank": rank,
        "reduced": reduced,
        "params": {i: p.detach().clone() for i, p in params.items()},
        "layout": shards.layout(),
    }


def _wide_worker(info, outdir: str) -> None:
    torch.set_num_threads(1)
    for case_id, model_name, sharded, kind, peer_copy in WIDE_CASES:
        torch.save(
            train(model_name, sharded, kind, info.rank, info.world_size, peer_copy),
            result_path(outdir, case_id, info.rank),
        )
        dist.barrier()
    torch.save(_exact_sums(None), result_path(outdir, f"exact-sums-{WIDE}", info.rank))
    last3 = dist.new_group([1, 2, 3])  # every rank takes part in making it
    torch.save(
        _exact_sums(last3) if info.rank > 0 else None,
        result_path(outdir, f"exact-sums-{WIDE - 1}", info.rank),
    )
    dist.barrier()


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    cases = [c[0] for c in WIDE_CASES] + [f"exact-sums-{n}" for n in (WIDE - 1, WIDE)]
    return spawn_results(tmp_path_factory.mktemp("sharded_update_wide"), _wide_worker, cases, WIDE)


@pytest.mark.parametrize("nproc", [WIDE - 1, WIDE])
def test_peer_copies_for_n_ranks_sum_each_part_exactly_and_gather_every_part(wide, nproc):
    split = [i for i, n in enumerate(SUM_PARAM_SIZES) if n % nproc == 0]
    assert len(split) >= 2  # at least one all-gather rides with a reduce-scatter, one with flush()
    outs = [o for o in (wide[(f"exact-sums-{nproc}", r)] for r in range(WIDE)) if o is not None]
    assert sorted(o["rank"] for o in outs) == list(range(nproc))
    for out in outs:
        rank = out["rank"]
        assert out["layout"]["ranks"] == nproc and out["layout"]["parts"] == len(split)
        for index in split:
            numel = SUM_PARAM_SIZES[index]
            count = numel // nproc
            full = sum(torch.arange(numel, dtype=torch.float32) * (r + 1) + 100 * r for r in range(nproc))
            assert torch.equal(out["reduced"][index], 0.5 * full[rank * count : (rank + 1) * count]), (
                rank,
                index,
            )
            gathered = torch.cat(
                [1000 * (r + 1) + torch.arange(count, dtype=torch.float32) for r in range(nproc)]
            )
            assert torch.equal(out["params"][index], gathered), (rank, index)


def test_peer_copies_for_n_ranks_train_like_the_nccl_sharded_update(wide):
    """Every rank ends on the same parameters (each part has one owner); they match plain ``overlap`` and the
    sharded update by collectives to fp32 rounding (with more than 2 ranks the addends' order may differ)."""
    peer = [wide[("odd-adamw-shardupd-peercopy", r)] for r in range(WIDE)]
    layout = peer[0]["layout"]["sharded_update"]
    assert layout["peer_copy"]["ranks"] == WIDE and layout["peer_copy_fallback"] is None
    params = list(build("odd").parameters())
    split = [p for p in params if p.numel() % WIDE == 0]
    assert 0 < len(split) < len(params)
    assert layout["split_params"] == layout["peer_copy"]["parts"] == len(split)
    assert layout["peer_copy"]["recv_bytes"] == (WIDE - 1) * sum(p.numel() // WIDE for p in split) * 4
    for rank in range(WIDE):
        assert all(torch.equal(a, b) for a, b in zip(peer[rank]["final"], peer[0]["final"], strict=True))
        for other in ("adamw", "adamw-shardupd"):
            ref = wide[(f"odd-{other}", rank)]["final"]
            for a, b in zip(peer[rank]["final"], ref, strict=True):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    start = build("odd").parameters()
    assert all(not torch.equal(a, b) for a, b in zip(peer[0]["final"], start, strict=True))


def test_peer_copies_fall_back_to_nccl_across_hosts_or_without_symmetric_memory(monkeypatch):
    from ddp_profile.harness.strategies.peer_shards import fallback_reason

    assert fallback_reason(4, on_gpu=False, environ={"LOCAL_WORLD_SIZE": "4"}) is None
    assert fallback_reason(4, on_gpu=False, environ={}) is None  # spawned locally: one host
    assert "more than one host (2 of 4 ranks" in str(
        fallback_reason(4, on_gpu=False, environ={"LOCAL_WORLD_SIZE": "2"})
    )
    import torch.distributed as tdist

    monkeypatch.setattr(tdist, "_symmetric_memory", None, raising=False)
    monkeypatch.setitem(__import__("sys").modules, "torch.distributed._symmetric_memory", None)
    assert "has no symmetric memory" in str(
        fallback_reason(4, on_gpu=True, environ={"LOCAL_WORLD_SIZE": "4"})
    )
    assert fallback_reason(4, on_gpu=False, environ={"LOCAL_WORLD_SIZE": "4"}) is None


def test_sharded_update_says_in_one_line_why_peer_copies_are_off(monkeypatch, capsys):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    model = odd_model()
    update = ShardedUpdate(
        list(model.parameters()), lambda ps: make_optimizer("sgd", ps), rank=0, world_size=2, peer_copy=True
    )
    assert update.exchange is None
    assert update.layout()["peer_copy_fallback"] == "ranks span more than one host (1 of 2 ranks on this one)"
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["note: peer copies off, the sharded update uses NCCL: " + update.peer_copy_fallback]


@pytest.mark.parametrize("timing_set", ["AB", "AC", "AD"])
def test_on_the_gpu_peer_copies_trained_like_stock_ddp_in_every_repeat(timing_set):
    """The committed journals of timing sets AB and AD (bf16) and AC (fp32), 2 x H200, graphed: every repeat of the
    sharded update with peer copies ended on final losses that stock DDP's own repeats ended on (in fp32, stock
    DDP itself ends on two rank-1 losses across repeats; the peer-copy runs end on the same ones)."""
    journal = Path(__file__).resolve().parents[2] / "traces" / "campaign" / timing_set / "repeats.jsonl.xz"
    if not journal.exists():
        pytest.skip(f"committed timing set {timing_set} not present")
    losses: dict[str, set] = {}
    for line in lzma.decompress(journal.read_bytes()).decode().splitlines():
        event = json.loads(line)
        if event.get("event") == "done":
            losses.setdefault(event["record"]["run"], set()).add(
                tuple(event["record"]["final_loss_per_rank"])
            )
    stock = next(v for k, v in losses.items() if k.startswith("torch_ddp-25mb-graph"))
    peer = [k for k in losses if "-shardupd" in k and "-peercopy" in k]
    assert peer, sorted(losses)
    for run in peer:
        assert losses[run] <= stock, (run, losses[run], stock)
