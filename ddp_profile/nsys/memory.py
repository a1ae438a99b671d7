"""Returning freed heap memory to the OS between the load's and the analysis' large temporaries."""

from __future__ import annotations


def return_freed_memory() -> None:
    """Hand memory the process has freed back to the OS (glibc ``malloc_trim``; a no-op elsewhere). The
    reader threads' parsed chunks are freed into per-thread malloc arenas that glibc does not shrink on its
    own: on a 1M-kernel export ~25 MB of such freed pages stayed resident through the frame build and the
    analysis and set the peak RSS. Trimming changes no value, only what stays mapped."""
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (macOS, musl without it): nothing to trim
        pass
