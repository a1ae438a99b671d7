"""The contention-cutting levers on CPU with gloo, world size 2 (one spawn for every case).

Each lever on `bucketed` trains like single-process training on the full batch (SGD, the same 1e-5
tolerance as tests/harness/test_strategies.py), except the bf16 reductions (bucketed's and torch_ddp's
bf16 comm hook), which are held to a stated tolerance; grad views really alias the bucket buffers;
per-bucket optimizers give bitwise the plain step.
"""

from __future__ import annotations

import functools
import json

import pytest
import torch
import torch.distributed as dist
from spawned import result_path, spawn_results  # tests/harness/ is on sys.path

from ddp_profile.errors import ConfigError
from ddp_profile.harness import bench, launch
from ddp_profile.harness.config import RunConfig, run_name
from ddp_profile.harness.models import build_model
from ddp_profile.harness.strategies import create, pack_buckets
from ddp_profile.harness.train import run_steps

BATCH, SEQ, STEPS, WARMUP = 2, 8, 3, 1
CAP = 0.02  # MiB: the tiny model's ~100 KiB of gradients in several buckets
SGD_LR, ADAMW_LR = 0.5, 1e-2

# (case id, strategy, levers, optimizer)
CASES = [
    ("plain", "bucketed", {}, "sgd"),
    ("first", "bucketed", {"first_bucket_mb": 0.002}, "sgd"),
    ("views", "bucketed", {"grad_views": True}, "sgd"),
    ("bf16", "bucketed", {"grad_reduce_dtype": "bf16"}, "sgd"),
    ("optoverlap", "bucketed", {"overlap_optimizer": True}, "sgd"),
    ("plain-adamw", "bucketed", {}, "adamw"),
    ("optoverlap-adamw", "bucketed", {"overlap_optimizer": True}, "adamw"),
    (
        "all",
        "bucketed",
        {
            "first_bucket_mb": 0.002,
            "grad_views": True,
            "grad_reduce_dtype": "bf16",
            "overlap_optimizer": True,
        },
        "sgd",
    ),
    (
        "all-but-bf16-adamw",
        "bucketed",
        {"first_bucket_mb": 0.002, "grad_views": True, "overlap_optimizer": True},
        "adamw",
    ),
    ("ddp-views", "torch_ddp", {"grad_views": True}, "sgd"),
    ("ddp-hookbf16", "torch_ddp", {"ddp_comm_hook": "bf16"}, "sgd"),
    ("peercopy", "bucketed", {"peer_copy_allreduce": True}, "sgd"),
    ("peercopy-bf16", "bucketed", {"peer_copy_allreduce": True, "grad_reduce_dtype": "bf16"}, "sgd"),
    (
        "peercopy-views-optoverlap-adamw",
        "bucketed",
        {"peer_copy_allreduce": True, "grad_views": True, "overlap_optimizer": True},
        "adamw",
    ),
    ("ddp-hookbf16-views", "torch_ddp", {"ddp_comm_hook": "bf16", "grad_views": True}, "sgd"),
    ("overlap", "overlap", {}, "sgd"),
    ("overlap-avg", "overlap", {"reduce_avg": True}, "sgd"),
]


def make_optimizer(kind: str, params):
    params = [p for p in params if p.requires_grad]
    return torch.optim.SGD(params, lr=SGD_LR) if kind == "sgd" else torch.optim.AdamW(params, lr=ADAMW_LR)


def global_batches(world_size: int) -> list[tuple]:
    gen = torch.Generator().manual_seed(7)
    out = []
    for _ in range(WARMUP + STEPS):
        tokens = torch.randint(0, 97, (BATCH * world_size, SEQ + 1), generator=gen)
        out.append((tokens[:, :-1], tokens[:, 1:]))
    return out


def state(model) -> list[torch.Tensor]:
    return [t.detach().clone() for t in [*model.parameters(), *model.buffers()]]


def _inside(t: torch.Tensor, buffer: torch.Tensor) -> bool:
    lo = buffer.data_ptr()
    return (
        lo <= t.data_ptr()
        and t.data_ptr() + t.numel() * t.element_size() <= lo + buffer.numel() * buffer.element_size()
    )


