"""Build nsys-shaped SQLite exports in code: tests (every supported layout) and benchmarks (millions of rows).

The tables and columns written are those of real exports, so the loader cannot tell a built file from a
recorded one except by content. Layouts:

* ``"2025.3"``: as the real 2025.3.2 export in tests/data (schema 3.20.3): ``greenContextId`` in activity
  tables, ``copyCount`` in MEMCPY, ``binaryData`` in NVTX_EVENTS, ``cuDevice`` in TARGET_INFO_GPU.
* ``"2023.4"``: as a real 2023.4.4 export (schema 3.7.2; NVTX_EVENTS, META_DATA_* and
  TARGET_INFO_SYSTEM_ENV checked against one made on a CPU machine with Debian's nsight-systems 2023.4.4):
  no ``binaryData``, META_DATA_EXPORT spells ``EXPORT_PARAM_OUTUPT_FILE``, TARGET_INFO_SYSTEM_ENV carries
  ``Hostname`` and ``DeviceEnvironment``. Not checked on a real file (no CUDA there): the activity tables
  are written without ``greenContextId``/``copyCount`` and TARGET_INFO_GPU without ``cuDevice``, which
  exercises the loader's fallbacks.
* ``"2024.x"``: between the two: ``greenContextId`` present, ``copyCount`` and ``binaryData`` absent.

Tables with no rows are not created, as nsys does. Rows go in with ``executemany`` over numpy columns.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
from pathlib import Path

import numpy as np

from ddp_profile import nvtx_names

LAYOUTS = {
    "2025.3": {"version": "2025.3.2.0", "schema": "3.20.3", "green": True, "copy_count": True,
               "binary": True, "cu_device": True, "out_key": "OUTPUT"},
    "2024.x": {"version": "2024.6.1.90", "schema": "3.15.4", "green": True, "copy_count": False,
               "binary": False, "cu_device": True, "out_key": "OUTPUT"},
    "2023.4": {"version": "2023.4.4.54", "schema": "3.7.2", "green": False, "copy_count": False,
               "binary": False, "cu_device": False, "out_key": "OUTUPT"},
}
EVENT_TYPES = {"NvtxMark": 34, "NvtxPushPopRange": 59, "NvtxStartEndRange": 60, "NvtxDomainCreate": 75}
GLOBAL_PID_BASE = 0x1000000000000  # vm id 1 in the top bits, as in real serialized GlobalIds


def global_pid(pid) -> np.ndarray:
    return GLOBAL_PID_BASE + (np.asarray(pid, dtype=np.int64) << 24)


def global_tid(pid, tid) -> np.ndarray:
    return global_pid(pid) + np.asarray(tid, dtype=np.int64)


class _Strings:
    """StringIds: one id per distinct string."""

    def __init__(self):
        self.ids: dict[str, int] = {}

    def id(self, value: str) -> int:
        return self.ids.setdefault(value, len(self.ids))

    def many(self, values) -> np.ndarray:
        uniq, inv = np.unique(np.asarray(values, dtype=object).astype(str), return_inverse=True)
        return np.array([self.id(v) for v in uniq], dtype=np.int64)[inv] if len(uniq) else np.empty(0, np.int64)


def _table(con, name: str, cols: list[tuple[str, str]], rows) -> None:
    con.execute(f"CREATE TABLE {name} (" + ", ".join(f"{c} {t}" for c, t in cols) + ")")
    if rows is not None:
        con.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(cols))})", rows)


def _col(spec: dict, key: str, n: int, default):
    value = spec.get(key)
    if value is None:
        return np.full(n, default, dtype=object if isinstance(default, str) or default is None else np.int64)
    return np.asarray(value)


def _activity_cols(layout: dict, extra: list[tuple[str, str]]) -> list[tuple[str, str]]:
    cols = [("start", "INTEGER NOT NULL"), ("end", "INTEGER NOT NULL"), ("deviceId", "INTEGER NOT NULL"),
            ("contextId", "INTEGER NOT NULL")]
    if layout["green"]:
        cols.append(("greenContextId", "INTEGER"))
    return cols + [("streamId", "INTEGER NOT NULL"), ("correlationId", "INTEGER"), ("globalPid", "INTEGER")] + extra


@contextlib.contextmanager
def _replacing(path: Path, suffix: str):
    """Yield a temporary file name beside ``path`` (same folder, so the rename is atomic); it is renamed over
    ``path`` when the block finishes and deleted when it fails (Ctrl-C included), so a half-built export is
    never left under the real name. safeio.write_text_atomic does not fit: SQLite writes the file itself."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _rows(*columns):
    return zip(*(c.tolist() if isinstance(c, np.ndarray) else c for c in columns), strict=True)


