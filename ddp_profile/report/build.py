"""The report's entry point: find runs, load and analyse them, and write every page into one folder with
plotly.js written once beside them (an index page, one page per run, one per comparison: strategy set,
scaling, bucket sweep), and the pages of any :class:`Extra` the caller passes (the findings are one: the
report imports none of them).

Pages are built in sibling modules: :mod:`~ddp_profile.report.runs` (run ids, page names, grouping),
:mod:`~ddp_profile.report.html` (escaping, page frame, figures, tables), :mod:`~ddp_profile.report.compare`
(the one comparison), :mod:`~ddp_profile.report.run_page` (one run's page), :mod:`~ddp_profile.report.index`
(index, strategy and scaling pages), :mod:`~ddp_profile.report.sweep` (bucket sweeps). The folder is built beside the destination and swapped in at the end
(:func:`write_report_dir`), so an interrupted or failed run never replaces a good report.
"""  # noqa: E501

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from ddp_profile.analysis.identity import StepSelection
from ddp_profile.errors import (
    OutputError,
    TraceError,
    UsageError,
    commit_output,
    one_line,
    quiet_worker_signals,
)
from ddp_profile.nsys.files import EXPORT_SUFFIXES, export_stem, reuse_decompressed
from ddp_profile.report import cache as run_cache
from ddp_profile.report import perfetto
from ddp_profile.report.compare import assign_baselines, comparison
from ddp_profile.report.html import PLOTLY_JS
from ddp_profile.report.index import render_group_page, render_index, render_scaling_page
from ddp_profile.report.run_page import render_run_page
from ddp_profile.report.runs import (
    PROGRAM_FILE,
    Run,
    discover_runs,
    fill_from_trace,
    group_runs,
    host_diagnosis,
    normalise_meta,
)
from ddp_profile.report.sweep import render_sweep_page, sweep_facts
from ddp_profile.safeio import read_side_json, shown_path

ALL_STEPS = StepSelection()  # every step, found by the default patterns
MARKER = ".ddp-profile-report"  # only folders holding this (or empty ones) are ever replaced


# ---- finding and loading runs ---------------------------------------------------------------------------


def _say(message: str) -> None:
    print(one_line(f"report:   {message}"), file=sys.stderr, flush=True)


def load_one(path: Path, selection: StepSelection = ALL_STEPS, cache_entry: Path | None = None):
    """Load and analyse one run (runs in a worker process under --jobs; progress lines go to stderr):
    (trace, analysis, its launch section, the main thread's launch and sync calls) over the steps of
    ``selection`` (a StepSelection: ``analyze``'s step pattern, phase patterns and steps). The run's JSON (``run.json``, ``<run>.json``) is found by the loader (``trace.run``).
    With ``cache_entry``, the result is also written there (report/cache.py); a cache that cannot be
    written is skipped with a line on stderr, not an error of the run."""  # noqa: E501
    from ddp_profile.analysis import analyze
    from ddp_profile.nsys.api import load_calls_and_waits
    from ddp_profile.nsys.loader import load_trace

    t0 = time.perf_counter()
    with reuse_decompressed():  # the API calls are read from the same (compressed) export again
        # The CUDA API table is read once: the calls for the launch diagnosis and the CPU rows, and from
        # the same read the host waits (the straggler's evidence) that load_trace would scan for.
        trace = load_trace(path, progress=_say, host_waits=False)
        api, trace.host_waits = load_calls_and_waits(trace)
        _say(f"loaded {path} in {time.perf_counter() - t0:.1f} s; analysing")
        try:
            analysis = analyze(trace, **selection.analyze_kwargs(), api=api)
            launches, host_calls = host_diagnosis(trace, analysis, api)
            del api
        except (
            UsageError
        ) as exc:  # a --steps selection with no step of this run: the user's to fix, not a failure
            raise UsageError(f"{path}: {exc}") from None
    result = trace, analysis, launches, host_calls
    if cache_entry is not None:
        try:
            run_cache.store(cache_entry, result)
        except OutputError as exc:
            _say(f"not cached: {exc}")
    return result


