"""Analyzer performance at scale (issues 8 and 18): the floor, load + analyze, scaling, memory, parallel
per-rank loading and report rendering, on real-shaped synthetic nsys exports of 0.1 M, 1 M and 10 M kernels
(non-launch CUDA API calls per kernel by name and NVTX density measured on traces/, ``real_shape``), one
committed real export replicated along time (``--replica``), and many small per-rank files on threads vs
Dask worker processes (``--sweep 64,256,1024``: wall, client and worker peak memory, cross-rank matching).

    .venv/bin/python benchmarks/bench_analyzer.py                      # all sizes, writes benchmarks/RESULTS.md
    .venv/bin/python benchmarks/bench_analyzer.py --sizes 0.1M --repeat 1 --no-render   # quick look
    .venv/bin/python benchmarks/bench_analyzer.py --browser            # also time the page in Chromium
    .venv/bin/python benchmarks/bench_analyzer.py --browser --readme docs/performance.md   # and refresh its section
    .venv/bin/python benchmarks/bench_analyzer.py --from-json benchmarks/results.json --readme docs/performance.md
                                            # re-render RESULTS.md and that section, measuring nothing

``--readme`` replaces the text between ``<!-- perf:begin -->`` and ``<!-- perf:end -->`` (atomically; the
markers are checked before anything is measured). ``--from-json`` renders from recorded results, so the docs
can follow a wording change without a new (slow) run; it leaves results.json as it is.

Every measurement runs in a fresh Python process (``--measure``), so its peak RSS (``ru_maxrss``) is its own;
each reports its RSS before the measured work too, and the peak above that is what the memory target is
judged on (an interpreter with pandas imported already holds ~100 MB whatever the trace). Timings exclude
imports. Before timing, each export is read once end to end so every measurement finds it in the page cache.
Floor and analysis alternate within each repeat, and the minimum over repeats is reported (this machine is
shared: the minimum is the least disturbed run).

Exports are built by :func:`ddp_profile.nsys.synth_scale.synth_scale_run` and cached under ``benchmarks/.data/``
(git-ignored); ``--rebuild`` builds them again. This is a measurement script, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / ".data"  # git-ignored cache of built exports (--data moves it)
KERNEL_COLS = ["start", "end", "deviceId", "streamId", "globalPid", "correlationId", "shortName"]
TARGET_RATIO, TARGET_MEM, TARGET_PAGE_S = 1.3, 2.0, 5.0


def parse_size(text: str) -> int:
    t = text.strip().upper()
    mult = {"K": 1_000, "M": 1_000_000}.get(t[-1:], 1)
    return int(float(t[:-1] if t[-1:] in "KM" else t) * mult)


def label(n: int) -> str:
    return f"{n / 1e6:g}M"


# ---- measurements (each in its own process) -----------------------------------------------------------


def _rss_now_kb() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def _peak_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


def measure_floor(path: str) -> dict:
    """The floor: the plainest complete read of the kernel columns the analysis needs into numpy."""
    import itertools
    import sqlite3

    import numpy as np

    before = _rss_now_kb()
    t0 = time.perf_counter()
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    n = con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    cur = con.execute(f"SELECT {', '.join(KERNEL_COLS)} FROM CUPTI_ACTIVITY_KIND_KERNEL")
    arr = np.fromiter(itertools.chain.from_iterable(cur), dtype=np.int64, count=n * len(KERNEL_COLS))
    arr = arr.reshape(n, len(KERNEL_COLS))
    seconds = time.perf_counter() - t0
    return {
        "seconds": seconds,
        "rows": n,
        "rss_before_kb": before,
        "peak_kb": _peak_kb(),
        "checksum": int(arr[:, 0].sum() % 1_000_003),
    }


def measure_floor_concat(path: str) -> dict:
    """A faster bare read (one group_concat string per column, parsed by numpy): the technique the loader
    uses, timed on the kernel table alone."""
    import sqlite3

    import numpy as np

    before = _rss_now_kb()
    t0 = time.perf_counter()
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    texts = con.execute(
        f"SELECT {', '.join(f'group_concat({c})' for c in KERNEL_COLS)} FROM CUPTI_ACTIVITY_KIND_KERNEL"
    ).fetchone()
    cols = [np.fromstring(t, dtype=np.int64, sep=",") for t in texts]
    del texts
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "rows": len(cols[0]), "rss_before_kb": before, "peak_kb": _peak_kb()}


def _launch_query(path: str) -> tuple[str, str]:
    """The two SELECTs of the rows ``analyze`` needs, as the loader words them (``sql``): the kernel columns,
    and the launching CUDA API calls (selected by name id, with a correlation id)."""
    from ddp_profile.nsys import sql
    from ddp_profile.nsys.files import open_export

    con = open_export(Path(path))
    ids = sql.launch_name_ids(con, sql.tables(con))
    con.close()
    names = f"nameId IN ({', '.join(map(str, ids))}) AND " if ids is not None else ""
    return (
        f"SELECT {', '.join(KERNEL_COLS)} FROM {sql.KERNEL}",
        f"SELECT globalTid, correlationId, start FROM {sql.RUNTIME} WHERE {names}correlationId != 0",
    )


def measure_floor_arrow(path: str) -> dict:
    """The issue-28 floor: a native Arrow read (ADBC SQLite driver, the loader's batch size) of the rows
    ``analyze`` needs, the kernel rows and the kernel-launch rows of the runtime table, into numpy arrays.
    Single-threaded; the launch-row names are looked up first (not timed: a few hundred strings)."""
    import adbc_driver_sqlite.dbapi as dbapi
    import numpy as np
    import pyarrow  # noqa: F401  (imported before the clock, as the driver's results need it)

    from ddp_profile.nsys.columnar import BATCH_ROWS, Reader

    kernels_q, launch_q = _launch_query(path)
    before = _rss_now_kb()
    t0 = time.perf_counter()
    con = dbapi.connect(Reader(Path(path)).uri)
    cur = con.cursor()
    cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)})
    cols = []
    for q in (kernels_q, launch_q):
        cur.execute(q)
        table = cur.fetch_arrow_table()
        cols += [np.asarray(c.to_numpy()) for c in table.columns]
        del table
    seconds = time.perf_counter() - t0
    con.close()
    k, n = len(cols[0]), len(cols[-1])
    return {
        "seconds": seconds,
        "rows": k,
        "launch_rows": n,
        "rss_before_kb": before,
        "peak_kb": _peak_kb(),
        "loaded_int64_mb": (7 * k + 3 * n) * 8 / 1e6,
    }


def measure_floor_cx(path: str) -> dict:
    """The same rows read by connectorx (Arrow), for the choice of reader; {"available": False} without it."""
    try:
        import connectorx as cx
    except ImportError:
        return {"available": False}
    import numpy as np

    kernels_q, launch_q = _launch_query(path)
    t0 = time.perf_counter()
    cols = []
    for q in (kernels_q, launch_q):
        table = cx.read_sql(f"sqlite://{Path(path).resolve()}", q, return_type="arrow")
        cols += [np.asarray(c.to_numpy()) for c in table.columns]
    return {
        "available": True,
        "seconds": time.perf_counter() - t0,
        "rows": len(cols[0]),
        "version": cx.__version__,
    }


def _children_cpu_s() -> float:
    """User + system CPU seconds of this process's finished children (and theirs): a figure the machine's
    other work disturbs far less than wall time."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def measure_cli(path: str) -> dict:
    """`python -m ddp_profile analyze PATH --format json -o FILE` as a user runs it: wall time from process
    start to exit (interpreter start and imports included), and the process's peak RSS."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "analysis.json"
        c0, t0 = _children_cpu_s(), time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "ddp_profile", "analyze", path, "--format", "json", "-o", str(out)],
            cwd=HERE.parent,
            capture_output=True,
            text=True,
        )
        seconds, cpu_s = time.perf_counter() - t0, _children_cpu_s() - c0
        if proc.returncode != 0:
            raise SystemExit(f"analyze failed on {path}: {proc.stderr[-2000:]}")
        size = out.stat().st_size
        with open(out, encoding="utf-8") as f:
            head = f.read(1 << 16)  # the summary comes first; the file can be hundreds of MB
    counts = {k: int(m.group(1)) for k in ("n_ranks", "n_steps") if (m := re.search(rf'"{k}": (\d+)', head))}
    return {
        "seconds": seconds,
        "cpu_s": cpu_s,
        "json_mb": size / 1e6,
        "peak_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
        **counts,
    }


STARTUP_MODULES = (
    "ddp_profile.cli",
    "ddp_profile.commands.analyze",
    "ddp_profile.nsys.loader",
    "ddp_profile.analysis",
    "ddp_profile.commands.writers",
)


def measure_startup(_path: str) -> dict:
    """What the `analyze` command pays before it reads a row: a fresh interpreter importing the modules it runs
    (numpy, pandas, pyarrow and the driver come with them), from process start to exit."""
    code = "; ".join(f"import {m}" for m in STARTUP_MODULES)
    c0, t0 = _children_cpu_s(), time.perf_counter()
    subprocess.run([sys.executable, "-c", code], cwd=HERE.parent, check=True)
    return {"seconds": time.perf_counter() - t0, "cpu_s": _children_cpu_s() - c0}


def measure_analyze(path: str, jobs: int = 1) -> dict:
    """load_trace + analyze (the core sections `analyze` outputs by default: steps, phases, overlap per kernel
    and rank, collectives, cost model, contention) + its JSON text, in one process, imports excluded."""
    from ddp_profile.analysis import OPTIONAL_SECTIONS, analyze
    from ddp_profile.commands.writers import json_text
    from ddp_profile.nsys.loader import load_trace
    from ddp_profile.schema import JSON_SECTIONS

    core = [k for k in JSON_SECTIONS if k not in OPTIONAL_SECTIONS]
    _warm_imports()
    before = _rss_now_kb()
    t0 = time.perf_counter()
    trace = load_trace(path, jobs=jobs, progress=True if jobs > 1 else None)
    t1 = time.perf_counter()
    result = analyze(trace, sections=core)
    t2 = time.perf_counter()
    text = json_text(result, core)
    t3 = time.perf_counter()
    s = result.summary()
    return {
        "seconds": t3 - t0,
        "load_s": t1 - t0,
        "analyze_s": t2 - t1,
        "json_s": t3 - t2,
        "json_mb": len(text) / 1e6,
        "rows": len(trace.kernels),
        "rss_before_kb": before,
        "peak_kb": _peak_kb(),
        "n_ranks": s["n_ranks"],
        "n_steps": s["n_steps"],
        "n_collectives": s["n_collectives"],
        "overlap_pct": s["overlap_pct"],
        "frame_bytes_per_row": trace.kernels.memory_usage(deep=True, index=False).sum()
        / max(1, len(trace.kernels)),
    }


def _warm_imports() -> None:
    """Load and analyse a tiny export first, so modules imported lazily on first use (pandas internals,
    regexes, the Arrow driver) are in memory before the baseline RSS is taken: the peak then measures the
    trace's data."""
    from ddp_profile.analysis import analyze
    from ddp_profile.commands.writers import json_text
    from ddp_profile.nsys.loader import load_trace
    from ddp_profile.nsys.synth import synth_ddp_run

    with tempfile.TemporaryDirectory() as tmp:
        json_text(analyze(load_trace(synth_ddp_run(Path(tmp) / "warm.sqlite")["path"])), ["steps"])


def measure_render(path: str, browser: bool) -> dict:
    """Time writing the report (one run page + index + plotly.js) and, optionally, opening the run page
    in headless Chromium until every figure has drawn."""
    from ddp_profile import report
    from ddp_profile.analysis import analyze
    from ddp_profile.nsys.loader import load_trace
    from ddp_profile.report.runs import host_diagnosis, read_api

    trace = load_trace(path)
    api = read_api(trace)
    analysis = analyze(trace, api=api)
    launches, host_calls = host_diagnosis(trace, analysis, api)  # as the report loads a run: CPU rows too
    run = report.Run(
        Path(path).name.split(".sqlite")[0], trace, analysis, launches=launches, host_calls=host_calls
    )
    out = Path(tempfile.mkdtemp(prefix="bench-report-")) / "report"
    try:
        t0 = time.perf_counter()
        sizes = report.write_report([run], out, progress=open(os.devnull, "w"))
        res = {
            "render_s": time.perf_counter() - t0,
            "page_mb": sizes[run.page] / 1e6,
            "rows": len(trace.kernels),
        }
        if browser:
            res.update(_open_in_browser(out / run.page, run.page and sizes[run.page]))
        return res
    finally:
        shutil.rmtree(out.parent, ignore_errors=True)


# In the page before its own scripts: a mark when, after the load event, the main thread first runs a task
# (the page has parsed, its scripts have run: a click or hover would now be answered).
_IDLE_MARK = "addEventListener('load',function(){setTimeout(function(){performance.mark('bench-idle-after-load');},0);});"  # noqa: E501


def _open_in_browser(page_path: Path, _size) -> dict:
    """Open the run page in headless Chromium. ``browser_open_s``: from navigation start until the timeline
    is drawn (its ``ddp-timeline-drawn`` mark) and the page is interactive (the first task after the load
    event), both read from the page's own performance timeline; the median of 3 opens in fresh tabs.
    ``figures_s``: then, scrolling to the bottom, until every plotly figure below the timeline has drawn
    (they are drawn, and plotly.js fetched, when they come near the screen)."""
    from playwright.sync_api import sync_playwright

    chromium = "/usr/bin/chromium"
    expected = page_path.read_text().count("Plotly.newPlot(")
    opens, phases, figures = [], [], []
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=["--headless", "--no-sandbox", "--disable-gpu"])
        for _ in range(3):
            page = b.new_page(viewport={"width": 1400, "height": 1000})
            page.add_init_script(_IDLE_MARK)
            page.goto(page_path.as_uri())
            page.wait_for_function(
                "performance.getEntriesByName('ddp-timeline-drawn').length && "
                "performance.getEntriesByName('bench-idle-after-load').length",
                timeout=120_000,
            )
            t = page.evaluate("""() => { const m = n => performance.getEntriesByName(n)[0].startTime,
                nav = performance.getEntriesByType('navigation')[0];
                return {drawn: m('ddp-timeline-drawn'), idle: m('bench-idle-after-load'),
                        html_read: nav.responseEnd, dom_ready: nav.domContentLoadedEventEnd}; }""")
            opens.append(max(t["drawn"], t["idle"]) / 1e3)
            phases.append(t)
            t0 = time.perf_counter()
            for i in range(page.locator(".figure").count()):
                page.locator(".figure").nth(i).scroll_into_view_if_needed()
            page.wait_for_function(
                f"document.querySelectorAll('.js-plotly-plot .main-svg').length >= {expected}",
                timeout=120_000,
            )
            figures.append(time.perf_counter() - t0)
            page.close()
        b.close()
    mid = sorted(range(3), key=lambda i: opens[i])[1]
    return {
        "browser_open_s": opens[mid],
        "browser_open_all_s": opens,
        "timeline_drawn_s": phases[mid]["drawn"] / 1e3,
        "html_read_s": phases[mid]["html_read"] / 1e3,
        "dom_ready_s": phases[mid]["dom_ready"] / 1e3,
        "figures_s": figures[mid],
        "figures": expected,
        "loadavg": _loadavg(),
        "browser": chromium,
    }