def _worker(info, outdir: str) -> None:
    torch.set_num_threads(1)  # two ranks on a small machine: no oversubscription
    for case_id, strategy_name, levers, opt_kind in CASES:
        torch.manual_seed(100)
        model = build_model("tiny")
        kwargs = {k: v for k, v in levers.items() if k != "overlap_optimizer"}
        if levers.get("overlap_optimizer"):
            kwargs["optimizer_factory"] = lambda params, kind=opt_kind: make_optimizer(kind, params)
        strategy = create(strategy_name, model, bucket_mb=CAP, **kwargs)
        optimizer = (
            strategy.optimizer
            if levers.get("overlap_optimizer")
            else make_optimizer(opt_kind, model.parameters())
        )
        batches = [
            (x[info.rank * BATCH : (info.rank + 1) * BATCH], y[info.rank * BATCH : (info.rank + 1) * BATCH])
            for x, y in global_batches(info.world_size)
        ]
        run_steps(strategy, optimizer, batches, torch.device("cpu"), warmup=WARMUP)
        grads = [p.grad for p in model.parameters()]
        out = {
            "final": state(model),
            "layout": strategy.layout(),
            "grad_is_none": [g is None for g in grads],
            "grad_storages": [g.untyped_storage().data_ptr() for g in grads if g is not None],
            "grad_dtypes": sorted({str(g.dtype) for g in grads if g is not None}),
        }
        if strategy_name == "bucketed":
            out["grad_in_own_bucket"] = [
                all(p.grad is not None and _inside(p.grad, b.buffer) for p in b.params)
                for b in strategy.buckets
            ]
            out["bucket_optimizers"] = [type(b.optimizer).__name__ for b in strategy.buckets]
        out["nccl_levers"] = launch.comm_setup(2, True, 2)  # what a run JSON on this gloo group would say
        torch.save(out, result_path(outdir, case_id, info.rank))
        dist.barrier()


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return spawn_results(tmp_path_factory.mktemp("levers"), _worker, [c[0] for c in CASES])


