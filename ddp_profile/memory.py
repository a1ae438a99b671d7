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
  reuse heap memory, so only full-length arrays pay for fresh pages. For a larger trace
  :func:`map_arrays_of` then raises it with the trace's row count (half a full-length int32 column, at
  most glibc's own 32 MiB ceiling): at 10M kernels a 3 MiB threshold made every per-rank temporary
  (5-10 MB) a fresh mapping, ~1.5 s more system time for `analyze` at the same peak RSS.
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
MAX_THRESHOLD_BYTES = 32 << 20  # glibc's ceiling for its own (dynamic) mmap threshold on 64-bit
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameter numbers (malloc.h)
TRIM_THRESHOLD_BYTES = 128 << 10  # glibc's default M_TRIM_THRESHOLD
_configured = False


def _libc():
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def map_large_arrays() -> bool:
    """Fix glibc's mmap threshold at :data:`LARGE_ARRAY_BYTES` (and its trim threshold at glibc's default), also
    after :func:`map_arrays_of` raised them. Returns whether it is in effect: False on a C library without
    ``mallopt``, or when the environment asks to keep the allocator."""
    global _configured
    if _configured:
        return _set(LARGE_ARRAY_BYTES, TRIM_THRESHOLD_BYTES)
    if os.environ.get("DDP_PROFILE_MALLOC") == "keep" or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return False
    _configured = bool(mallopt(_M_MMAP_THRESHOLD, LARGE_ARRAY_BYTES))
    return _configured


def map_arrays_of(rows: int) -> None:
    """Once the load knows its row count (and :func:`map_large_arrays` is in effect): the mmap threshold at half
    a full-length int32 column (2 bytes per row) when that is above :data:`LARGE_ARRAY_BYTES`, at most
    :data:`MAX_THRESHOLD_BYTES`, and the trim threshold at twice it, as glibc's dynamic setting pairs them.
    Full-length columns keep their own mappings; a per-rank or per-name temporary reuses heap memory."""
    size = min(max(LARGE_ARRAY_BYTES, 2 * int(rows)), MAX_THRESHOLD_BYTES)
    if _configured and size > LARGE_ARRAY_BYTES:
        _set(size, 2 * size)


def _set(mmap_bytes: int, trim_bytes: int) -> bool:
    mallopt = getattr(_libc(), "mallopt", None)
    return (
        mallopt is not None
        and bool(mallopt(_M_MMAP_THRESHOLD, mmap_bytes))
        and bool(mallopt(_M_TRIM_THRESHOLD, trim_bytes))
    )


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
