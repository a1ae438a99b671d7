"""Damaged copies of committed per-rank exports, built in a temporary folder (the committed files are only
read): the kinds of damage real captures have, each one SQL statement list over one rank's file."""

from __future__ import annotations

import lzma
import shutil
import sqlite3
from pathlib import Path

TRACES = Path(__file__).resolve().parents[2] / "traces"
ACTIVITY = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
)


def copy_run(run: str, dest: Path) -> Path:
    """The committed run ``run`` (a folder under traces/) decompressed into ``dest``: its exports as plain
    .sqlite files and its run JSON."""
    dest.mkdir(parents=True, exist_ok=True)
    for f in sorted((TRACES / run).iterdir()):
        if f.name.endswith(".sqlite.xz"):
            (dest / f.name[: -len(".xz")]).write_bytes(lzma.decompress(f.read_bytes()))
        elif f.suffix == ".json":
            shutil.copyfile(f, dest / f.name)
    return dest


def rank_file(folder: Path, rank: int) -> Path:
    return next(folder.glob(f"*_rank{rank}.sqlite"))


def damage(path: Path, statements: list[str]) -> None:
    con = sqlite3.connect(path)
    try:
        for sql in statements:
            con.execute(sql)
        con.commit()
    finally:
        con.close()


def shift_clock(path: Path, ns: int) -> None:
    """The file's clock ``ns`` later: its session start moves, every time in it is read ``ns`` later."""
    damage(path, [f"UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = utcEpochNs + {int(ns)}"])


def step_start(path: Path, step: int) -> int:
    con = sqlite3.connect(path)
    try:
        row = con.execute(
            "SELECT n.start FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
            "WHERE COALESCE(n.text, s.value) = ?",
            (f"step {step}",),
        ).fetchone()
    finally:
        con.close()
    return int(row[0])


def start_late(path: Path, at_ns: int) -> None:
    """The capture starts at ``at_ns``: GPU activity, API calls and NVTX ranges before it are gone (marks,
    such as the rank marker, stay)."""
    damage(
        path,
        [f"DELETE FROM {t} WHERE start < {int(at_ns)}" for t in ACTIVITY]
        + [f"DELETE FROM NVTX_EVENTS WHERE start < {int(at_ns)} AND end IS NOT NULL"],
    )


def drop_api(path: Path) -> None:
    damage(path, ["DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME"])


def drop_kernel_names(path: Path) -> None:
    """Every kernel's name ids point nowhere (the string table lost them)."""
    damage(
        path,
        [
            "DELETE FROM StringIds WHERE id IN (SELECT shortName FROM CUPTI_ACTIVITY_KIND_KERNEL "
            "UNION SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL)"
        ],
    )


def drop_nccl_kernels(path: Path) -> None:
    damage(
        path,
        [
            "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE shortName IN "
            "(SELECT id FROM StringIds WHERE value LIKE 'ncclDevKernel%' OR value LIKE 'ncclKernel%')"
        ],
    )


def drop_nvtx_ranges(path: Path) -> None:
    """No NVTX ranges (a program that marks nothing): steps must be inferred. Marks stay."""
    damage(path, ["DELETE FROM NVTX_EVENTS WHERE end IS NOT NULL"])


def drop_process_nccl_kernels(path: Path, nth_process: int) -> None:
    """The NCCL kernels of the ``nth_process``-th process (by globalPid) of a file holding several ranks."""
    con = sqlite3.connect(path)
    try:
        pids = [
            r[0] for r in con.execute("SELECT DISTINCT globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY 1")
        ]
    finally:
        con.close()
    damage(
        path,
        [
            f"DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE globalPid = {int(pids[nth_process])} AND shortName IN "
            "(SELECT id FROM StringIds WHERE value LIKE 'ncclDevKernel%' OR value LIKE 'ncclKernel%')"
        ],
    )
