"""Small synthetic DDP exports whose ranks can differ: kernel speed, per-step delays, how many steps, whether
the rank has NCCL kernels or an optimizer update; one file for all ranks or one file per rank with its own
session start and clock rate. Each all-reduce ends on every rank when the last rank to start it has run it
(the earlier ranks wait), as NCCL's do. Written with ``nsys.synth.build_export``, read like any export."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ddp_profile import nvtx_names
from ddp_profile.nsys.synth import EVENT_TYPES, build_export

PER_STEP = 6  # kernels per step: 2 forward, 2 backward, 2 optimizer
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
START_NS = 1_000_000


@dataclass
class Rank:
    kernel_ns: int = 50_000
    delays: list[int] = field(default_factory=list)
    """Per step, how much later than the common start the rank begins it (non-decreasing); [] = none."""
    steps: int | None = None  # None: the run's step count
    nccl: bool = True
    cut_last: bool = False  # the last step stops after backward: no optimizer, no step range end
    optimizer_every: int = 1  # the optimizer runs in steps s with (s + 1) % optimizer_every == 0
    skip_optimizer: tuple[int, ...] = ()  # steps whose optimizer update is missing


def _t0(spec: Rank, s: int, period: int) -> int:
    return START_NS + s * period + (spec.delays[s] if spec.delays else 0)


def _collective_ends(
    ranks: list[Rank], n_steps: int, nccl_ns: int, period: int
) -> dict[tuple[int, int], int]:
    """(step, bucket) -> when that all-reduce ends on every rank: nccl_ns after the last rank started it (a
    collective completes only once every rank joined; the earlier ranks wait)."""
    ends: dict[tuple[int, int], int] = {}
    for spec in ranks:
        for s in range(spec.steps or n_steps):
            if spec.nccl:
                for b in range(2):
                    start = _t0(spec, s, period) + (3 + b) * spec.kernel_ns
                    ends[(s, b)] = max(ends.get((s, b), 0), start + nccl_ns)
    return ends


def _columns(
    r: int,
    pid: int,
    spec: Rank,
    n_steps: int,
    nccl_ns: int,
    period: int,
    n_ranks: int,
    coll_end: dict[tuple[int, int], int],
):
    k: dict[str, list] = {
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
            "launch_api",
        )
    }
    n: dict[str, list] = {
        c: []
        for c in (
            "pid",
            "tid",
            "start",
            "end",
            "text",
            "domain",
            "payload",
            "category",
            "registered",
            "event_type",
        )
    }
    kns = spec.kernel_ns
    for s in range(spec.steps or n_steps):
        t0 = _t0(spec, s, period)
        last = spec.cut_last and s == (spec.steps or n_steps) - 1
        opt = not last and (s + 1) % spec.optimizer_every == 0 and s not in spec.skip_optimizer
        after = coll_end[(s, 1)] if spec.nccl else t0 + 4 * kns  # the optimizer waits for the last all-reduce
        starts = [int(x) for x in t0 + np.arange(4) * kns] + (
            [after + i * kns for i in range(2)] if opt else []
        )
        names = ["fwd_gemm"] * 2 + ["bwd_gemm"] * 2 + ["sgd_update"] * (len(starts) - 4)
        ends = [x + kns for x in starts]
        streams = [7] * len(starts)
        if spec.nccl:
            buckets = [t0 + 3 * kns, t0 + 4 * kns]
            starts, ends = starts + buckets, ends + [coll_end[(s, 0)], coll_end[(s, 1)]]
            names, streams = names + [NCCL] * 2, streams + [17] * 2
        m = len(starts)
        corr = len(k["pid"]) + 1
        for col, vals in (
            ("pid", [pid] * m),
            ("device", [r] * m),
            ("stream", streams),
            ("start", starts),
            ("end", ends),
            ("name", names),
            ("correlation_id", list(range(corr, corr + m))),
            ("launch_start", [int(x) - 5_000 for x in starts]),
            ("launch_tid", [pid] * m),
            ("launch_api", ["cudaLaunchKernel_v7000"] * m),
        ):
            k[col].extend(vals)
        end = int(max(ends))
        ranges = [
            (nvtx_names.FORWARD, t0 - 8_000, t0 + 2 * kns - 5_000, -1, nvtx_names.CATEGORY_PHASE),
            (nvtx_names.BACKWARD, t0 + 2 * kns - 5_000, t0 + 4 * kns - 5_000, -1, nvtx_names.CATEGORY_PHASE),
        ]
        if opt:
            ranges.append((nvtx_names.OPTIMIZER, t0 + 4 * kns, end, -1, nvtx_names.CATEGORY_PHASE))
        ranges.append(
            (f"{nvtx_names.STEP} {s}", t0 - 10_000, -1 if last else end + 1_000, s, nvtx_names.CATEGORY_STEP)
        )
        for text, a, b, payload, cat in ranges:
            for col, v in (
                ("pid", pid),
                ("tid", pid),
                ("start", a),
                ("end", b),
                ("text", text),
                ("domain", nvtx_names.DOMAIN),
                ("payload", payload),
                ("category", cat),
                ("registered", 1),
                ("event_type", EVENT_TYPES["NvtxPushPopRange"]),
            ):
                n[col].append(v)
    for col, v in (
        ("pid", pid),
        ("tid", pid),
        ("start", 500_000),
        ("end", -1),
        ("text", f"{nvtx_names.RANK_MARKER} {r}/{n_ranks}"),
        ("domain", nvtx_names.DOMAIN),
        ("payload", r),
        ("category", nvtx_names.CATEGORY_META),
        ("registered", 0),
        ("event_type", EVENT_TYPES["NvtxMark"]),
    ):
        n[col].append(v)
    return k, n


def write_run(
    folder: Path,
    ranks: list[Rank],
    n_steps: int = 3,
    nccl_ns: int = 10_000,
    *,
    per_rank_files: bool = False,
    session_offsets_ns: list[int] | None = None,
    clock_rates: list[float] | None = None,
) -> list[Path]:
    """The export(s) of one run in ``folder`` (run.sqlite, or rank<r>.sqlite per rank); returns their paths.
    Per-rank files: rank r's session starts ``session_offsets_ns[r]`` later (its times earlier by as much,
    so the aligned run is the same), and its clock runs ``clock_rates[r]`` times as fast (drift)."""
    folder.mkdir(parents=True, exist_ok=True)
    period = (
        PER_STEP * max(r.kernel_ns for r in ranks)
        + nccl_ns
        + 100_000
        + max((max(r.delays) if r.delays else 0) for r in ranks)
    )
    coll_end = _collective_ends(ranks, n_steps, nccl_ns, period)
    cols = [
        _columns(r, 1000 + r, spec, n_steps, nccl_ns, period, len(ranks), coll_end)
        for r, spec in enumerate(ranks)
    ]
    if not per_rank_files:
        k = {c: np.concatenate([np.asarray(x[0][c]) for x in cols]) for c in cols[0][0]}
        n = {c: np.concatenate([np.asarray(x[1][c]) for x in cols]) for c in cols[0][1]}
        path = folder / "run.sqlite"
        build_export(
            path,
            processes=[{"pid": 1000 + r, "name": "python", "device": r} for r in range(len(ranks))],
            kernels=k,
            nvtx=n,
        )
        return [path]
    paths = []
    for r, (k, n) in enumerate(cols):
        off = (session_offsets_ns or [0] * len(ranks))[r]
        rate = (clock_rates or [1.0] * len(ranks))[r]
        for d in (k, n):
            for c in ("start", "end", "launch_start"):
                if c in d:
                    d[c] = [x if x == -1 else int(round(x * rate)) - off for x in d[c]]
        path = folder / f"rank{r}.sqlite"
        build_export(
            path,
            processes=[{"pid": 1000 + r, "name": "python", "device": 0}],
            kernels={c: np.asarray(v) for c, v in k.items()},
            nvtx={c: np.asarray(v) for c, v in n.items()},
            host=f"node{r}",
            session_start_utc_ns=1_700_000_000_000_000_000 + off,
        )
        paths.append(path)
    return paths
