"""Kernel groups (families) by short kernel name: the one table of them, and :func:`name_group`.

Its own module, free of the analysis' other modules, so that any stage of the pipeline can name a kernel's
group (``launches``' launch diagnosis, ``kernel_families``' per-step GPU time, ``after_backward``'s optimizer
kernels) without importing the launch diagnosis.
"""

from __future__ import annotations

import re

from ddp_profile.analysis.kernel_arrays import NCCL

OPTIMIZER, GEMM, ATTENTION, REDUCE = "optimizer (multi_tensor_apply)", "GEMM", "attention", "reduce"
ELEMENTWISE = "elementwise (incl. copies, casts)"
KERNEL_GROUPS = (
    (OPTIMIZER, r"multi_tensor_apply"),
    (GEMM, r"^(nvjet|Kernel2$|cutlass)|gemm"),
    (ATTENTION, r"sdpa|fmha|flash|convert_dq_to_16bits|compute_dot_do_o"),
    (REDUCE, r"reduce_kernel"),
    (ELEMENTWISE, r"elementwise"),
)
"""(group, regex on the short kernel name). Casts and copies run as ``*elementwise_kernel`` whose template
arguments (in the demangled name, which the loader does not read) would tell them apart. The one list of kernel
families: ``kernel_families`` groups a step's GPU time by it too."""
OTHER, COPY, NCCL_GROUP = "other", "copy", NCCL.upper()
"""Groups beside KERNEL_GROUPS: a compute kernel no pattern matches; a memcpy or memset (by kind); an NCCL kernel
(by kind)."""
GROUPS = (*(g for g, _ in KERNEL_GROUPS), OTHER, COPY, NCCL_GROUP)
"""Every group label :func:`kernel_group_codes` indexes, in this order."""
MEMORY_BOUND_GROUPS = (OPTIMIZER, REDUCE, ELEMENTWISE)
"""The groups whose kernels stream tensors through HBM with little arithmetic per byte (optimizer updates,
reductions, elementwise ops, casts and copies): their speed is the memory bandwidth they get."""


def name_group(name) -> str:
    """The group of a compute kernel's short name: the first KERNEL_GROUPS pattern it matches, else OTHER."""
    return next((g for g, rx in KERNEL_GROUPS if name is not None and re.search(rx, str(name))), OTHER)


__all__ = ["ATTENTION", "COPY", "ELEMENTWISE", "GEMM", "GROUPS", "KERNEL_GROUPS", "MEMORY_BOUND_GROUPS", "NCCL_GROUP",
           "OPTIMIZER", "OTHER", "REDUCE", "name_group"]
