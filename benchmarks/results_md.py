"""Turn one bench_analyzer.py run into benchmarks/RESULTS.md (tables + the README's Performance section)
and benchmarks/results.json, and put the Performance section into README.md between the markers
``<!-- perf:begin -->`` and ``<!-- perf:end -->``. Every figure comes from the run's measurements (or from
a results.json they were recorded in); nothing is typed by hand."""

from __future__ import annotations

import json
from pathlib import Path

from ddp_profile.safeio import write_text_atomic

TARGET_RATIO, TARGET_MEM, TARGET_PAGE_S = 1.3, 2.0, 5.0
TARGET_ARROW, TARGET_SECOND_SHARE, TARGET_REPORT_S = 1.5, 0.15, 45.0  # issue 28
TARGET_REAL_ARROW, TARGET_100K_S = 2.0, 20.0  # real-shaped step cases: command vs Arrow floor; 100,000 steps
BEGIN, END = "<!-- perf:begin -->", "<!-- perf:end -->"
HEADING = "## Performance"


class MarkerError(ValueError):
    """README.md lacks one clean pair of performance markers; the message is one line for the user."""


def _ok(flag: bool) -> str:
    return "met" if flag else "NOT met"


def _load1(loadavg: str | None) -> str:
    """The 1-minute figure of a recorded "1m 5m 15m" load average."""
    return loadavg.split()[0] if loadavg else "-"


def _rows(res: dict) -> list[dict]:
    """The size rows and, when measured, the replicated real trace's row."""
    return res["sizes"] + ([res["replica"]] if res.get("replica") else [])


def _ranks_text(res: dict) -> str:
    """ "8 ranks, " from the first measured synthetic size; empty when no size was measured (--sizes '')."""
    return f"{res['sizes'][0]['analyze']['n_ranks']} ranks, " if res.get("sizes") else ""


def _frame_text(res: dict) -> str:
    """The kernels frame's bytes per row beside the int64 columns', from the last measured row (if any)."""
    rows = _rows(res)
    if not rows:
        return ""
    last = rows[-1]
    text = (
        f"; the returned kernels frame alone takes {last['analyze']['frame_bytes_per_row']:.0f} bytes per row "
        "(its 16 columns; int16 ranks, devices and streams, int32 pids and correlation ids, categorical names) "
        "against 56 per kernel for the seven int64 columns; a row is a kernel, memcpy or memset"
    )
    copies = 1 - last["rows"] / last["analyze"]["rows"] if last["analyze"]["rows"] else 0.0
    if copies > 0.005:
        text += (
            f", so an export with copies holds more rows than kernels (in the table's last row, {100 * copies:.0f} % "
            "of the rows are copies or memsets)"
        )
    return text


def shape_lines(res: dict) -> list[str]:
    """The real-shape ratios the synthetic exports were built with (measured on traces/)."""
    sh = res.get("real_shape")
    if not sh:
        return []
    top = ", ".join(f"{n} {r:.3f}" for n, r in list(sh["other_api"].items())[:6])
    launch = ", ".join(f"{n} {r:.3f}" for n, r in sh["launch_api"].items())
    return [
        f"Real shape, measured on the {sh['runs']} committed runs in `traces/` ({sh['activity_rows']:,} kernel, "
        f"memcpy and memset rows): {sh['api_per_kernel']:.2f} CUDA API rows per GPU activity row, of which "
        f"{sh['launch_per_kernel']:.2f} launch it ({launch}) and the rest launch nothing ({top}, ...); "
        f"{sh['nvtx_per_kernel']:.3f} NVTX rows per activity row. The synthetic exports carry the same "
        "non-launch calls per kernel and NVTX density (`synth_scale.add_real_shape`); the loader selects the "
        "launching calls by name id in SQL."
    ]