def build_export(path, *, layout: str = "2025.3", processes: list[dict], kernels: dict | None = None,
                 memcpy: dict | None = None, memset: dict | None = None, nvtx: dict | None = None,
                 gpus: list[dict] | None = None, host: str = "synth-host",
                 session_start_utc_ns: int = 1_700_000_000_000_000_000, meta_extra: dict | None = None,
                 environment: dict | None = None, stdout: str | None = None, api: dict | None = None) -> Path:
    """Write an export to ``path`` (atomically). Arrays in the dicts are columns of equal length:

    processes: ``[{"pid", "name", "device"}]``. kernels: pid, device, stream, start, end, name (str), and
    optionally correlation_id, launch_start, launch_tid, launch_api (str). memcpy/memset: the same minus
    name, plus bytes (and copy_kind for memcpy). nvtx: pid, tid, start, end (-1 = none: a mark or an
    unclosed range), text, and optionally event_type (59 default), domain (str; "" default), registered
    (bool: text goes to StringIds via textId, ``text`` NULL, as NCCL's ranges), payload (-1 = none),
    category. environment / stdout: planted into the tables where nsys keeps them (for scrub tests).
    api: further CUDA API calls (synchronize, allocator...): pid, start, end, name (str), optionally tid
    (default: the pid, the main thread); each gets its own correlationId, above the launches'. Launch rows
    last 500 ns.
    """
    spec = LAYOUTS[layout]
    path = Path(path)
    with _replacing(path, ".tmp") as tmp:
        con = sqlite3.connect(tmp)
        con.execute("PRAGMA journal_mode=OFF")
        strings = _Strings()
        _write_meta(con, spec, host, meta_extra or {}, environment or {}, processes)
        _table(con, "TARGET_INFO_SESSION_START_TIME", [("utcEpochNs", "INTEGER"), ("utcTime", "TEXT"),
               ("localTime", "TEXT")], [(session_start_utc_ns, "2023-11-14T22:13:20", "2023-11-14T22:13:20")])
        _table(con, "PROCESSES", [("globalPid", "INTEGER"), ("pid", "INTEGER"), ("name", "TEXT")],
               [(int(global_pid(p["pid"])), p["pid"], p.get("name", "python")) for p in processes])
        _write_gpus(con, spec, gpus or [{"device": d} for d in sorted({p.get("device", 0) for p in processes})])
        runtime: list[np.ndarray] = []
        if kernels is not None:
            _write_kernels(con, spec, strings, kernels, runtime)
        for table, data in (("CUPTI_ACTIVITY_KIND_MEMCPY", memcpy), ("CUPTI_ACTIVITY_KIND_MEMSET", memset)):
            if data is not None:
                _write_copies(con, spec, table, strings, data, runtime)
        if runtime or api is not None:
            cols = [("start", "INTEGER NOT NULL"), ("end", "INTEGER NOT NULL"), ("eventClass", "INTEGER NOT NULL"),
                    ("globalTid", "INTEGER"), ("correlationId", "INTEGER"), ("nameId", "INTEGER NOT NULL"),
                    ("returnValue", "INTEGER NOT NULL"), ("callchainId", "INTEGER")]
            r = np.concatenate(runtime, axis=1) if runtime else np.zeros((5, 0), np.int64)
            end = r[0] + 500
            if api is not None:
                r, end = _with_api_rows(strings, api, r, end)
            _table(con, "CUPTI_ACTIVITY_KIND_RUNTIME", cols, _rows(r[0], end, r[1], r[2], r[3], r[4],
                                                                   np.zeros(r.shape[1], np.int64), [None] * r.shape[1]))
        if nvtx is not None:
            _write_nvtx(con, spec, strings, nvtx)
        if stdout is not None:
            _table(con, "ProcessStreams", [("globalPid", "INTEGER NOT NULL"), ("filenameId", "INTEGER NOT NULL"),
                   ("contentId", "INTEGER NOT NULL")], [(int(global_pid(processes[0]["pid"])),
                   strings.id(f"/home/{host}/run/pid_{processes[0]['pid']}_stdout.log"), strings.id(stdout))])
        _table(con, "StringIds", [("id", "INTEGER NOT NULL PRIMARY KEY"), ("value", "TEXT NOT NULL")],
               ((i, v) for v, i in strings.ids.items()))
        con.commit()
        con.close()
    return path


