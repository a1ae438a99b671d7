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
2. ``rank_task``: load the file (``nsys.loader.load_trace`` on that file alone), shift its times by the
   file's offset, compute the part; return it with the file's processes and rank markers. The client then
   chooses every process's rank from all files' evidence (``nsys.ranks.assign_ranks``, as the loader does)
   and renames the parts' local ranks.

Without Dask installed, asking for it raises :class:`DaskMissing` (the CLI prints one line and exits 2).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

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


def rank_task(path: Path, offset: int, fn, kwargs: dict) -> dict:
    """On a worker: load one export, put it on the run's clock, compute ``fn(trace, **kwargs)``; return the
    part and the rank evidence (processes, rank markers, the run record). The trace is dropped here."""
    trace = load_local(path)
    _shift(trace, offset)
    part = fn(trace, **kwargs)
    nv = trace.nvtx
    markers = nv.loc[nv["name"].astype("string").str.startswith(nvtx_names.RANK_MARKER, na=False), ["pid", "name"]]
    procs = trace.ranks[["pid", "device", "rank"]].copy()
    return {"part": part, "procs": procs, "markers": markers.reset_index(drop=True), "run": trace.run,
            "warnings": list(trace.warnings), "rows": len(trace.kernels),
            "worker_peak_kb": _peak_kb()}


def _peak_kb() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


@dataclass
class DistributedTrace:
    """A run whose per-rank exports are analysed on a Dask cluster (see the module docstring). Holds the
    file list, the client and the clock offsets; ``run``, ``meta`` and ``ranks`` are filled once the per-rank
    tasks have run. Pass it to :func:`ddp_profile.analysis.analyze`."""

    paths: list[Path]
    client: object
    offsets: list[int]
    hosts: list[str | None]
    progress: object = None
    run: dict | None = None
    meta: dict = field(default_factory=dict)
    ranks: pd.DataFrame | None = None
    stats: dict = field(default_factory=dict)

    def map_ranks(self, fn, **kwargs) -> list:
        """``fn(trace_of_one_file, **kwargs)`` on the workers, one task per file; the results with their
        ranks renamed to the run's ranks (``result.remap_ranks(mapping)``), in file order."""
        import time

        dd = _distributed()
        t0 = time.perf_counter()
        futures = self.client.map(rank_task, self.paths, self.offsets, fn=fn, kwargs=kwargs, pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        results: list = [None] * len(futures)
        for fut in dd.as_completed(futures):
            results[index[fut.key]] = fut.result()
            fut.release()
            if self.progress:
                self.progress(f"analysed {self.paths[index[fut.key]]}")
        t1 = time.perf_counter()
        mapping = self._assign_ranks(results)
        parts = [r["part"].remap_ranks(mapping[i]) for i, r in enumerate(results)]
        self.run = next((r["run"] for r in results if r["run"] is not None), None)
        self.meta["warnings"] = list(dict.fromkeys(w for r in results for w in r["warnings"]))
        self.stats.update(map_s=t1 - t0, rows=sum(r["rows"] for r in results),
                          worker_peak_kb=max(r["worker_peak_kb"] for r in results),
                          part_bytes=sum(p.nbytes() for p in parts))
        return parts

    def _assign_ranks(self, results: list[dict]) -> list[dict[int, int]]:
        """Per file, local rank -> run rank, chosen from all files' evidence as the loader chooses it."""
        host_order = {h: i for i, h in enumerate(dict.fromkeys(self.hosts))}
        procs = pd.concat([r["procs"].assign(file=i, host_order=host_order[self.hosts[i]])
                           for i, r in enumerate(results)], ignore_index=True)
        markers = pd.concat([r["markers"].assign(file=i) for i, r in enumerate(results)], ignore_index=True)
        chosen, source = rank_rules.assign_ranks(procs[["file", "pid", "device", "host_order"]], markers,
                                                 [export_stem(p) for p in self.paths])
        run_rank = {(int(f), int(p)): int(r) for f, p, r in zip(chosen["file"], chosen["pid"], chosen["rank"],
                                                                strict=True)}
        self.meta["rank_source"] = source
        self.ranks = chosen
        return [{int(lr): run_rank[(i, int(p))] for p, lr in zip(r["procs"]["pid"], r["procs"]["rank"], strict=True)}
                for i, r in enumerate(results)]


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
