"""Work a step runs after its last backward kernel that every data-parallel rank repeats in full
(``schema.AFTER_BACKWARD_COLUMNS``): the gradient copies of PyTorch DDP and the optimizer's kernels.

Copies. PyTorch DDP all-reduces gradients in flat buckets. Unless ``gradient_as_bucket_view=True``, it copies
each averaged bucket slot back into its parameter's ``.grad`` once backward is done: one device-to-device
copy per gradient, on the compute stream, before the optimizer can start. On the committed stock DDP trace
of set B (2 × H200, XL bf16) that is 435 copies, 4.4–4.8 ms a step on each rank, in every step. With bucket
views ``.grad`` is the bucket slot, so there is nothing to copy back (PyTorch's documentation of the option;
no profiled views run is committed to show the copies gone). Timed, views gain about that much: timing set J
(2 × H100, XL fp32) runs views + 2 channels 5.570 ms faster than 2 channels alone, intervals separate. The
rule: ``verdict.advice``'s ``grad_copy_back``.

Optimizer. A data-parallel job runs the whole optimizer update on every rank after backward; sharded, each
rank updates 1/N of it. On set ZP's graphed stock DDP trace (2 × H200, XL bf16) the fused AdamW kernels
take 16.0 ms a step on each rank; in timing set AA the sharded update (each rank steps its half from the
gradient hooks while backward runs) is 5.9 ms faster than the same configuration unsharded (overlap, NCCL
average, 8 CTAs, carveout 8: 184.36 against 190.24 ms), intervals separate. Jobs that
already shard are left out by the rule (:func:`shards`): a ReduceScatter kernel (FSDP, ZeRO-2, this harness's
sharded update), or AllGather + Broadcast kernels taking at least SHARDED_SYNC_RATIO of the AllReduce
kernels' time (ZeRO-1's parameter broadcast moves as many bytes as the all-reduce: 0.92 on the committed
ZeroRedundancyOptimizer job). A DDP job's own small gathers and broadcasts (metrics, flags) stay below it:
0.12 on the committed Lightning job, 0.38 on the Hugging Face one. The rule: ``verdict.advice``'s
``optimizer_shard``.

    copies             = number of [CUDA memcpy DtoD] rows of the rank with start ≥ backward_end_ns and end ≤ end_ns
    copy_ns            = their summed durations (one after another on one stream: time the step spends on them)
    optimizer_kernels  = compute kernels of kernel_groups.OPTIMIZER's group (multi_tensor_apply: fused and foreach
                         optimizers, foreach gradient clipping) with start ≥ backward_end_ns and end ≤ end_ns
    optimizer_ns       = their summed durations
    allreduce_kernel_ns, reduce_scatter_kernel_ns, gather_broadcast_kernel_ns
                       = summed durations of the NCCL kernels of kind AllReduce, ReduceScatter, and AllGather or
                         Broadcast with start ≥ start_ns and end ≤ end_ns (the whole step)
    step_kernels       = number of the rank's GPU activities (kernels of every kind, memcpys, memsets: one launch
                         call each) with start ≥ start_ns and end ≤ end_ns
    captured_kernels   = number of its compute kernels (not NCCL, memcpy or memset) with start ≥ start_ns and
                         end ≤ backward_end_ns: the forward and backward a CUDA graph of the model would replay
                         (``verdict``'s ``launch_bound`` model takes DDP's per-gradient bucket copies out of them)

Opens no file; a step without a backward end (no backward phase) has no row.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddp_profile import schema
from ddp_profile.activity_names import DEVICE_COPY
from ddp_profile.analysis.kernel_arrays import ints
from ddp_profile.analysis.kernel_groups import KINDS, OPTIMIZER, kind_codes, name_group

SHARDED_SYNC_RATIO = 0.5
"""AllGather + Broadcast kernel time at or above this share of the AllReduce kernel time marks a job that syncs
parameters after a sharded update (ZeRO-1); below it, a data-parallel job's own small gathers and broadcasts."""


_COUNTS = ("copies", "optimizer_kernels", "step_kernels", "captured_kernels")


def shards(frame: pd.DataFrame | None) -> bool:
    """Whether the job of these ``schema.AFTER_BACKWARD_COLUMNS`` rows shards its update (module docstring)."""
    if frame is None or frame.empty:
        return False
    rs, gb, ar = (
        float(frame[c].fillna(0).sum())
        for c in ("reduce_scatter_kernel_ns", "gather_broadcast_kernel_ns", "allreduce_kernel_ns")
    )
    return rs > 0 or (gb > 0 and gb >= SHARDED_SYNC_RATIO * ar)


def _by_rank(cols: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], mask: np.ndarray) -> dict:
    """{rank: (start, end)} of the masked kernels (``cols``: their rank, start and end columns, and whether the
    rank is known), each rank's sorted by start (grouped once, not per step; only these columns are taken,
    never the frame's rows)."""
    rank, start, end, has_rank = cols
    rows = np.flatnonzero(mask & has_rank)  # a kernel without a rank is in no rank's group
    r = rank[rows]
    out = {}
    for value in pd.unique(r).tolist():  # in order of first appearance, as groupby(sort=False)
        sub = rows[r == value]
        sub = sub[np.argsort(start[sub], kind="stable")]
        out[value] = (start[sub], end[sub])
    return out