def _write_meta(con, spec, host, extra, environment, processes) -> None:
    export = {"EXPORT_PRODUCT_NAME": "NVIDIA Nsight Systems", "EXPORT_PRODUCT_VERSION": spec["version"],
              "EXPORT_SCHEMA_VERSION": spec["schema"], "EXPORT_HOST": host, "EXPORT_USER": "",
              "EXPORT_PARAM_INPUT_FILE": "report.nsys-rep", f"EXPORT_PARAM_{spec['out_key']}_FILE": "report.sqlite"}
    export.update(extra)
    _table(con, "META_DATA_EXPORT", [("name", "TEXT NOT NULL"), ("value", "TEXT")], export.items())
    capture = [("DEVICE_DISPLAY_NAME", host), ("PROCESS_0:COMMAND", "torchrun"),
               ("PROCESS_0:ARGUMENT_0", f"--nproc_per_node={len(processes)}"), ("PROCESS_0:ARGUMENT_1", "train.py")]
    capture += [("PROCESS_0:ENVIRONMENT_VARIABLE", f'{k}="{v}"') for k, v in environment.items()]
    _table(con, "META_DATA_CAPTURE", [("name", "TEXT NOT NULL"), ("value", "TEXT")], capture)
    env_rows = [("Local (CLI)", "Hostname", 0, host)]
    if environment:
        env_rows.append(("Local (CLI)", "DeviceEnvironment", 1, ";".join(f"{k}={v}" for k, v in environment.items())))
    _table(con, "TARGET_INFO_SYSTEM_ENV", [("globalVid", "INTEGER"), ("devStateName", "TEXT NOT NULL"),
           ("name", "TEXT NOT NULL"), ("nameEnum", "INTEGER NOT NULL"), ("value", "TEXT NOT NULL")],
           [(GLOBAL_PID_BASE, *r) for r in env_rows])


def _write_gpus(con, spec, gpus) -> None:
    cols = [("vmId", "INTEGER"), ("id", "INTEGER"), ("name", "TEXT"), ("busLocation", "TEXT"),
            ("totalMemory", "INTEGER"), ("smCount", "INTEGER")]
    rows = [[GLOBAL_PID_BASE, g["device"], g.get("name", "NVIDIA H100 80GB HBM3"),
             g.get("bus", f"0000:{g['device'] + 6:02x}:00.0"), g.get("memory", 85_520_809_984), g.get("sm", 132)]
            for g in gpus]
    if spec["cu_device"]:
        cols.append(("cuDevice", "INTEGER"))
        for r, g in zip(rows, gpus, strict=True):
            r.append(g["device"])
    _table(con, "TARGET_INFO_GPU", cols, rows)


def _with_api_rows(strings, api, r, end) -> tuple[np.ndarray, np.ndarray]:
    """Runtime rows ``r`` (rows start, eventClass, globalTid, correlationId, nameId) and their ends, with
    the ``api`` calls of :func:`build_export` appended (correlationIds after the largest one used)."""
    n = len(api["start"])
    name = np.asarray(api["name"]).astype(str)
    tid = _col(api, "tid", n, 0)
    tid = np.where(tid > 0, tid, np.asarray(api["pid"]))
    cls = np.where(np.char.startswith(name, "cu") & ~np.char.startswith(name, "cuda"), 1, 0)
    corr = int(r[3].max(initial=0)) + 1 + np.arange(n)
    extra = np.vstack([np.asarray(api["start"], np.int64), cls, global_tid(api["pid"], tid), corr, strings.many(name)])
    return np.concatenate([r, extra], axis=1), np.concatenate([end, np.asarray(api["end"], np.int64)])


def _launch_rows(strings, data, n, default_api) -> np.ndarray | None:
    if data.get("launch_start") is None:
        return None
    api = _col(data, "launch_api", n, default_api)
    name_ids = strings.many(api)
    event_class = np.where(np.char.startswith(api.astype(str), "cu") & ~np.char.startswith(api.astype(str), "cuda"), 1, 0)
    tid = _col(data, "launch_tid", n, 0)
    tid = np.where(tid > 0, tid, np.asarray(data["pid"]))
    return np.vstack([np.asarray(data["launch_start"], np.int64), event_class,
                      global_tid(data["pid"], tid), np.asarray(data["correlation_id"], np.int64), name_ids])