def measure_report(traces: str, jobs: str) -> dict:
    """`ddp-profile report` of the shipped traces as the README's quick start runs it (here into a temporary
    output folder): the first run on a fresh folder, then a second with nothing changed (which the report's
    cache in that folder serves, report/cache.py). Wall times, process start included."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "reports"
        cmd = [sys.executable, "-m", "ddp_profile", "report", traces, "-o", str(out)]
        if jobs != "default":
            cmd += ["--jobs", jobs]
        times, loads, cpu = [], [], []
        for _ in range(2):
            loads.append(_loadavg())
            c0, t0 = _children_cpu_s(), time.perf_counter()
            proc = subprocess.run(cmd, cwd=HERE.parent, capture_output=True, text=True)
            times.append(time.perf_counter() - t0)
            cpu.append(_children_cpu_s() - c0)
            if proc.returncode not in (0, 3):
                raise SystemExit(f"report failed: {proc.stderr[-2000:]}")
        pages = sum(1 for p in out.iterdir() if p.suffix == ".html")
        cache = out / ".cache"
        cache_b = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file()) if cache.is_dir() else 0
        size_b = sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) - cache_b
    return {
        "first_s": times[0],
        "second_s": times[1],
        "second_share": times[1] / times[0],
        "pages": pages,
        "size_mb": size_b / 1e6,  # the pages and their files, the cache folder excluded
        "cache_mb": cache_b / 1e6,
        "first_cpu_s": cpu[0],
        "second_cpu_s": cpu[1],
        "jobs": jobs,
        "rc": proc.returncode,
        "loadavg": loads,
        "loadavg_end": _loadavg(),
        "command": "ddp-profile report" + (f" --jobs {jobs}" if jobs != "default" else ""),
    }


def measure_nsys(path: str) -> dict:
    exe = shutil.which("nsys")
    if not exe:
        return {"available": False}
    with tempfile.TemporaryDirectory() as tmp:
        # nsys stats may add tables or indexes to the export it reads: give it a copy, so the floor and
        # the analysis keep reading the untouched file. The copy is made before the clock starts.
        copy = shutil.copyfile(path, os.path.join(tmp, "export.sqlite"))
        t0 = time.perf_counter()
        proc = subprocess.run(
            [
                exe,
                "stats",
                "-r",
                "cuda_gpu_kern_sum",
                "-f",
                "csv",
                "-o",
                f"{tmp}/k",
                "--force-export=false",
                copy,
            ],
            capture_output=True,
            text=True,
        )
        seconds = time.perf_counter() - t0
    ver = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.strip()
    return {
        "available": True,
        "seconds": seconds,
        "rc": proc.returncode,
        "version": ver.replace("NVIDIA Nsight Systems version", "nsys").strip() or None,
    }


MEASURES = {
    "floor": measure_floor,
    "floor_concat": measure_floor_concat,
    "floor_arrow": measure_floor_arrow,
    "floor_cx": measure_floor_cx,
    "analyze": measure_analyze,
    "cli": measure_cli,
    "startup": measure_startup,
}


def _child(kind: str, path: Path, *extra: str) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--measure", kind, str(path), *extra]
    load = _loadavg().split()[0]  # the 1-minute load average as the measurement starts (a shared machine)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"measurement {kind} on {path} failed:\n{proc.stderr[-3000:]}")
    if proc.stderr.strip():
        print(proc.stderr.rstrip(), file=sys.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1]) | {"loadavg": load}


# ---- real shape (issue 18): measured on the committed traces, applied to the synthetic exports ----------

TRACES = HERE.parent / "traces"
REPLICA_SOURCE = TRACES / "torch_ddp-25mb_xl_fp32_2xh200"


def real_shape() -> dict:
    """Per GPU activity row (kernel, memcpy, memset) of all committed runs: CUDA API rows by name (launching
    calls and the rest), and NVTX rows. Cached in the data folder (the traces do not change often)."""
    cache = DATA / "real_shape.json"
    if cache.exists():
        return json.loads(cache.read_text())
    from ddp_profile.nsys import sql
    from ddp_profile.nsys.files import find_exports, open_export

    runs = sorted({p.parent for p in TRACES.rglob("*.sqlite*")})
    activity = nvtx = 0
    by_name: dict[str, int] = {}
    for run in runs:
        for path in find_exports([run]):
            con = open_export(path)
            have = sql.tables(con)
            activity += sum(
                con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                for t in (sql.KERNEL, sql.MEMCPY, sql.MEMSET)
                if t in have
            )
            nvtx += con.execute(f"SELECT COUNT(*) FROM {sql.NVTX}").fetchone()[0] if sql.NVTX in have else 0
            for name, n in con.execute(
                f"SELECT s.value, COUNT(*) FROM {sql.RUNTIME} r JOIN {sql.STRINGS} s "
                "ON s.id = r.nameId GROUP BY 1"
            ):
                by_name[name] = by_name.get(name, 0) + n
            con.close()
    import fnmatch

    from ddp_profile.nsys.sql import LAUNCH_FUNCTIONS

    launch = {n for n in by_name if any(fnmatch.fnmatchcase(n, g) for g in LAUNCH_FUNCTIONS)}
    per = {n: c / activity for n, c in sorted(by_name.items(), key=lambda kv: -kv[1])}
    out = {
        "runs": len(runs),
        "activity_rows": activity,
        "api_rows": sum(by_name.values()),
        "api_per_kernel": sum(by_name.values()) / activity,
        "launch_per_kernel": sum(by_name[n] for n in launch) / activity,
        "other_api": {n: round(r, 4) for n, r in per.items() if n not in launch and r >= 1e-4},
        "launch_api": {n: round(r, 4) for n, r in per.items() if n in launch},
        "nvtx_per_kernel": nvtx / activity,
    }
    DATA.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(out, indent=1))
    return out


def replica_for(n: int, rebuild: bool) -> tuple[Path, dict]:
    """The committed 2-GPU torch_ddp export repeated along time to about ``n`` kernels (built when missing)."""
    import lzma
    import sqlite3

    from ddp_profile.nsys.synth_scale import replicate_export

    src_file = next(REPLICA_SOURCE.glob("*.sqlite.xz"))
    path = DATA / f"replica_{REPLICA_SOURCE.name}_{label(n)}.sqlite"
    src = sqlite3.connect(":memory:")
    src.deserialize(lzma.decompress(src_file.read_bytes()))
    base = src.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    copies = max(1, round(n / base))
    if rebuild or not path.exists():
        replicate_export(src, path, copies)
    src.close()
    return path, {"source": _rel(src_file), "copies": copies, "source_kernels": base}


# ---- real-shaped step cases: committed real jobs repeated along time, many steps -------------------------

REAL_CASES = {
    # name: (source under traces/, copies (None: about REAL_KERNELS kernels), what the case exercises)
    "2r-nvtx": ("torch_ddp-25mb_small_fp32_2xh200", 100, "2 ranks in one file, NVTX step ranges"),
    "2r-inferred": (
        "foreign/gpt-logevery",
        None,
        "2 ranks in one file, no step NVTX (steps inferred), a host "
        "sync every step on one rank (straggler evidence every step)",
    ),
    "4r-nvtx": (
        "two-node/bucketed-25mb_small_fp32_4xh100",
        None,
        "4 per-rank files (2 hosts), NVTX step ranges",
    ),
    "100k-steps": (
        None,
        None,
        "synthetic 2-rank export of 100,000 tiny steps (12 compute kernels and 2 "
        "all-reduces per rank and step), no step NVTX (steps inferred), real-shaped CUDA API rows",
    ),
}
REAL_KERNELS = 1_230_000
STEPS_100K = 100_000


def _open_xz(path: Path):
    import lzma
    import sqlite3

    con = sqlite3.connect(":memory:")
    con.deserialize(lzma.decompress(path.read_bytes()))
    return con


def real_case(name: str, rebuild: bool) -> tuple[Path, dict]:
    """The export (a file, or a folder of per-rank files) of case ``name`` of REAL_CASES, built when missing."""
    from ddp_profile.nsys.synth_scale import add_real_shape, replicate_exports, synth_scale_run

    source, copies, what = REAL_CASES[name]
    DATA.mkdir(parents=True, exist_ok=True)
    if source is None:
        path = DATA / f"real_{name}.sqlite"
        if rebuild or not path.exists():
            tmp = path.with_suffix(".part")
            synth_scale_run(
                tmp,
                n_kernels=STEPS_100K * 14 * 2,
                n_ranks=2,
                kernels_per_step=12,
                n_buckets=2,
                nvtx_steps=False,
                chunk_steps=4096,
            )
            add_real_shape(tmp, api_per_kernel=real_shape()["other_api"])
            tmp.rename(path)
        return path, {"case": name, "what": what, "source": "synth_scale_run", "copies": 1}
    files = sorted((TRACES / source).glob("*.sqlite.xz"))
    cons = [_open_xz(f) for f in files]
    base = sum(c.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0] for c in cons)
    copies = copies or max(1, round(REAL_KERNELS / base))
    folder = DATA / f"real_{name}_x{copies}"
    dsts = [folder / f.name.removesuffix(".xz") for f in files]
    if rebuild or not all(d.exists() for d in dsts):
        folder.mkdir(parents=True, exist_ok=True)
        replicate_exports(cons, dsts, copies)
    for c in cons:
        c.close()
    return (dsts[0] if len(dsts) == 1 else folder), {
        "case": name,
        "what": what,
        "source": _rel(TRACES / source),
        "copies": copies,
        "source_kernels": base,
    }


def export_counts(path: Path) -> dict:
    """Rows of the kernel, CUDA runtime and NVTX tables, over every export of ``path`` (a file or a folder)."""
    import sqlite3

    out = {"kernels": 0, "api_rows": 0, "nvtx_rows": 0}
    for f in [path] if path.is_file() else sorted(path.glob("*.sqlite")):
        con = sqlite3.connect(f"file:{f}?mode=ro", uri=True)
        have = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        for key, table in (
            ("kernels", "CUPTI_ACTIVITY_KIND_KERNEL"),
            ("api_rows", "CUPTI_ACTIVITY_KIND_RUNTIME"),
            ("nvtx_rows", "NVTX_EVENTS"),
        ):
            out[key] += con.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] if table in have else 0
        con.close()
    return out


def bench_real(name: str, args) -> dict:
    """One real-shaped case: the Arrow floor (summed over per-rank files) and the `analyze --format json`
    command on the whole export, alternating, the minimum of ``args.repeat``."""
    path, info = real_case(name, args.rebuild)
    files = [path] if path.is_file() else sorted(path.glob("*.sqlite"))
    for f in files:
        warm(f)
    floors, clis = [], []
    for _ in range(args.repeat):
        parts = [_child("floor_arrow", f) for f in files]
        floors.append(
            {
                "seconds": sum(x["seconds"] for x in parts),
                "loaded_int64_mb": sum(x["loaded_int64_mb"] for x in parts),
                "launch_rows": sum(x["launch_rows"] for x in parts),
                "loadavg": parts[0]["loadavg"],
            }
        )
        clis.append(_child("cli", path))
    fa, cli = min(floors, key=lambda r: r["seconds"]), min(clis, key=lambda r: r["seconds"])
    res = dict(
        info,
        path=_rel(path),
        files=len(files),
        file_mb=sum(f.stat().st_size for f in files) / 1e6,
        **export_counts(path),
        repeats=args.repeat,
        floor_arrow=fa,
        cli=cli,
        all_cli=clis,
        ratio_arrow=cli["seconds"] / fa["seconds"],
        peak_over_loaded=cli["peak_kb"] * 1024 / 1e6 / fa["loaded_int64_mb"],
    )
    res.update(n_ranks=cli.get("n_ranks"), n_steps=cli.get("n_steps"))
    print(
        f"{name:>12}: {res['n_ranks']} ranks, {res['n_steps']} steps, {res['kernels']:,} kernels, "
        f"{res['api_rows']:,} API rows | arrow floor {fa['seconds']:.2f} s | analyze {cli['seconds']:.2f} s "
        f"(CPU {cli['cpu_s']:.2f} s) = {res['ratio_arrow']:.2f}x | peak RSS {cli['peak_kb'] / 1024:.0f} MB = "
        f"{res['peak_over_loaded']:.2f}x the loaded arrays",
        flush=True,
    )
    return res


# ---- many per-rank files: threads vs Dask processes (issue 18) -------------------------------------------

SWEEP_KERNELS_PER_STEP, SWEEP_BUCKETS, SWEEP_STEPS = 500, 6, 2  # ~1,000 kernels per rank file


def sweep_folder(max_files: int, rebuild: bool) -> Path:
    """``max_files`` real-shaped per-rank exports of one run of that world size (built when missing); the
    smaller sweeps take its first files (rank markers say R/max_files: every rank sees every collective of
    the ranks loaded, so the matching is the same work)."""
    from ddp_profile.nsys.synth_scale import add_real_shape, synth_scale_run

    shape = real_shape()
    folder = DATA / f"sweep_{max_files}ranks_real"
    if rebuild and folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    per_step = SWEEP_KERNELS_PER_STEP + SWEEP_BUCKETS
    for r in range(max_files):
        path = folder / f"rank{r:04d}.sqlite"
        if not path.exists():
            tmp = path.with_suffix(".part")
            synth_scale_run(
                tmp,
                n_kernels=per_step * SWEEP_STEPS * max_files,
                n_ranks=max_files,
                kernels_per_step=SWEEP_KERNELS_PER_STEP,
                n_buckets=SWEEP_BUCKETS,
                rank_of_file=r,
            )
            add_real_shape(tmp, api_per_kernel=shape["other_api"], nvtx_per_kernel=shape["nvtx_per_kernel"])
            tmp.rename(path)
    return folder


def measure_ranks(folder: str, count: str, mode: str, jobs: str) -> dict:
    """One run's first ``count`` per-rank files: load + analyze on threads (``load_trace(jobs=)``), or on a
    LocalCluster of ``jobs`` worker processes (``ddp_profile.distributed``), with the reduce step's time and
    its cross-rank matching's share."""
    from ddp_profile.analysis import analyze
    from ddp_profile.analysis import pipeline as ap
    from ddp_profile.nsys.loader import load_trace

    files = sorted(Path(folder).glob("rank*.sqlite"))[: int(count)]
    _warm_imports()
    before = _rss_now_kb()
    out = {"files": len(files), "mode": mode, "jobs": int(jobs)}
    if mode == "threads":
        t0 = time.perf_counter()
        trace = load_trace(files, jobs=int(jobs))
        t1 = time.perf_counter()
        res = analyze(trace)
        out.update(seconds=time.perf_counter() - t0, load_s=t1 - t0, rows=len(trace.kernels))
    else:
        from ddp_profile import distributed

        t0 = time.perf_counter()
        client = distributed.make_client(workers=int(jobs), processes=True)
        client.wait_for_workers(int(jobs))
        client.run(_import_stack)  # workers import the reader and the analysis before the clock starts
        t1 = time.perf_counter()
        trace = distributed.load_trace(files, client=client)
        res = analyze(trace)
        t3 = time.perf_counter()
        # The cross-rank matching alone, on the same rows (gathered again; not counted above).
        found = trace.map_ranks(ap.step_part)
        m0 = time.perf_counter()
        ap.coll.match_parts(found, [])
        match_s = time.perf_counter() - m0
        trace.close()
        distributed.close_client(client)
        out.update(
            seconds=t3 - t1,
            cluster_start_s=t1 - t0,
            load_s=trace.stats["load_s"],
            match_s=match_s,
            match_share=match_s / (t3 - t1),
            rows=trace.stats["rows"],
            worker_peak_mb=trace.stats["worker_peak_kb"] / 1024,
            part_mb=trace.stats["part_bytes"] / 1e6,
        )
    out.update(
        rss_before_kb=before,
        peak_kb=_peak_kb(),
        client_peak_over_start_mb=(_peak_kb() - before) / 1024,
        n_collectives=len(res.collectives),
        n_ranks=int(res.rank_overlap["rank"].nunique()),
        result_digest=_result_digest(res),
    )
    return out