def _load_stored(path: Path, selection: StepSelection, entry: Path | None):
    """:func:`load_one` in a worker process: the entry's path when the result went into the cache (the
    parent reads it there, rather than receiving a second pickle through the pool's pipe), else the result."""
    result = load_one(path, selection, entry)
    return entry if entry is not None and entry.is_file() else result


def read_program(path: Path) -> dict | None:
    """The run folder's program.json (a foreign program's own description), or None when absent or not a
    JSON object."""
    if not path.is_dir():
        return None
    try:  # a regular file only, size-capped (a FIFO or /dev/zero named program.json must not block)
        data = read_side_json(path / PROGRAM_FILE)
    except TraceError as exc:
        _say(f"{exc}; ignored")
        return None
    return data if isinstance(data, dict) else None


def load_runs(
    paths: list,
    jobs: int = 1,
    progress=None,
    selection: StepSelection = ALL_STEPS,
    cache: run_cache.RunCache | None = None,
) -> tuple[list[Run], list[str]]:
    """Load and analyse every run, reporting progress on ``progress`` (stderr by default). ``paths``: run
    locations or (location, run id) pairs from :func:`discover_runs`; ``selection``: the StepSelection
    (``analyze``'s; one keeping no step of a run raises UsageError). With ``cache``, a run whose inputs,
    step selection and tool are unchanged since the last report is taken from it, and the others are stored
    in it. Returns the runs and one message per run that failed (the report lists them; the CLI exits
    non-zero)."""
    from ddp_profile.errors import DdpProfileError

    out = progress or sys.stderr
    pairs = [p if isinstance(p, tuple) else (Path(p), None) for p in paths]
    ids = {str(p): rid for p, rid in pairs}
    paths = [p for p, _ in pairs]
    runs, failures, t0 = [], [], time.perf_counter()

    def done(i, path, result):
        if isinstance(
            result, UsageError
        ):  # a bad setting (environment, options) fails every run alike: exit 2
            raise result
        if isinstance(result, DdpProfileError):
            failures.append(f"{path}: {result}")
            print(one_line(f"report: [{i}/{len(paths)}] FAILED {path}: {result}"), file=out, flush=True)
            return
        trace, analysis, launches, host_calls = result
        meta = fill_from_trace(normalise_meta(getattr(trace, "run", None) or {}), trace, read_program(path))
        rid = shown_path(
            ids.get(str(path)) or meta.get("run_name") or (path.name if path.is_dir() else export_stem(path))
        )  # a non-UTF-8 name escaped
        folder = str(rid).rsplit("/", 1)[0] if "/" in str(rid) else ""
        given = meta.get("run_name")  # shown beside the id when the JSON names the run differently
        name = str(rid) if given in (None, "", str(rid).rsplit("/", 1)[-1]) else f"{rid} ({given})"
        runs.append(
            Run(
                name,
                trace,
                analysis,
                meta,
                run_id=str(rid),
                folder=folder,
                launches=launches,
                host_calls=host_calls,
            )
        )
        print(
            f"report: [{i}/{len(paths)}] analysed {name} ({len(trace.kernels):,} kernels, "
            f"{time.perf_counter() - t0:.1f} s elapsed)",
            file=out,
            flush=True,
        )

    print(f"report: loading {len(paths)} run(s) with {jobs} job(s)", file=out, flush=True)
    keys = [run_cache.run_key(p, cache.options) if cache is not None else None for p in paths]
    cached = [cache.get(k) if cache is not None and k is not None else None for k in keys]
    if cache is not None and any(c is not None for c in cached):
        print(
            f"report: {sum(c is not None for c in cached)} run(s) unchanged since the last report: taken from "
            f"its cache",
            file=out,
            flush=True,
        )
    entries = [
        cache.entry_path(k) if cache is not None and k is not None and c is None else None
        for k, c in zip(keys, cached, strict=True)
    ]

    def finish(i, p, result):
        if keys[i - 1] is not None and entries[i - 1] is not None and not isinstance(result, DdpProfileError):
            cache.record(keys[i - 1], entries[i - 1])
        done(i, p, result)

    todo = [i for i, c in enumerate(cached) if c is None]
    if jobs <= 1 or len(todo) <= 1:
        for i, p in enumerate(paths, 1):
            result = cached[i - 1]
            if result is None:
                try:
                    result = load_one(p, selection, entries[i - 1])
                except UsageError:
                    raise
                except DdpProfileError as exc:
                    result = exc
            finish(i, p, result)
    else:
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        pool = ProcessPoolExecutor(max_workers=jobs, initializer=quiet_worker_signals)
        try:
            futures = {i: pool.submit(_load_stored, paths[i], selection, entries[i]) for i in todo}
            for i, p in enumerate(paths, 1):
                try:
                    result = cached[i - 1] if i - 1 not in futures else futures[i - 1].result()
                    if isinstance(result, Path):  # written to the cache by the worker: read, not sent back
                        result = run_cache.read_entry(result)
                except UsageError:
                    raise
                except DdpProfileError as exc:
                    result = exc
                except BrokenProcessPool:  # a worker was killed (OOM killer, kill -9): its runs are failures
                    result = TraceError(
                        "a worker process died while loading it (killed, or out of memory); "
                        "run again with fewer --jobs"
                    )
                finish(i, p, result)
        except BaseException:  # Ctrl-C / SIGTERM: do not wait for the other workers' loads
            _stop_workers(pool)
            raise
        pool.shutdown()
    names = [r.run_id for r in runs]
    for i, r in enumerate(runs):  # bare locations with one run_name: keep both pages apart
        if names.count(r.run_id) > 1 and names.index(r.run_id) != i:
            r.run_id = r.name = f"{r.run_id}~{i + 1}"
    return runs, failures


