"""Per-rank work on a Dask cluster: each per-rank export is loaded and analysed where a worker runs, and only
small per-rank tables travel back (``pip install ddp-profile[dask]``).

Layers: this module composes the reader (:mod:`ddp_profile.nsys`) and the analysis
(:mod:`ddp_profile.analysis`), which never import each other. ``load_trace(paths, client=...)`` returns a
:class:`DistributedTrace`, a handle that holds no kernel: :func:`ddp_profile.analysis.analyze` sees its
``map_ranks`` and runs the per-rank stages (:mod:`ddp_profile.analysis.pipeline`: steps and collective rows, then
the step metrics) on the workers, the cross-rank steps on the client (one step identity across ranks,
collective matching, cost model, summaries): the same code path as a trace loaded in one process.

Rounds of tasks, each task handling a batch of files (by default about four tasks per worker thread, so
thousands of small per-rank files do not cost a scheduler round trip each; every file is still loaded and
analysed on its own):

1. ``file_facts``: each file's session start and host (a few rows): the client aligns clocks the way
   ``nsys.loader.load_trace`` does for several files (offset = session start - earliest session start).
2. ``load_one``: load the file (``nsys.loader.load_trace`` on that file alone) and shift its times by the
   file's offset; the trace stays on the worker (a future). ``evidence`` returns its processes and rank
   markers; the client chooses every process's rank from all files' evidence (``nsys.ranks.assign_ranks``,
   as the loader does) and ``set_ranks`` renames them on the worker.
3. The analysis' stages (``analysis.pipeline``) run on the held traces (``map_ranks``); between them the client
   gives steps one identity across ranks and matches collectives.

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
from ddp_profile.memory import python_strings
from ddp_profile.nsys import ranks as rank_rules
from ddp_profile.nsys import sql
from ddp_profile.nsys.files import export_stem, find_exports, open_export
from ddp_profile.nsys.loader import load_trace as load_local
from ddp_profile.safeio import shown_path

INSTALL_HINT = "Dask is not installed: pip install 'ddp-profile[dask]' (or: pip install 'dask[distributed]')"


class DaskMissing(UsageError):
    """Dask was asked for but ``dask.distributed`` cannot be imported."""


def _distributed():
    try:
        import dask.distributed as dd
    except ImportError as exc:
        raise DaskMissing(INSTALL_HINT) from exc
    return dd


SCHEDULER_TIMEOUT_S = 5


def make_client(scheduler: str | None = None, *, workers: int | None = None, processes: bool = True):
    """A ``dask.distributed.Client``: to the cluster at ``scheduler`` (an address such as
    ``tcp://host:8786``), or on a new ``LocalCluster`` of ``workers`` single-threaded workers (processes,
    or threads with ``processes=False``) when ``scheduler`` is None or ``"local"``. Closing the client also
    closes a cluster made here."""
    dd = _distributed()
    if scheduler not in (None, "local"):  # an unreachable address fails after this many seconds
        return dd.Client(scheduler, timeout=SCHEDULER_TIMEOUT_S)
    workers = workers or os.cpu_count() or 1
    cluster = dd.LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=processes, dashboard_address=":0", silence_logs=40
    )
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
    if trace.host_waits is not None and len(trace.host_waits):
        trace.host_waits = trace.host_waits.assign(
            start_ns=trace.host_waits["start_ns"] + offset, end_ns=trace.host_waits["end_ns"] + offset
        )


def load_one(path: Path, offset: int):
    """On a worker: one export loaded alone and put on the run's clock. The trace stays on the worker."""
    trace = load_local(path)
    _not_rebased(trace)
    _shift(trace, offset)
    return trace


def _not_rebased(trace) -> None:
    """Files whose times the loader rebased (negative or beyond 2^52 ns: ``nsys.timebase``) are counted from
    their own earliest activity, which the run's clock offsets here do not know: refused, not misaligned."""
    from ddp_profile.errors import TraceError

    if min((f["offset_ns"] for f in trace.meta.get("files", [])), default=0) != 0:
        raise TraceError(
            f"{', '.join(str(f['path']) for f in trace.meta['files'])}: times negative or beyond 2^52 ns "
            "were rebased on loading, which per-rank work on Dask cannot align; load without --dask"
        )


