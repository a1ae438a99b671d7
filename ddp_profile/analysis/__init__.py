"""The analysis engine: one front function delegating to one module per analysis.

``analyze(trace)`` takes a loaded trace (attributes ``kernels``, ``nvtx``, ``gpus``, ``ranks``, ``meta``,
``run``; see ``ddp_profile.schema``) and returns an :class:`Analysis` holding one frame per analysis:

- ``windows``: steps and phases found in NVTX (else inferred from the kernel sequence and the launching
  threads: ``infer``) and projected onto the GPU by launch time;
- ``steps``: per (rank, step) compute / comm / overlap / exposed comm (wait vs transfer) / tail / idle;
- ``comm_kinds``: per (rank, step, collective kind) NCCL time, exposed, waiting, by phase and after backward;
- ``overlap``: per kernel name (nsys ``nccl_gpu_overlap_trace`` semantics) and per rank (HTA semantics);
- ``collectives``: NCCL kernels matched across ranks, wait vs transfer, bytes and bus bandwidth;
- ``costmodel``: alpha-beta fit, predicted overhead, optimal bucket size;
- ``contention``: compute slowdown while NCCL runs;
- ``launches`` (given the CUDA API calls, ``analyze(trace, api=...)``): is each step launch-bound;
- ``compare``: several runs side by side, scaling efficiency and Amdahl's serial fraction.

Each module's docstring defines its numbers as formulas. The modules stand in layers (declared in
``tests/project/test_layers.py``): this face re-exports; ``pipeline`` conducts the stages and ``result``
holds what they return; answers (straggler, critical path, verdict, recommend, ...) read measures
(overlap, collectives, comm kinds, contention, steps, launches, ...); boundaries find steps and phases
(windows, infer, cycles, identity); all stand on a ground floor of shared helpers (kernel arrays, kernel
naming and kind codes, projection, cost model, ``ddp_profile.intervals``). A measure imports only the ground.
"""

from __future__ import annotations

from ddp_profile.analysis.compare import amdahl_serial_fraction, compare_runs
from ddp_profile.analysis.costmodel import optimal_bucket_bytes, predict_overhead
from ddp_profile.analysis.kernel_arrays import KernelArrays
from ddp_profile.analysis.pipeline import analyze
from ddp_profile.analysis.result import JSON_VERSION, Analysis, records
from ddp_profile.schema import JSON_SECTIONS, OPTIONAL_SECTIONS

__all__ = [
    "Analysis",
    "analyze",
    "records",
    "KernelArrays",
    "compare_runs",
    "predict_overhead",
    "optimal_bucket_bytes",
    "amdahl_serial_fraction",
    "JSON_SECTIONS",
    "OPTIONAL_SECTIONS",
    "JSON_VERSION",
]