def _result_digest(res) -> str:
    """A digest of the whole analysis as `analyze --format json --section all` writes it: threads and Dask
    must give the same one."""
    import hashlib

    from ddp_profile.commands.writers import json_text
    from ddp_profile.schema import JSON_SECTIONS

    return hashlib.blake2b(json_text(res, list(JSON_SECTIONS)).encode(), digest_size=16).hexdigest()


def _import_stack() -> None:
    import ddp_profile.analysis.pipeline  # noqa: F401
    import ddp_profile.distributed  # noqa: F401


# ---- driver ---------------------------------------------------------------------------------------------


def export_for(n: int, ranks: int, rebuild: bool) -> tuple[Path, float | None]:
    """The cached single-file export of about ``n`` kernels (built when missing); (path, build seconds)."""
    from ddp_profile.nsys.synth_scale import add_real_shape, synth_scale_run

    DATA.mkdir(parents=True, exist_ok=True)
    path = DATA / f"ddp_{label(n)}_{ranks}ranks_real.sqlite"
    if path.exists() and not rebuild:
        return path, None
    shape = real_shape()
    t0 = time.perf_counter()
    synth_scale_run(path, n_kernels=n, n_ranks=ranks)
    add_real_shape(path, api_per_kernel=shape["other_api"], nvtx_per_kernel=shape["nvtx_per_kernel"])
    return path, time.perf_counter() - t0