def evidence(trace) -> dict:
    """On a worker: what the client needs of a loaded file to choose ranks (processes, rank markers), the
    run record and the loader's warnings: a few rows."""
    nv = trace.nvtx
    markers = nv.loc[
        nv["name"].astype("string").str.startswith(nvtx_names.RANK_MARKER, na=False), ["pid", "name"]
    ]
    return {
        "procs": trace.ranks[["pid", "device", "rank"]].copy(),
        "markers": markers.reset_index(drop=True),
        "run": trace.run,
        "warnings": list(trace.warnings),
        "rows": len(trace.kernels),
        "nccl_channels": trace.meta.get("nccl_channels"),
    }


def set_ranks(trace, by_pid: dict[int, int]):
    """On a worker: the trace's ranks replaced by the run's (chosen on the client from all files), by pid."""

    def mapped(pid, old):
        return (
            np.array([by_pid.get(int(p), -1) for p in pid], dtype=np.int64) if len(pid) else np.asarray(old)
        )

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
    hw = trace.host_waits
    if hw is not None and len(hw):
        hw["rank"] = pd.array([by_pid.get(int(p)) for p in hw["pid"]], dtype="Int64")
    return trace


@python_strings()
def apply(trace, extra, fn, kwargs: dict):
    """On a worker: ``fn(trace, extra, **kwargs)`` (``extra`` None: ``fn(trace, **kwargs)``)."""
    part = fn(trace, **kwargs) if extra is None else fn(trace, extra, **kwargs)
    return {"part": part, "worker_peak_kb": _peak_kb()}


# Batches: one task handles several files (each file still loaded and analysed alone), so a run of
# thousands of small per-rank files costs one scheduler round trip per batch, not per file.


def facts_batch(paths: list[Path]) -> list[dict]:
    return [file_facts(p) for p in paths]


def load_batch(paths: list[Path], offsets: list[int] | None):
    """On a worker: a batch of files as one trace, read together by the loader (its fixed cost per call is
    then paid once per batch) and put on the run's clock. The loader aligns the batch's files on their
    earliest session start, so the batch is shifted by that file's run offset (``offsets``: None when the
    run's files are not aligned). Falls back to one load per file (:func:`load_one`, a list) when the run
    is not aligned or the loader refuses the batch (e.g. rank evidence that only the whole run resolves)."""
    from ddp_profile.errors import TraceError

    if len(paths) > 1 and offsets is not None:
        try:
            trace = load_local(paths)
            _not_rebased(trace)
        except TraceError:
            pass
        else:
            _shift(trace, min(offsets))
            return trace
    return [load_one(p, o) for p, o in zip(paths, offsets or [0] * len(paths), strict=True)]


def _file_ranks(trace, path: Path) -> pd.DataFrame:
    return trace.ranks.loc[trace.ranks["file"] == shown_path(path)]


def evidence_batch(loaded, paths: list[Path]) -> list[dict]:
    """:func:`evidence` of each file of a batch (a list of traces, or one trace read together)."""
    if isinstance(loaded, list):
        return [evidence(t) for t in loaded]
    nv = loaded.nvtx
    marks = nv.loc[
        nv["name"].astype("string").str.startswith(nvtx_names.RANK_MARKER, na=False), ["rank", "pid", "name"]
    ]
    krank = loaded.kernels["rank"].to_numpy()
    out = []
    for i, path in enumerate(paths):
        procs = _file_ranks(loaded, path)
        mine = marks.loc[marks["rank"].isin(procs["rank"].tolist())]
        out.append(
            {
                "procs": procs[["pid", "device", "rank"]].reset_index(drop=True),
                "markers": mine[["pid", "name"]].reset_index(drop=True),
                "run": loaded.run,
                "warnings": list(loaded.warnings) if i == 0 else [],
                "rows": int(np.isin(krank, procs["rank"].to_numpy()).sum()),
                # the batch's (the loader takes the most over its files; the client, over all files)
                "nccl_channels": loaded.meta.get("nccl_channels"),
            }
        )
    return out