@functools.cache
def reference(opt_kind: str) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(initial, final) state of single-process training on the full global batch, no communication."""
    torch.manual_seed(100)
    model = build_model("tiny")
    initial = state(model)
    run_steps(
        create("none", model),
        make_optimizer(opt_kind, model.parameters()),
        global_batches(2),
        torch.device("cpu"),
        warmup=WARMUP,
    )
    return initial, state(model)


CASE = {c[0]: c for c in CASES}


@pytest.mark.parametrize(
    "case_id",
    [
        c[0]
        for c in CASES
        if c[3] == "sgd" and c[2].get("grad_reduce_dtype") != "bf16" and c[2].get("ddp_comm_hook") != "bf16"
    ]
    + ["plain-adamw", "optoverlap-adamw", "all-but-bf16-adamw", "peercopy-views-optoverlap-adamw"],
)
def test_fp32_levers_train_like_a_single_process(results, case_id):
    _, expected = reference(CASE[case_id][3])
    for rank in (0, 1):
        for a, b in zip(results[(case_id, rank)]["final"], expected, strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("case_id", ["bf16", "all", "ddp-hookbf16", "ddp-hookbf16-views", "peercopy-bf16"])
def test_bf16_reduction_is_within_its_stated_tolerance(results, case_id):
    """Stated tolerance: with SGD the training update (final - initial parameters) matches fp32
    single-process training within 1 % in norm per tensor (each rank's pre-divided share is rounded to bf16,
    2^-9 relative, and so is the bf16 sum), and every parameter within 1e-3 absolutely; it must differ from
    the fp32 result (else the bf16 path did not run)."""
    initial, expected = reference("sgd")
    final = results[(case_id, 0)]["final"]
    assert all(
        torch.equal(a, b) for a, b in zip(final, results[(case_id, 1)]["final"], strict=True)
    )  # ranks agree
    worst = 0.0
    for x0, a, b in zip(initial, final, expected, strict=True):
        torch.testing.assert_close(a, b, atol=1e-3, rtol=0)
        update = (b - x0).norm()
        if update > 0:
            worst = max(worst, float((a - b).norm() / update))
    assert worst < 0.01
    assert any(not torch.equal(a, b) for a, b in zip(final, expected, strict=True))
    layout = results[(case_id, 0)]["layout"]
    assert layout["reduce_dtype"] == "bf16"
    sent = layout["ddp_bucket_bytes"] if CASE[case_id][1] == "torch_ddp" else layout["bucket_bytes"]
    assert layout["reduce_bytes"] == [n // 2 for n in sent]
    assert results[(case_id, 0)]["grad_dtypes"] == ["torch.float32"]  # fp32 gradients, parameters stay fp32


def test_ddp_bf16_hook_is_pytorchs_hook_and_matches_our_bf16_buckets(results):
    """torch_ddp + --ddp-comm-hook bf16 runs PyTorch's bf16_compress_hook (on gloo under a second name, since
    DDP's by-name check refuses it on a build without NCCL) and gives bitwise the result of bucketed's bf16
    reduction: at world size 2 both send bf16(g)/2 (exact halving) and sum two bf16 values, element by
    element, so the bucket boundaries (DDP's and ours differ) change nothing."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    from ddp_profile.harness.strategies import torch_ddp

    on_nccl, elsewhere, dtype = torch_ddp.COMM_HOOKS["bf16"]
    assert on_nccl is default_hooks.bf16_compress_hook and dtype == torch.bfloat16
    for case_id in ("ddp-hookbf16", "ddp-hookbf16-views"):
        layout = results[(case_id, 0)]["layout"]
        assert layout["comm_hook"] == "bf16"
        assert layout["comm_hook_fn"] == f"{elsewhere.__module__}.{elsewhere.__name__}"  # gloo: the wrapper
        for rank in (0, 1):
            for a, b in zip(results[(case_id, rank)]["final"], results[("bf16", rank)]["final"], strict=True):
                assert torch.equal(a, b), (case_id, rank)
    assert results[("ddp-hookbf16-views", 0)]["layout"]["gradient_as_bucket_view"] is True
    assert results[("ddp-views", 0)]["layout"]["comm_hook_fn"] is None  # no hook unless asked


def test_peer_copy_allreduce_is_bitwise_the_all_reduce(results):
    """Peer copy + one local add sums the same two addends as gloo's two-rank all-reduce: the same result,
    bit for bit, in fp32 and with bf16 wires (on gloo the copy is a send/recv; the GPU transport, symmetric
    memory and copy engines, has no CPU test)."""
    for peer, plain in (
        ("peercopy", "plain"),
        ("peercopy-bf16", "bf16"),
        ("peercopy-views-optoverlap-adamw", "all-but-bf16-adamw"),
    ):
        layout = results[(peer, 0)]["layout"]
        assert (
            layout["peer_copy_allreduce"] is True
            and results[(plain, 0)]["layout"]["peer_copy_allreduce"] is False
        )
        assert layout["peer_copy"]["transport"].startswith("gloo send/recv + one add")
        assert layout["peer_copy"]["recv_bytes"] == sum(layout["reduce_bytes"])
        for rank in (0, 1):
            for a, b in zip(results[(peer, rank)]["final"], results[(plain, rank)]["final"], strict=True):
                assert torch.equal(a, b), (peer, rank)


def test_gloo_stand_in_only_calls_pytorchs_hook(monkeypatch):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    from ddp_profile.harness.strategies import torch_ddp

    calls = []
    monkeypatch.setattr(
        default_hooks, "bf16_compress_hook", lambda group, bucket: calls.append((group, bucket)) or "fut"
    )
    assert torch_ddp.COMM_HOOKS["bf16"][1]("group", "bucket") == "fut" and calls == [("group", "bucket")]


def test_grad_views_alias_the_bucket_buffers_and_change_no_value(results):
    views, plain = results[("views", 0)], results[("plain", 0)]
    assert views["layout"]["grad_views"] is True and views["layout"]["buckets"] > 2
    assert all(views["grad_in_own_bucket"])  # every .grad lies inside its bucket's flat buffer: no copy-back
    assert not any(plain["grad_in_own_bucket"])  # the reference strategy keeps separate .grad tensors
    for a, b in zip(views["final"], plain["final"], strict=True):
        assert torch.equal(a, b)  # same arithmetic, bitwise


def test_reduce_avg_on_gloo_divides_first_and_is_bitwise_plain_overlap(results):
    for rank in (0, 1):
        avg, plain = results[("overlap-avg", rank)], results[("overlap", rank)]
        assert avg["layout"]["reduce_avg"] is True and plain["layout"]["reduce_avg"] is False
        assert avg["layout"]["reduce_op"] == plain["layout"]["reduce_op"] == "divide, then sum"
        for a, b in zip(avg["final"], plain["final"], strict=True):
            assert torch.equal(a, b)


@pytest.mark.parametrize(
    "backend,asked,averages", [("nccl", True, True), ("nccl", False, False), ("gloo", True, False)]
)
def test_nccl_averages_only_when_asked_and_the_group_is_nccl(monkeypatch, backend, asked, averages):
    from ddp_profile.harness.strategies import overlap

    monkeypatch.setattr(overlap.dist, "get_backend", lambda group=None: backend)
    assert overlap.averages_in_nccl(asked, None) is averages


def test_torch_ddp_grad_views_use_ddp_buckets(results):
    res = results[("ddp-views", 0)]
    assert res["layout"]["gradient_as_bucket_view"] is True
    # The grads live in DDP's flat bucket buffers: as many distinct storages as DDP buckets, not one per grad.
    storages = res["grad_storages"]
    assert len(set(storages)) == res["layout"]["ddp_buckets"] < len(storages)


def test_per_bucket_optimizer_is_bitwise_the_plain_step(results):
    for overlapped, plain in (("optoverlap", "plain"), ("optoverlap-adamw", "plain-adamw")):
        res = results[(overlapped, 0)]
        assert res["layout"]["overlap_optimizer"] is True
        assert len(res["bucket_optimizers"]) == res["layout"]["buckets"] > 2
        assert set(res["bucket_optimizers"]) == {"SGD" if plain == "plain" else "AdamW"}
        for rank in (0, 1):
            for a, b in zip(
                results[(overlapped, rank)]["final"], results[(plain, rank)]["final"], strict=True
            ):
                assert torch.equal(a, b), (overlapped, rank)


def test_first_bucket_is_small_and_later_ones_use_the_cap(results):
    first, plain = results[("first", 0)]["layout"], results[("plain", 0)]["layout"]
    assert first["first_bucket_mb"] == 0.002
    assert first["bucket_bytes"][0] < plain["bucket_bytes"][0]
    assert first["bucket_bytes"][0] >= 0.002 * 2**20 or first["buckets"] == 1
    assert sum(first["bucket_bytes"]) == sum(plain["bucket_bytes"])
    # reverse registration order kept: the first bucket holds the last-registered parameters
    assert first["bucket_params"][0][0] == plain["bucket_params"][0][0]


def test_first_bucket_packing_matches_pytorch_bucket_size_limits():
    import random

    rng = random.Random(1)
    for _ in range(200):
        n = rng.randint(1, 12)
        numels = [rng.choice([1, 3, 10, 100, 1000]) for _ in range(n)]
        cap, first = rng.choice([40, 400, 4000]), rng.choice([4, 40, 400])
        tensors = [torch.empty(k) for k in numels]
        theirs = dist._compute_bucket_assignment_by_size(
            list(reversed(tensors)), [first, cap], [False] * n, list(reversed(range(n)))
        )[0]
        assert pack_buckets([4 * k for k in numels], cap, first_cap_bytes=first) == theirs
    assert pack_buckets([4, 4, 4, 4], 8, first_cap_bytes=4) == [[3], [2, 1], [0]]
    # per dtype: each key's first bucket uses the first cap
    assert pack_buckets([4, 4, 4, 4], 100, keys=["a", "b", "a", "b"], first_cap_bytes=4) == [
        [3],
        [2],
        [1],
        [0],
    ]


# ---- config, names, CLI ----


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        (
            {"strategy": "naive", "first_bucket_mb": 1},
            "first_bucket_mb applies to strategy bucketed only, not 'naive'",
        ),
        (
            {"strategy": "torch_ddp", "first_bucket_mb": 1},
            "first_bucket_mb applies to strategy bucketed only",
        ),
        (
            {"strategy": "torch_ddp", "grad_reduce_dtype": "bf16"},
            "grad_reduce_dtype applies to strategy bucketed only",
        ),
        (
            {"strategy": "flat", "overlap_optimizer": True},
            "overlap_optimizer applies to strategy bucketed only",
        ),
        (
            {"strategy": "overlap", "grad_views": True},
            "grad_views applies to strategies bucketed and torch_ddp only",
        ),
        ({"strategy": "bucketed", "reduce_avg": True}, "reduce_avg applies to strategy overlap only"),
        (
            {"strategy": "torch_ddp", "sharded_update": True},
            "sharded_update applies to strategy overlap only",
        ),
        (
            {"strategy": "overlap", "sharded_update": True, "shard_optimizer": "ours"},
            "sharded_update and shard_optimizer cannot be combined",
        ),
        ({"gemm_sm_carveout_scope": "backward"}, "gemm_sm_carveout_scope needs gemm_sm_carveout"),
        (
            {"gemm_sm_carveout": 8, "gemm_sm_carveout_scope": "forward"},
            "gemm_sm_carveout_scope 'forward' is unknown",
        ),
        ({"grad_reduce_dtype": "fp16"}, "grad_reduce_dtype 'fp16' is unknown"),
        ({"first_bucket_mb": -1}, "first_bucket_mb must be > 0"),
        ({"first_bucket_mb": 25, "bucket_mb": 25}, "first_bucket_mb 25 must be smaller than bucket_mb 25"),
        ({"nccl_channels": -1}, "nccl_channels must be an integer from 1 to 64"),
        ({"nccl_channels": 65}, "nccl_channels must be an integer from 1 to 64"),
        ({"strategy": "none", "nccl_channels": 2}, "nccl_channels needs communication"),
        ({"strategy": "none", "nccl_high_priority": True}, "nccl_high_priority needs communication"),
        (
            {"strategy": "bucketed", "ddp_comm_hook": "bf16"},
            "ddp_comm_hook applies to strategy torch_ddp only",
        ),
        ({"strategy": "torch_ddp", "ddp_comm_hook": "fp16"}, "ddp_comm_hook 'fp16' is unknown"),
        (
            {"strategy": "torch_ddp", "ddp_comm_hook": "bf16", "ddp_nvtx_hook": True},
            "ddp_comm_hook and ddp_nvtx_hook cannot be combined",
        ),
        ({"nccl_min_ctas": 65}, "nccl_min_ctas must be an integer from 1 to 64"),
        (
            {"strategy": "torch_ddp", "peer_copy_allreduce": True},
            "peer_copy_allreduce applies to strategy bucketed or to overlap with sharded_update only",
        ),
        ({"nccl_min_ctas": 4, "nccl_channels": 2}, "nccl_min_ctas 4 must not exceed nccl_channels 2"),
        ({"strategy": "none", "nccl_min_ctas": 2}, "nccl_min_ctas needs communication"),
        ({"gemm_sm_carveout": -1}, "gemm_sm_carveout must be an integer from 1 to 64 SMs"),
        ({"gemm_sm_carveout": 65}, "gemm_sm_carveout must be an integer from 1 to 64 SMs"),
        ({"blas_library": "cublas"}, "blas_library 'cublas' is unknown; choose cublaslt"),
        (
            {"strategy": "bucketed", "cuda_graph": True},
            "cuda_graph applies to strategies none, overlap, torch_ddp only",
        ),
        (
            {"strategy": "torch_ddp", "cuda_graph": True, "ddp_comm_hook": "bf16"},
            "cuda_graph cannot be combined",
        ),
        (
            {"strategy": "torch_ddp", "cuda_graph": True, "shard_optimizer": "ours"},
            "cuda_graph cannot be combined",
        ),
    ],
)
def test_senseless_lever_combinations_raise_one_line(changes, needle):
    with pytest.raises(ConfigError, match=needle) as info:
        RunConfig(**changes)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("changes", "name"),
    [
        (
            {"bucket_mb": 100, "nccl_channels": 2, "nccl_high_priority": True},
            "bucketed-100mb-ch2-hiprio_xl_fp32_2xh200",
        ),
        (
            {
                "first_bucket_mb": 1,
                "grad_views": True,
                "grad_reduce_dtype": "bf16",
                "overlap_optimizer": True,
            },
            "bucketed-25mb-first1mb-views-gradbf16-optoverlap_xl_fp32_2xh200",
        ),
        ({"first_bucket_mb": 0.5}, "bucketed-25mb-first0.5mb_xl_fp32_2xh200"),
        (
            {"strategy": "torch_ddp", "grad_views": True, "nccl_channels": 4},
            "torch_ddp-25mb-views-ch4_xl_fp32_2xh200",
        ),
        ({"strategy": "flat", "nccl_high_priority": True}, "flat-hiprio_xl_fp32_2xh200"),
        (
            {
                "strategy": "torch_ddp",
                "ddp_comm_hook": "bf16",
                "nccl_channels": 2,
                "nccl_min_ctas": 2,
                "nccl_high_priority": True,
            },
            "torch_ddp-25mb-hookbf16-ch2-minctas2-hiprio_xl_fp32_2xh200",
        ),
        (
            {"strategy": "torch_ddp", "ddp_comm_hook": "bf16", "grad_views": True},
            "torch_ddp-25mb-views-hookbf16_xl_fp32_2xh200",
        ),
        (
            {"grad_reduce_dtype": "bf16", "peer_copy_allreduce": True, "nccl_high_priority": True},
            "bucketed-25mb-gradbf16-peercopy-hiprio_xl_fp32_2xh200",
        ),
        ({}, "bucketed-25mb_xl_fp32_2xh200"),
        (
            {"strategy": "torch_ddp", "nccl_channels": 8, "gemm_sm_carveout": 8},
            "torch_ddp-25mb-ch8-carve8_xl_fp32_2xh200",
        ),
        (
            {"strategy": "torch_ddp", "gemm_sm_carveout": 24, "blas_library": "cublaslt"},
            "torch_ddp-25mb-carve24_xl_fp32_2xh200",
        ),
        ({"strategy": "none", "blas_library": "cublaslt"}, "none-lt_xl_fp32_2xh200"),
        (
            {
                "strategy": "torch_ddp",
                "grad_views": True,
                "nccl_channels": 8,
                "step_sync": False,
                "gemm_sm_carveout": 8,
            },
            "torch_ddp-25mb-views-ch8-nosync-carve8_xl_fp32_2xh200",
        ),
        ({"strategy": "none", "step_sync": False}, "none-nosync_xl_fp32_2xh200"),
        (
            {"strategy": "overlap", "reduce_avg": True, "cuda_graph": True, "nccl_channels": 8},
            "overlap-avg-ch8-graph_xl_fp32_2xh200",
        ),
        (
            {
                "strategy": "overlap",
                "reduce_avg": True,
                "sharded_update": True,
                "cuda_graph": True,
                "nccl_channels": 8,
                "gemm_sm_carveout": 8,
            },
            "overlap-avg-shardupd-ch8-graph-carve8_xl_fp32_2xh200",
        ),
        (
            {
                "strategy": "overlap",
                "reduce_avg": True,
                "nccl_channels": 8,
                "gemm_sm_carveout": 8,
                "gemm_sm_carveout_scope": "backward",
            },
            "overlap-avg-ch8-carve8bwd_xl_fp32_2xh200",
        ),
        (
            {
                "strategy": "torch_ddp",
                "grad_views": True,
                "cuda_graph": True,
                "nccl_channels": 8,
                "gemm_sm_carveout": 8,
            },
            "torch_ddp-25mb-views-ch8-graph-carve8_xl_fp32_2xh200",
        ),
    ],
)
def test_run_names_carry_the_levers(changes, name):
    assert run_name(RunConfig(model="xl", **changes), 2, "h200") == name