def _stop_workers(pool) -> None:
    """Cancel what has not started and end the worker processes now (shutdown would wait for their loads)."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.join(2)
        if proc.is_alive():  # a worker inherits the SIGTERM-as-exception handler and may linger: end it
            proc.kill()
            proc.join(2)


# ---- folder writing, entry points -----------------------------------------------------------------------


def write_report_dir(out_dir: Path, fill) -> Path:
    """Build the report in a temporary sibling folder via ``fill(tmp_path)`` and swap it in.

    The old report is moved aside only after the new one is complete, and deleted only after the new one
    is in place; any failure (or Ctrl-C) before the swap removes the temporary folder and leaves the old
    report untouched. A non-empty destination without our marker file is refused, never deleted."""
    out_dir = Path(out_dir).resolve()
    if out_dir.exists() and (
        not out_dir.is_dir() or (any(out_dir.iterdir()) and not (out_dir / MARKER).exists())
    ):
        raise OutputError(f"{out_dir}: exists and is not a ddp-profile report folder; choose another -o")
    if out_dir.is_dir():  # a report folder someone put exports into: replacing it would delete them
        held = next((p for p in out_dir.rglob("*") if p.name.endswith(EXPORT_SUFFIXES)), None)
        if held is not None:
            raise UsageError(
                f"{out_dir}: holds an nsys export ({held.relative_to(out_dir)}) and would be replaced; "
                "move the export out or choose another -o"
            )
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    except OSError as exc:
        raise OutputError(f"{out_dir.parent}: cannot create the report folder ({exc.strerror})") from exc
    try:
        fill(tmp)
        (tmp / MARKER).write_text("written by ddp-profile report; this folder is replaced on each run\n")
        os.chmod(tmp, 0o755)
        commit_output(
            tmp, out_dir
        )  # the old folder moved aside, the new one in (put back if a signal ends us)
    except OSError as exc:
        raise OutputError(
            f"{out_dir}: cannot write the report ({exc.strerror or exc}); the previous report is unchanged"
        ) from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def _write(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8", errors="backslashreplace")  # a non-UTF-8 file name in the text


class Extra(Protocol):
    """Pages a report adds beside its run pages, from the same loaded runs, in the same atomic swap
    (``ddp_profile.findings.pages.FindingsPages`` is one). The report imports no extra: its caller passes them."""

    def source(self, paths: list) -> Path | None:
        """What the extra answers from, for the report's inputs; None when it has nothing to add for them."""
        ...

    def skipped(self, runs: list[Run]) -> str | None:
        """For an extra whose :meth:`source` was None: a note on stderr saying why (None: say nothing)."""
        ...

    def write(self, source: Path, runs: list[Run], folder: Path, out) -> tuple[dict[str, int], str]:
        """Write its pages into ``folder`` (progress notes on ``out``): ({file: bytes}, an HTML block for the
        top of the index, "" for none)."""
        ...


