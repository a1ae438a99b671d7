"""Per-rank work on a Dask cluster: each per-rank export is loaded and analysed where a worker runs, and only
small per-rank tables travel back (``pip install ddp-profile[dask]``).

Layers: this module composes the reader (:mod:`ddp_profile.nsys`) and the analysis
(:mod:`ddp_profile.analysis`), which never import each other. ``load_trace(paths, client=...)`` returns a
:class:`DistributedTrace`, a handle that holds no kernel: :func:`ddp_profile.analysis.analyze` sees its
``map_ranks`` and runs the per-rank stage (:func:`ddp_profile.analysis.parts.rank_part`) on the workers, then
the reduce stage on the client (cross-rank collective matching, cost model, summaries).

Two rounds of tasks, one per file each:

1. ``file_facts``: each file's session start and host (a few rows): the client aligns clocks the way
   ``nsys.loader.load_trace`` does for several files (offset = session start - earliest session start).
2. ``load_one``: load the file (``nsys.loader.load_trace`` on that file alone) and shift its times by the
   file's offset; the trace stays on the worker (a future). ``evidence`` returns its processes and rank
   markers; the client chooses every process's rank from all files' evidence (``nsys.ranks.assign_ranks``,
   as the loader does) and ``set_ranks`` renames them on the worker.
3. The analysis' stages (``analysis.parts``) run on the held traces (``map_ranks``); between them the client
   matches collectives across ranks.

Without Dask installed, asking for it raises :class:`DaskMissing` (the CLI prints one line and exits 2).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ddp_profile import nvtx_names
from ddp_profile.errors import UsageError
from ddp_profile.nsys import ranks as rank_rules
from ddp_profile.nsys import sql
from ddp_profile.nsys.files import export_stem, find_exports, open_export
from ddp_profile.nsys.loader import load_trace as load_local

INSTALL_HINT = "Dask is not installed: pip install 'ddp-profile[dask]' (or: pip install 'dask[distributed]')"


class DaskMissing(UsageError):
    """Dask was asked for but ``dask.distributed`` cannot be imported."""


def _distributed():
    try:
        import dask.distributed as dd
    except ImportError as exc:
        raise DaskMissing(INSTALL_HINT) from exc
    return dd


def make_client(scheduler: str | None = None, *, workers: int | None = None, processes: bool = True):
    """A ``dask.distributed.Client``: to the cluster at ``scheduler`` (an address such as
    ``tcp://host:8786``), or on a new ``LocalCluster`` of ``workers`` single-threaded workers (processes,
    or threads with ``processes=False``) when ``scheduler`` is None or ``"local"``. Closing the client also
    closes a cluster made here."""
    dd = _distributed()
    if scheduler not in (None, "local"):
        return dd.Client(scheduler)
    workers = workers or os.cpu_count() or 1
    cluster = dd.LocalCluster(n_workers=workers, threads_per_worker=1, processes=processes,
                              dashboard_address=":0", silence_logs=40)
    client = dd.Client(cluster)
    client._ddp_profile_cluster = cluster  # closed with the client (close_client)
    return client


def close_client(client) -> None:
    cluster = getattr(client, "_ddp_profile_cluster", None)
    client.close()
    if cluster is not None:
        cluster.close()


def file_facts(path: Path) -> dict:
    """Session start (UTC ns) and host of one export: what clock alignment needs (a few rows read)."""
    con = open_export(path)
    try:
        have = sql.tables(con)
        return {"utc_ns": sql.session_start_utc_ns(con, have), "host": sql.capture_host(con, have)}
    finally:
        con.close()


def _shift(trace, offset: int) -> None:
    """Put a trace loaded alone onto the run's clock (in place): kernels' start/end/launch, NVTX start/end."""
    if not offset:
        return
    k = trace.kernels
    for c in ("start_ns", "end_ns"):
        k[c] = k[c] + offset
    launch = k["launch_ns"]
    k["launch_ns"] = launch.where(launch.isna() | (launch < 0), launch + offset)
    for c in ("start_ns", "end_ns"):
        if c in trace.nvtx:
            trace.nvtx[c] = trace.nvtx[c] + offset


def load_one(path: Path, offset: int):
    """On a worker: one export loaded alone and put on the run's clock. The trace stays on the worker."""
    trace = load_local(path)
    _shift(trace, offset)
    return trace


def evidence(trace) -> dict:
    """On a worker: what the client needs of a loaded file to choose ranks (processes, rank markers), the
    run record and the loader's warnings: a few rows."""
    nv = trace.nvtx
    markers = nv.loc[nv["name"].astype("string").str.startswith(nvtx_names.RANK_MARKER, na=False), ["pid", "name"]]
    return {"procs": trace.ranks[["pid", "device", "rank"]].copy(), "markers": markers.reset_index(drop=True),
            "run": trace.run, "warnings": list(trace.warnings), "rows": len(trace.kernels),
            "nccl_channels": trace.meta.get("nccl_channels")}


def set_ranks(trace, by_pid: dict[int, int]):
    """On a worker: the trace's ranks replaced by the run's (chosen on the client from all files), by pid."""
    def mapped(pid, old):
        return np.array([by_pid.get(int(p), -1) for p in pid], dtype=np.int64) if len(pid) else np.asarray(old)

    k = trace.kernels
    pids, inv = np.unique(k["pid"].to_numpy(np.int64), return_inverse=True)
    new = mapped(pids, k["rank"])[inv] if len(k) else k["rank"].to_numpy()
    k["rank"] = new.astype(k["rank"].dtype)
    order = np.lexsort((k["start_ns"].to_numpy(), k["rank"].to_numpy()))
    if not (np.diff(order) == 1).all():
        trace.kernels = k.iloc[order].reset_index(drop=True)
    nv = trace.nvtx
    if len(nv):
        nv["rank"] = pd.array([by_pid.get(int(p)) if pd.notna(p) else None for p in nv["pid"]], dtype="Int64")
    trace.ranks["rank"] = [by_pid[int(p)] for p in trace.ranks["pid"]]
    return trace


