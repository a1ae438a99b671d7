"""Times the loader can compute with exactly: rows without a process left out, times rebased when they are
negative or too large for float64, clock offsets folded together.

nsys counts times in integer nanoseconds from the session start, so real exports never need a rebase. An
export whose times are negative (they would meet -1, the "no launch" value of ``launch_ns``) or beyond 2^52
ns (float64, used by the analysis' arrays, is no longer exact there: ~300 ns lost on ``comm_tail_ns`` near
2^63) is shifted to its earliest activity at read time; the shift goes into the file's clock offset, and
the whole trace is then counted from its earliest activity, with a warning.
"""

from __future__ import annotations

import numpy as np

from ddp_profile.errors import TraceError

EXACT_NS = 1 << 52
"""Times up to this magnitude are exact in float64."""
MAX_CLOCK_OFFSET_NS = 1 << 62
"""Session starts further apart than this (146 years) are no run's ranks, and would overflow int64 times."""


def drop_no_process(
    cols: dict, kind: np.ndarray, codes: np.ndarray
) -> tuple[dict, np.ndarray, np.ndarray, int]:
    """GPU rows whose pid is 0 (a NULL ``globalPid``, read as 0) belong to no process and so to no rank:
    left out here, so every command (inspect, analyze, report) sees the same rows. Returns the kept columns,
    kinds and name codes, and how many were left out."""
    no_pid = cols["pid"] == 0
    n = int(no_pid.sum())
    if not n:
        return cols, kind, codes, 0
    keep = ~no_pid
    return {c: None if v is None else v[keep] for c, v in cols.items()}, kind[keep], codes[keep], n


def rebase(cols: dict, launch: list, nvtx_range: tuple[int, int] | None = None) -> int:
    """Shift one file's raw GPU, launch and (through the returned value) NVTX times so they start at 0 when a
    GPU or launch time is negative, or any time is beyond :data:`EXACT_NS` either way; ``cols`` and ``launch`` (``sql.launches``' columns, start
    third) are changed in place. Returns the shift (0 for every export nsys writes)."""  # noqa: E501
    arrays = [
        a
        for a in (cols["start"], cols["end"], launch[2] if len(launch) > 2 else None)
        if a is not None and len(a)
    ]
    if not arrays:
        return 0
    lo, hi = min(int(a.min()) for a in arrays), max(int(a.max()) for a in arrays)
    if nvtx_range is not None:  # NVTX times move with the GPU times; negative ones are normal (events before
        # the capture range, seen in real exports) and harmless: only GPU and launch times meet -1
        if lo >= 0 and hi <= EXACT_NS and -EXACT_NS <= nvtx_range[0] and nvtx_range[1] <= EXACT_NS:
            return 0
        lo, hi = min(lo, nvtx_range[0]), max(hi, nvtx_range[1])
    if lo >= 0 and hi <= EXACT_NS:
        return 0
    if hi - lo > EXACT_NS:
        raise TraceError(
            f"GPU times span {hi - lo:,} ns ({lo:,} .. {hi:,}): more than 52 days in one capture; "
            "the export's timestamps are damaged"
        )
    for key in ("start", "end"):
        cols[key] = cols[key].astype(np.int64) - lo
    if len(launch) > 2:
        launch[2] = launch[2].astype(np.int64) - lo
    return lo


def fold_shifts(
    clock_offsets: list[int], shifts: list[int], warnings: list[str]
) -> tuple[list[int], list[int]]:
    """(offsets for the rebased arrays, offsets for a file's own raw times such as API calls read later): the
    clock alignment plus each file's shift, all counted from the trace's earliest activity when any file was
    rebased (else the clock offsets unchanged)."""
    if not any(shifts):
        return list(clock_offsets), list(clock_offsets)
    origin = min(o + s for o, s in zip(clock_offsets, shifts, strict=True))
    warnings.append(
        f"timestamps were negative or beyond 2^52 ns: every time is counted from {origin:,} ns "
        "(the earliest activity) so that all arithmetic stays exact"
    )
    return (
        [o + s - origin for o, s in zip(clock_offsets, shifts, strict=True)],
        [o - origin for o in clock_offsets],
    )