def _write_kernels(con, spec, strings, k, runtime) -> None:
    n = len(k["start"])
    names = strings.many(k["name"])
    corr = _col(k, "correlation_id", n, 0)
    cols = _activity_cols(spec, [("demangledName", "INTEGER NOT NULL"), ("shortName", "INTEGER NOT NULL"),
                                 ("registersPerThread", "INTEGER NOT NULL"), ("gridX", "INTEGER NOT NULL")])
    columns = [k["start"], k["end"], k["device"], np.ones(n, np.int64)]
    if spec["green"]:
        columns.append(np.zeros(n, np.int64))
    columns += [k["stream"], corr, global_pid(k["pid"]), names, names, np.full(n, 32), np.ones(n, np.int64)]
    _table(con, "CUPTI_ACTIVITY_KIND_KERNEL", cols, _rows(*map(np.asarray, columns)))
    launch = _launch_rows(strings, k, n, "cudaLaunchKernel_v7000")
    if launch is not None:
        runtime.append(launch)


def _write_copies(con, spec, table, strings, c, runtime) -> None:
    n = len(c["start"])
    memcpy = table.endswith("MEMCPY")
    extra = [("bytes", "INTEGER NOT NULL"), ("copyKind", "INTEGER NOT NULL")] if memcpy else \
        [("value", "INTEGER NOT NULL"), ("bytes", "INTEGER NOT NULL")]
    if memcpy and spec["copy_count"]:
        extra.append(("copyCount", "INTEGER"))
    columns = [c["start"], c["end"], c["device"], np.ones(n, np.int64)]
    if spec["green"]:
        columns.append(np.zeros(n, np.int64))
    columns += [c["stream"], _col(c, "correlation_id", n, 0), global_pid(c["pid"])]
    columns += [c["bytes"], _col(c, "copy_kind", n, 1)] if memcpy else [np.zeros(n, np.int64), c["bytes"]]
    if memcpy and spec["copy_count"]:
        columns.append(np.ones(n, np.int64))
    _table(con, table, _activity_cols(spec, extra), _rows(*map(np.asarray, columns)))
    launch = _launch_rows(strings, c, n, "cudaMemcpyAsync_v3020" if memcpy else "cudaMemsetAsync_v3020")
    if launch is not None:
        runtime.append(launch)


def _write_nvtx(con, spec, strings, e) -> None:
    n = len(e["start"])
    domain = _col(e, "domain", n, "").astype(str)
    pid = np.asarray(e["pid"], np.int64)
    # One NvtxDomainCreate per (process, named domain); domain ids count from 1 within each process.
    domain_ids = np.zeros(n, np.int64)
    creates = []
    for p in np.unique(pid):
        for j, name in enumerate(sorted(set(domain[(pid == p) & (domain != "")].tolist())), start=1):
            domain_ids[(pid == p) & (domain == name)] = j
            creates.append((0, None, EVENT_TYPES["NvtxDomainCreate"], None, None, None, name,
                            int(global_tid(p, p)), None, None, j, None, None, None, None, None, None, None, None))
    registered = _col(e, "registered", n, 0).astype(bool)
    texts = np.asarray(e["text"], dtype=object)
    text_ids = np.full(n, None, dtype=object)
    if registered.any():
        text_ids[registered] = strings.many(texts[registered]).astype(object)
    text = np.where(registered, None, texts)
    end = np.asarray(e["end"], dtype=np.int64).astype(object)
    end[np.asarray(e["end"]) < 0] = None
    payload = _col(e, "payload", n, -1).astype(object)
    payload[_col(e, "payload", n, -1) < 0] = None
    category = _col(e, "category", n, 0).astype(object)
    category[_col(e, "category", n, 0) == 0] = None
    tid = global_tid(pid, e["tid"])
    none = [None] * n
    rows = list(creates) + list(_rows(
        np.asarray(e["start"], np.int64), end, _col(e, "event_type", n, EVENT_TYPES["NvtxPushPopRange"]), none,
        category, none, text, tid, tid, text_ids, domain_ids,
        none, payload, none, none, none, none, none, none))
    cols = [("start", "INTEGER NOT NULL"), ("end", "INTEGER"), ("eventType", "INTEGER NOT NULL"), ("rangeId", "INTEGER"),
            ("category", "INTEGER"), ("color", "INTEGER"), ("text", "TEXT"), ("globalTid", "INTEGER"),
            ("endGlobalTid", "INTEGER"), ("textId", "INTEGER"), ("domainId", "INTEGER"), ("uint64Value", "INTEGER"),
            ("int64Value", "INTEGER"), ("doubleValue", "REAL"), ("uint32Value", "INTEGER"), ("int32Value", "INTEGER"),
            ("floatValue", "REAL"), ("jsonTextId", "INTEGER"), ("jsonText", "TEXT")]
    if spec["binary"]:
        cols.append(("binaryData", "TEXT"))
        rows = [(*r, None) for r in rows]
    _table(con, "NVTX_EVENTS", cols, rows)
    _table(con, "ENUM_NSYS_EVENT_TYPE", [("id", "INTEGER"), ("name", "TEXT"), ("label", "TEXT")],
           [(i, nm, nm) for nm, i in EVENT_TYPES.items()])