class _FakeNCCL:
    class Options:
        def __init__(self, is_high_priority_stream=False):
            self.is_high_priority_stream = is_high_priority_stream
            self.config = type("Config", (), {"max_ctas": -1, "min_ctas": -1})()


def test_nccl_options_prefer_the_group_config_and_fall_back_to_the_environment(monkeypatch):
    env: dict = {}
    monkeypatch.setattr(dist, "ProcessGroupNCCL", _FakeNCCL, raising=False)
    opts, desc = launch.nccl_options(2, True, environ=env)
    assert opts.config.max_ctas == 2 and opts.is_high_priority_stream is True and env == {}
    assert desc["channels_mechanism"] == "pg_options.config.max_ctas"
    assert desc["high_priority_mechanism"] == "pg_options.is_high_priority_stream"
    monkeypatch.delattr(dist, "ProcessGroupNCCL")
    opts, desc = launch.nccl_options(3, True, environ=env)
    assert opts is None and env == {"NCCL_MAX_NCHANNELS": "3", "TORCH_NCCL_HIGH_PRIORITY": "1"}
    assert desc["channels_mechanism"] == "env NCCL_MAX_NCHANNELS"
    assert launch.nccl_options(0, False, environ=env)[0] is None


def test_nccl_min_ctas_goes_through_the_group_config_else_the_environment(monkeypatch):
    env: dict = {}
    monkeypatch.setattr(dist, "ProcessGroupNCCL", _FakeNCCL, raising=False)
    opts, desc = launch.nccl_options(4, False, environ=env, min_ctas=4)
    assert (opts.config.max_ctas, opts.config.min_ctas, opts.is_high_priority_stream, env) == (
        4,
        4,
        False,
        {},
    )
    assert desc["nccl_min_ctas"] == 4 and desc["min_ctas_mechanism"] == "pg_options.config.min_ctas"
    opts, desc = launch.nccl_options(0, False, environ=env, min_ctas=2)  # min alone makes options too
    assert opts.config.min_ctas == 2 and opts.config.max_ctas == -1 and desc["channels_mechanism"] is None
    monkeypatch.delattr(dist, "ProcessGroupNCCL")
    opts, desc = launch.nccl_options(0, False, environ=env, min_ctas=3)
    assert (
        opts is None and env == {"NCCL_MIN_CTAS": "3"} and desc["min_ctas_mechanism"] == "env NCCL_MIN_CTAS"
    )
    assert (
        "nccl_min_ctas" not in launch.nccl_options(2, False, environ={})[1]
    )  # records without the lever keep their keys


