#!/usr/bin/env python3
"""Is a run host-bound? Per-step launch counts, CUDA API time, GPU idle gaps and host time per launch.

Usage: .venv/bin/python scripts/host_bound.py traces/none_xl_bf16_1xh200/none_xl_bf16_1xh200.sqlite.xz [...]

A diagnostic, not part of the library: it reads tables the analyzer does not load (CUDA runtime API calls
with their names), so it queries the export directly, read-only (a `.xz` export is unpacked to a temporary
folder first). It looks at one process, the one that owns the most `step N` NVTX ranges.

Why these numbers: a step is launch-bound when the host needs longer to issue its kernels than the GPU needs
to run them. Then the GPU sits idle in thousands of short gaps spread over the whole step (not in a few long
waits), the CUDA API calls themselves are a minority of host time (the rest is Python/ATen dispatch between
launches), and host time per launch exceeds GPU time per kernel. Kernels and API calls are assigned to a
step by the host time of the call that launched them; GPU busy time is the union of kernel, memcpy and
memset intervals that start inside the step's range.

Knobs: none besides the export paths.
"""

from __future__ import annotations

import lzma
import re
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from ddp_profile import nvtx_names as names

PHASES = (names.FORWARD, names.BACKWARD, names.OPTIMIZER)
PID = "((globalTid >> 24) & 16777215)"  # pid from a serialized globalTid (see ddp_profile/nsys/sql.py)
KPID = "((globalPid >> 24) & 16777215)"

# Kernel groups by name; first match wins. `dname` is the demangled name (templates tell a cast apart).
GROUPS = (
    ("optimizer (multi_tensor_apply)", r"multi_tensor_apply"),
    ("GEMM", r"^(nvjet|sm\d+_xmma_gemm|Kernel2$|cutlass.*gemm|.*gemm)"),
    ("attention", r"sdpa|fmha|flash|convert_dq_to_16bits|compute_dot_do_o"),
    ("cast to bf16", r"bfloat16_copy_kernel"),
    ("copy / other cast", r"copy_kernel"),
    (
        "arange/cos/sin/pow/fill/neg (RoPE, fills)",
        r"arange|cos_kernel|sin_kernel|pow_tensor_tensor|FillFunctor|neg_kernel",
    ),
    ("reduce", r"reduce_kernel"),
    ("other elementwise", r"elementwise"),
)


def kernel_group(name: str, dname: str) -> str:
    text = f"{name} {dname}"
    for group, pattern in GROUPS:
        if re.search(pattern, name if group == "GEMM" else text):
            return group
    return "other"


