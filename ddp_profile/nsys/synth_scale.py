"""Synthetic exports at benchmark scale (millions of kernels): ``synth_scale_run`` writes them in chunks so
memory stays flat. Built on :mod:`ddp_profile.nsys.synth`'s table writers."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np

from ddp_profile import nvtx_names
from ddp_profile.nsys.synth import (
    EVENT_TYPES,
    LAYOUTS,
    Strings,
    build_export,
    columns_to_rows,
    global_pid,
    global_tid,
    replacing,
    write_nvtx,
)

SCALE_COMPUTE_NAMES = [
    "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_nn",
    "ampere_bf16_s16816gemm_bf16_64x64_sliced1x2_tn",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel",
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>",
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>",
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float>",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float>>>",
    "flash_fwd_kernel",
    "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel",
    "flash_bwd_dot_do_o_kernel",
    "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::AddFunctor>>",
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>",
    "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel<c10::BFloat16, float>",
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluBackwardCUDAKernelImpl>",
    "void at::native::multi_tensor_apply_kernel<at::native::FusedAdamMathFunctor<float, 4>>",
    "void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float, float, float>",
]
SCALE_NCCL_NAME = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"


def _scale_steps(
    rng,
    steps: int,
    tmpl: np.ndarray,
    base_ns: np.ndarray,
    n_buckets: int,
    t0: int,
    bucket_bytes: np.ndarray,
    jitter,
) -> tuple[dict, dict, int]:
    """GPU and host timings of ``steps`` consecutive steps of one rank, all numpy (no loop per kernel).

    Per step: forward | backward (with one all-reduce per bucket on another stream, the last one starting
    when backward ends, hence exposed) | optimizer (after the last all-reduce). Kernels are launched a fixed
    ~20 us before they start, in order, so launch order = start order and phase host ranges nest cleanly.
    ``rng`` draws the GPU durations (the same for every rank: ranks stay in lock-step as all-reduces force
    them to); ``jitter`` draws the rank's own launch jitter.
    """
    k = len(tmpl)
    f = b = k // 3
    per = b // n_buckets
    gap, step_gap, lag = 2_000, 40_000, 20_000
    dur = (base_ns[tmpl][None, :] * rng.uniform(0.85, 1.15, (steps, k))).astype(np.int64)
    rel = np.cumsum(dur + gap, axis=1) - (dur + gap)
    bwd_end = rel[:, f + b - 1] + dur[:, f + b - 1]
    ends_at = f + (np.arange(1, n_buckets + 1) * per) - 1
    bstart = rel[:, ends_at] + dur[:, ends_at]
    bstart[:, -1] = bwd_end
    # All-reduce time = 20 us latency + bytes at ~300 GB/s, +-5 %: three bucket sizes feed the cost model.
    bdur = (20_000 + bucket_bytes[None, :] / 300 * rng.uniform(0.95, 1.05, (steps, n_buckets))).astype(
        np.int64
    )
    shift = bstart[:, -1] + bdur[:, -1] + gap - rel[:, f + b]  # optimizer waits for the last all-reduce
    rel[:, f + b :] += np.maximum(shift, 0)[:, None]
    length = rel[:, -1] + dur[:, -1] + step_gap
    t_step = t0 + np.cumsum(length) - length
    ks = t_step[:, None] + rel
    ns = t_step[:, None] + bstart
    klaunch = ks - lag - jitter.integers(0, 1_000, ks.shape)
    nlaunch = ns - lag
    # Host ranges: each phase spans its launches; backward also covers the all-reduce launches.
    fwd = (klaunch[:, 0] - 500, klaunch[:, f - 1] + 500)
    bwd = (klaunch[:, f] - 400, np.maximum(klaunch[:, f + b - 1], nlaunch[:, -1]) + 500)
    opt = (klaunch[:, f + b] - 400, klaunch[:, -1] + 500)
    host = {
        "step": (fwd[0] - 1_000, opt[1] + 1_000),
        "forward": fwd,
        "backward": bwd,
        "optimizer": opt,
        "bucket": (nlaunch - 300, nlaunch + 300),
        "bucket_bytes": bucket_bytes,
    }
    gpu = {
        "k_start": ks,
        "k_end": ks + dur,
        "k_launch": klaunch,
        "n_start": ns,
        "n_end": ns + bdur,
        "n_launch": nlaunch,
    }
    return gpu, host, int(t_step[-1] + length[-1])


def synth_scale_run(
    path,
    *,
    n_kernels: int,
    n_ranks: int = 8,
    kernels_per_step: int = 2_000,
    n_buckets: int = 25,
    rank_of_file: int | None = None,
    seed: int = 0,
    layout: str = "2025.3",
    chunk_steps: int = 64,
    nvtx_steps: bool = True,
) -> dict:
    """A realistic DDP export of about ``n_kernels`` GPU kernels (compute + NCCL), built in chunks.

    All ``n_ranks`` processes in one file, or only rank ``rank_of_file`` (per-rank files of one run share
    the session start, so they align). Per rank and step: ``kernels_per_step`` compute kernels on stream 7
    drawn from 16 realistic names, ``n_buckets`` NCCL all-reduces on stream 17, one runtime/driver API row
    per kernel (launch correlation), and NVTX ranges in the project's domain: rank marker, ``step i``,
    forward/backward/optimizer, one ``allreduce b<i> <bytes>B`` range per bucket. Ranks start a few us
    apart, so collectives have wait time. Memory stays at one chunk: the first chunk goes through
    :func:`build_export` (so tables and StringIds are exactly its layout), later chunks are appended.
    ``nvtx_steps=False`` leaves out the step, phase and bucket ranges (the rank markers stay): the analysis then
    infers the steps from the kernels.
    """
    rng = np.random.default_rng(seed)
    per_step = kernels_per_step + n_buckets
    steps_total = max(1, -(-n_kernels // (per_step * n_ranks)))
    tmpl = np.concatenate(
        [
            rng.integers(0, 8, kernels_per_step // 3),  # forward-ish, backward-ish, optimizer
            rng.integers(6, 14, kernels_per_step // 3),
            rng.integers(10, 16, kernels_per_step - 2 * (kernels_per_step // 3)),
        ]
    )
    base_ns = rng.integers(5_000, 120_000, len(SCALE_COMPUTE_NAMES))
    bucket_bytes = np.array([25 * 2**20, 12 * 2**20, 6 * 2**20] * n_buckets)[:n_buckets]
    ranks = list(range(n_ranks)) if rank_of_file is None else [rank_of_file]
    clocks = {r: 1_000_000 + 3_000 * r for r in ranks}
    corr = dict.fromkeys(ranks, 1)
    path = Path(path)
    names = np.array(SCALE_COMPUTE_NAMES + [SCALE_NCCL_NAME], dtype=object)
    nvtx: dict[str, list] = {
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

    def add_nvtx(pid, start, end, text, payload, category, event_type=EVENT_TYPES["NvtxPushPopRange"]):
        n = len(start)
        for col, v in (
            ("pid", [pid] * n),
            ("tid", [pid] * n),
            ("start", list(start)),
            ("end", list(end)),
            ("text", list(text)),
            ("domain", [nvtx_names.DOMAIN] * n),
            ("payload", list(payload)),
            ("category", [category] * n),
            ("registered", [0] * n),
            ("event_type", [event_type] * n),
        ):
            nvtx[col].extend(v)

    def chunk(s0, s1):
        cols: dict[str, list] = {
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
        for r in ranks:
            pid = 1000 + r
            gpu, host, clocks[r] = _scale_steps(
                np.random.default_rng((seed, s0)),
                s1 - s0,
                tmpl,
                base_ns,
                n_buckets,
                clocks[r],
                bucket_bytes,
                np.random.default_rng((seed, s0, r)),
            )
            starts = np.concatenate([gpu["k_start"], gpu["n_start"]], axis=1).ravel()
            n = len(starts)
            is_nccl = np.concatenate(
                [np.zeros_like(gpu["k_start"], bool), np.ones_like(gpu["n_start"], bool)], axis=1
            ).ravel()
            name_idx = np.concatenate(
                [np.broadcast_to(tmpl, gpu["k_start"].shape), np.full(gpu["n_start"].shape, len(names) - 1)],
                axis=1,
            ).ravel()
            for col, v in (
                ("pid", np.full(n, pid)),
                ("device", np.full(n, r)),
                ("stream", np.where(is_nccl, 17, 7)),
                ("start", starts),
                ("end", np.concatenate([gpu["k_end"], gpu["n_end"]], axis=1).ravel()),
                ("name", name_idx),
                ("correlation_id", np.arange(corr[r], corr[r] + n)),
                ("launch_start", np.concatenate([gpu["k_launch"], gpu["n_launch"]], axis=1).ravel()),
                ("launch_tid", np.where(is_nccl, pid + 1, pid)),
                ("launch_api", is_nccl),
            ):
                cols[col].append(v)
            corr[r] += n
            if not nvtx_steps:
                continue
            idx = np.arange(s0, s1)
            # (start, end) pairs unpacked by name: mypy miscounts a *-argument followed by positional ones
            h0, h1 = host["step"]
            add_nvtx(pid, h0, h1, [f"{nvtx_names.STEP} {i}" for i in idx], idx, nvtx_names.CATEGORY_STEP)
            for ph in (nvtx_names.FORWARD, nvtx_names.BACKWARD, nvtx_names.OPTIMIZER):
                h0, h1 = host[ph]
                add_nvtx(pid, h0, h1, [ph] * len(idx), [-1] * len(idx), nvtx_names.CATEGORY_PHASE)
            bs, be = host["bucket"]
            texts = [
                f"{nvtx_names.ALLREDUCE_PREFIX} b{j} {bucket_bytes[j]}B"
                for _ in idx
                for j in range(n_buckets)
            ]
            add_nvtx(
                pid,
                bs.ravel(),
                be.ravel(),
                texts,
                np.tile(bucket_bytes, len(idx)),
                nvtx_names.CATEGORY_BUCKET,
            )
        return {c: np.concatenate(v) for c, v in cols.items()}

    bounds = list(range(0, steps_total, chunk_steps)) + [steps_total]
    first = chunk(bounds[0], bounds[1])
    rest = [(a, b) for a, b in zip(bounds[1:-1], bounds[2:], strict=True)]
    # NVTX host ranges derive from each chunk's GPU times, so the NVTX table is written after the last chunk.
    with replacing(path, ".build") as tmp:
        processes = [{"pid": 1000 + r, "name": "python", "device": r} for r in ranks]
        for r in ranks:
            add_nvtx(
                1000 + r,
                [500_000],
                [-1],
                [f"{nvtx_names.RANK_MARKER} {r}/{n_ranks}"],
                [r],
                nvtx_names.CATEGORY_META,
                EVENT_TYPES["NvtxMark"],
            )
        kernels = dict(
            first,
            name=names[first["name"]],
            launch_api=np.where(first["launch_api"], "cuLaunchKernelEx", "cudaLaunchKernel_v7000"),
        )
        build_export(
            tmp, layout=layout, processes=processes, kernels=kernels, gpus=[{"device": r} for r in ranks]
        )
        con = sqlite3.connect(tmp)
        con.execute("PRAGMA journal_mode=OFF")
        con.execute("PRAGMA synchronous=OFF")
        ids = dict(con.execute("SELECT value, id FROM StringIds"))
        # Every chunk repeats the same template, so a name the first chunk lacks (few kernels per step) is
        # never used later either: -1 marks it.
        name_ids = np.array([ids.get(n, -1) for n in names], dtype=np.int64)
        api_ids = np.array([ids["cudaLaunchKernel_v7000"], ids["cuLaunchKernelEx"]], dtype=np.int64)
        spec = LAYOUTS[layout]
        for s0, s1 in rest:
            _append_chunk(con, spec, chunk(s0, s1), name_ids, api_ids)
        _append_nvtx(con, spec, nvtx)
        con.commit()
        con.close()
    n_rows = steps_total * per_step * len(ranks)
    return {
        "path": path,
        "n_kernels": n_rows,
        "n_ranks": n_ranks,
        "ranks_in_file": ranks,
        "n_steps": steps_total,
        "n_nvtx": len(nvtx["start"]) + len(ranks),
    }


def _append_chunk(con, spec, c: dict, name_ids: np.ndarray, api_ids: np.ndarray) -> None:
    """Append kernels and their runtime rows, in the column order :func:`write_kernels` creates."""
    n = len(c["start"])
    nid = name_ids[c["name"]]
    columns = [c["start"], c["end"], c["device"], np.ones(n, np.int64)]
    if spec["green"]:
        columns.append(np.zeros(n, np.int64))
    columns += [
        c["stream"],
        c["correlation_id"],
        global_pid(c["pid"]),
        nid,
        nid,
        np.full(n, 32),
        np.ones(n, np.int64),
    ]
    con.executemany(
        f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({', '.join('?' * len(columns))})",
        columns_to_rows(*columns),
    )
    api = c["launch_api"].astype(np.int64)
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?, ?, ?, NULL)",
        columns_to_rows(
            c["launch_start"],
            c["launch_start"] + 500,
            api,
            global_tid(c["pid"], c["launch_tid"]),
            c["correlation_id"],
            api_ids[api],
            np.zeros(n, np.int64),
        ),
    )


def _append_nvtx(con, spec, e: dict) -> None:
    """Write the NVTX table once every chunk's host ranges are known, through :func:`write_nvtx` (texts are
    unregistered, so the StringIds already written need nothing new)."""
    write_nvtx(
        con,
        spec,
        Strings(),
        {
            k: np.asarray(v, dtype=object if k == "text" else np.int64)
            if k not in ("domain",)
            else np.asarray(v)
            for k, v in e.items()
        },
    )


def add_real_shape(
    path,
    *,
    api_per_kernel: dict[str, float],
    nvtx_per_kernel: float | None = None,
    nvtx_name: str = "aten::addmm",
) -> dict:
    """Make a built export real-shaped, in place, in SQL (no rows pass through Python): beside each kernel's
    launching call, further CUDA API calls that launch nothing (``api_per_kernel``: name -> calls per kernel,
    e.g. cuKernelGetName 0.65, cudaStreamIsCapturing 0.10, as measured on real exports), each with its own
    correlationId, a few us before the launch on the same thread; and default-domain NVTX ranges around
    launches (PyTorch's emit_nvtx style, ``nvtx_name``) until NVTX rows per kernel reach ``nvtx_per_kernel``.
    Which launches get an extra row is a deterministic hash of the launch row and the name. Returns the
    resulting counts."""
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode=OFF")
    con.execute("PRAGMA synchronous=OFF")
    n_kernels = con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    n_launch = con.execute("SELECT MAX(rowid) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0] or 0
    corr_base = (
        con.execute("SELECT MAX(correlationId) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0] or 0
    ) + 1
    next_id = (con.execute("SELECT MAX(id) FROM StringIds").fetchone()[0] or 0) + 1
    for j, (name, rate) in enumerate(api_per_kernel.items()):
        whole, frac = int(rate), rate - int(rate)
        con.execute("INSERT INTO StringIds (id, value) VALUES (?, ?)", (next_id, name))
        for copy in range(whole + (1 if frac > 0 else 0)):
            keep = 10_000 if copy < whole else int(round(frac * 10_000))
            salt = 7919 * (j + 1) + 104_729 * copy
            con.execute(
                "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId, nameId, "
                "returnValue) SELECT start - ?, start - ? + 300, 0, globalTid, correlationId + ?, ?, 0 "
                "FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE rowid <= ? AND ((rowid * 2654435761 + ?) % 10007) < ?",
                (
                    1_000 + 400 * j,
                    1_000 + 400 * j,
                    corr_base * (1 + j + len(api_per_kernel) * copy),
                    next_id,
                    n_launch,
                    salt,
                    keep,
                ),
            )
        next_id += 1
    n_nvtx = con.execute("SELECT COUNT(*) FROM NVTX_EVENTS").fetchone()[0]
    if nvtx_per_kernel and n_kernels and n_nvtx / n_kernels < nvtx_per_kernel:
        keep = int(round((nvtx_per_kernel * n_kernels - n_nvtx) / max(1, n_launch) * 10_007))
        con.execute(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, endGlobalTid, domainId) "
            "SELECT start - 200, start + 200, ?, ?, globalTid, globalTid, 0 FROM CUPTI_ACTIVITY_KIND_RUNTIME "
            "WHERE rowid <= ? AND ((rowid * 40503 + 17) % 10007) < ?",
            (EVENT_TYPES["NvtxPushPopRange"], nvtx_name, n_launch, keep),
        )
    con.commit()
    out = {
        "kernels": n_kernels,
        "api_rows": con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0],
        "nvtx_rows": con.execute("SELECT COUNT(*) FROM NVTX_EVENTS").fetchone()[0],
    }
    con.close()
    return out


TIMED_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "NVTX_EVENTS",
)


def time_range(con: sqlite3.Connection) -> tuple[int, int]:
    """(first start, last end) over an export's timed tables."""
    have = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    timed = [t for t in TIMED_TABLES if t in have]
    lo = min(con.execute(f"SELECT MIN(start) FROM {t}").fetchone()[0] or 0 for t in timed)
    hi = max(con.execute(f"SELECT MAX(COALESCE(end, start)) FROM {t}").fetchone()[0] or 0 for t in timed)
    return lo, hi


def replicate_exports(sources: list[sqlite3.Connection], dsts: list, copies: int) -> list[dict]:
    """Per-rank exports of one run repeated together: each as :func:`replicate_export`, all shifted by the
    span of the whole run (the union of their time ranges), so the ranks' copies stay aligned."""
    ranges = [time_range(con) for con in sources]
    span = max(r[1] for r in ranges) - min(r[0] for r in ranges) + 1_000_000
    return [replicate_export(con, dst, copies, span=span) for con, dst in zip(sources, dsts, strict=True)]


def replicate_export(src: sqlite3.Connection, dst, copies: int, span: int | None = None) -> dict:
    """A real export repeated ``copies`` times along time into ``dst`` (a path): every timed table's rows
    again, shifted by the capture's span (plus 1 ms; or by ``span``) per copy, correlationIds shifted past the
    largest one used, so each copy's kernels join their own launches. Other tables (StringIds, processes, GPUs,
    session start) are copied once. ``src``: an open connection (e.g. a decompressed ``.sqlite.xz``)."""
    dst = Path(dst)
    with replacing(dst, ".build") as tmp:
        out = sqlite3.connect(tmp)
        src.backup(out)
        out.execute("PRAGMA journal_mode=OFF")
        out.execute("PRAGMA synchronous=OFF")
        have = {r[0] for r in out.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        timed = [t for t in TIMED_TABLES if t in have]
        if span is None:
            lo, hi = time_range(out)
            span = hi - lo + 1_000_000
        corr = (
            max(
                (out.execute(f"SELECT MAX(correlationId) FROM {t}").fetchone()[0] or 0)
                for t in timed
                if "correlationId" in {r[1] for r in out.execute(f'PRAGMA table_info("{t}")')}
            )
            + 1
        )
        counts = {}
        for t in timed:
            cols = [r[1] for r in out.execute(f'PRAGMA table_info("{t}")')]
            n = out.execute(f"SELECT MAX(rowid) FROM {t}").fetchone()[0] or 0
            for k in range(1, copies):
                expr = [
                    f"{c} + {k * span}"
                    if c in ("start", "end")
                    else f"CASE WHEN correlationId > 0 THEN correlationId + {k * corr} END"
                    if c == "correlationId"
                    else c
                    for c in cols
                ]
                out.execute(
                    f"INSERT INTO {t} ({', '.join(cols)}) SELECT {', '.join(expr)} FROM {t} WHERE rowid <= {n}"
                )
            counts[t] = out.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
        out.commit()
        out.close()
    return counts