def test_nccl_levers_are_ignored_with_a_note_on_gloo(results):
    levers = results[("plain", 1)]["nccl_levers"]
    assert (
        levers["backend"] == "gloo" and levers["nccl_channels"] == 2 and levers["nccl_high_priority"] is True
    )
    assert levers["channels_mechanism"] is None and levers["high_priority_mechanism"] is None
    assert levers["nccl_min_ctas"] == 2 and levers["min_ctas_mechanism"] is None
    assert levers["note"] == "ignored: backend gloo has no NCCL channels or streams"


def test_cli_records_every_lever_in_the_run_json(tmp_path, capsys):
    args = [
        "--strategy",
        "bucketed",
        "--model",
        "tiny",
        "--seq-len",
        "8",
        "--batch",
        "2",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--bucket-mb",
        "0.01",
        "--first-bucket-mb",
        "0.002",
        "--grad-views",
        "--grad-reduce-dtype",
        "bf16",
        "--overlap-optimizer",
        "--nccl-channels",
        "2",
        "--nccl-high-priority",
        "--backend",
        "gloo",
        "--out",
        str(tmp_path),
    ]
    assert bench.main(args) == 0
    name = "bucketed-0.01mb-first0.002mb-views-gradbf16-optoverlap-ch2-hiprio_tiny_fp32_1xcpu"
    assert name in capsys.readouterr().out
    record = json.loads((tmp_path / f"{name}.json").read_text())
    cfg = record["config"]
    assert (
        cfg["first_bucket_mb"],
        cfg["grad_views"],
        cfg["grad_reduce_dtype"],
        cfg["overlap_optimizer"],
        cfg["nccl_channels"],
        cfg["nccl_high_priority"],
    ) == (0.002, True, "bf16", True, 2, True)
    assert (
        record["nccl_levers"]["note"]
        == "ignored: a single process (no process group) has no NCCL channels or streams"
    )
    layout = record["layout"]
    assert (
        layout["overlap_optimizer"] is True
        and layout["reduce_dtype"] == "bf16"
        and layout["grad_views"] is True
    )
    assert layout["first_bucket_mb"] == 0.002 and layout["buckets"] > 1
    # single process: the per-bucket optimizers still stepped (the loop's own step() is a no-op)
    assert record["final_loss_per_rank"][0] > 0


