"""The loaded trace: fixed-schema frames (see ``ddp_profile.schema``) plus what is known about their origin."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd


@dataclass
class Trace:
    """One training run's trace, possibly assembled from several export files (one per rank or host).

    All timestamps are ns on one clock: the first file's session clock, other files shifted by the
    difference of their session start times (``meta["clock"]``).
    """

    kernels: pd.DataFrame
    """``schema.KERNEL_COLUMNS``: one row per GPU kernel, memcpy or memset, sorted by (rank, start_ns)."""
    nvtx: pd.DataFrame
    """``schema.NVTX_COLUMNS``: NVTX push/pop and start/end ranges, plus marks (end_ns = start_ns)."""
    gpus: pd.DataFrame
    """``schema.GPU_COLUMNS``: the GPUs each file's host reported, by CUDA device ordinal."""
    ranks: pd.DataFrame
    """``schema.RANK_COLUMNS``: one row per process that ran GPU work, with how its rank was found."""
    meta: dict = field(default_factory=dict)
    """nsys_version, schema_version, files, rank_source, clock (offsets), scrubbed, warnings, per-file info."""
    run: dict | None = None
    """The training harness's run record beside the exports (``run.json``, ``<export stem>.json`` or
    ``<folder name>.json``), when found; a damaged one is skipped with a warning in ``meta``."""
    paths: list[Path] = field(default_factory=list)
    """The export files read, in the order read."""
    host_waits: pd.DataFrame | None = None
    """``schema.HOST_WAIT_COLUMNS``: synchronize and memcpy calls on each process's main thread (the straggler's
    evidence, ``analysis.straggler``); None when the trace was not read by ``load_trace``, or was read with
    ``host_waits=False`` (then ``nsys.api.load_calls_and_waits`` gives them)."""

    @property
    def world_size(self) -> int:
        return int(len(self.ranks))

    @property
    def warnings(self) -> list[str]:
        return self.meta.setdefault("warnings", [])
