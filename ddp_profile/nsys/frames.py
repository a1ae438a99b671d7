"""Arrays read from the exports -> the fixed-schema frames of ``ddp_profile.schema`` (kernels, NVTX, GPUs,
processes). Pure numpy/pandas: no SQL here; ``loader`` reads and aligns, this module shapes.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ddp_profile import schema
from ddp_profile.nsys import names as nccl_names
from ddp_profile.nsys import sql
from ddp_profile.nsys.read import concat
from ddp_profile.safeio import shown_path

# File names enter frames only as ``safeio.shown_path`` text (a non-UTF-8 name's bytes as ``\xff`` escapes), so
# any string column takes them, Arrow-backed ones too; ``load_trace`` makes its frames with Python-backed
# strings (``memory.python_strings``).


KINDS = [
    "compute",
    "nccl",
    "memcpy",
    "memset",
    "unknown",
]  # unknown: a kernel whose name id is not in StringIds


def nvtx_depth(keys: np.ndarray, start: np.ndarray, end: np.ndarray, pushpop: np.ndarray) -> np.ndarray:
    """Nesting depth of push/pop ranges within their (file, pid, tid, domain) stack (NVTX keeps one stack
    per domain and thread); start/end ranges and marks are not stacked and get depth 0."""
    depth = np.zeros(len(start), dtype=np.int64)
    idx = np.flatnonzero(pushpop)
    if len(idx) == 0:
        return depth
    order = idx[np.lexsort((-end[idx], start[idx], keys[idx]))]
    stack: list[int] = []
    last_key = None
    for i, k, s, e in zip(
        order.tolist(), keys[order].tolist(), start[order].tolist(), end[order].tolist(), strict=False
    ):
        if k != last_key:
            stack, last_key = [], k
        while stack and stack[-1] <= s:
            stack.pop()
        depth[i] = len(stack)
        stack.append(e)
    return depth


def nvtx_frame(files: list[dict], offsets: list[int]) -> pd.DataFrame:
    frames = []
    for f, off in zip(files, offsets, strict=False):
        if f["nvtx"] is None or len(f["nvtx"][0]) == 0:
            continue
        ints, texts = f["nvtx"]
        domains = f["domains"]
        pid, domain_id = ints[:, 0], ints[:, 2]
        frames.append(
            pd.DataFrame(
                {
                    "file": f["index"],
                    "pid": pid,
                    "tid": ints[:, 1],
                    "domain": [
                        domains.get((p, d), "") if d else ""
                        for p, d in zip(pid.tolist(), domain_id.tolist(), strict=False)
                    ],
                    "name": texts,
                    "start_ns": ints[:, 3] + off,
                    "end_ns": pd.array(np.where(ints[:, 7] == 1, ints[:, 4] + off, 0), dtype="Int64"),
                    "_open": ints[:, 7] == 0,
                    "_raw_end": ints[:, 4] + off,
                    "payload": pd.array(ints[:, 5], dtype="Int64"),
                    "_has_payload": ints[:, 8] == 1,
                    "category": pd.array(ints[:, 6], dtype="Int64"),
                    "_has_category": ints[:, 9] == 1,
                    "_pushpop": ints[:, 10] == sql.NVTX_PUSHPOP,
                    "domain_id": domain_id,
                }
            )
        )
    cols = ["file"] + schema.NVTX_COLUMNS
    if not frames:
        df = schema.empty_frame(cols)
        return df.astype(
            {
                "pid": "int64",
                "tid": "int64",
                "start_ns": "int64",
                "end_ns": "Int64",
                "depth": "int64",
                "payload": "Int64",
                "category": "Int64",
                "rank": "Int64",
            }
        )
    df = pd.concat(frames, ignore_index=True)
    df.loc[df["_open"], "end_ns"] = pd.NA
    df.loc[~df["_has_payload"], "payload"] = pd.NA
    df.loc[~df["_has_category"], "category"] = pd.NA
    keys = pd.MultiIndex.from_frame(df[["file", "pid", "tid", "domain_id"]]).codes
    key = np.zeros(len(df), dtype=np.int64)
    for level in keys:
        key = key * (int(level.max()) + 2) + level
    end_for_depth = np.where(df["_open"], np.iinfo(np.int64).max, df["_raw_end"].to_numpy())
    df["depth"] = nvtx_depth(key, df["start_ns"].to_numpy(), end_for_depth, df["_pushpop"].to_numpy())
    df["rank"] = pd.array([pd.NA] * len(df), dtype="Int64")
    df["name"] = df["name"].astype("string")
    df["domain"] = df["domain"].astype("category")
    return df[cols]


def global_codes(files: list[dict]) -> tuple[list[np.ndarray], list[str]]:
    """Per-file label codes remapped onto one sorted list of distinct labels (the category order pandas
    gives ``astype("category")``), so names stay integer codes end to end: never one string per row."""
    labels = sorted({lab for f in files for lab in f["kernels"]["labels"]})
    where = {lab: i for i, lab in enumerate(labels)}
    codes = []
    for f in files:
        remap = np.array([where[lab] for lab in f["kernels"]["labels"]], dtype=np.int32)
        codes.append(remap[f["kernels"]["code"]] if len(remap) else np.zeros(0, np.int32))
    return codes, labels


def categorical(codes: np.ndarray, values: list) -> pd.Categorical:
    """Rows' ``values[code]`` as a categorical built from codes (None -> missing), categories sorted."""
    cats = sorted({v for v in values if v is not None})
    where = {v: i for i, v in enumerate(cats)}
    # int8 codes when the categories allow (pandas stores them so anyway): a quarter of the gather's traffic
    small = len(cats) < np.iinfo(np.int8).max
    remap = np.array(
        [where.get(v, -1) if v is not None else -1 for v in values] or [-1],
        dtype=np.int8 if small else np.int32,
    )
    return pd.Categorical.from_codes(
        remap[codes] if len(values) else np.full(len(codes), -1, remap.dtype),
        categories=pd.Index(cats) if cats else pd.Index([], dtype=object),
    )


