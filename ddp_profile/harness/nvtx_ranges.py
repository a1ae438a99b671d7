"""Thin, cheap NVTX wrapper for the harness: every range in the project domain, named by nvtx_names.

Why a wrapper: the names, colours and categories must match what the parser reads (nvtx_names), the
`nvtx` package may be missing (then every call is a no-op), and ranges are emitted in hot paths (one per
collective launch), so event attributes are built once and cached rather than per call.

All ranges here are push/pop ranges: they nest per thread, which is what nsys shows as a stack. Ranges
opened inside autograd hooks live on the autograd thread; that is fine because each is pushed and popped
within the same hook call.
"""

from __future__ import annotations

import contextlib
from functools import lru_cache

from ddp_profile import nvtx_names as names

try:  # nvtx is optional: absent on some machines, and never needed for correctness
    import nvtx as _nvtx
except ImportError:  # pragma: no cover - exercised only where nvtx is missing
    _nvtx = None

_DOMAIN = _nvtx.get_domain(names.DOMAIN) if _nvtx is not None else None


@lru_cache(maxsize=4096)
def _attributes(message: str, color: str | None, category: int, payload: int | None):
    assert _DOMAIN is not None  # only push() calls this, and only when _DOMAIN is set
    return _DOMAIN.get_event_attributes(message=message, color=color, category=category, payload=payload)


def push(
    message: str, color: str | None = None, category: int = names.CATEGORY_PHASE, payload: int | None = None
):
    if _DOMAIN is not None:
        _DOMAIN.push_range(_attributes(message, color, category, payload))


def pop() -> None:
    if _DOMAIN is not None:
        _DOMAIN.pop_range()


@contextlib.contextmanager
def _range(message: str, color: str | None, category: int, payload: int | None):
    push(message, color, category, payload)
    try:
        yield
    finally:
        pop()


def phase(name: str):
    """Range for a phase (forward, backward, optimizer, grad_sync_wait) in its nvtx_names colour."""
    return _range(name, names.COLORS.get(name), names.CATEGORY_PHASE, None)


def step(index: int):
    """Range for one training step: message f"{STEP} {index}", payload = step index."""
    return _range(f"{names.STEP} {index}", names.COLORS[names.STEP], names.CATEGORY_STEP, index)


def allreduce_message(bucket: int, nbytes: int) -> str:
    """Text of a collective-launch range; the parser reads bucket index and bytes back from it."""
    return f"{names.ALLREDUCE_PREFIX} b{bucket} {nbytes}B"


def collective(bucket: int, nbytes: int):
    """Range around one collective LAUNCH (not its completion): payload = bytes, bucket in the message."""
    return _range(
        allreduce_message(bucket, nbytes), names.COLORS[names.ALLREDUCE_PREFIX], names.CATEGORY_BUCKET, nbytes
    )


def param_sync_message(bucket: int, owner: int, nbytes: int) -> str:
    """Text of a sharded-optimizer parameter broadcast range: owner bucket index, source rank, bytes."""
    return f"{names.PARAM_SYNC_PREFIX} b{bucket} r{owner} {nbytes}B"


def param_sync(bucket: int, owner: int, nbytes: int):
    """Range around one parameter broadcast from its owner rank (the launch; with gloo, the whole call)."""
    return _range(
        param_sync_message(bucket, owner, nbytes),
        names.COLORS[names.PARAM_SYNC_PREFIX],
        names.CATEGORY_BUCKET,
        nbytes,
    )


def fsdp_block(index: int) -> None:
    """Open the range of one FSDP unit's forward (closed by pop() from the unit's forward hook)."""
    push(
        f"{names.FSDP_BLOCK_PREFIX} {index}",
        names.COLORS[names.FSDP_BLOCK_PREFIX],
        names.CATEGORY_PHASE,
        index,
    )


def rank_marker(rank: int, world_size: int) -> None:
    """Instant marker naming this process's rank, so a merged report's processes map to ranks."""
    if _DOMAIN is not None:
        _DOMAIN.mark(_attributes(f"{names.RANK_MARKER} {rank}/{world_size}", None, names.CATEGORY_META, rank))