@python_strings()
def set_ranks_batch(loaded, mappings: list[dict[int, int]], paths: list[Path]):
    """The batch with the run's ranks, as one trace (:func:`joined`): the analysis stages then run once per
    batch, not once per file (their fixed cost per call, ~0.1 s of pandas work, is what made thousands of
    small files slow on Dask). A batch read together is renamed from its own ranks (unique per file and
    process) to the run's."""
    if isinstance(loaded, list):
        return joined([set_ranks(t, m) for t, m in zip(loaded, mappings, strict=True)])
    local = {}
    for path, by_pid in zip(paths, mappings, strict=True):
        procs = _file_ranks(loaded, path)
        local.update({int(r): by_pid[int(p)] for r, p in zip(procs["rank"], procs["pid"], strict=True)})
    k = loaded.kernels
    old = k["rank"].to_numpy()
    ranks, inv = np.unique(old, return_inverse=True)
    k["rank"] = np.array([local.get(int(r), -1) for r in ranks], dtype=np.int64)[inv].astype(k["rank"].dtype)
    order = np.lexsort((k["start_ns"].to_numpy(), k["rank"].to_numpy()))
    if not (np.diff(order) == 1).all():
        k = loaded.kernels = k.iloc[order].reset_index(drop=True)
    nv = loaded.nvtx
    if len(nv):
        nv["rank"] = pd.array([local.get(int(r)) if pd.notna(r) else None for r in nv["rank"]], dtype="Int64")
    loaded.ranks["rank"] = [local[int(r)] for r in loaded.ranks["rank"]]
    new = k["rank"].to_numpy()
    loaded.meta["file_rows"] = [
        np.flatnonzero(np.isin(new, [mappings[i][int(p)] for p in _file_ranks(loaded, path)["pid"]]))
        for i, path in enumerate(paths)
    ]
    return loaded


def joined(traces: list):
    """Several files' traces (whole ranks each, on the run's clock and ranks) as one: frames concatenated in
    file order (each file's rows stay together and in their order), categorical columns over the sorted union
    of their categories (as the loader builds them); ``meta["file_rows"]`` = each file's [first, last) kernel
    rows (as positions), which ``analysis.pipeline`` uses to keep per-file order where results depend on it."""
    from ddp_profile.trace import Trace

    if len(traces) == 1:
        return traces[0]
    kernels = [t.kernels for t in traces]
    for col in kernels[0].columns:
        if isinstance(kernels[0][col].dtype, pd.CategoricalDtype):
            cats = sorted(set().union(*(k[col].cat.categories for k in kernels)))
            kernels = [k.assign(**{col: k[col].cat.set_categories(cats)}) for k in kernels]
    sizes = np.cumsum([0] + [len(k) for k in kernels])
    nvtx = [t.nvtx for t in traces if len(t.nvtx)]
    return Trace(
        kernels=pd.concat(kernels, ignore_index=True),
        nvtx=pd.concat(nvtx, ignore_index=True) if nvtx else traces[0].nvtx,
        gpus=pd.concat([t.gpus for t in traces], ignore_index=True),
        ranks=pd.concat([t.ranks for t in traces], ignore_index=True),
        meta={"file_rows": [np.arange(a, b) for a, b in zip(sizes[:-1], sizes[1:], strict=True)]},
        run=traces[0].run,
        paths=[p for t in traces for p in t.paths],
        host_waits=pd.concat([t.host_waits for t in traces if t.host_waits is not None], ignore_index=True)
        if any(t.host_waits is not None for t in traces)
        else None,
    )