def nullable(values: np.ndarray | None, n: int, own: bool = False) -> pd.arrays.IntegerArray:
    """Nullable integer column (Int64, or Int32 for int32 input) with <NA> where the reader put -1 (no
    launch row, no byte count); ``values`` None: all <NA> (np.zeros' pages stay untouched until written,
    so an all-missing column costs its 1-byte mask). ``own``: ``values`` may be overwritten (no copy)."""
    if values is None:
        return pd.arrays.IntegerArray(np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool))
    missing = values < 0
    if own:
        values[missing] = 0
        return pd.arrays.IntegerArray(values, missing)
    return pd.arrays.IntegerArray(np.where(missing, 0, values).astype(values.dtype, copy=False), missing)


def kernel_arrays(files: list[dict], offsets: list[int]) -> dict[str, np.ndarray]:
    """All files' GPU activity as concatenated numpy columns (times on the common clock). One file's
    columns are taken as they are (no copy); dtypes are the reader's (int32 where values are small)."""
    codes, labels = global_codes(files)
    ks = [f["kernels"] for f in files]
    offs = list(zip(ks, offsets, strict=True))

    def shifted(col):
        return concat([k[col] + off if off else k[col] for k, off in offs])

    bytes_ = None
    if any(k["bytes"] is not None for k in ks):
        bytes_ = concat(
            [k["bytes"] if k["bytes"] is not None else np.full(len(k["start"]), -1, np.int64) for k in ks]
        )
    return {
        # np.zeros for file 0 (a single export's column): untouched zero pages take no memory
        "file": concat(
            [
                np.full(len(k["code"]), f["index"], dtype=np.int32)
                if f["index"]
                else np.zeros(len(k["code"]), dtype=np.int32)
                for f, k in zip(files, ks, strict=True)
            ]
        ),
        "pid": concat([k["pid"] for k in ks]),
        "device": concat([k["device"] for k in ks]),
        "stream": concat([k["stream"] for k in ks]),
        "start_ns": shifted("start"),
        "end_ns": shifted("end"),
        "code": concat(codes),
        "labels": labels,
        "kind": concat([k["kind"] for k in ks]),
        "correlation_id": concat([k["corr"] for k in ks]),
        "launch_ns": concat(
            [
                np.where(k["launch_ns"] >= 0, k["launch_ns"] + off, -1) if off else k["launch_ns"]
                for k, off in offs
            ]
        ),
        "launch_tid": concat([k["launch_tid"] for k in ks]),
        "bytes": bytes_,
    }


def kernel_frame(
    arr: dict[str, np.ndarray], order: np.ndarray | None = None, consume: bool = False
) -> pd.DataFrame:
    """KERNEL_COLUMNS (+ file) from :func:`kernel_arrays`, rows taken in ``order``. Names and NCCL fields
    are categoricals built from integer codes (parsed once per distinct name); no object column per row.

    Column types (see schema.KERNEL_COLUMNS), as the reader and the rank mapping chose them (wider where a
    value needs it): rank, device, stream int16; pid, correlation_id int32; start_ns, end_ns int64; launch_ns
    Int64; bytes Int32; launch_tid Int32.

    Memory: with ``consume`` each input column is dropped from ``arr`` as soon as its reordered copy exists,
    and the frame adopts the arrays (``copy=False``: no consolidation into one 2-D block, which would copy
    every integer column once more)."""

    def take(col):
        a = arr.pop(col) if consume else arr[col]
        return a[order] if order is not None and a is not None else a

    labels = arr["labels"]
    code = take("code")
    n = len(code)
    parsed = [nccl_names.parse_nccl(n) for n in labels]
    # The trace's frame has no file column (schema.KERNEL_COLUMNS): consumed, it is dropped, not reordered.
    if consume:
        del arr["file"]
    frame = {"file": None if consume else take("file"), "rank": take("rank") if "rank" in arr else None}
    for col in ("pid", "device", "stream", "start_ns", "end_ns"):
        frame[col] = take(col)
    frame["name"] = categorical(code, labels)
    frame["kind"] = pd.Categorical.from_codes(take("kind").astype(np.int8, copy=False), categories=KINDS)
    for j, col in enumerate(("collective", "algorithm", "protocol", "dtype")):
        frame[col] = categorical(code, [p[j] for p in parsed])
    del code
    frame["correlation_id"] = take("correlation_id")
    for col in ("launch_ns", "launch_tid", "bytes"):
        frame[col] = nullable(take(col), n, own=order is not None)
    if frame["rank"] is None:
        del frame["rank"]
    if frame["file"] is None:
        del frame["file"]
    return pd.DataFrame(frame, copy=False)


