"""``overlap`` with ``sharded_update`` on CPU with gloo, world size 2 (one spawn for every case).

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


def test_peer_copies_need_exactly_two_ranks(tmp_path):
    from ddp_profile.errors import ConfigError
    from ddp_profile.harness.strategies.peer_copy import symmetric_rendezvous
    from ddp_profile.harness.strategies.peer_shards import PeerShards

    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        with pytest.raises(ConfigError, match="needs exactly 2 ranks"):
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
