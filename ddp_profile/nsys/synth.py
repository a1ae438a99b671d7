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
    "2025.3": {
        "version": "2025.3.2.0",
        "schema": "3.20.3",
        "green": True,
        "copy_count": True,
        "binary": True,
        "cu_device": True,
        "out_key": "OUTPUT",
    },
    "2024.x": {
        "version": "2024.6.1.90",
        "schema": "3.15.4",
        "green": True,
        "copy_count": False,
        "binary": False,
        "cu_device": True,
        "out_key": "OUTPUT",
    },
    "2023.4": {
        "version": "2023.4.4.54",
        "schema": "3.7.2",
        "green": False,
        "copy_count": False,
        "binary": False,
        "cu_device": False,
        "out_key": "OUTUPT",
    },
}
EVENT_TYPES = {"NvtxMark": 34, "NvtxPushPopRange": 59, "NvtxStartEndRange": 60, "NvtxDomainCreate": 75}
GLOBAL_PID_BASE = 0x1000000000000  # vm id 1 in the top bits, as in real serialized GlobalIds


def global_pid(pid) -> np.ndarray:
    return GLOBAL_PID_BASE + (np.asarray(pid, dtype=np.int64) << 24)


def global_tid(pid, tid) -> np.ndarray:
    return global_pid(pid) + np.asarray(tid, dtype=np.int64)


class Strings:
    """StringIds: one id per distinct string."""

    def __init__(self):
        self.ids: dict[str, int] = {}

    def id(self, value: str) -> int:
        return self.ids.setdefault(value, len(self.ids))

    def many(self, values) -> np.ndarray:
        uniq, inv = np.unique(np.asarray(values, dtype=object).astype(str), return_inverse=True)
        return (
            np.array([self.id(v) for v in uniq], dtype=np.int64)[inv] if len(uniq) else np.empty(0, np.int64)
        )


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
    cols = [
        ("start", "INTEGER NOT NULL"),
        ("end", "INTEGER NOT NULL"),
        ("deviceId", "INTEGER NOT NULL"),
        ("contextId", "INTEGER NOT NULL"),
    ]
    if layout["green"]:
        cols.append(("greenContextId", "INTEGER"))
    return (
        cols
        + [("streamId", "INTEGER NOT NULL"), ("correlationId", "INTEGER"), ("globalPid", "INTEGER")]
        + extra
    )


@contextlib.contextmanager
def replacing(path: Path, suffix: str):
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


def columns_to_rows(*columns):
    return zip(*(c.tolist() if isinstance(c, np.ndarray) else c for c in columns), strict=True)