def batches(n_files: int, n_workers: int, size: int | None = None) -> list[range]:
    """File index ranges, one per task: ``size`` files each, by default about four tasks per worker (enough
    to balance uneven files, few enough that per-task overhead stays small)."""
    size = size or max(1, -(-n_files // (4 * max(1, n_workers))))
    return [range(i, min(i + size, n_files)) for i in range(0, n_files, size)]


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
    aligned: bool = True
    """Whether ``offsets`` come from the files' session starts (else all 0, as the loader does then)."""
    groups: list[range] = field(default_factory=list)
    """File index ranges, one per task (:func:`batches`); ``traces`` holds one future per group."""

    def _ensure_loaded(self) -> None:
        if self.traces is not None:
            return
        import time

        t0 = time.perf_counter()
        if not self.groups:
            self.groups = batches(len(self.paths), 1)
        paths = [[self.paths[i] for i in g] for g in self.groups]
        offsets = [[self.offsets[i] for i in g] if self.aligned else None for g in self.groups]
        loaded = self.client.map(load_batch, paths, offsets, pure=False)
        facts = [
            f
            for got in self._gather(self.client.map(evidence_batch, loaded, paths, pure=False), "loaded")
            for f in got
        ]
        mapping = self._assign_ranks(facts)
        self.traces = self.client.map(
            set_ranks_batch, loaded, [[mapping[i] for i in g] for g in self.groups], paths, pure=False
        )
        del loaded
        self.run = next((f["run"] for f in facts if f["run"] is not None), None)
        self.meta["warnings"] = list(dict.fromkeys(w for f in facts for w in f["warnings"]))
        self.meta["nccl_channels"] = max(
            (c for f in facts if (c := f["nccl_channels"]) is not None), default=None
        )
        self.stats.update(
            load_s=time.perf_counter() - t0,
            rows=sum(f["rows"] for f in facts),
            part_bytes=0,
            worker_peak_kb=0,
        )

    def _gather(self, futures: list, verb: str) -> list:
        """Results of one future per group, in group order; ``progress`` hears of each file of a group."""
        dd = _distributed()
        index = {f.key: i for i, f in enumerate(futures)}
        results: list = [None] * len(futures)
        for fut in dd.as_completed(futures):
            results[index[fut.key]] = fut.result()
            if self.progress:
                for i in self.groups[index[fut.key]]:
                    self.progress(f"{verb} {self.paths[i]}")
        return results

    def map_ranks(self, fn, per_file: list | None = None, **kwargs) -> list:
        """``fn(trace, per_file[i], **kwargs)`` (or ``fn(trace, **kwargs)``) on the worker holding batch i's
        trace (its files joined, ranks already the run's: :func:`joined`); the results, in batch order (one
        per batch: ``per_file`` has one item per batch too)."""
        self._ensure_loaded()
        extra = per_file if per_file is not None else [None] * len(self.groups)
        got = self.client.gather(self.client.map(apply, self.traces, extra, fn=fn, kwargs=kwargs, pure=False))
        parts = [g["part"] for g in got]
        self.stats["worker_peak_kb"] = max(
            [self.stats["worker_peak_kb"]] + [g["worker_peak_kb"] for g in got]
        )
        self.stats["part_bytes"] += sum(
            p.nbytes()
            if hasattr(p, "nbytes")
            else int(p.memory_usage(deep=True).sum())
            if p is not None
            else 0
            for p in parts
        )
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
        procs = pd.concat(
            [f["procs"].assign(file=i, host_order=host_order[self.hosts[i]]) for i, f in enumerate(facts)],
            ignore_index=True,
        )
        markers = pd.concat([f["markers"].assign(file=i) for i, f in enumerate(facts)], ignore_index=True)
        chosen, source = rank_rules.assign_ranks(
            procs[["file", "pid", "device", "host_order"]], markers, [export_stem(p) for p in self.paths]
        )
        self.meta["rank_source"] = source
        self.ranks = chosen
        out: list[dict[int, int]] = [{} for _ in facts]
        for f, p, r in zip(chosen["file"], chosen["pid"], chosen["rank"], strict=True):
            out[int(f)][int(p)] = int(r)
        return out


def load_trace(
    paths,
    *,
    client=None,
    scheduler: str | None = None,
    jobs: int | None = None,
    processes: bool = True,
    progress=None,
    batch: int | None = None,
) -> DistributedTrace:
    """What :func:`ddp_profile.nsys.loader.load_trace` is for one run, on Dask: a handle whose analysis runs
    per rank on the workers. ``client``: a ``dask.distributed.Client`` to use; else one is made
    (:func:`make_client`: ``scheduler`` address, or a LocalCluster of ``jobs`` workers). ``batch``: files per
    task (default: about four tasks per worker thread, :func:`batches`). Raises DaskMissing without Dask,
    TraceError for unreadable inputs (as the loader)."""
    files = find_exports(paths)
    if client is None:
        client = make_client(scheduler, workers=jobs, processes=processes)
    groups = batches(len(files), sum(client.nthreads().values()) or 1, batch)
    facts = [
        f
        for got in client.gather(client.map(facts_batch, [[files[i] for i in g] for g in groups], pure=False))
        for f in got
    ]
    utc = [f["utc_ns"] for f in facts]
    # As the loader: offsets from the session starts, none when a file lacks its start.
    aligned = len(files) > 1 and all(u is not None for u in utc)
    offsets = [u - min(utc) for u in utc] if aligned else [0] * len(files)
    return DistributedTrace(
        paths=files,
        client=client,
        offsets=offsets,
        hosts=[f["host"] for f in facts],
        progress=progress,
        groups=groups,
        aligned=aligned,
    )