def synth_ddp_run(path, *, n_ranks: int = 2, n_steps: int = 3, kernels_per_step: int = 12, n_buckets: int = 3,
                  kernel_ns: int = 10_000, nccl_ns: int = 8_000, layout: str = "2025.3",
                  marker: bool = True) -> dict:
    """One file holding a DDP run whose overlap is known by construction; returns the truth.

    Per rank and step, on stream 7: forward F = kernels_per_step//3 kernels, backward B = the same number,
    back to back, each ``kernel_ns``; on stream 17 one NCCL all-reduce of ``nccl_ns`` per bucket, bucket b
    starting at the end of backward kernel (b+1)*B/n_buckets - 1. The last bucket starts when backward ends,
    so it is fully exposed; the others end before backward does (needs nccl_ns <= kernel_ns * B/n_buckets),
    so they are fully hidden. The optimizer (the remaining kernels) starts when the last all-reduce ends.
    Hence per step: comm = n_buckets*nccl_ns, overlap = (n_buckets-1)*nccl_ns, exposed = nccl_ns.
    NVTX: rank marker, ``step i`` (payload i), forward/backward/optimizer nested, in the project's domain.
    """
    f = b = kernels_per_step // 3
    o = kernels_per_step - f - b
    per = b // n_buckets
    if per < 1 or nccl_ns > kernel_ns * per:
        raise ValueError("each bucket's all-reduce must fit inside backward (nccl_ns <= kernel_ns * B // n_buckets)")
    gap = 50_000
    step_ns = (f + b) * kernel_ns + nccl_ns + o * kernel_ns + gap
    k_cols: dict[str, list] = {c: [] for c in ("pid", "device", "stream", "start", "end", "name",
                                               "correlation_id", "launch_start", "launch_tid", "launch_api")}
    n_cols: dict[str, list] = {c: [] for c in ("pid", "tid", "start", "end", "text", "domain", "payload",
                                               "category", "registered", "event_type")}
    idx = np.arange(kernels_per_step)
    for r in range(n_ranks):
        pid = 1000 + r
        for s in range(n_steps):
            t0 = 1_000_000 + s * step_ns
            starts = t0 + idx * kernel_ns
            starts[f + b:] += nccl_ns  # optimizer waits for the last all-reduce
            names = ["fwd_gemm"] * f + ["bwd_gemm"] * b + ["sgd_update"] * o
            bucket_starts = t0 + (f + (np.arange(n_buckets) + 1) * per) * kernel_ns
            bucket_starts[-1] = t0 + (f + b) * kernel_ns
            n_all = kernels_per_step + n_buckets
            corr0 = s * n_all + 1
            for col, vals in (("pid", [pid] * n_all), ("device", [r] * n_all),
                              ("stream", [7] * kernels_per_step + [17] * n_buckets),
                              ("start", list(starts) + list(bucket_starts)),
                              ("end", list(starts + kernel_ns) + list(bucket_starts + nccl_ns)),
                              ("name", names + ["ncclDevKernel_AllReduce_Sum_f32_RING_LL"] * n_buckets),
                              ("correlation_id", list(range(corr0, corr0 + n_all))),
                              ("launch_start", list(starts - 5_000) + list(bucket_starts - 5_000)),
                              ("launch_tid", [pid] * f + [pid + 1] * b + [pid] * o + [pid] * n_buckets),
                              ("launch_api", ["cudaLaunchKernel_v7000"] * kernels_per_step
                               + ["cuLaunchKernelEx"] * n_buckets)):
                k_cols[col].extend(vals)
            phases = [(f"{nvtx_names.STEP} {s}", t0 - 10_000, t0 + step_ns - gap, s, nvtx_names.CATEGORY_STEP, 0),
                      (nvtx_names.FORWARD, t0 - 8_000, t0 + f * kernel_ns - 5_000, -1, nvtx_names.CATEGORY_PHASE, 1),
                      (nvtx_names.BACKWARD, t0 + f * kernel_ns - 5_000, t0 + (f + b) * kernel_ns - 5_000, -1,
                       nvtx_names.CATEGORY_PHASE, 1),
                      (nvtx_names.OPTIMIZER, t0 + (f + b) * kernel_ns, t0 + step_ns - gap - 1_000, -1,
                       nvtx_names.CATEGORY_PHASE, 1)]
            for text, start, end, payload, cat, registered in phases:
                for col, v in (("pid", pid), ("tid", pid), ("start", start), ("end", end), ("text", text),
                               ("domain", nvtx_names.DOMAIN), ("payload", payload), ("category", cat),
                               ("registered", registered), ("event_type", EVENT_TYPES["NvtxPushPopRange"])):
                    n_cols[col].append(v)
        if marker:
            for col, v in (("pid", pid), ("tid", pid), ("start", 500_000), ("end", -1),
                           ("text", f"{nvtx_names.RANK_MARKER} {r}/{n_ranks}"), ("domain", nvtx_names.DOMAIN),
                           ("payload", r), ("category", nvtx_names.CATEGORY_META), ("registered", 0),
                           ("event_type", EVENT_TYPES["NvtxMark"])):
                n_cols[col].append(v)
    processes = [{"pid": 1000 + r, "name": "python", "device": r} for r in range(n_ranks)]
    build_export(path, layout=layout, processes=processes, kernels={k: np.asarray(v) for k, v in k_cols.items()},
                 nvtx={k: np.asarray(v) for k, v in n_cols.items()})
    per_step = {"comm_ns": n_buckets * nccl_ns, "overlap_ns": (n_buckets - 1) * nccl_ns, "exposed_comm_ns": nccl_ns,
                "compute_ns": kernels_per_step * kernel_ns, "step_ns": step_ns - gap}
    return {"path": Path(path), "n_ranks": n_ranks, "n_steps": n_steps,
            "n_kernels": n_ranks * n_steps * (kernels_per_step + n_buckets),
            "n_nccl": n_ranks * n_steps * n_buckets, "per_step": per_step}