def build_export(
    path,
    *,
    layout: str = "2025.3",
    processes: list[dict],
    kernels: dict | None = None,
    memcpy: dict | None = None,
    memset: dict | None = None,
    nvtx: dict | None = None,
    gpus: list[dict] | None = None,
    host: str = "synth-host",
    session_start_utc_ns: int = 1_700_000_000_000_000_000,
    meta_extra: dict | None = None,
    environment: dict | None = None,
    stdout: str | None = None,
    api: dict | None = None,
) -> Path:
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
    with replacing(path, ".tmp") as tmp:
        con = sqlite3.connect(tmp)
        con.execute("PRAGMA journal_mode=OFF")
        strings = Strings()
        _write_meta(con, spec, host, meta_extra or {}, environment or {}, processes)
        _table(
            con,
            "TARGET_INFO_SESSION_START_TIME",
            [("utcEpochNs", "INTEGER"), ("utcTime", "TEXT"), ("localTime", "TEXT")],
            [(session_start_utc_ns, "2023-11-14T22:13:20", "2023-11-14T22:13:20")],
        )
        _table(
            con,
            "PROCESSES",
            [("globalPid", "INTEGER"), ("pid", "INTEGER"), ("name", "TEXT")],
            [(int(global_pid(p["pid"])), p["pid"], p.get("name", "python")) for p in processes],
        )
        _write_gpus(
            con, spec, gpus or [{"device": d} for d in sorted({p.get("device", 0) for p in processes})]
        )
        runtime: list[np.ndarray] = []
        if kernels is not None:
            write_kernels(con, spec, strings, kernels, runtime)
        for table, data in (("CUPTI_ACTIVITY_KIND_MEMCPY", memcpy), ("CUPTI_ACTIVITY_KIND_MEMSET", memset)):
            if data is not None:
                _write_copies(con, spec, table, strings, data, runtime)
        if runtime or api is not None:
            cols = [
                ("start", "INTEGER NOT NULL"),
                ("end", "INTEGER NOT NULL"),
                ("eventClass", "INTEGER NOT NULL"),
                ("globalTid", "INTEGER"),
                ("correlationId", "INTEGER"),
                ("nameId", "INTEGER NOT NULL"),
                ("returnValue", "INTEGER NOT NULL"),
                ("callchainId", "INTEGER"),
            ]
            r = np.concatenate(runtime, axis=1) if runtime else np.zeros((5, 0), np.int64)
            end = r[0] + 500
            if api is not None:
                r, end = _with_api_rows(strings, api, r, end)
            _table(
                con,
                "CUPTI_ACTIVITY_KIND_RUNTIME",
                cols,
                columns_to_rows(
                    r[0], end, r[1], r[2], r[3], r[4], np.zeros(r.shape[1], np.int64), [None] * r.shape[1]
                ),
            )
        if nvtx is not None:
            write_nvtx(con, spec, strings, nvtx)
        if stdout is not None:
            _table(
                con,
                "ProcessStreams",
                [
                    ("globalPid", "INTEGER NOT NULL"),
                    ("filenameId", "INTEGER NOT NULL"),
                    ("contentId", "INTEGER NOT NULL"),
                ],
                [
                    (
                        int(global_pid(processes[0]["pid"])),
                        strings.id(f"/home/{host}/run/pid_{processes[0]['pid']}_stdout.log"),
                        strings.id(stdout),
                    )
                ],
            )
        _table(
            con,
            "StringIds",
            [("id", "INTEGER NOT NULL PRIMARY KEY"), ("value", "TEXT NOT NULL")],
            ((i, v) for v, i in strings.ids.items()),
        )
        con.commit()
        con.close()
    return path


def _write_meta(con, spec, host, extra, environment, processes) -> None:
    export = {
        "EXPORT_PRODUCT_NAME": "NVIDIA Nsight Systems",
        "EXPORT_PRODUCT_VERSION": spec["version"],
        "EXPORT_SCHEMA_VERSION": spec["schema"],
        "EXPORT_HOST": host,
        "EXPORT_USER": "",
        "EXPORT_PARAM_INPUT_FILE": "report.nsys-rep",
        f"EXPORT_PARAM_{spec['out_key']}_FILE": "report.sqlite",
    }
    export.update(extra)
    _table(con, "META_DATA_EXPORT", [("name", "TEXT NOT NULL"), ("value", "TEXT")], export.items())
    capture = [
        ("DEVICE_DISPLAY_NAME", host),
        ("PROCESS_0:COMMAND", "torchrun"),
        ("PROCESS_0:ARGUMENT_0", f"--nproc_per_node={len(processes)}"),
        ("PROCESS_0:ARGUMENT_1", "train.py"),
    ]
    capture += [("PROCESS_0:ENVIRONMENT_VARIABLE", f'{k}="{v}"') for k, v in environment.items()]
    _table(con, "META_DATA_CAPTURE", [("name", "TEXT NOT NULL"), ("value", "TEXT")], capture)
    env_rows = [("Local (CLI)", "Hostname", 0, host)]
    if environment:
        env_rows.append(
            ("Local (CLI)", "DeviceEnvironment", 1, ";".join(f"{k}={v}" for k, v in environment.items()))
        )
    _table(
        con,
        "TARGET_INFO_SYSTEM_ENV",
        [
            ("globalVid", "INTEGER"),
            ("devStateName", "TEXT NOT NULL"),
            ("name", "TEXT NOT NULL"),
            ("nameEnum", "INTEGER NOT NULL"),
            ("value", "TEXT NOT NULL"),
        ],
        [(GLOBAL_PID_BASE, *r) for r in env_rows],
    )