def write_report(
    runs: list[Run],
    out_dir: Path,
    failures: list[str] | tuple[str, ...] = (),
    progress=None,
    extras: Sequence[tuple[Extra, Path]] = (),
    cache: run_cache.RunCache | None = None,
    key: str | None = None,
    jobs: int = 1,
) -> dict:
    """Render every page into ``out_dir`` atomically; returns {page name: bytes}. ``extras``: (extra, its
    source) pairs whose pages are built from the same already-analysed runs and land in the same atomic
    swap, their index blocks first on the index. ``jobs`` > 1 renders the run pages (and their Perfetto
    files) in that many forked processes (:func:`_run_pages`)."""
    from plotly.offline import get_plotlyjs

    out = progress or sys.stderr
    groups = group_runs(runs)
    sizes = {}

    assign_baselines(runs)
    context: dict[str, Any] = {
        "groups": groups,
        "comps": {g.page: comparison(g.runs) for g in groups if g.kind == "strategies"},
        "sweeps": {g.page: sweep_facts(g, runs) for g in groups if g.kind == "sweep"},
    }

    def fill(tmp: Path):
        _write(tmp / PLOTLY_JS, get_plotlyjs())
        for i, (page, size, seconds) in enumerate(_run_pages(runs, context, tmp, jobs), 1):
            sizes[page] = size
            print(
                f"report: [{i}/{len(runs)}] page {page} ({size / 1e6:.1f} MB, {seconds:.1f} s)",
                file=out,
                flush=True,
            )
        for g in groups:
            if g.kind == "sweep":
                text = render_sweep_page(g, runs, facts=context["sweeps"][g.page])
            else:
                text = {"scaling": render_scaling_page}.get(g.kind, render_group_page)(g)
            _write(tmp / g.page, text)
            sizes[g.page] = (tmp / g.page).stat().st_size
        front = []  # the extras' blocks, first on the index
        for extra, source in extras:
            written, block = extra.write(source, runs, tmp, out)
            sizes.update(written)
            front += [block] if block else []
        _write(tmp / "index.html", render_index(runs, groups, list(failures), context=context, front=front))
        sizes["index.html"] = (tmp / "index.html").stat().st_size
        if cache is not None:
            cache.carry_into(tmp)  # the runs' cached results go into the new folder (not counted as pages)
        if key is not None:  # what this report was made from, for the next one (report/cache.py)
            run_cache.write_record(tmp, key, list(failures), sizes)

    write_report_dir(out_dir, fill)
    return sizes


_PAGES: tuple | None = None  # (runs, context, folder) while run pages are rendered; forked workers inherit it


def _page_of(i: int) -> tuple[str, int, float]:
    """Render run ``i``'s page (and its Perfetto file) into the folder: (page, bytes, seconds)."""
    assert _PAGES is not None
    runs, context, folder = _PAGES
    r, t0 = runs[i], time.perf_counter()
    _write(folder / r.page, render_run_page(r, context))
    if perfetto.fits_in_report(r.trace):
        perfetto.write_perfetto(folder / perfetto.file_name(r.page), r.trace, r.analysis)
    return r.page, (folder / r.page).stat().st_size, time.perf_counter() - t0


def _run_pages(runs: list[Run], context: dict, folder: Path, jobs: int):
    """(page, bytes, seconds) of each run page, in run order. With ``jobs`` > 1 (and fork available) the
    pages are rendered in forked worker processes, which inherit the loaded runs (nothing large is sent to
    them; each writes its own files); pages depend only on their run and the shared context, so the
    folder is the same either way (tests/report/test_report_cache.py)."""
    import multiprocessing as mp

    global _PAGES
    _PAGES = (runs, context, folder)
    try:
        if jobs <= 1 or len(runs) <= 1 or "fork" not in mp.get_all_start_methods():
            yield from map(_page_of, range(len(runs)))
            return
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(
            max_workers=min(jobs, len(runs)),
            mp_context=mp.get_context("fork"),
            initializer=quiet_worker_signals,
        ) as pool:
            yield from pool.map(_page_of, range(len(runs)))
    finally:
        _PAGES = None