def per_rank_exports(n: int, ranks: int, rebuild: bool) -> Path:
    """One export per rank (one run of about ``n`` kernels in all), as a folder, for the --jobs timing."""
    from ddp_profile.nsys.synth_scale import synth_scale_run

    folder = DATA / f"ranks_{label(n)}_{ranks}ranks"
    if rebuild and folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for r in range(ranks):
        path = folder / f"rank{r}.sqlite"
        if not path.exists():
            synth_scale_run(path, n_kernels=n, n_ranks=ranks, rank_of_file=r)
    return folder


def _rel(path: Path) -> str:
    return str(path.relative_to(HERE.parent)) if path.is_relative_to(HERE.parent) else str(path)


def warm(path: Path) -> None:
    """Read the file once so every measurement finds it in the page cache (none pays the first read)."""
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def machine() -> dict:
    cpu = next(
        (line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
        "?",
    )
    mem_kb = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal"))
    import sqlite3

    import numpy as np
    import pandas as pd

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "ram_gib": round(mem_kb / 2**20, 1),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "pandas": pd.__version__,
        "sqlite": sqlite3.sqlite_version,
        "os": platform.platform(),
        "nsys": "found" if shutil.which("nsys") else None,
        "loadavg_start": _loadavg(),
    }


def _compile_package() -> str:
    """Compile the package's modules to bytecode before anything is timed, as ``pip install`` does: where
    ``PYTHONDONTWRITEBYTECODE`` is set (as on this project's machines) a checkout's modules would otherwise be
    compiled from source at every process start (~40 modules, ~0.05-0.09 s of each ``analyze`` command)."""
    import compileall

    ok = compileall.compile_dir(str(HERE.parent / "ddp_profile"), quiet=1)
    note = "compiled before timing (as pip install does)"
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        note += "; PYTHONDONTWRITEBYTECODE is set here"
    return note if ok else note + " (some modules failed to compile)"