def sweep_lines(res: dict) -> list[str]:
    sw = res.get("sweep")
    if not sw:
        return []
    out = [
        f"Per-rank files, threads (`load_trace(jobs={sw['jobs']})` + `analyze`) vs Dask (`--dask`: a LocalCluster "
        f"of {sw['jobs']} worker processes; cluster start and worker imports not counted; each task reads a batch "
        "of files together and analyses them as one trace, about four tasks per worker, and only per-rank "
        "tables (the *parts*) travel to the client's reduce step), real-shaped ranks of "
        f"{sw['kernels_per_file']:,} kernels each ({sw['disk_mb']:.0f} MB on disk for the largest set):",
        "",
        "| files | mode | wall s | client peak over start MB | worker peak RSS MB | parts MB | load s (Dask) | "
        "cross-rank matching s (share) | load average |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    threads = {r["files"]: r.get("result_digest") for r in sw["rows"] if r["mode"] == "threads"}
    same = []
    for r in sw["rows"]:
        d = r["mode"] == "dask"
        out.append(
            f"| {r['files']} | {r['mode']} | {r['seconds']:.2f} | {r['client_peak_over_start_mb']:.0f} | "
            + (
                f"{r['worker_peak_mb']:.0f} | {r['part_mb']:.1f} | {r['load_s']:.2f} | "
                f"{r['match_s']:.3f} ({100 * r['match_share']:.1f} %) |"
                if d
                else "- | - | - | - |"
            )
            + f" {r.get('loadavg', '-')} |"
        )
        if d and r.get("result_digest") and threads.get(r["files"]):
            same.append(
                f"{r['files']} files: {'the same' if r['result_digest'] == threads[r['files']] else 'DIFFERENT'}"
            )
    if same:
        out += [
            "",
            "Dask against threads, the whole analysis (`--section all` JSON, digested): "
            + "; ".join(same)
            + ".",
        ]
    return out


def arrow_targets(res: dict) -> list[str]:
    """Issue 28's lines: the CLI against the Arrow floor, memory against the loaded arrays, the report twice."""
    big = [s for s in _rows(res) if s["rows"] >= 900_000 and "floor_arrow" in s]
    lines = []
    if big:
        worst = max(big, key=lambda s: s["ratio_arrow"])
        lines.append(
            f"`analyze --format json` (the command, process start and imports included) <= {TARGET_ARROW}x "
            f"the Arrow floor at >= 1M kernels: {_ok(worst['ratio_arrow'] <= TARGET_ARROW)} ("
            + "; ".join(
                f"{s['size']}: {s['cli']['seconds']:.2f} s vs {s['floor_arrow']['seconds']:.2f} s = "
                f"{s['ratio_arrow']:.2f}x, {_ok(s['ratio_arrow'] <= TARGET_ARROW).lower()}; in one process, "
                f"imports excluded: {s['ratio_arrow_inproc']:.2f}x"
                for s in big
            )
            + ")"
        )
        with_start = [s for s in big if "startup" in s]
        if with_start:
            lines.append(
                "What the command's start leaves for the analysis within the target: "
                + "; ".join(
                    f"{s['size']}: start {s['startup']['seconds']:.2f} s (interpreter and imports) + the floor's read "
                    f"{s['floor_arrow']['seconds']:.2f} s = {(s['startup']['seconds'] + s['floor_arrow']['seconds']):.2f} s "
                    f"of {TARGET_ARROW * s['floor_arrow']['seconds']:.2f} s, leaving "
                    f"{TARGET_ARROW * s['floor_arrow']['seconds'] - s['startup']['seconds'] - s['floor_arrow']['seconds']:.2f} s "
                    f"for building the frames, the analysis ({s['analyze']['analyze_s']:.2f} s in one process) and the JSON "
                    f"({s['analyze']['json_s']:.2f} s), unless they overlap the read"
                    for s in with_start
                )
                + "."
            )
        mem = max(big, key=lambda s: s["mem_ratio_loaded"])
        lines.append(
            f"Peak memory <= {TARGET_MEM}x the loaded arrays (the floor's kernel and launch rows as int64): "
            f"{_ok(mem['mem_ratio_loaded'] <= TARGET_MEM)} ("
            + "; ".join(
                f"{s['size']}: +{s['peak_over_base_mb']:.0f} MB = {s['mem_ratio_loaded']:.2f}x "
                f"{s['loaded_int64_mb']:.0f} MB"
                for s in big
            )
            + ")"
        )
    r = res.get("report")
    if r:
        lines.append(
            f"A second `{r['command']}` of the unchanged shipped traces <= {100 * TARGET_SECOND_SHARE:.0f} % of "
            f"the first: {_ok(r['second_share'] <= TARGET_SECOND_SHARE)} ({r['second_s']:.1f} s after "
            f"{r['first_s']:.1f} s = {100 * r['second_share']:.1f} %)"
        )
        cpu = (
            f"; CPU time of its processes {r['first_cpu_s']:.1f} s, i.e. {r['first_cpu_s'] / res['machine']['cores']:.1f} s "
            f"over {res['machine']['cores']} otherwise idle cores"
            if "first_cpu_s" in r
            else ""
        )
        size = (
            f", {r['size_mb']:.0f} MB written beside a {r['cache_mb']:.0f} MB cache" if "size_mb" in r else ""
        )
        lines.append(
            f"The shipped trace set (`{r['folder']}`, {r['pages']} pages{size}) reported in under "
            f"{TARGET_REPORT_S:g} s, first run: {_ok(r['first_s'] < TARGET_REPORT_S)} ({r['first_s']:.1f} s; "
            f"1-minute load average {r['loadavg'][0].split()[0]} at its start{cpu})"
        )
    return lines


def targets(res: dict) -> list[str]:
    """One line per issue-8 and issue-28 target, judged from the measurements (sizes of 1 M kernels and more)."""
    big = [s for s in _rows(res) if s["rows"] >= 900_000]
    lines = arrow_targets(res)
    if big:
        worst = max(big, key=lambda s: s["ratio"])
        lines.append(
            f"Full analysis <= {TARGET_RATIO}x the `sqlite3` floor at >= 1M kernels (issue 8): {_ok(worst['ratio'] <= TARGET_RATIO)} "
            f"("
            + "; ".join(
                f"{s['size']}: {s['ratio']:.3f}x, {_ok(s['ratio'] <= TARGET_RATIO).lower()}" for s in big
            )
            + ")"
        )
        mem = max(big, key=lambda s: s["mem_ratio"])
        lines.append(
            f"Peak memory <= {TARGET_MEM}x the kernel columns as int64: {_ok(mem['mem_ratio'] <= TARGET_MEM)} "
            f"("
            + "; ".join(
                f"{s['size']}: +{s['peak_over_base_mb']:.0f} MB over the process's "
                f"{s['analyze']['rss_before_kb'] / 1024:.0f} MB start = {s['mem_ratio']:.2f}x "
                f"{s['kernel_cols_int64_mb']:.0f} MB, {_ok(s['mem_ratio'] <= TARGET_MEM).lower()}"
                for s in big
            )
            + ")"
        )
    nsys = [s for s in res["sizes"] if s["nsys"].get("available")]
    if nsys:
        ok = all(s["nsys"].get("rc") == 0 and s["analyze"]["seconds"] < s["nsys"]["seconds"] for s in nsys)
        version = nsys[0]["nsys"].get("version") or "nsys"
        lines.append(
            f"Faster than `nsys stats -r cuda_gpu_kern_sum` ({version}, on a copy of the same file): "
            f"{_ok(ok)} ("
            + ", ".join(
                f"{s['size']}: load+analyze {s['analyze']['seconds']:.2f} s vs nsys stats "
                f"{s['nsys']['seconds']:.2f} s{'' if s['nsys'].get('rc') == 0 else ' (nsys failed, rc ' + str(s['nsys'].get('rc')) + ')'}"
                for s in nsys
            )
            + ")"
        )
    else:
        lines.append(
            "Faster than `nsys stats -r cuda_gpu_kern_sum`: not measured (nsys is not installed on this "
            "machine; Debian's nsight-systems 2023.4 is not available here)"
        )
    pr = res.get("per_rank")
    if pr:
        one, many = pr["by_jobs"]["1"], pr["by_jobs"][str(pr["jobs"])]
        lines.append(
            f"Per-rank files load in parallel (--jobs) with a progress bar: {pr['files']} files, "
            f"load {one['load_s']:.2f} s with 1 job, {many['load_s']:.2f} s with {pr['jobs']} "
            f"({one['load_s'] / many['load_s']:.2f}x)"
        )
    r = res.get("render")
    if r:
        line = f"Report of a {r['size']}-kernel run: page written in {r['render_s']:.2f} s ({r['page_mb']:.1f} MB)"
        if "browser_open_s" in r:
            line += (
                f"; opens in headless Chromium in {r['browser_open_s']:.2f} s (target < {TARGET_PAGE_S:g} s: "
                f"{_ok(r['browser_open_s'] < TARGET_PAGE_S)})"
            )
        else:
            line += "; browser open time not measured (run with --browser)"
        lines.append(line)
    return lines


def real_lines(res: dict) -> list[str]:
    """The real-shaped step cases: what each export holds, the command against the Arrow floor, and the targets."""
    rb = res.get("real")
    if not rb or not rb.get("rows"):
        return []
    out = [
        f"Real-shaped step cases, measured with `{rb['command']}` ({rb['date']}; 1-minute load average "
        f"{_load1(rb.get('loadavg_start'))} at the start and {_load1(rb.get('loadavg_end'))} at the end): committed "
        "real jobs repeated along time with their CUDA runtime rows and NVTX (`synth_scale.replicate_exports`; "
        "per-rank files shifted together), and one synthetic export of 100,000 tiny steps. *Arrow floor*: the "
        "native Arrow read of the kernel and kernel-launch rows (summed over per-rank files); *analyze*: the command "
        "`python -m ddp_profile analyze PATH --format json -o FILE` from process start to exit, with the CPU time "
        "of its process beside it (the machine's other work inflates wall time, much less CPU time); *peak RSS*: "
        "the command's whole process (interpreter and imports included). Minimum of "
        f"{rb['rows'][0]['repeats']} run(s).",
        "",
        "| case | source x copies | ranks | steps | kernels | CUDA API rows | NVTX rows | Arrow floor | analyze "
        "(CPU) | ratio | per 1,000 steps | peak RSS / loaded arrays | load average (floor / command) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rb["rows"]:
        fa, c = r["floor_arrow"], r["cli"]
        steps = r.get("n_steps") or 0
        out.append(
            f"| {r['case']} | `{r['source']}` x {r['copies']} | {r.get('n_ranks', '-')} | {steps:,} | "
            f"{r['kernels']:,} | {r['api_rows']:,} | {r['nvtx_rows']:,} | {fa['seconds']:.2f} s | "
            f"{c['seconds']:.2f} s ({c['cpu_s']:.2f} s) | {r['ratio_arrow']:.2f}x | "
            + (
                f"{1e3 * c['seconds'] / steps:.3f} s ({1e3 * c['cpu_s'] / steps:.3f} s) | "
                if steps
                else "- | "
            )
            + f"{c['peak_kb'] / 1024:.0f} MB / {fa['loaded_int64_mb']:.0f} MB = {r['peak_over_loaded']:.2f}x | "
            f"{fa.get('loadavg', '-')} / {c.get('loadavg', '-')} |"
        )
    out += ["", *[f"- {r['case']}: {r['what']}" for r in rb["rows"]], ""]
    for r in rb["rows"]:
        c = r["cli"]
        if r["case"] == "100k-steps":
            out.append(
                f"- {r.get('n_steps', 0):,} inferred steps analysed in under {TARGET_100K_S:g} s: "
                f"{_ok(c['seconds'] < TARGET_100K_S)} ({c['seconds']:.1f} s wall, {c['cpu_s']:.1f} s CPU)"
            )
        elif r["kernels"] >= 900_000:
            out.append(
                f"- {r['case']}: `analyze --format json` <= {TARGET_REAL_ARROW}x the Arrow floor: "
                f"{_ok(r['ratio_arrow'] <= TARGET_REAL_ARROW)} ({c['seconds']:.2f} s vs "
                f"{r['floor_arrow']['seconds']:.2f} s = {r['ratio_arrow']:.2f}x)"
            )
    return out


def table(res: dict) -> str:
    head = (
        "| kernels | rows | file MB | floor s | floor Mrows/s | group_concat read s | load s | analyze s | "
        "load+analyze s | Mrows/s | ratio to floor | floor us/row | total us/row | peak over start MB | "
        "kernel cols int64 MB | memory ratio |"
    )
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for s in _rows(res):
        a, f = s["analyze"], s["floor"]
        out.append(
            f"| {s['size']} | {s['rows']:,} | {s['file_mb']:.0f} | {f['seconds']:.2f} | "
            f"{s['rows'] / f['seconds'] / 1e6:.2f} | {s['floor_concat']['seconds']:.2f} | {a['load_s']:.2f} | "
            f"{a['analyze_s']:.2f} | {a['seconds']:.2f} | {s['rows'] / a['seconds'] / 1e6:.2f} | "
            f"{s['ratio']:.2f} | {1e6 * f['seconds'] / s['rows']:.2f} | {1e6 * a['seconds'] / s['rows']:.2f} | "
            f"{s['peak_over_base_mb']:.0f} | {s['kernel_cols_int64_mb']:.0f} | {s['mem_ratio']:.2f} |"
        )
    return "\n".join(out)


def readme_section(res: dict) -> str:
    """The README's Performance section: its heading, then :func:`readme_block`."""
    return f"{HEADING}\n\n{readme_block(res)}"


def readme_block(res: dict) -> str:
    """The Performance section's text below its heading: what goes between the README's markers."""
    m = res["machine"]
    lines = [
        f"Measured with `{res['command']}` on {m['cores']} cores ({m['cpu']}), {m['ram_gib']} GiB RAM, "
        f"Python {m['python']}, SQLite {m['sqlite']} ({res['date']}; a machine shared with other work: 1-minute load "
        f"average {_load1(m.get('loadavg_start'))} at the start and {_load1(m.get('loadavg_end'))} at the end, and "
        "per measurement in the tables); synthetic exports in the nsys 2025.3 schema "
        f"({_ranks_text(res)}compute and NCCL kernels on two streams, NVTX steps, "
        "phases and bucket ranges, launching and other CUDA API rows and NVTX density as measured on the "
        "committed real traces, see below). Full tables: `benchmarks/RESULTS.md`.",
        "",
        "The *floor* is the plainest complete read of the kernel columns the analysis needs "
        f"({', '.join('`' + c + '`' for c in ('start', 'end', 'deviceId', 'streamId', 'globalPid', 'correlationId', 'shortName'))})"
        " from `CUPTI_ACTIVITY_KIND_KERNEL` into a numpy array with Python's `sqlite3`; *load+analyze* is "
        "`load_trace` + `analyze` (also reading the runtime-API table for launch times and NVTX): per-step metrics, "
        "per-kernel and per-rank overlap, collective table, cost model, contention"
        + (
            " and, in the rows measured since issue 28, the JSON text of those sections. The loader reads columns "
            "through the Arrow ADBC SQLite driver (the launch rows on a second thread); without it, with SQLite's "
            "`group_concat` parsed by numpy in row chunks on up to 4 threads"
            if any("floor_arrow" in s for s in _rows(res))
            else ". The loader reads columns with SQLite's `group_concat` parsed by numpy (no Python object per value) "
            "in row chunks on up to 4 threads (2 here)"
        )
        + f"; the floor is single-threaded. Memory is the peak RSS above the process's RSS before loading{_frame_text(res)}.",
        "",
        "| kernels | floor | load + analyze | ratio | peak memory over start | kernel columns as int64 | "
        "load average (floor / analysis) |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in _rows(res):
        a, f = s["analyze"], s["floor"]
        lines.append(
            f"| {s['rows']:,} | {f['seconds']:.2f} s ({s['rows'] / f['seconds'] / 1e6:.2f} M rows/s) | "
            f"{a['seconds']:.2f} s ({s['rows'] / a['seconds'] / 1e6:.2f} M rows/s) | {s['ratio']:.2f}x | "
            f"{s['peak_over_base_mb']:.0f} MB | {s['kernel_cols_int64_mb']:.0f} MB | "
            f"{f.get('loadavg', '-')} / {a.get('loadavg', '-')} |"
        )
    lines += arrow_table(res)
    lines += ["", *[f"- {t}" for t in targets(res)], ""]
    lines += [*real_lines(res), ""] if res.get("real") else []
    if res.get("replica"):
        rp = res["replica"]["replica"]
        lines += [
            f"The replica row is `{rp['source']}` ({rp['source_kernels']:,} kernels, 2 GPUs) repeated "
            f"{rp['copies']} times along time (`synth_scale.replicate_export`).",
            "",
        ]
    if res.get("real_shape") or res.get("sweep"):
        lines += [*shape_lines(res), "", *sweep_lines(res), ""]
    return "\n".join(lines)


def arrow_table(res: dict) -> list[str]:
    """Issue 28's table: the Arrow floor, the command, and where the command's time goes (when measured)."""
    rows = [s for s in _rows(res) if "floor_arrow" in s]
    if not rows:
        return []
    cx = [s for s in rows if s.get("floor_cx", {}).get("available")]
    out = [
        "",
        "The *Arrow floor* (issue 28) is a native Arrow read of the rows `analyze` needs: the kernel columns above "
        "and the kernel-launch rows of `CUPTI_ACTIVITY_KIND_RUNTIME` (`globalTid`, `correlationId`, `start` of the "
        "launching calls, selected by name id in SQL as the loader does), through the ADBC SQLite driver into numpy, "
        "single-threaded, imports excluded. *analyze* is the command `python -m ddp_profile analyze PATH --format "
        "json -o FILE` timed from process start to exit ("
        + (
            "the package's bytecode compiled beforehand, as `pip install` does; "
            if res.get("machine", {}).get("bytecode")
            else ""
        )
        + "its default JSON: the summary and the "
        "core sections; "
        "`comm_kinds` and the recommendation are computed only when asked for); its split is measured in one "
        "process (load / analysis / JSON text). The loader reads through the same driver (the launch rows on a "
        "second thread) and falls back to `sqlite3` where the driver is missing."
        + (
            " connectorx read the same rows in "
            + ", ".join(f"{s['floor_cx']['seconds']:.2f} s ({s['size']})" for s in cx)
            + "."
            if cx
            else ""
        ),
        "",
        "| kernels | Arrow floor | analyze (command) | ratio | in one process: load / analysis / JSON | ratio in one process "
        "| peak memory over start | loaded arrays as int64 | load average (floor / command) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in rows:
        fa, c, a = s["floor_arrow"], s["cli"], s["analyze"]
        out.append(
            f"| {s['rows']:,} | {fa['seconds']:.2f} s | {c['seconds']:.2f} s"
            + (f" (CPU {c['cpu_s']:.2f} s)" if "cpu_s" in c else "")
            + f" | {s['ratio_arrow']:.2f}x | "
            f"{a['load_s']:.2f} / {a['analyze_s']:.2f} / {a['json_s']:.2f} s | {s['ratio_arrow_inproc']:.2f}x | "
            f"{s['peak_over_base_mb']:.0f} MB | {s['loaded_int64_mb']:.0f} MB | "
            f"{fa.get('loadavg', '-')} / {c.get('loadavg', '-')} |"
        )
    return out


def check_markers(text: str, name: str = "README.md") -> tuple[int, int]:
    """(end of the begin marker's line, start of the end marker) in ``text``; MarkerError unless each marker
    is there exactly once, begin first."""
    n_begin, n_end = text.count(BEGIN), text.count(END)
    if n_begin == 0 or n_end == 0:
        raise MarkerError(
            f"{name}: no '{BEGIN}' / '{END}' markers; add both lines under its '{HEADING}' heading"
        )
    if n_begin > 1 or n_end > 1 or text.index(BEGIN) > text.index(END):
        raise MarkerError(f"{name}: the markers '{BEGIN}' and '{END}' must appear once each, begin first")
    begin = text.index(BEGIN) + len(BEGIN)
    return begin, text.index(END)


def with_block(text: str, block: str, name: str = "README.md") -> str:
    """``text`` with everything between the markers replaced by ``block`` (markers kept, own lines)."""
    begin, end = check_markers(text, name)
    return text[:begin] + "\n" + block.strip("\n") + "\n" + text[end:]


def update_readme(res: dict, readme: Path) -> bool:
    """Put :func:`readme_block` between ``readme``'s markers, atomically; True if the file changed."""
    text = readme.read_text(encoding="utf-8")
    new = with_block(text, readme_block(res), readme.name)
    if new != text:
        write_text_atomic(readme, new)
    return new != text


def write_results(res: dict, out: Path, write_json: bool = True) -> Path:
    """RESULTS.md (and, unless re-rendering recorded results, results.json) in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    m = res["machine"]
    md = [
        "# Analyzer benchmark results",
        "",
        "Generated by `benchmarks/bench_analyzer.py`; do not edit by hand (run it again).",
        "",
        f"- Command: `{res['command']}`",
        f"- Date: {res['date']}",
        f"- Machine: {m['cpu']}, {m['cores']} cores, {m['ram_gib']} GiB RAM; {m['os']}; load average "
        f"{m.get('loadavg_start')} at the start, {m.get('loadavg_end')} at the end (a shared machine: other "
        "work slows floor and analysis alike, which is why they alternate and the minimum is kept)",
        f"- Software: Python {m['python']}, numpy {m['numpy']}, pandas {m['pandas']}, SQLite {m['sqlite']}; "
        f"nsys: {m['nsys'] or 'not installed'}",
        "",
        "Times are the minimum of the repeats, each in a fresh process, file in the page cache, imports excluded. "
        "Memory is the measuring process's peak RSS (`ru_maxrss`) above its RSS before the measured work.",
        "",
        table(res),
        "",
        "## Targets",
        "",
        *[f"- {t}" for t in targets(res)],
        "",
        *(["## Real-shaped step cases", "", *real_lines(res), ""] if res.get("real") else []),
        "## README section (paste as is)",
        "",
        readme_section(res),
    ]
    path = out / "RESULTS.md"
    write_text_atomic(path, "\n".join(md) + "\n")
    if write_json:
        write_text_atomic(out / "results.json", json.dumps(res, indent=1, default=str) + "\n")
    return path
