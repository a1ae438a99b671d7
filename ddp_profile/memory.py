"""Keeping the process's resident memory close to what the load and the analysis actually hold.

Two glibc behaviours make freed numpy temporaries stay resident (both are no-ops elsewhere):

* glibc serves a request of at least ``M_MMAP_THRESHOLD`` bytes from a mapping of its own, unmapped on
  free. The threshold starts at 128 KiB but rises to the size of each such block freed (up to 32 MiB),
  so after the loader frees its first 8 MB array, every full-length column of a 1M-kernel trace comes
  from the heap, and freed ones stay mapped there between the holes of live ones. Each stage then stacks
  its peak on the previous stages' leftovers: on the 1M-kernel benchmark export the peak RSS of load +
  analyze was ~102 MiB over the start, ~90 MiB with a fixed threshold (``benchmarks/bench_analyzer.py``).
  :func:`map_large_arrays` fixes the threshold at 3 MiB: arrays at least that large get their own mapping
  and go back to the OS when freed; the chunk-sized temporaries of the vectorised loops (2 MiB) still
  reuse heap memory, so only full-length arrays pay for fresh pages.
* Reader threads free their parsed chunks into per-thread arenas glibc does not shrink on its own:
  :func:`return_freed_memory` (``malloc_trim``) hands them back between stages.

A third setting is pandas': :func:`python_strings` keeps the ``str`` columns the load and the analysis make in
Python storage while they run (the caller's setting is restored after).

Neither changes a value. The threshold is process-wide (it also applies to the caller's own arrays, as
glibc's starting threshold would): set ``DDP_PROFILE_MALLOC=keep`` (or glibc's own
``MALLOC_MMAP_THRESHOLD_``) to leave the allocator as it is.
"""

from __future__ import annotations

import ctypes
import os
from contextlib import contextmanager

LARGE_ARRAY_BYTES = 3 << 20
_M_MMAP_THRESHOLD = -3  # mallopt parameter number (malloc.h)
_configured = False


def _libc():
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def map_large_arrays() -> bool:
    """Fix glibc's mmap threshold at :data:`LARGE_ARRAY_BYTES` (once per process). Returns whether it is in
    effect: False on a C library without ``mallopt``, or when the environment asks to keep the allocator."""
    global _configured
    if _configured:
        return True
    if os.environ.get("DDP_PROFILE_MALLOC") == "keep" or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return False
    _configured = bool(mallopt(_M_MMAP_THRESHOLD, LARGE_ARRAY_BYTES))
    return _configured


def return_freed_memory() -> None:
    """Hand memory the process has freed back to the OS (glibc ``malloc_trim``; a no-op elsewhere)."""
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is not None:
        trim(0)


@contextmanager
def python_strings():
    """pandas' ``str`` columns made inside in Python storage (``mode.string_storage``), restored after; used as
    a decorator of ``load_trace`` and ``analyze``. With pyarrow installed (the columnar reader's) pandas 3
    stores them in Arrow buffers instead: the same values, but load + analyze of the benchmark's replica export
    then peaked ~20 MB higher (183 vs 163 MB over the start, ``benchmarks/bench_analyzer.py``), and a file
    name's lone surrogates (a non-UTF-8 name) would not fit an Arrow string."""
    import pandas as pd

    with pd.option_context("mode.string_storage", "python"):
        yield