def _write_gpus(con, spec, gpus) -> None:
    cols = [
        ("vmId", "INTEGER"),
        ("id", "INTEGER"),
        ("name", "TEXT"),
        ("busLocation", "TEXT"),
        ("totalMemory", "INTEGER"),
        ("smCount", "INTEGER"),
    ]
    rows = [
        [
            GLOBAL_PID_BASE,
            g["device"],
            g.get("name", "NVIDIA H100 80GB HBM3"),
            g.get("bus", f"0000:{g['device'] + 6:02x}:00.0"),
            g.get("memory", 85_520_809_984),
            g.get("sm", 132),
        ]
        for g in gpus
    ]
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
    extra = np.vstack(
        [np.asarray(api["start"], np.int64), cls, global_tid(api["pid"], tid), corr, strings.many(name)]
    )
    return np.concatenate([r, extra], axis=1), np.concatenate([end, np.asarray(api["end"], np.int64)])


def _launch_rows(strings, data, n, default_api) -> np.ndarray | None:
    if data.get("launch_start") is None:
        return None
    api = _col(data, "launch_api", n, default_api)
    name_ids = strings.many(api)
    event_class = np.where(
        np.char.startswith(api.astype(str), "cu") & ~np.char.startswith(api.astype(str), "cuda"), 1, 0
    )
    tid = _col(data, "launch_tid", n, 0)
    tid = np.where(tid > 0, tid, np.asarray(data["pid"]))
    return np.vstack(
        [
            np.asarray(data["launch_start"], np.int64),
            event_class,
            global_tid(data["pid"], tid),
            np.asarray(data["correlation_id"], np.int64),
            name_ids,
        ]
    )


def write_kernels(con, spec, strings, k, runtime) -> None:
    n = len(k["start"])
    names = strings.many(k["name"])
    corr = _col(k, "correlation_id", n, 0)
    cols = _activity_cols(
        spec,
        [
            ("demangledName", "INTEGER NOT NULL"),
            ("shortName", "INTEGER NOT NULL"),
            ("registersPerThread", "INTEGER NOT NULL"),
            ("gridX", "INTEGER NOT NULL"),
        ],
    )
    columns = [k["start"], k["end"], k["device"], np.ones(n, np.int64)]
    if spec["green"]:
        columns.append(np.zeros(n, np.int64))
    columns += [k["stream"], corr, global_pid(k["pid"]), names, names, np.full(n, 32), np.ones(n, np.int64)]
    _table(con, "CUPTI_ACTIVITY_KIND_KERNEL", cols, columns_to_rows(*map(np.asarray, columns)))
    launch = _launch_rows(strings, k, n, "cudaLaunchKernel_v7000")
    if launch is not None:
        runtime.append(launch)


def _write_copies(con, spec, table, strings, c, runtime) -> None:
    n = len(c["start"])
    memcpy = table.endswith("MEMCPY")
    extra = (
        [("bytes", "INTEGER NOT NULL"), ("copyKind", "INTEGER NOT NULL")]
        if memcpy
        else [("value", "INTEGER NOT NULL"), ("bytes", "INTEGER NOT NULL")]
    )
    if memcpy and spec["copy_count"]:
        extra.append(("copyCount", "INTEGER"))
    columns = [c["start"], c["end"], c["device"], np.ones(n, np.int64)]
    if spec["green"]:
        columns.append(np.zeros(n, np.int64))
    columns += [c["stream"], _col(c, "correlation_id", n, 0), global_pid(c["pid"])]
    columns += [c["bytes"], _col(c, "copy_kind", n, 1)] if memcpy else [np.zeros(n, np.int64), c["bytes"]]
    if memcpy and spec["copy_count"]:
        columns.append(np.ones(n, np.int64))
    _table(con, table, _activity_cols(spec, extra), columns_to_rows(*map(np.asarray, columns)))
    launch = _launch_rows(strings, c, n, "cudaMemcpyAsync_v3020" if memcpy else "cudaMemsetAsync_v3020")
    if launch is not None:
        runtime.append(launch)