# ---- large exports for benchmarks (issue 8) ----------------------------------------------------------------

SCALE_COMPUTE_NAMES = [
    "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_nn", "ampere_bf16_s16816gemm_bf16_64x64_sliced1x2_tn",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel",
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>",
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>",
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float>",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float>>>",
    "flash_fwd_kernel", "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel", "flash_bwd_dot_do_o_kernel",
    "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::AddFunctor>>",
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>",
    "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel<c10::BFloat16, float>",
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluBackwardCUDAKernelImpl>",
    "void at::native::multi_tensor_apply_kernel<at::native::FusedAdamMathFunctor<float, 4>>",
    "void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float, float, float>",
]
SCALE_NCCL_NAME = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"


def _scale_steps(rng, steps: int, tmpl: np.ndarray, base_ns: np.ndarray, n_buckets: int, t0: int,
                 bucket_bytes: np.ndarray, jitter) -> tuple[dict, dict, int]:
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
    bdur = (20_000 + bucket_bytes[None, :] / 300 * rng.uniform(0.95, 1.05, (steps, n_buckets))).astype(np.int64)
    shift = bstart[:, -1] + bdur[:, -1] + gap - rel[:, f + b]  # optimizer waits for the last all-reduce
    rel[:, f + b:] += np.maximum(shift, 0)[:, None]
    length = rel[:, -1] + dur[:, -1] + step_gap
    t_step = t0 + np.cumsum(length) - length
    ks = (t_step[:, None] + rel)
    ns = (t_step[:, None] + bstart)
    klaunch = ks - lag - jitter.integers(0, 1_000, ks.shape)
    nlaunch = ns - lag
    # Host ranges: each phase spans its launches; backward also covers the all-reduce launches.
    fwd = (klaunch[:, 0] - 500, klaunch[:, f - 1] + 500)
    bwd = (klaunch[:, f] - 400, np.maximum(klaunch[:, f + b - 1], nlaunch[:, -1]) + 500)
    opt = (klaunch[:, f + b] - 400, klaunch[:, -1] + 500)
    host = {"step": (fwd[0] - 1_000, opt[1] + 1_000), "forward": fwd, "backward": bwd, "optimizer": opt,
            "bucket": (nlaunch - 300, nlaunch + 300), "bucket_bytes": bucket_bytes}
    gpu = {"k_start": ks, "k_end": ks + dur, "k_launch": klaunch, "n_start": ns, "n_end": ns + bdur,
           "n_launch": nlaunch}
    return gpu, host, int(t_step[-1] + length[-1])