def _loadavg() -> str:
    """1/5/15-minute load averages: other work on the machine slows every figure alike (a shared VM)."""
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def bench_size(n: int, args, path: Path | None = None) -> dict:
    path, built = (path, None) if path else export_for(n, args.ranks, args.rebuild)
    warm(path)
    runs: dict[str, list] = {
        "floor_arrow": [],
        "cli": [],
        "analyze": [],
        "floor": [],
        "floor_concat": [],
        "startup": [],
    }
    for _ in range(args.repeat):
        for kind in runs:
            runs[kind].append(_child(kind, path))
    best = {k: min(v, key=lambda r: r["seconds"]) for k, v in runs.items()}
    rows = best["floor"]["rows"]
    int64_bytes = rows * len(KERNEL_COLS) * 8
    a, f, fa, cli = best["analyze"], best["floor"], best["floor_arrow"], best["cli"]
    res = {
        "size": label(n),
        "path": _rel(path),
        "file_mb": path.stat().st_size / 1e6,
        "build_s": built,
        "rows": rows,
        "repeats": args.repeat,
        "floor": f,
        "floor_concat": best["floor_concat"],
        "floor_arrow": fa,
        "floor_cx": _child("floor_cx", path),
        "cli": cli,
        "startup": best["startup"],
        "analyze": a,
        "all_runs": runs,
        "ratio": a["seconds"] / f["seconds"],
        # issue 28: the CLI (process start included) and the in-process work against the Arrow floor
        "ratio_arrow": cli["seconds"] / fa["seconds"],
        "ratio_arrow_inproc": a["seconds"] / fa["seconds"],
        "kernel_cols_int64_mb": int64_bytes / 1e6,
        "loaded_int64_mb": fa["loaded_int64_mb"],
        "peak_over_base_mb": (a["peak_kb"] - a["rss_before_kb"]) * 1024 / 1e6,
        "floor_peak_over_base_mb": (f["peak_kb"] - f["rss_before_kb"]) * 1024 / 1e6,
        "nsys": measure_nsys(str(path)),
    }
    res["mem_ratio"] = res["peak_over_base_mb"] / res["kernel_cols_int64_mb"]
    res["mem_ratio_loaded"] = res["peak_over_base_mb"] / res["loaded_int64_mb"]
    print(
        f"{res['size']:>5} {rows:>11,} rows | floor {f['seconds']:7.2f} s ({rows / f['seconds'] / 1e6:5.2f} M rows/s)"
        f" | load+analyze {a['seconds']:7.2f} s (load {a['load_s']:.2f} + analyze {a['analyze_s']:.2f} + json "
        f"{a['json_s']:.2f}; {rows / a['seconds'] / 1e6:5.2f} M rows/s) | ratio {res['ratio']:.2f}"
        f" | peak +{res['peak_over_base_mb']:.0f} MB = {res['mem_ratio']:.2f}x kernel cols",
        flush=True,
    )
    print(
        f"      arrow floor {fa['seconds']:.2f} s | analyze CLI {cli['seconds']:.2f} s = {res['ratio_arrow']:.2f}x "
        f"(in process {res['ratio_arrow_inproc']:.2f}x) | peak = {res['mem_ratio_loaded']:.2f}x the loaded arrays "
        f"({res['loaded_int64_mb']:.0f} MB)",
        flush=True,
    )
    return res


