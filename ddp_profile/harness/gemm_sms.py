"""GEMMs that leave SMs to NCCL: cuBLASLt's SM-count target (``RunConfig.gemm_sm_carveout``, ``-carveN``).

Why. cuBLAS's Hopper GEMMs (``nvjet_*``) are persistent: their grid has one CTA per SM (132 on an H100 or
H200). An NCCL all-reduce running beside them holds some SMs for its whole duration (one CTA per channel),
so the GEMM's last CTAs wait for a second wave and the kernel takes up to twice as long: the same GEMMs
beside an NCCL kernel against alone, like for like, is ``analysis.kernel_families.contention_by_family``,
whose ratios the findings' losses section prints. Fewer NCCL channels shorten the overlap but leave the
second wave.

What. ``gemm_sm_carveout = N`` makes every GEMM target SMs − N (``torch._C._set_sm_carveout_experimental``,
which PyTorch turns into ``CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET`` on its cuBLASLt paths), with PyTorch's
preferred BLAS library set to cuBLASLt (``torch.backends.cuda.preferred_blas_library``) so that plain
``mm``/``bmm`` take those paths too. With NCCL held to at most N CTAs (``nccl_channels``) a GEMM then fits in
one wave beside a running all-reduce, at the price of N SMs when nothing runs beside it. ``blas_library =
"cublaslt"`` alone switches the library without a carveout (the control that separates the two effects).
Numerics are unchanged in kind: the same bf16/fp32 GEMMs with fp32 accumulation, possibly another kernel.

On the CPU (gloo runs, tests) nothing is set and the record says so. Torch and the standard library only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from ddp_profile.errors import ConfigError

CUBLASLT = "cublaslt"


def describe(carveout: int, blas_library: str) -> dict:
    """What a run asked for: {"blas_library": ..., "sm_carveout": N} ("" library: PyTorch's default)."""
    library = CUBLASLT if carveout else blas_library
    return {"blas_library": library or "default", "sm_carveout": carveout}


@contextlib.contextmanager
def gemm_sms(carveout: int, blas_library: str, device: torch.device) -> Iterator[dict]:
    """Apply the lever for the block, restoring PyTorch's previous settings after it (a process that runs
    several configurations, ``ddp_profile.harness.repeats``, must not carry one's setting into the next).
    Yields the record for the run JSON: ``describe``'s keys plus ``applied`` and, on a GPU, ``sm_count``
    and ``gemm_sm_target`` (SMs − carveout)."""
    record: dict = {**describe(carveout, blas_library), "applied": False}
    if not carveout and not blas_library:
        yield record
        return
    if device.type != "cuda":
        record["note"] = "ignored on the CPU (no cuBLAS)"
        yield record
        return
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    if carveout >= sms:
        raise ConfigError(f"gemm_sm_carveout {carveout} leaves no SM for GEMMs on this GPU ({sms} SMs)")
    before_library = torch.backends.cuda.preferred_blas_library()
    before_carveout = torch._C._get_sm_carveout_experimental()
    try:
        torch.backends.cuda.preferred_blas_library(CUBLASLT)
        if carveout:
            torch._C._set_sm_carveout_experimental(carveout)
        record.update(applied=True, sm_count=sms, gemm_sm_target=sms - carveout)
        yield record
    finally:
        torch._C._set_sm_carveout_experimental(before_carveout)
        torch.backends.cuda.preferred_blas_library(before_library)


@contextlib.contextmanager
def every_sm(on: bool) -> Iterator[None]:
    """Inside, GEMMs target every SM (no carveout) when ``on``; the carveout in force before is restored
    after (``gemm_sm_carveout_scope = "backward"``: the loop wraps the forward in this). Read by PyTorch at
    each GEMM launch, so a captured CUDA graph keeps each phase's kernels."""
    if not on:
        yield
        return
    before = torch._C._get_sm_carveout_experimental()
    torch._C._set_sm_carveout_experimental(None)
    try:
        yield
    finally:
        torch._C._set_sm_carveout_experimental(before)


def check(
    carveouts=(0, 8, 16, 66), m: int = 4096, k: int = 1600, n: int = 6400, reps: int = 20
) -> list[dict]:
    """Whether this GPU's PyTorch honours the lever: one bf16 GEMM (m x k @ k x n, the XL model's first MLP
    GEMM at batch 16 x 256) timed with CUDA events under each carveout, nothing running beside it. A carveout
    that takes effect makes the GEMM slower roughly in proportion to the SMs it keeps (half the SMs: about
    twice the time); the same time under every carveout means PyTorch ignored it. One dict per carveout:
    {"sm_carveout", "gemm_sm_target", "median_us"}."""
    device = torch.device("cuda", torch.cuda.current_device())
    a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
    b = torch.randn(k, n, device=device, dtype=torch.bfloat16)
    rows = []
    for carveout in carveouts:
        with gemm_sms(carveout, CUBLASLT, device) as record:
            for _ in range(3):
                a @ b
            times = []
            for _ in range(reps):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                a @ b
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) * 1e3)
        rows.append(
            {
                "sm_carveout": carveout,
                "gemm_sm_target": record["gemm_sm_target"],
                "median_us": round(sorted(times)[len(times) // 2], 1),
            }
        )
    return rows


if __name__ == "__main__":  # python -m ddp_profile.harness.gemm_sms: one JSON line per carveout
    import json

    for row in check():
        print(json.dumps(row), flush=True)


__all__ = ["CUBLASLT", "check", "describe", "gemm_sms"]