def synth_scale_run(path, *, n_kernels: int, n_ranks: int = 8, kernels_per_step: int = 2_000, n_buckets: int = 25,
                    rank_of_file: int | None = None, seed: int = 0, layout: str = "2025.3",
                    chunk_steps: int = 64) -> dict:
    """A realistic DDP export of about ``n_kernels`` GPU kernels (compute + NCCL), built in chunks.

    All ``n_ranks`` processes in one file, or only rank ``rank_of_file`` (per-rank files of one run share
    the session start, so they align). Per rank and step: ``kernels_per_step`` compute kernels on stream 7
    drawn from 16 realistic names, ``n_buckets`` NCCL all-reduces on stream 17, one runtime/driver API row
    per kernel (launch correlation), and NVTX ranges in the project's domain: rank marker, ``step i``,
    forward/backward/optimizer, one ``allreduce b<i> <bytes>B`` range per bucket. Ranks start a few us
    apart, so collectives have wait time. Memory stays at one chunk: the first chunk goes through
    :func:`build_export` (so tables and StringIds are exactly its layout), later chunks are appended.
    """
    rng = np.random.default_rng(seed)
    per_step = kernels_per_step + n_buckets
    steps_total = max(1, -(-n_kernels // (per_step * n_ranks)))
    tmpl = np.concatenate([rng.integers(0, 8, kernels_per_step // 3),  # forward-ish, backward-ish, optimizer
                           rng.integers(6, 14, kernels_per_step // 3),
                           rng.integers(10, 16, kernels_per_step - 2 * (kernels_per_step // 3))])
    base_ns = rng.integers(5_000, 120_000, len(SCALE_COMPUTE_NAMES))
    bucket_bytes = np.array([25 * 2**20, 12 * 2**20, 6 * 2**20] * n_buckets)[:n_buckets]
    ranks = list(range(n_ranks)) if rank_of_file is None else [rank_of_file]
    clocks = {r: 1_000_000 + 3_000 * r for r in ranks}
    corr = dict.fromkeys(ranks, 1)
    path = Path(path)
    names = np.array(SCALE_COMPUTE_NAMES + [SCALE_NCCL_NAME], dtype=object)
    nvtx: dict[str, list] = {c: [] for c in ("pid", "tid", "start", "end", "text", "domain", "payload",
                                             "category", "registered", "event_type")}

    def add_nvtx(pid, start, end, text, payload, category, event_type=EVENT_TYPES["NvtxPushPopRange"]):
        n = len(start)
        for col, v in (("pid", [pid] * n), ("tid", [pid] * n), ("start", list(start)), ("end", list(end)),
                       ("text", list(text)), ("domain", [nvtx_names.DOMAIN] * n), ("payload", list(payload)),
                       ("category", [category] * n), ("registered", [0] * n), ("event_type", [event_type] * n)):
            nvtx[col].extend(v)

    def chunk(s0, s1):
        cols = {c: [] for c in ("pid", "device", "stream", "start", "end", "name", "correlation_id",
                                "launch_start", "launch_tid", "launch_api")}
        for r in ranks:
            pid = 1000 + r
            gpu, host, clocks[r] = _scale_steps(np.random.default_rng((seed, s0)), s1 - s0, tmpl, base_ns, n_buckets,
                                                clocks[r], bucket_bytes, np.random.default_rng((seed, s0, r)))
            starts = np.concatenate([gpu["k_start"], gpu["n_start"]], axis=1).ravel()
            n = len(starts)
            is_nccl = np.concatenate([np.zeros_like(gpu["k_start"], bool), np.ones_like(gpu["n_start"], bool)],
                                     axis=1).ravel()
            name_idx = np.concatenate([np.broadcast_to(tmpl, gpu["k_start"].shape),
                                       np.full(gpu["n_start"].shape, len(names) - 1)], axis=1).ravel()
            for col, v in (("pid", np.full(n, pid)), ("device", np.full(n, r)), ("stream", np.where(is_nccl, 17, 7)),
                           ("start", starts), ("end", np.concatenate([gpu["k_end"], gpu["n_end"]], axis=1).ravel()),
                           ("name", name_idx), ("correlation_id", np.arange(corr[r], corr[r] + n)),
                           ("launch_start", np.concatenate([gpu["k_launch"], gpu["n_launch"]], axis=1).ravel()),
                           ("launch_tid", np.where(is_nccl, pid + 1, pid)), ("launch_api", is_nccl)):
                cols[col].append(v)
            corr[r] += n
            idx = np.arange(s0, s1)
            add_nvtx(pid, *host["step"], [f"{nvtx_names.STEP} {i}" for i in idx], idx, nvtx_names.CATEGORY_STEP)
            for ph in (nvtx_names.FORWARD, nvtx_names.BACKWARD, nvtx_names.OPTIMIZER):
                add_nvtx(pid, *host[ph], [ph] * len(idx), [-1] * len(idx), nvtx_names.CATEGORY_PHASE)
            bs, be = host["bucket"]
            texts = [f"{nvtx_names.ALLREDUCE_PREFIX} b{j} {bucket_bytes[j]}B" for _ in idx for j in range(n_buckets)]
            add_nvtx(pid, bs.ravel(), be.ravel(), texts, np.tile(bucket_bytes, len(idx)), nvtx_names.CATEGORY_BUCKET)
        return {c: np.concatenate(v) for c, v in cols.items()}

    bounds = list(range(0, steps_total, chunk_steps)) + [steps_total]
    first = chunk(bounds[0], bounds[1])
    rest = [(a, b) for a, b in zip(bounds[1:-1], bounds[2:], strict=True)]
    # NVTX host ranges derive from each chunk's GPU times, so the NVTX table is written after the last chunk.
    with _replacing(path, ".build") as tmp:
        processes = [{"pid": 1000 + r, "name": "python", "device": r} for r in ranks]
        for r in ranks:
            add_nvtx(1000 + r, [500_000], [-1], [f"{nvtx_names.RANK_MARKER} {r}/{n_ranks}"], [r],
                     nvtx_names.CATEGORY_META, EVENT_TYPES["NvtxMark"])
        kernels = dict(first, name=names[first["name"]],
                       launch_api=np.where(first["launch_api"], "cuLaunchKernelEx", "cudaLaunchKernel_v7000"))
        build_export(tmp, layout=layout, processes=processes, kernels=kernels, gpus=[{"device": r} for r in ranks])
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
    return {"path": path, "n_kernels": n_rows, "n_ranks": n_ranks, "ranks_in_file": ranks, "n_steps": steps_total,
            "n_nvtx": len(nvtx["start"]) + len(ranks)}


def _append_chunk(con, spec, c: dict, name_ids: np.ndarray, api_ids: np.ndarray) -> None:
    """Append kernels and their runtime rows, in the column order :func:`_write_kernels` creates."""
    n = len(c["start"])
    nid = name_ids[c["name"]]
    columns = [c["start"], c["end"], c["device"], np.ones(n, np.int64)]
    if spec["green"]:
        columns.append(np.zeros(n, np.int64))
    columns += [c["stream"], c["correlation_id"], global_pid(c["pid"]), nid, nid, np.full(n, 32), np.ones(n, np.int64)]
    con.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({', '.join('?' * len(columns))})",
                    _rows(*columns))
    api = c["launch_api"].astype(np.int64)
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?, ?, ?, NULL)",
                    _rows(c["launch_start"], c["launch_start"] + 500, api, global_tid(c["pid"], c["launch_tid"]),
                          c["correlation_id"], api_ids[api], np.zeros(n, np.int64)))


def _append_nvtx(con, spec, e: dict) -> None:
    """Write the NVTX table once every chunk's host ranges are known, through :func:`_write_nvtx` (texts are
    unregistered, so the StringIds already written need nothing new)."""
    _write_nvtx(con, spec, _Strings(), {k: np.asarray(v, dtype=object if k == "text" else np.int64)
                                        if k not in ("domain",) else np.asarray(v) for k, v in e.items()})
