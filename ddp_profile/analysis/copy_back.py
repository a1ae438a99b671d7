"""Gradient copies after backward: the device-to-device copies a step runs between its last backward kernel
and its end (``schema.COPY_BACK_COLUMNS``).

Why. PyTorch DDP all-reduces gradients in flat buckets. Unless ``gradient_as_bucket_view=True``, it copies
each averaged bucket slot back into its parameter's ``.grad`` once backward is done: one device-to-device
copy per gradient, on the compute stream, before the optimizer can start. On the committed stock DDP trace
of set B (2 × H200, XL bf16) that is 435 copies, 4.4–4.8 ms a step on each rank, in every step. With bucket
views ``.grad`` is the bucket slot, so there is nothing to copy back (PyTorch's documentation of the option;
no profiled views run is committed to show the copies gone). Timed, views gain about that much: timing set J
(2 × H100, XL fp32) runs views + 2 channels 5.570 ms faster than 2 channels alone, intervals separate. The
rule: ``verdict.advice``'s ``grad_copy_back``.

    copies  = number of [CUDA memcpy DtoD] rows of the rank with start ≥ backward_end_ns and end ≤ end_ns
    copy_ns = their summed durations (they run one after another on one stream: time the step spends on them)

Opens no file; a step without a backward end (no backward phase) has no row.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddp_profile import schema
from ddp_profile.activity_names import DEVICE_COPY


def after_backward(kernels: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """``schema.COPY_BACK_COLUMNS`` for the ``steps`` (``schema.STEP_METRIC_COLUMNS``: rank, step,
    backward_end_ns, end_ns) from the ``kernels`` (``schema.KERNEL_COLUMNS``)."""
    if steps is None or steps.empty or kernels is None or kernels.empty:
        return schema.empty_frame(schema.COPY_BACK_COLUMNS)
    copies = kernels[(kernels["kind"].astype(str) == "memcpy").to_numpy() & (kernels["name"].astype(str) == DEVICE_COPY).to_numpy()]
    rows = []
    for rank, mine in steps[steps["backward_end_ns"].notna()].groupby("rank", sort=True):
        c = copies[copies["rank"].to_numpy() == rank]
        order = np.argsort(c["start_ns"].to_numpy(np.int64), kind="stable")
        start = c["start_ns"].to_numpy(np.int64)[order]
        end = c["end_ns"].to_numpy(np.int64)[order]
        for step, lo, hi in zip(mine["step"], mine["backward_end_ns"].astype("float64"), mine["end_ns"].astype("float64"),
                                strict=True):
            a, b = np.searchsorted(start, lo, "left"), np.searchsorted(start, hi, "right")
            inside = end[a:b] <= hi
            rows.append((rank, step, int(inside.sum()), float((end[a:b] - start[a:b])[inside].sum())))
    return pd.DataFrame(rows, columns=schema.COPY_BACK_COLUMNS) if rows else schema.empty_frame(schema.COPY_BACK_COLUMNS)