def test_cli_records_the_ddp_hook_and_min_ctas_in_the_run_json(tmp_path, capsys):
    args = [
        "--strategy",
        "torch_ddp",
        "--model",
        "tiny",
        "--seq-len",
        "8",
        "--batch",
        "2",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--ddp-comm-hook",
        "bf16",
        "--nccl-channels",
        "4",
        "--nccl-min-ctas",
        "4",
        "--backend",
        "gloo",
        "--out",
        str(tmp_path),
    ]
    assert bench.main(args) == 0
    name = "torch_ddp-25mb-hookbf16-ch4-minctas4_tiny_fp32_1xcpu"
    assert name in capsys.readouterr().out
    record = json.loads((tmp_path / f"{name}.json").read_text())
    assert (record["config"]["ddp_comm_hook"], record["config"]["nccl_min_ctas"]) == ("bf16", 4)
    assert record["nccl_levers"]["nccl_min_ctas"] == 4 and "ignored" in record["nccl_levers"]["note"]
    # one process: no DDP wrapper, so no hook registered, and the layout says so
    assert record["layout"]["comm_hook"] == "bf16" and record["layout"]["comm_hook_fn"] is None


def test_cli_rejects_a_senseless_lever_with_one_line(capsys):
    assert bench.main(["--strategy", "naive", "--first-bucket-mb", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["ddp-profile bench: error: first_bucket_mb applies to strategy bucketed only, not 'naive'"]


def test_cli_records_the_gemm_lever_and_that_the_cpu_ignores_it(tmp_path, capsys):
    args = [
        "--strategy",
        "none",
        "--model",
        "tiny",
        "--seq-len",
        "8",
        "--batch",
        "2",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--gemm-sm-carveout",
        "8",
        "--out",
        str(tmp_path),
    ]
    assert bench.main(args) == 0
    name = "none-carve8_tiny_fp32_1xcpu"
    assert name in capsys.readouterr().out
    record = json.loads((tmp_path / f"{name}.json").read_text())
    assert record["config"]["gemm_sm_carveout"] == 8
    assert record["gemm_levers"] == {
        "blas_library": "cublaslt",
        "sm_carveout": 8,
        "applied": False,
        "note": "ignored on the CPU (no cuBLAS)",
    }


class _FakeTorchBlas:
    """Stand-ins for PyTorch's BLAS-library and carveout settings, recording every call in order."""

    def __init__(self):
        self.library, self.carveout, self.calls = "default-lib", None, []

    def preferred_blas_library(self, backend=None):
        if backend is None:
            return self.library
        self.calls.append(("library", backend))
        self.library = backend
        return backend

    def get_carveout(self):
        return self.carveout

    def set_carveout(self, value):
        self.calls.append(("carveout", value))
        self.carveout = value


@pytest.fixture
def fake_blas(monkeypatch):
    fake = _FakeTorchBlas()
    monkeypatch.setattr(torch.backends.cuda, "preferred_blas_library", fake.preferred_blas_library)
    monkeypatch.setattr(torch._C, "_get_sm_carveout_experimental", fake.get_carveout)
    monkeypatch.setattr(torch._C, "_set_sm_carveout_experimental", fake.set_carveout)
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda device: type("P", (), {"multi_processor_count": 132})()
    )
    return fake


def test_gemm_carveout_is_set_for_the_block_and_restored_after_it_even_on_error(fake_blas):
    from ddp_profile.harness.gemm_sms import gemm_sms

    with pytest.raises(RuntimeError, match="boom"), gemm_sms(24, "", torch.device("cuda", 0)) as record:
        assert (fake_blas.library, fake_blas.carveout) == ("cublaslt", 24)
        assert record == {
            "blas_library": "cublaslt",
            "sm_carveout": 24,
            "applied": True,
            "sm_count": 132,
            "gemm_sm_target": 108,
        }
        raise RuntimeError("boom")
    assert (fake_blas.library, fake_blas.carveout) == ("default-lib", None)
    assert fake_blas.calls == [
        ("library", "cublaslt"),
        ("carveout", 24),
        ("carveout", None),
        ("library", "default-lib"),
    ]


def test_backward_scope_lifts_the_carveout_for_the_forward_only(fake_blas):
    from ddp_profile.harness.gemm_sms import every_sm, gemm_sms

    with gemm_sms(8, "", torch.device("cuda", 0)):
        with every_sm(True):
            assert fake_blas.carveout is None
        assert fake_blas.carveout == 8
        fake_blas.calls.clear()
        with every_sm(False):
            pass
        assert fake_blas.calls == []
    assert fake_blas.carveout is None


def test_cli_records_the_carveout_scope(tmp_path, capsys):
    args = [
        "--strategy",
        "none",
        "--model",
        "tiny",
        "--seq-len",
        "8",
        "--batch",
        "2",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--gemm-sm-carveout",
        "8",
        "--gemm-sm-carveout-scope",
        "backward",
        "--out",
        str(tmp_path),
    ]
    assert bench.main(args) == 0
    capsys.readouterr()
    record = json.loads((tmp_path / "none-carve8bwd_tiny_fp32_1xcpu.json").read_text())
    assert record["config"]["gemm_sm_carveout_scope"] == "backward"
    assert record["gemm_levers"]["scope"] == "backward" and record["gemm_levers"]["applied"] is False


def test_cublaslt_alone_sets_no_carveout_and_off_touches_nothing(fake_blas):
    from ddp_profile.harness.gemm_sms import gemm_sms

    with gemm_sms(0, "cublaslt", torch.device("cuda", 0)) as record:
        assert (fake_blas.library, fake_blas.carveout) == ("cublaslt", None)
    assert record["gemm_sm_target"] == 132 and record["sm_carveout"] == 0
    fake_blas.calls.clear()
    with gemm_sms(0, "", torch.device("cuda", 0)) as record:
        pass
    assert fake_blas.calls == [] and record == {"blas_library": "default", "sm_carveout": 0, "applied": False}


def test_a_carveout_of_every_sm_is_refused_in_one_line(fake_blas):
    from ddp_profile.harness.gemm_sms import gemm_sms

    with (
        pytest.raises(ConfigError, match="leaves no SM for GEMMs on this GPU \\(132 SMs\\)"),
        gemm_sms(132, "", torch.device("cuda", 0)),
    ):
        pass
    assert fake_blas.calls == []


def test_no_step_sync_is_parsed_recorded_and_trains_alike_on_the_cpu(tmp_path, capsys):
    common = [
        "--strategy",
        "none",
        "--model",
        "tiny",
        "--seq-len",
        "8",
        "--batch",
        "2",
        "--steps",
        "3",
        "--warmup",
        "1",
        "--optimizer",
        "sgd",
        "--out",
        str(tmp_path),
    ]
    assert bench.main(common) == 0 and bench.main([*common, "--no-step-sync"]) == 0
    capsys.readouterr()
    synced = json.loads((tmp_path / "none_tiny_fp32_1xcpu.json").read_text())
    unsynced = json.loads((tmp_path / "none-nosync_tiny_fp32_1xcpu.json").read_text())
    assert synced["config"]["step_sync"] is True and unsynced["config"]["step_sync"] is False
    assert unsynced["final_loss_per_rank"] == synced["final_loss_per_rank"]
    assert len(unsynced["step_ms_per_rank"][0]) == 3


def test_cuda_graph_strategies_agree_and_the_cpu_records_that_it_ignored_the_graph(tmp_path, capsys):
    from ddp_profile.harness import cuda_graph
    from ddp_profile.harness.config import GRAPH_STRATEGIES

    assert GRAPH_STRATEGIES == cuda_graph.STRATEGIES
    with cuda_graph.graph_stream(True, torch.device("cpu")) as stream:
        assert stream is None
    args = [
        "--strategy",
        "none",
        "--model",
        "tiny",
        "--seq-len",
        "8",
        "--batch",
        "2",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--cuda-graph",
        "--out",
        str(tmp_path),
    ]
    assert bench.main(args) == 0
    capsys.readouterr()
    record = json.loads((tmp_path / "none-graph_tiny_fp32_1xcpu.json").read_text())
    assert record["config"]["cuda_graph"] is True
    assert record["cuda_graph"] == {"captured": False, "note": "ignored on the CPU"}


@pytest.mark.parametrize(
    "fields,backend,world_size,leaves",
    [
        ({"strategy": "torch_ddp", "cuda_graph": True}, "nccl", 2, True),
        ({"strategy": "torch_ddp", "cuda_graph": False}, "nccl", 2, False),
        ({"strategy": "torch_ddp", "cuda_graph": True}, "gloo", 2, False),
        ({"strategy": "none", "cuda_graph": True}, "nccl", 1, False),
    ],
)
def test_only_graphed_nccl_runs_with_peers_leave_without_destroying_the_group(
    fields, backend, world_size, leaves
):
    assert bench.skips_group_teardown(RunConfig(seq_len=64, **fields), backend, world_size) is leaves