def write_nvtx(con, spec, strings, e) -> None:
    n = len(e["start"])
    domain = _col(e, "domain", n, "").astype(str)
    pid = np.asarray(e["pid"], np.int64)
    # One NvtxDomainCreate per (process, named domain); domain ids count from 1 within each process.
    domain_ids = np.zeros(n, np.int64)
    creates = []
    for p in np.unique(pid):
        for j, name in enumerate(sorted(set(domain[(pid == p) & (domain != "")].tolist())), start=1):
            domain_ids[(pid == p) & (domain == name)] = j
            creates.append(
                (
                    0,
                    None,
                    EVENT_TYPES["NvtxDomainCreate"],
                    None,
                    None,
                    None,
                    name,
                    int(global_tid(p, p)),
                    None,
                    None,
                    j,
                    None,
                    None,
                    None,
                    None,
                    None,
                    None,
                    None,
                    None,
                )
            )
    registered = _col(e, "registered", n, 0).astype(bool)
    texts = np.asarray(e["text"], dtype=object)
    text_ids = np.full(n, None, dtype=object)
    if registered.any():
        text_ids[registered] = strings.many(texts[registered]).astype(object)
    # None is a valid scalar for an object array; numpy's stubs reject it in np.where
    text = np.where(registered, None, texts)  # type: ignore[call-overload]
    end = np.asarray(e["end"], dtype=np.int64).astype(object)
    end[np.asarray(e["end"]) < 0] = None
    payload = _col(e, "payload", n, -1).astype(object)
    payload[_col(e, "payload", n, -1) < 0] = None
    category = _col(e, "category", n, 0).astype(object)
    category[_col(e, "category", n, 0) == 0] = None
    tid = global_tid(pid, e["tid"])
    none = [None] * n
    rows = list(creates) + list(
        columns_to_rows(
            np.asarray(e["start"], np.int64),
            end,
            _col(e, "event_type", n, EVENT_TYPES["NvtxPushPopRange"]),
            none,
            category,
            none,
            text,
            tid,
            tid,
            text_ids,
            domain_ids,
            none,
            payload,
            none,
            none,
            none,
            none,
            none,
            none,
        )
    )
    cols = [
        ("start", "INTEGER NOT NULL"),
        ("end", "INTEGER"),
        ("eventType", "INTEGER NOT NULL"),
        ("rangeId", "INTEGER"),
        ("category", "INTEGER"),
        ("color", "INTEGER"),
        ("text", "TEXT"),
        ("globalTid", "INTEGER"),
        ("endGlobalTid", "INTEGER"),
        ("textId", "INTEGER"),
        ("domainId", "INTEGER"),
        ("uint64Value", "INTEGER"),
        ("int64Value", "INTEGER"),
        ("doubleValue", "REAL"),
        ("uint32Value", "INTEGER"),
        ("int32Value", "INTEGER"),
        ("floatValue", "REAL"),
        ("jsonTextId", "INTEGER"),
        ("jsonText", "TEXT"),
    ]
    if spec["binary"]:
        cols.append(("binaryData", "TEXT"))
        rows = [(*r, None) for r in rows]
    _table(con, "NVTX_EVENTS", cols, rows)
    _table(
        con,
        "ENUM_NSYS_EVENT_TYPE",
        [("id", "INTEGER"), ("name", "TEXT"), ("label", "TEXT")],
        [(i, nm, nm) for nm, i in EVENT_TYPES.items()],
    )