def _per_rank_jobs(args, results: dict) -> None:
    n_pr = parse_size(args.per_rank_size)
    folder = per_rank_exports(n_pr, args.ranks, args.rebuild)
    for p in folder.iterdir():
        warm(p)
    par = {}
    for jobs in (1, args.jobs):
        par[jobs] = min(
            (_child("analyze", folder, str(jobs)) for _ in range(args.repeat)), key=lambda r: r["seconds"]
        )
    results["per_rank"] = {
        "size": label(n_pr),
        "files": args.ranks,
        "folder": _rel(folder),
        "jobs": args.jobs,
        "by_jobs": {str(k): v for k, v in par.items()},
    }
    print(
        f"per-rank files ({args.ranks} x {label(n_pr)}/{args.ranks}): load jobs=1 {par[1]['load_s']:.2f} s, "
        f"jobs={args.jobs} {par[args.jobs]['load_s']:.2f} s",
        flush=True,
    )


def main(argv=None) -> int:
    global DATA
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--sizes", default="0.1M,1M,10M", help="kernel counts, comma-separated (default 0.1M,1M,10M)"
    )
    ap.add_argument("--ranks", type=int, default=8, help="ranks (processes) in each export (default 8)")
    ap.add_argument(
        "--repeat", type=int, default=3, help="repeats per measurement; the minimum is kept (default 3)"
    )
    ap.add_argument(
        "--jobs", type=int, default=2, help="parallel jobs for the per-rank files timing (default 2)"
    )
    ap.add_argument(
        "--per-rank-size",
        default="1M",
        help="kernels of the per-rank run, all files (default 1M; empty to skip)",
    )
    ap.add_argument("--render-size", default="1M", help="size whose report page is rendered (default 1M)")
    ap.add_argument("--replica", default="1M", help="kernels of the replicated real trace row ('' to skip)")
    ap.add_argument(
        "--sweep", default="64,256,1024", help="per-rank file counts, threads vs Dask ('' to skip)"
    )
    ap.add_argument(
        "--real",
        default=",".join(REAL_CASES),
        help=f"real-shaped step cases, comma-separated ('' to skip; default all: {', '.join(REAL_CASES)})",
    )
    ap.add_argument(
        "--update",
        metavar="FILE",
        default=None,
        help="measure only the --real cases and put them into these recorded results (the other "
        "rows are kept as recorded)",
    )
    ap.add_argument("--sweep-repeat", type=int, default=1, help="repeats per sweep point (default 1)")
    ap.add_argument("--no-render", action="store_true", help="skip the report rendering timing")
    ap.add_argument(
        "--report",
        default="traces",
        help="folder reported twice with `ddp-profile report` (first run, then unchanged; default "
        "traces, the quick start's; '' to skip)",
    )
    ap.add_argument(
        "--report-jobs", default="default", help="--jobs for that report (default: the command's own)"
    )
    ap.add_argument("--browser", action="store_true", help="also time opening the page in headless Chromium")
    ap.add_argument("--rebuild", action="store_true", help="build the cached exports again")
    ap.add_argument(
        "--data", default=str(DATA), help="cache folder for built exports (default benchmarks/.data)"
    )
    ap.add_argument(
        "--out", default=str(HERE), help="folder for RESULTS.md and results.json (default benchmarks/)"
    )
    ap.add_argument(
        "--readme",
        metavar="FILE",
        default=None,
        help="also replace the Performance text between FILE's perf:begin/perf:end markers",
    )
    ap.add_argument(
        "--from-json",
        metavar="FILE",
        default=None,
        help="measure nothing: render RESULTS.md (in --out) and --readme from these recorded results",
    )
    ap.add_argument(
        "--measure", nargs="+", help=argparse.SUPPRESS
    )  # internal: one measurement, JSON on stdout
    args = ap.parse_args(argv)
    DATA = Path(args.data).resolve()
    if args.measure:
        kind, path, *extra = args.measure
        if kind == "render":
            out = measure_render(path, browser=bool(extra and extra[0] == "browser"))
        elif kind == "report":
            out = measure_report(path, extra[0] if extra else "default")
        elif kind == "ranks":
            out = measure_ranks(path, *extra)
        elif kind == "analyze" and extra:
            out = measure_analyze(path, jobs=int(extra[0]))
        else:
            out = MEASURES[kind](path)
        print(json.dumps(out))
        return 0
    from results_md import MarkerError, check_markers, update_readme, write_results

    readme = Path(args.readme) if args.readme else None
    try:
        if readme:  # checked first: a missing marker must not cost a whole benchmark run
            check_markers(readme.read_text(encoding="utf-8"), str(readme))
        if args.from_json:
            results = json.loads(Path(args.from_json).read_text(encoding="utf-8"))
    except MarkerError as exc:
        print(f"bench_analyzer: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(
            f"bench_analyzer: cannot read {exc.filename if isinstance(exc, OSError) else args.from_json}: "
            f"{getattr(exc, 'strerror', None) or exc}",
            file=sys.stderr,
        )
        return 2
    if args.update:
        return _update(args, readme)
    if args.from_json:
        md = write_results(results, Path(args.out), write_json=False)
        print(f"wrote {md} from {args.from_json}")
        if readme:
            print(f"{'updated' if update_readme(results, readme) else 'unchanged:'} {readme}")
        return 0

    command = "python benchmarks/bench_analyzer.py " + " ".join(argv if argv is not None else sys.argv[1:])
    info = machine()
    info["bytecode"] = _compile_package()
    print(
        f"machine: {info['cpu']}, {info['cores']} cores, {info['ram_gib']} GiB; "
        f"nsys: {info['nsys'] or 'not installed (Debian nsight-systems 2023.4 is not available here)'}",
        flush=True,
    )
    sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    results = {
        "command": command.strip(),
        "machine": info,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "sizes": [bench_size(n, args) for n in sizes],
    }
    results["real_shape"] = real_shape()
    if args.replica:
        rpath, info_r = replica_for(parse_size(args.replica), args.rebuild)
        row = bench_size(0, args, path=rpath)
        row.update(size=f"replica {label(row['rows'])}", replica=info_r)
        results["replica"] = row
    results["real"] = _real_block(args)
    sweep = [int(x) for x in args.sweep.split(",") if x.strip()]
    if sweep:
        folder = sweep_folder(max(sweep), args.rebuild)
        results["sweep"] = {
            "folder": _rel(folder),
            "disk_mb": sum(p.stat().st_size for p in folder.iterdir()) / 1e6,
            "kernels_per_file": (SWEEP_KERNELS_PER_STEP + SWEEP_BUCKETS) * SWEEP_STEPS,
            "jobs": args.jobs,
            "rows": [],
        }
        for n in sweep:
            for p in sorted(folder.glob("rank*.sqlite"))[:n]:
                warm(p)
            for mode in ("threads", "dask"):
                r = min(
                    (_child("ranks", folder, str(n), mode, str(args.jobs)) for _ in range(args.sweep_repeat)),
                    key=lambda x: x["seconds"],
                )
                results["sweep"]["rows"].append(r)
                print(
                    f"{n:>5} per-rank files, {mode:>7} x{args.jobs}: {r['seconds']:.2f} s, client peak +"
                    f"{r['client_peak_over_start_mb']:.0f} MB"
                    + (
                        f", worker peak {r['worker_peak_mb']:.0f} MB, "
                        f"load {r['load_s']:.2f} s, matching {r['match_s']:.3f} s ({100 * r['match_share']:.1f} %)"
                        if mode == "dask"
                        else ""
                    ),
                    flush=True,
                )
    if args.per_rank_size:
        _per_rank_jobs(args, results)
    if not args.no_render:
        rpath, _ = export_for(parse_size(args.render_size), args.ranks, False)
        r = _child("render", rpath, "browser" if args.browser else "none")
        results["render"] = dict(r, size=args.render_size)
        print(
            f"report of {args.render_size}: rendered in {r['render_s']:.2f} s ({r['page_mb']:.1f} MB page)"
            + (
                f", opened in Chromium in {r['browser_open_s']:.2f} s (timeline drawn at {r['timeline_drawn_s']:.2f} s; "  # noqa: E501
                f"opens {', '.join(f'{x:.2f}' for x in r['browser_open_all_s'])} s; load average "
                f"{r['loadavg']}), figures below it drawn {r['figures_s']:.2f} s after scrolling"
                if "browser_open_s" in r
                else ""
            ),
            flush=True,
        )
    if args.report:
        r = _child("report", Path(args.report).resolve(), args.report_jobs)
        results["report"] = dict(r, folder=_rel(Path(args.report).resolve()))
        print(
            f"report of {args.report}: first run {r['first_s']:.1f} s, second (unchanged) {r['second_s']:.1f} s = "
            f"{100 * r['second_share']:.1f} % of the first ({r['pages']} pages; load average {r['loadavg'][0]})",
            flush=True,
        )
    info["loadavg_end"] = _loadavg()
    md = write_results(results, Path(args.out))
    print(f"wrote {md} and {md.with_name('results.json')}")
    if readme:
        print(f"{'updated' if update_readme(results, readme) else 'unchanged:'} {readme}")
    return 0