def union(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Disjoint sorted (n, 2) intervals covering the input intervals."""
    if len(start) == 0:
        return np.empty((0, 2), dtype=np.int64)
    order = np.argsort(start, kind="stable")
    s, e = start[order], np.maximum.accumulate(end[order])
    new = np.r_[True, s[1:] > e[:-1]]
    idx = np.flatnonzero(new)
    return np.column_stack([s[idx], np.r_[e[idx[1:] - 1], e[-1]]])


def open_ro(path: Path, tmp: Path) -> sqlite3.Connection:
    if path.suffix == ".xz":
        plain = tmp / path.stem
        with lzma.open(path) as src, open(plain, "wb") as dst:
            shutil.copyfileobj(src, dst)
        path = plain
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def load(con: sqlite3.Connection) -> dict:
    strings = dict(con.execute("SELECT id, value FROM StringIds"))
    nvtx = pd.read_sql(
        f"SELECT start, end, COALESCE(text, '') AS text, textId, {PID} AS pid FROM NVTX_EVENTS "
        "WHERE eventType = 59 AND end IS NOT NULL",
        con,
    )
    nvtx["name"] = [t or strings.get(i, "") for t, i in zip(nvtx.text, nvtx.textId, strict=True)]
    api = pd.read_sql(
        f"SELECT start, end, globalTid AS tid, {PID} AS pid, correlationId AS corr, nameId "
        "FROM CUPTI_ACTIVITY_KIND_RUNTIME",
        con,
    )
    api["name"] = api.nameId.map(strings).str.replace(r"_v\d+$", "", regex=True)
    gpu = {}
    for kind in ("KERNEL", "MEMCPY", "MEMSET"):
        cols = "shortName, demangledName" if kind == "KERNEL" else "0 AS shortName, 0 AS demangledName"
        try:
            gpu[kind] = pd.read_sql(
                f"SELECT start, end, {KPID} AS pid, correlationId AS corr, {cols} "
                f"FROM CUPTI_ACTIVITY_KIND_{kind}",
                con,
            )
        except pd.errors.DatabaseError:  # absent table: nothing of that kind was recorded
            gpu[kind] = pd.DataFrame(columns=["start", "end", "pid", "corr", "shortName", "demangledName"])
    k = gpu["KERNEL"]
    k["name"], k["dname"] = k.shortName.map(strings), k.demangledName.map(strings).fillna("")
    return {"nvtx": nvtx, "api": api, "gpu": gpu}


def label(times: np.ndarray, ranges: pd.DataFrame, col: str, default) -> np.ndarray:
    out = np.full(len(times), default, dtype=object)
    for _, r in ranges.iterrows():
        out[(times >= r.start) & (times < r.end)] = r[col]
    return out


def report(path: Path, d: dict) -> None:
    nvtx, api, gpu = d["nvtx"], d["api"], d["gpu"]
    steps = nvtx[nvtx.name.str.fullmatch(rf"{names.STEP} \d+")]
    if steps.empty:
        print(f"{path}: no '{names.STEP} N' NVTX ranges; nothing to do")
        return
    pid = steps.pid.value_counts().index[0]
    steps = steps[steps.pid == pid].sort_values("start").reset_index(drop=True)
    steps["step"] = steps.index
    phases = nvtx[(nvtx.pid == pid) & nvtx.name.isin(PHASES)]
    api = api[api.pid == pid].copy()
    api["step"] = label(api.start.values, steps, "step", -1)
    api["phase"] = label(api.start.values, phases, "name", "")
    api["dur"] = api.end - api.start
    n = len(steps)
    print(f"== {path.name}: {n} steps, process {pid}")

    k = gpu["KERNEL"]
    k = k[k.pid == pid].merge(api[["corr", "step", "phase"]], on="corr", how="left")
    k = k[k.step.notna() & (k.step >= 0)]
    k["dur"] = k.end - k.start
    k["group"] = [kernel_group(a, b) for a, b in zip(k.name, k.dname, strict=True)]
    g = k.groupby("group").dur.agg(["size", "sum"])
    print("kernels per step by group: launches, GPU ms, mean us")
    for grp, row in g.sort_values("size", ascending=False).iterrows():
        print(
            f"  {grp:48s} {row['size'] / n:7.0f} {row['sum'] / n / 1e6:8.2f} {row['sum'] / row['size'] / 1e3:8.2f}"
        )
    print(
        f"  {'total':48s} {len(k) / n:7.0f} {k.dur.sum() / n / 1e6:8.2f} {k.dur.mean() / 1e3:8.2f}"
        f"  (median {k.dur.median() / 1e3:.2f} us)"
    )

    inside = api[api.step >= 0]
    a = inside.groupby("name").dur.agg(["size", "sum", "mean"]).sort_values("sum", ascending=False)
    print("CUDA API per step: calls, ms, mean us")
    for name, row in a.iterrows():
        print(f"  {name:30s} {row['size'] / n:8.1f} {row['sum'] / n / 1e6:8.2f} {row['mean'] / 1e3:8.2f}")
    churn = inside.name.str.contains(r"cudaMalloc|cudaFree|cuMemAlloc|cuMemFree|cuMemMap|cuMemCreate").sum()
    syncs = inside.name.str.contains("Synchronize").sum()
    print(
        f"  allocator calls inside steps: {churn}; synchronize calls inside steps: {syncs} ({syncs / n:.1f}/step)"
    )

    busy_ev = pd.concat([gpu[x][gpu[x].pid == pid][["start", "end"]] for x in gpu])
    launches = inside[inside.name.str.contains("Launch")]
    print(
        "step: wall ms | GPU busy ms | idle ms (fwd/bwd/opt/other) | gaps 20-100us n | launches | host us/launch"
        " | median launch interval us | API ms excl. sync"
    )
    for _, st in steps.iterrows():
        ev = busy_ev[(busy_ev.start >= st.start) & (busy_ev.start < st.end)]
        busy = union(ev.start.values, np.minimum(ev.end.values, st.end))
        edges = np.r_[st.start, busy.ravel(), st.end].reshape(-1, 2)
        idle = edges[edges[:, 1] > edges[:, 0]]
        gap = idle[:, 1] - idle[:, 0]
        where = label((idle[:, 0] + idle[:, 1]) / 2, phases, "name", "other")
        by = [gap[where == p].sum() / 1e6 for p in (*PHASES, "other")]
        wall = (st.end - st.start) / 1e6
        ls = launches[launches.step == st.step].sort_values("start")
        interval = ls.groupby("tid").start.diff().dropna()
        api_ms = inside[(inside.step == st.step) & ~inside.name.str.contains("Synchronize")].dur.sum() / 1e6
        print(
            f"  {st.step}: {wall:7.1f} | {(busy[:, 1] - busy[:, 0]).sum() / 1e6:6.1f} | {wall - (busy[:, 1] - busy[:, 0]).sum() / 1e6:6.1f}"
            f" ({'/'.join(f'{x:.1f}' for x in by)}) | {((gap >= 20e3) & (gap < 100e3)).sum():5d} | {len(ls):5d} |"
            f" {wall * 1e3 / max(len(ls), 1):6.1f} | {interval.median() / 1e3:6.1f} | {api_ms:6.1f}"
        )


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.split("\n\n")[1])
        return 0 if argv else 2
    for arg in argv:
        path = Path(arg)
        if not path.is_file():
            print(
                f"host_bound: {path} is not a file; pass an nsys SQLite export (.sqlite or .sqlite.xz)",
                file=sys.stderr,
            )
            return 2
        with tempfile.TemporaryDirectory() as tmp:
            con = open_ro(path, Path(tmp))
            try:
                report(path, load(con))
            finally:
                con.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