def apply(trace, extra, fn, kwargs: dict):
    """On a worker: ``fn(trace, extra, **kwargs)`` (``extra`` None: ``fn(trace, **kwargs)``)."""
    part = fn(trace, **kwargs) if extra is None else fn(trace, extra, **kwargs)
    return {"part": part, "worker_peak_kb": _peak_kb()}


def _peak_kb() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


@dataclass
class DistributedTrace:
    """A run whose per-rank exports stay on the workers of a Dask cluster (see the module docstring): the
    file list, the client and the futures of the loaded traces; ``run``, ``meta`` and ``ranks`` are filled once
    the files are loaded. Pass it to :func:`ddp_profile.analysis.analyze`; :meth:`close` frees the traces."""

    paths: list[Path]
    client: Any
    offsets: list[int]
    hosts: list[str | None]
    progress: Any = None
    run: dict | None = None
    meta: dict = field(default_factory=dict)
    ranks: pd.DataFrame | None = None
    stats: dict = field(default_factory=dict)
    traces: list | None = None

    def _ensure_loaded(self) -> None:
        if self.traces is not None:
            return
        import time

        t0 = time.perf_counter()
        loaded = self.client.map(load_one, self.paths, self.offsets, pure=False)
        facts = self._gather(self.client.map(evidence, loaded, pure=False), "loaded")
        mapping = self._assign_ranks(facts)
        self.traces = self.client.map(set_ranks, loaded, mapping, pure=False)
        del loaded
        self.run = next((f["run"] for f in facts if f["run"] is not None), None)
        self.meta["warnings"] = list(dict.fromkeys(w for f in facts for w in f["warnings"]))
        self.meta["nccl_channels"] = max((c for f in facts if (c := f["nccl_channels"]) is not None), default=None)
        self.stats.update(load_s=time.perf_counter() - t0, rows=sum(f["rows"] for f in facts), part_bytes=0,
                          worker_peak_kb=0)

    def _gather(self, futures: list, verb: str) -> list:
        dd = _distributed()
        index = {f.key: i for i, f in enumerate(futures)}
        results: list = [None] * len(futures)
        for fut in dd.as_completed(futures):
            results[index[fut.key]] = fut.result()
            if self.progress:
                self.progress(f"{verb} {self.paths[index[fut.key]]}")
        return results

    def map_ranks(self, fn, per_file: list | None = None, **kwargs) -> list:
        """``fn(trace, per_file[i], **kwargs)`` (or ``fn(trace, **kwargs)``) on the worker holding file i's
        trace, its ranks already the run's; the results, in file order."""
        self._ensure_loaded()
        extra = per_file if per_file is not None else [None] * len(self.paths)
        got = self.client.gather(self.client.map(apply, self.traces, extra, fn=fn, kwargs=kwargs, pure=False))
        parts = [g["part"] for g in got]
        self.stats["worker_peak_kb"] = max([self.stats["worker_peak_kb"]] + [g["worker_peak_kb"] for g in got])
        self.stats["part_bytes"] += sum(p.nbytes() if hasattr(p, "nbytes") else
                                        int(p.memory_usage(deep=True).sum()) if p is not None else 0 for p in parts)
        return parts

    def close(self) -> None:
        """Release the traces held on the workers."""
        if self.traces is not None:
            for f in self.traces:
                f.release()
            self.traces = None

    def _assign_ranks(self, facts: list[dict]) -> list[dict[int, int]]:
        """Per file, pid -> run rank, chosen from all files' evidence as the loader chooses it."""
        host_order = {h: i for i, h in enumerate(dict.fromkeys(self.hosts))}
        procs = pd.concat([f["procs"].assign(file=i, host_order=host_order[self.hosts[i]])
                           for i, f in enumerate(facts)], ignore_index=True)
        markers = pd.concat([f["markers"].assign(file=i) for i, f in enumerate(facts)], ignore_index=True)
        chosen, source = rank_rules.assign_ranks(procs[["file", "pid", "device", "host_order"]], markers,
                                                 [export_stem(p) for p in self.paths])
        self.meta["rank_source"] = source
        self.ranks = chosen
        out: list[dict[int, int]] = [{} for _ in facts]
        for f, p, r in zip(chosen["file"], chosen["pid"], chosen["rank"], strict=True):
            out[int(f)][int(p)] = int(r)
        return out


def load_trace(paths, *, client=None, scheduler: str | None = None, jobs: int | None = None,
               processes: bool = True, progress=None) -> DistributedTrace:
    """What :func:`ddp_profile.nsys.loader.load_trace` is for one run, on Dask: a handle whose analysis runs
    per rank on the workers. ``client``: a ``dask.distributed.Client`` to use; else one is made
    (:func:`make_client`: ``scheduler`` address, or a LocalCluster of ``jobs`` workers). Raises DaskMissing
    without Dask, TraceError for unreadable inputs (as the loader)."""
    files = find_exports(paths)
    if client is None:
        client = make_client(scheduler, workers=jobs, processes=processes)
    facts = client.gather(client.map(file_facts, files, pure=False))
    utc = [f["utc_ns"] for f in facts]
    # As the loader: offsets from the session starts, none when a file lacks its start.
    offsets = [u - min(utc) for u in utc] if len(files) > 1 and all(u is not None for u in utc) else [0] * len(files)
    return DistributedTrace(paths=files, client=client, offsets=offsets, hosts=[f["host"] for f in facts],
                            progress=progress)
