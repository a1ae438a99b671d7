"""Kernel naming, on the analysis' ground floor: kernel groups (families) by short kernel name (the one table
of them, :func:`name_group`, :func:`kernel_group_codes`), the GEMM wave ratio threshold, the CUDA API call
kinds (:func:`of_kind`) and collective kinds by NCCL collective name (KINDS, :func:`kind_of`,
:func:`kind_codes`, :func:`rows_of`).

Its own module, importing only ``kernel_arrays``, so that every measure and answer can name a kernel's group
or a collective's kind (``launches``, ``kernel_families``, ``after_backward``, ``comm_kinds``, ``steps``,
``infer``, ``straggler``, ``verdict``) without importing a sibling analysis.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ddp_profile.analysis.kernel_arrays import NCCL, KernelArrays

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


def kernel_group_codes(karr: KernelArrays) -> np.ndarray:
    """Per row, the index into GROUPS of its group: :func:`name_group` of the kernel's short name, NCCL kernels
    by kind, memcpy/memset rows COPY. Patterns run once per distinct name."""
    by_name = np.array([GROUPS.index(name_group(n)) for n in karr.name_values()], dtype=np.int8)
    out = by_name[karr.name_code.astype(np.int64)] if len(karr.name_code) else np.zeros(0, dtype=np.int8)
    out = np.where(karr.is_nccl, np.int8(GROUPS.index(NCCL_GROUP)), out)
    return np.where(karr.is_compute | karr.is_nccl, out, np.int8(GROUPS.index(COPY))).astype(np.int8)


WAVE_RATIO = 1.5
"""A median overlapped/alone GEMM ratio (:func:`gemm_wave_ratio`) from which GEMMs beside NCCL are taken to run
in two waves: sharing SMs' bandwidth slows a kernel by tens of percent, a second wave of a persistent GEMM
(one CTA per SM) by up to 100 %."""


def of_kind(api: pd.DataFrame, kind: str) -> np.ndarray:
    """Rows of an API_CALL_COLUMNS frame whose ``kind`` (the nsys layer's class of the call) is ``kind``."""
    return np.asarray(api["kind"] == kind, dtype=bool)


# ---- collective kinds, by the NCCL collective name ------------------------------------------------------

KINDS = ("AllReduce", "AllGather", "ReduceScatter", "Broadcast", "AllToAll", "SendRecv", "other")
GRADIENT = ("AllReduce", "ReduceScatter")
PARAM = ("AllGather", "Broadcast")
_CANON = {
    "allreduce": "AllReduce",
    "allgather": "AllGather",
    "reducescatter": "ReduceScatter",
    "broadcast": "Broadcast",
    "bcast": "Broadcast",
    "alltoall": "AllToAll",
    "sendrecv": "SendRecv",
    "send": "SendRecv",
    "recv": "SendRecv",
}
OTHER_KIND = KINDS.index("other")


def kind_of(collective) -> str:
    """The kind (one of KINDS) of a parsed collective name (``AllReduce``, ``all_gather``...; None -> other)."""
    if collective is None or (isinstance(collective, float) and np.isnan(collective)) or collective is pd.NA:
        return "other"
    return _CANON.get(re.sub(r"[^a-z]", "", str(collective).lower()), "other")


def kind_codes(collective: pd.Series) -> np.ndarray:
    """Index into KINDS per row (int8); each distinct value classified once (few in a trace)."""
    if isinstance(collective.dtype, pd.CategoricalDtype):
        cats = np.array(
            [KINDS.index(kind_of(c)) for c in collective.cat.categories] + [OTHER_KIND], dtype=np.int8
        )
        return cats[collective.cat.codes.to_numpy()]
    codes, uniq = pd.factorize(collective.astype("object"), use_na_sentinel=True)
    table = np.array([KINDS.index(kind_of(c)) for c in uniq] + [OTHER_KIND], dtype=np.int8)
    return table[codes]


def nccl_rows(karr) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(positions, KINDS codes, ranks) of the NCCL kernels of ``karr``, ascending, computed once: a rank's
    NCCL kernels are then picked among these few rows, not from all of the rank's. Only these rows' kinds are
    classified and kept (not one code per kernel)."""

    def compute():
        idx = np.flatnonzero(karr.is_nccl)
        frame = karr.frame
        kinds = (
            kind_codes(frame["collective"].iloc[idx])
            if "collective" in frame
            else np.full(len(idx), OTHER_KIND, dtype=np.int8)
        )
        return idx, kinds, karr.rank[idx]

    return karr.memo("nccl_rows", compute)


def rows_of(karr, kinds: tuple[str, ...]) -> np.ndarray:
    """Positions (ascending) of the NCCL kernels whose kind is in ``kinds``."""
    codes = np.array([KINDS.index(k) for k in kinds], dtype=np.int8)
    idx, kcode, _ = nccl_rows(karr)
    return idx[np.isin(kcode, codes)]