def synth_ddp_run(
    path,
    *,
    n_ranks: int = 2,
    n_steps: int = 3,
    kernels_per_step: int = 12,
    n_buckets: int = 3,
    kernel_ns: int = 10_000,
    nccl_ns: int = 8_000,
    layout: str = "2025.3",
    marker: bool = True,
) -> dict:
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
        raise ValueError(
            "each bucket's all-reduce must fit inside backward (nccl_ns <= kernel_ns * B // n_buckets)"
        )
    gap = 50_000
    step_ns = (f + b) * kernel_ns + nccl_ns + o * kernel_ns + gap
    k_cols: dict[str, list] = {
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
    n_cols: dict[str, list] = {
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
    idx = np.arange(kernels_per_step)
    for r in range(n_ranks):
        pid = 1000 + r
        for s in range(n_steps):
            t0 = 1_000_000 + s * step_ns
            starts = t0 + idx * kernel_ns
            starts[f + b :] += nccl_ns  # optimizer waits for the last all-reduce
            names = ["fwd_gemm"] * f + ["bwd_gemm"] * b + ["sgd_update"] * o
            bucket_starts = t0 + (f + (np.arange(n_buckets) + 1) * per) * kernel_ns
            bucket_starts[-1] = t0 + (f + b) * kernel_ns
            n_all = kernels_per_step + n_buckets
            corr0 = s * n_all + 1
            for col, vals in (
                ("pid", [pid] * n_all),
                ("device", [r] * n_all),
                ("stream", [7] * kernels_per_step + [17] * n_buckets),
                ("start", list(starts) + list(bucket_starts)),
                ("end", list(starts + kernel_ns) + list(bucket_starts + nccl_ns)),
                ("name", names + ["ncclDevKernel_AllReduce_Sum_f32_RING_LL"] * n_buckets),
                ("correlation_id", list(range(corr0, corr0 + n_all))),
                ("launch_start", list(starts - 5_000) + list(bucket_starts - 5_000)),
                ("launch_tid", [pid] * f + [pid + 1] * b + [pid] * o + [pid] * n_buckets),
                (
                    "launch_api",
                    ["cudaLaunchKernel_v7000"] * kernels_per_step + ["cuLaunchKernelEx"] * n_buckets,
                ),
            ):
                k_cols[col].extend(vals)
            phases = [
                (f"{nvtx_names.STEP} {s}", t0 - 10_000, t0 + step_ns - gap, s, nvtx_names.CATEGORY_STEP, 0),
                (
                    nvtx_names.FORWARD,
                    t0 - 8_000,
                    t0 + f * kernel_ns - 5_000,
                    -1,
                    nvtx_names.CATEGORY_PHASE,
                    1,
                ),
                (
                    nvtx_names.BACKWARD,
                    t0 + f * kernel_ns - 5_000,
                    t0 + (f + b) * kernel_ns - 5_000,
                    -1,
                    nvtx_names.CATEGORY_PHASE,
                    1,
                ),
                (
                    nvtx_names.OPTIMIZER,
                    t0 + (f + b) * kernel_ns,
                    t0 + step_ns - gap - 1_000,
                    -1,
                    nvtx_names.CATEGORY_PHASE,
                    1,
                ),
            ]
            for text, start, end, payload, cat, registered in phases:
                for col, v in (
                    ("pid", pid),
                    ("tid", pid),
                    ("start", start),
                    ("end", end),
                    ("text", text),
                    ("domain", nvtx_names.DOMAIN),
                    ("payload", payload),
                    ("category", cat),
                    ("registered", registered),
                    ("event_type", EVENT_TYPES["NvtxPushPopRange"]),
                ):
                    n_cols[col].append(v)
        if marker:
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
                n_cols[col].append(v)
    processes = [{"pid": 1000 + r, "name": "python", "device": r} for r in range(n_ranks)]
    build_export(
        path,
        layout=layout,
        processes=processes,
        kernels={k: np.asarray(v) for k, v in k_cols.items()},
        nvtx={k: np.asarray(v) for k, v in n_cols.items()},
    )
    per_step = {
        "comm_ns": n_buckets * nccl_ns,
        "overlap_ns": (n_buckets - 1) * nccl_ns,
        "exposed_comm_ns": nccl_ns,
        "compute_ns": kernels_per_step * kernel_ns,
        "step_ns": step_ns - gap,
    }
    return {
        "path": Path(path),
        "n_ranks": n_ranks,
        "n_steps": n_steps,
        "n_kernels": n_ranks * n_steps * (kernels_per_step + n_buckets),
        "n_nccl": n_ranks * n_steps * n_buckets,
        "per_step": per_step,
    }


# NCCL's payload schemas for its collectives' NVTX ranges (src/include/nvtx_payload_schemas.h): schema id
# (any distinct ids here), entries (NVTX entry type: 18 uint64, 22 size_t, 5 int; name). The reduction op is
# an enum of NCCL's own, written here with type 11 and never read.
NCCL_PAYLOAD_SCHEMAS = {
    "ncclAllReduce": (
        5,
        [(18, "NCCL communicator ID"), (22, "Message size [bytes]"), (11, "Reduction operation")],
    ),
    "ncclReduceScatter": (
        7,
        [(18, "NCCL communicator ID"), (22, "Message size [bytes]"), (11, "Reduction operation")],
    ),
    "ncclAllGather": (4, [(18, "NCCL communicator ID"), (22, "Message size [bytes]")]),
    "ncclBroadcast": (6, [(18, "NCCL communicator ID"), (22, "Message size [bytes]"), (5, "Root")]),
}


def add_nccl_payloads(path, sizes: list[int], *, explicit_offsets: bool = True) -> None:
    """Give an export's NCCL collective ranges (domain "NCCL", registered names of NCCL_PAYLOAD_SCHEMAS) the
    binary payloads NCCL records, in place: the schema tables and, per range, ``binaryData``
    = the 32-byte header (uint32 domain id, reserved, uint32 schema id, reserved, uint64 payload size,
    uint64 total size) + the struct (communicator id, the next of ``sizes``, 0...), the ranges taken thread by
    thread (globalTid order), each thread's in start order. ``explicit_offsets``:
    write each entry's offset (else NULL: natural alignment, as for a first entry)."""
    con = sqlite3.connect(path)
    try:
        con.execute(
            "CREATE TABLE NVTX_PAYLOAD_SCHEMAS (domainId INTEGER, schemaId INTEGER, name TEXT, "
            "type INTEGER, flags INTEGER, numEntries INTEGER, payloadSize INTEGER, alignTo INTEGER)"
        )
        con.execute(
            "CREATE TABLE NVTX_PAYLOAD_SCHEMA_ENTRIES (domainId INTEGER NOT NULL, schemaId INTEGER NOT NULL, "
            "idx INTEGER NOT NULL, flags INTEGER, type INTEGER, name TEXT, description TEXT, "
            "arrayOrUnionDetail INTEGER, offset INTEGER)"
        )
        for sid, entries in NCCL_PAYLOAD_SCHEMAS.values():
            con.execute(
                "INSERT INTO NVTX_PAYLOAD_SCHEMAS VALUES (1, ?, NULL, 1, 0, ?, 24, NULL)", (sid, len(entries))
            )
            for idx, (typ, name) in enumerate(entries):
                off = 8 * idx if explicit_offsets and idx else None
                con.execute(
                    "INSERT INTO NVTX_PAYLOAD_SCHEMA_ENTRIES VALUES (1, ?, ?, 0, ?, ?, NULL, 0, ?)",
                    (sid, idx, typ, name, off),
                )
        rows = con.execute(
            "SELECT e.rowid, s.value FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
            "WHERE e.eventType = 59 ORDER BY e.globalTid, e.start"
        ).fetchall()
        left = list(sizes)
        for rowid, name in rows:
            if name not in NCCL_PAYLOAD_SCHEMAS or not left:
                continue
            sid, entries = NCCL_PAYLOAD_SCHEMAS[name]
            body = (0xC0FFEE).to_bytes(8, "little") + int(left.pop(0)).to_bytes(8, "little") + bytes(8)
            blob = (
                (1).to_bytes(4, "little")
                + bytes(4)
                + sid.to_bytes(4, "little")
                + bytes(4)
                + len(body).to_bytes(8, "little")
                + (32 + len(body)).to_bytes(8, "little")
                + body
            )
            con.execute("UPDATE NVTX_EVENTS SET binaryData = ? WHERE rowid = ?", (blob, rowid))
        con.commit()
    finally:
        con.close()


# ---- large exports for benchmarks --------------------------------------------------------------------------