def _real_block(args) -> dict | None:
    names = [n.strip() for n in args.real.split(",") if n.strip()]
    if not names:
        return None
    bad = [n for n in names if n not in REAL_CASES]
    if bad:
        raise SystemExit(f"bench_analyzer: unknown --real case {bad[0]!r} (cases: {', '.join(REAL_CASES)})")
    command = "python benchmarks/bench_analyzer.py " + " ".join(sys.argv[1:])
    block = {
        "command": command.strip(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "loadavg_start": _loadavg(),
        "bytecode": _compile_package(),
        "rows": [],
    }
    block["rows"] = [bench_real(n, args) for n in names]
    block["loadavg_end"] = _loadavg()
    return block


def _update(args, readme: Path | None) -> int:
    """--update: the recorded results with their real-shaped cases measured again."""
    from results_md import update_readme, write_results

    results = json.loads(Path(args.update).read_text(encoding="utf-8"))
    results["real"] = _real_block(args)
    md = write_results(results, Path(args.out))
    print(f"wrote {md} and {md.with_name('results.json')}")
    if readme:
        print(f"{'updated' if update_readme(results, readme) else 'unchanged:'} {readme}")
    return 0


if __name__ == "__main__":
    sys.path[:0] = [
        str(HERE),
        str(HERE.parent),
    ]  # results_md, and this tree's ddp_profile (not an installed one)
    raise SystemExit(main())