def _check_inputs_outside(paths: list, out_dir: Path) -> None:
    """The output folder is replaced as a whole: an input inside it (an export, a run folder, the folder
    itself) would be deleted. Refused before anything is read (UsageError: a wrong ``-o``)."""
    out = Path(out_dir).resolve()
    for p in paths:
        p = Path(p[0] if isinstance(p, tuple) else p).resolve()
        if p == out or out in p.parents:
            raise UsageError(
                f"input {p} is inside the output folder {out}, which the report replaces; "
                "choose another -o (inputs are never deleted)"
            )


def build_report(
    paths: list,
    out_dir: Path,
    jobs: int = 1,
    progress=None,
    extras: Sequence[Extra] = (),
    selection: StepSelection = ALL_STEPS,
    cache: bool = True,
    split_jobs: bool = True,
) -> tuple[dict, list[str]]:
    """Find, load, analyse and render; the library behind `ddp-profile report`. ``extras`` add their pages
    where their :meth:`Extra.source` finds something to answer from (the command passes the findings, which
    then need one campaign folder); otherwise their note on stderr says why they were skipped. ``selection``:
    the StepSelection every run is analysed over (``analyze``'s step pattern, phases and steps). With
    ``cache`` (default), per-run results are kept in the report folder and reused while unchanged
    (report/cache.py). ``split_jobs``: a folder whose exports' captures do not overlap in time is several
    runs, one per export (a line on stderr says so); False reports every folder as one job."""
    _check_inputs_outside(paths, out_dir)
    grouping: list[str] = []
    found = discover_runs(paths, split_jobs=split_jobs, notes=grouping)
    for line in grouping:
        print(one_line(f"report: {line}"), file=progress or sys.stderr, flush=True)
    if not found:
        raise TraceError(
            f"no nsys exports (*.sqlite, *.sqlite.xz) under {', '.join(map(str, paths))}; "
            "record runs with scripts/profile_*.sh or pass export paths"
        )
    sources = [(extra, extra.source(paths)) for extra in extras]
    key = None
    if cache:  # nothing changed since the last report (inputs, tool, options): the folder is kept as it is
        key = run_cache.report_key(
            paths,
            [p for p, _ in found],
            out_dir,
            {
                "extras": [type(e).__name__ for e, s in sources if s is not None],
                "ids": [rid for _, rid in found],
                "steps": selection.key(),
            },
        )
        kept = run_cache.unchanged_report(out_dir, MARKER, key)
        if kept is not None:
            print(
                f"report: {out_dir} is up to date (same inputs and tool as when it was written); kept as it is",
                file=progress or sys.stderr,
                flush=True,
            )
            return kept
    store = run_cache.RunCache(out_dir, MARKER, options=selection.key()) if cache else None
    try:
        return _build(
            paths=paths,
            found=found,
            out_dir=out_dir,
            jobs=jobs,
            progress=progress,
            sources=sources,
            store=store,
            key=key,
            selection=selection,
        )
    finally:
        if store is not None:
            store.close()


def _build(
    *, paths, found, out_dir, jobs, progress, sources, store, key, selection
) -> tuple[dict, list[str]]:
    runs, failures = load_runs(found, jobs, progress, selection, cache=store)
    if not runs:
        raise TraceError("no run could be loaded: " + "; ".join(failures))
    for extra, source in sources:
        note = extra.skipped(runs) if source is None else None
        if note:
            print(note, file=progress or sys.stderr, flush=True)
    if len(paths) == 1 and Path(paths[0]).is_dir():  # hosts.txt beside the runs: which host ran which
        from ddp_profile.report.hosts import HOSTS_FILE, read_hosts

        hosts = read_hosts(Path(paths[0]))
        listed = (Path(paths[0]) / HOSTS_FILE).is_file()
        for r in runs:
            r.host = hosts.get(r.run_id) if r.run_id else None
            r.hosts_file = listed
    return write_report(
        runs,
        out_dir,
        failures,
        progress,
        extras=[(e, s) for e, s in sources if s is not None],
        cache=store,
        key=key,
        jobs=jobs,
    ), failures
