"""The names a loaded trace gives GPU activities that are not kernels (``Trace.kernels``' ``name`` of its
memcpy and memset rows), shared by the reader that writes them and the analyses that look for them.
Standard library only."""

from __future__ import annotations

MEMSET = "[CUDA memset]"
"""Every memset row."""


def memcpy_name(direction: str) -> str:
    """A memcpy row's name: ``[CUDA memcpy DtoD]`` for ``"DtoD"`` (nsys's copy-kind names: HtoD, DtoH, DtoD ...)."""
    return f"[CUDA memcpy {direction}]"


DEVICE_COPY = memcpy_name("DtoD")
"""A copy from device memory to device memory (``Tensor.copy_`` between tensors on one GPU)."""

PEER_COPY = memcpy_name("PtoP")
"""A copy between two GPUs' memories on a copy engine (``cudaMemcpyPeer``, or a copy into a peer's memory
mapped into this process, as PyTorch symmetric memory does): communication outside NCCL."""