def process_frame(arr: dict[str, np.ndarray], files: list[dict]) -> pd.DataFrame:
    """One row per (file, pid) that ran GPU work, with its device (the one most of its work ran on)."""
    if len(arr["pid"]) == 0:
        return pd.DataFrame(columns=["file", "pid", "device", "host_order"])
    # Few distinct (file, pid, device): hash them (pd.factorize) rather than sort millions of rows.
    # Packed key: file (< 2^15) | pid (< 2^24, see sql.PID_SQL) | device + 1 (< 2^16).
    i64 = np.int64
    key = arr["file"].astype(i64)  # built in place: two full-length temporaries, not eight
    key <<= 48
    part = arr["pid"].astype(i64)
    part <<= 16
    key |= part
    part[:] = arr["device"]
    part += 1
    part &= 0xFFFF
    key |= part
    del part
    codes, uniq = pd.factorize(key)
    del key
    counts = pd.DataFrame(
        {
            "file": uniq >> 48,
            "pid": (uniq >> 16) & 0xFFFFFFFF,
            "device": (uniq & 0xFFFF) - 1,
            "n": np.bincount(codes, minlength=len(uniq)),
        }
    )
    counts = counts.sort_values(["file", "pid", "device"], kind="stable")
    procs = counts.sort_values("n", ascending=False, kind="stable").drop_duplicates(["file", "pid"])
    procs = procs[["file", "pid", "device"]]
    host_order = {h: i for i, h in enumerate(dict.fromkeys(f["host"] for f in files))}
    procs["host_order"] = [host_order[files[f]["host"]] for f in procs["file"]]
    return procs.reset_index(drop=True)


def gpu_frame(files: list[dict]) -> pd.DataFrame:
    rows = [(shown_path(f["path"]), *g) for f in files for g in f["gpus"]]
    df = pd.DataFrame(rows, columns=schema.GPU_COLUMNS)
    return df.astype({"device": "int64", "sm_count": "Int64", "memory_bytes": "Int64"})


_VERSION_SUFFIX = re.compile(r"_v\d+$")  # cudaLaunchKernel_v7000 -> cudaLaunchKernel (as nsys stats shows it)


def api_name(raw: str) -> str:
    """The CUDA API function name without nsys's API version suffix."""
    return _VERSION_SUFFIX.sub("", raw)


def host_waits_frame(
    per_file: list[tuple[str, list | None]], ranks: pd.DataFrame, offsets: dict[str, int]
) -> pd.DataFrame:
    """``schema.HOST_WAIT_COLUMNS`` from each file's :func:`sql.host_wait_calls` rows (``per_file``: (path,
    rows or None)), with the trace's ranks (RANK_COLUMNS: file, pid, rank) and per-file clock offsets, sorted
    by (rank, start_ns)."""
    frames = []
    for path, rows in per_file:
        if not rows:
            continue
        mine = ranks[ranks["file"].astype(str) == str(path)]
        rank_of = dict(zip(mine["pid"].astype(int), mine["rank"].astype(int), strict=True))
        off = offsets.get(str(path), 0)
        pid, tid, start, end, name, kind = zip(*rows, strict=True)
        frames.append(
            pd.DataFrame(
                {
                    "rank": pd.array([rank_of.get(p) for p in pid], dtype="Int64"),
                    "pid": np.asarray(pid, np.int64),
                    "tid": np.asarray(tid, np.int64),
                    "name": [api_name(n) for n in name],
                    "kind": list(kind),
                    "start_ns": np.asarray(start, np.int64) + off,
                    "end_ns": np.asarray(end, np.int64) + off,
                }
            )
        )
    if not frames:
        return schema.empty_frame(schema.HOST_WAIT_COLUMNS)
    df = pd.concat(frames, ignore_index=True).sort_values(
        ["rank", "start_ns"], kind="stable", na_position="last"
    )
    return schema.select(df, schema.HOST_WAIT_COLUMNS)
