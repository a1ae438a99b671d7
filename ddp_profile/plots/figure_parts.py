"""Shared bits of the plot functions: the source line every title carries, colours, bar merging."""

from __future__ import annotations

import html

import numpy as np

from ddp_profile.plots.palette import KIND_COLORS, PHASE_COLORS, SEGMENT_COLORS  # noqa: F401

# Colours come from the palette module (one colour per concept, colour-blind safe); re-exported here.
KIND_LABELS = {"compute": "compute kernel", "nccl": "NCCL kernel", "memcpy": "memcpy", "memset": "memset"}


def describe_source(run: dict | None, gpu_name: str | None = None, steps=None) -> str:
    """'NVIDIA H100 80GB HBM3 ×2 · model xl · fp32 · steps 3–7': what a figure was measured on.

    ``run`` is the run.json dict (may be None for a bare export); ``gpu_name`` fills in when run.json lacks
    it; ``steps`` is any iterable of step indices (shown as a range)."""
    run = run or {}
    gpu = run.get("gpu_name") or gpu_name or "unknown GPU"
    world = run.get("world_size")
    parts = [f"{gpu} ×{world}" if world else str(gpu)]
    # unknown model or dtype (a foreign program's trace): left out, never '?'
    if run.get("model") and not isinstance(run.get("model"), dict):
        parts.append(f"model {run['model']}")
    if run.get("dtype"):
        parts.append(str(run["dtype"]))
    step_list = sorted({int(s) for s in steps}) if steps is not None else []
    if step_list:
        lo, hi = step_list[0], step_list[-1]
        parts.append(f"step {lo}" if lo == hi else f"steps {lo}–{hi} ({len(step_list)})")
    return " · ".join(parts)


def titled(title: str, source: str) -> dict:
    """Layout title with the source on a second, smaller line (escaped: run fields are data)."""
    return {
        "text": f"{html.escape(title, quote=False)}<br><sup>{html.escape(source, quote=False)}</sup>",
        "x": 0.01,
    }


def merge_small_bars(row: np.ndarray, start: np.ndarray, end: np.ndarray, min_ns: float) -> np.ndarray:
    """Group ids that merge runs of sub-pixel bars on the same row into one bar.

    ``row`` sorts first, then ``start``; inputs must already be sorted that way. A bar starts a new group
    when it is on another row, or either it or its predecessor is at least ``min_ns`` long, or the gap to the
    furthest end so far on its row exceeds ``min_ns``::

        row 0:  |a| |b||c|      |d|   [====e====]
        groups:  0   0  0        1         2        (a,b,c closer than min_ns; e is long)

    Vectorised: the running maximum of end times is taken over ``end + row * offset`` so it never leaks
    across rows."""
    n = len(start)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    start = start.astype(np.float64)
    end = np.maximum(end.astype(np.float64), start)
    span = float(end.max() - start.min()) + 1.0
    shift = row.astype(np.float64) * span * 4.0
    run_end = np.maximum.accumulate(end - start.min() + shift)
    dur = end - start
    new = np.ones(n, dtype=bool)
    gap = (start[1:] - start.min() + shift[1:]) - run_end[:-1]
    small = dur < min_ns
    new[1:] = (row[1:] != row[:-1]) | (gap > min_ns) | ~small[1:] | ~small[:-1]
    return np.cumsum(new) - 1