def _in_windows(
    arrays: tuple[np.ndarray, np.ndarray] | None, lo: np.ndarray, hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per window i: count and summed duration of one rank's ``arrays`` (start, end; sorted by start) starting at
    or after ``lo[i]`` and ending by ``hi[i]`` (int64). Each window's rows are one slice of the sorted starts; every
    (window, row) pair is visited once in one pass, so the cost grows with the rows the windows hold."""
    count, total = np.zeros(len(lo), np.int64), np.zeros(len(lo), np.int64)
    if arrays is None or not len(lo):
        return count, total.astype(float)
    start, end = arrays
    a, b = np.searchsorted(start, lo, "left"), np.searchsorted(start, hi, "right")
    width = np.maximum(b - a, 0)
    stop = np.cumsum(width)
    row = np.arange(int(stop[-1])) - np.repeat(stop - width - a, width)  # the rows of window i, in order
    inside = end[row] <= np.repeat(hi, width)
    n = np.concatenate([[0], np.cumsum(inside)])
    ns = np.concatenate([[0], np.cumsum(np.where(inside, end[row] - start[row], 0))])
    return n[stop] - n[stop - width], (ns[stop] - ns[stop - width]).astype(float)


def _by_name(series: pd.Series, test) -> np.ndarray:
    """``test(value)`` per row of a (categorical or object) series, evaluated once per distinct value."""
    if isinstance(series.dtype, pd.CategoricalDtype):  # its codes: no object per row
        codes, uniq = series.cat.codes.to_numpy(), series.cat.categories
    else:
        codes, uniq = pd.factorize(series.astype("object"), use_na_sentinel=True)
    table = np.array([bool(test(v)) for v in uniq] + [False], dtype=bool)
    return table[codes]


def after_backward(kernels: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """``schema.AFTER_BACKWARD_COLUMNS`` for the ``steps`` (``schema.STEP_METRIC_COLUMNS``: rank, step,
    start_ns, backward_end_ns, end_ns) from the ``kernels`` (``schema.KERNEL_COLUMNS``)."""
    if steps is None or steps.empty or kernels is None or kernels.empty:
        return schema.empty_frame(schema.AFTER_BACKWARD_COLUMNS)
    kind_is = {
        k: _by_name(kernels["kind"], lambda v, k=k: str(v) == k) for k in ("nccl", "memcpy", "compute")
    }
    nccl = kind_is["nccl"]
    kinds = kind_codes(kernels["collective"])  # index into KINDS, classified once per distinct name
    where = (
        ints(kernels["rank"]),
        ints(kernels["start_ns"]),
        ints(kernels["end_ns"]),
        kernels["rank"].notna().to_numpy(),
    )
    copies = _by_rank(where, kind_is["memcpy"] & _by_name(kernels["name"], lambda n: str(n) == DEVICE_COPY))
    optimizer = _by_rank(
        where, kind_is["compute"] & _by_name(kernels["name"], lambda n: name_group(n) == OPTIMIZER)
    )
    collectives = [
        _by_rank(where, nccl & np.isin(kinds, [KINDS.index(k) for k in group]))
        for group in (("AllReduce",), ("ReduceScatter",), ("AllGather", "Broadcast"))
    ]
    every = _by_rank(where, np.ones(len(kernels), bool))
    compute = _by_rank(where, kind_is["compute"])
    keep = steps["backward_end_ns"].notna().to_numpy()  # no backward end: no row
    rank, step = ints(steps["rank"])[keep], ints(steps["step"])[keep]
    first, lo, hi = (ints(steps[c])[keep] for c in ("start_ns", "backward_end_ns", "end_ns"))
    cols: dict[str, np.ndarray] = {
        c: np.zeros(len(rank), np.int64 if c in _COUNTS else float) for c in schema.AFTER_BACKWARD_COLUMNS[2:]
    }
    for r in np.unique(rank).tolist():  # per rank, every step at once
        at = np.flatnonzero(rank == r)
        cols["copies"][at], cols["copy_ns"][at] = _in_windows(copies.get(r), lo[at], hi[at])
        cols["optimizer_kernels"][at], cols["optimizer_ns"][at] = _in_windows(
            optimizer.get(r), lo[at], hi[at]
        )
        for c, arrays in zip(schema.AFTER_BACKWARD_COLUMNS[6:9], collectives, strict=True):
            cols[c][at] = _in_windows(arrays.get(r), first[at], hi[at])[1]
        cols["step_kernels"][at] = _in_windows(every.get(r), first[at], hi[at])[0]
        cols["captured_kernels"][at] = _in_windows(compute.get(r), first[at], lo[at])[0]
    if not len(rank):
        return schema.empty_frame(schema.AFTER_BACKWARD_COLUMNS)
    frame = pd.DataFrame({"rank": rank, "step": step, **cols})
    return frame.sort_values(["rank", "step"], kind="stable").reset_index(drop=True)
