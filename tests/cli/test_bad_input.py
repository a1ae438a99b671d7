"""Bad input matrix: every case through the CLI (a real ``python -m ddp_profile`` subprocess) and
the library. A user mistake gives exactly one line on stderr naming the file and what to do, a documented
exit code, no traceback (unless ``--debug``), and leaves every input byte-identical (sha256).

Exit codes (ddp_profile/errors.py):
    0    success (also: no NVTX, open NVTX ranges, hosts with clock offsets -- loaded, with a warning)
    2    usage error (bad arguments, e.g. an invalid --step-pattern regex)
    3    input error: missing, empty, random, text, truncated, non-nsys SQLite, .nsys-rep, damaged
         (kernels ending before they start), duplicate ranks, mixed runs, empty folder, unreadable file.
         ``report`` also exits 3 when no run could be loaded, whatever the reason.
    4    the trace lacks data the command needs (no CUDA kernel table, zero GPU activity)
    5    output error (output folder cannot be created or written, disk full)
    130  interrupted (Ctrl-C); no partial output, a previous report is left intact

``report`` prints progress lines prefixed ``report:`` on stderr; the single error line is the one prefixed
``ddp-profile report: error:``, so for it the progress lines are set aside before counting.
"""

from __future__ import annotations

import errno
import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli

from ddp_profile.errors import DdpProfileError, MissingDataError, OutputError, TraceError, UsageError
from ddp_profile.nsys import synth
from ddp_profile.nsys.loader import load_trace

PY = sys.executable
SESSION_UTC = 1_700_000_000_000_000_000
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


# ---- building the inputs ---------------------------------------------------------------------------------


def _kernels(n=4, pid=7, t0=0, dev=0, dur=60):
    return {
        "pid": np.full(n, pid),
        "device": np.full(n, dev),
        "stream": np.full(n, 7),
        "start": t0 + np.arange(n) * 100,
        "end": t0 + np.arange(n) * 100 + dur,
        "name": np.array(["gemm"] * n),
        "correlation_id": np.arange(1, n + 1),
        "launch_start": t0 + np.arange(n) * 100 - 10,
    }


def _nvtx(pid=7, ends=(500,)):
    n = len(ends)
    return {
        "pid": np.full(n, pid),
        "tid": np.full(n, pid),
        "start": np.zeros(n, int),
        "end": np.array(ends),
        "text": np.array([f"step {i}" for i in range(n)]),
    }


P7 = [{"pid": 7, "device": 0}]


def _good(d: Path, name="good.sqlite", **kw) -> Path:
    return synth.build_export(d / name, processes=P7, kernels=_kernels(), nvtx=_nvtx(), **kw)


def mk_missing(d):
    return ["missing.sqlite"]


def mk_empty(d):
    (d / "empty.sqlite").write_bytes(b"")
    return ["empty.sqlite"]


def mk_random(d):
    (d / "random.sqlite").write_bytes(np.random.default_rng(7).bytes(4096))
    return ["random.sqlite"]


def mk_text(d):
    (d / "notes.sqlite").write_text("step,ms\n1,12.5\n")
    return ["notes.sqlite"]


def mk_truncated(d):
    data = _good(d, "full.sqlite").read_bytes()
    (d / "full.sqlite").unlink()
    (d / "cut.sqlite").write_bytes(data[: len(data) // 2])
    return ["cut.sqlite"]


def mk_bad_xz(d):
    (d / "bad.sqlite.xz").write_bytes(b"\xfd7zXZ\x00" + b"not really xz" * 10)
    return ["bad.sqlite.xz"]


def mk_not_nsys(d):
    con = sqlite3.connect(d / "other.sqlite")
    con.execute("CREATE TABLE t (x INTEGER)")
    con.commit()
    con.close()
    return ["other.sqlite"]


def mk_nsys_rep(d):
    (d / "run.nsys-rep").write_bytes(b"QDSTRM-ish binary report")
    return ["run.nsys-rep"]


def mk_no_cuda(d):
    synth.build_export(d / "nocuda.sqlite", processes=P7, nvtx=_nvtx())
    return ["nocuda.sqlite"]


def mk_zero_kernels(d):
    synth.build_export(d / "zero.sqlite", processes=P7, kernels=_kernels(0), nvtx=_nvtx())
    return ["zero.sqlite"]


def mk_end_before_start(d):
    k = _kernels()
    k["end"] = k["start"] - 50
    synth.build_export(d / "backwards.sqlite", processes=P7, kernels=k, nvtx=_nvtx())
    return ["backwards.sqlite"]


def mk_duplicate_ranks(d):
    (d / "dup").mkdir()
    synth.build_export(d / "dup/a_rank0.sqlite", processes=P7, kernels=_kernels())
    # another process (pid 8): two ranks claiming rank 0, not one capture twice (that is refused earlier)
    synth.build_export(d / "dup/b_rank0.sqlite", processes=[{"pid": 8, "device": 0}], kernels=_kernels(pid=8))
    return ["dup"]


def mk_mixed_runs(d):
    (d / "mixed").mkdir()
    synth.build_export(d / "mixed/run_rank0.sqlite", processes=P7, kernels=_kernels())
    synth.build_export(
        d / "mixed/run_rank1.sqlite",
        processes=[{"pid": 8, "device": 1}],
        kernels=_kernels(pid=8, dev=1),
        session_start_utc_ns=SESSION_UTC + 3600 * 10**9,
    )
    return ["mixed"]


def mk_empty_folder(d):
    (d / "nothing").mkdir()
    (d / "nothing/readme.txt").write_text("no exports here")
    return ["nothing"]


def mk_unreadable(d):
    _good(d, "locked.sqlite")
    os.chmod(d / "locked.sqlite", 0)
    return ["locked.sqlite"]


def mk_bad_regex(d):
    _good(d)
    return ["good.sqlite"]


# A process that cannot read the file: chmod 000 works for normal users; root reads anything, so there the
# subprocess is made to see the same PermissionError open() would raise (the loader's own code path).
UNREADABLE_PRELUDE = (
    "import builtins, ddp_profile.nsys.files as L\n"
    "real = builtins.open\n"
    "def deny(p, *a, **k):\n"
    "    if str(p).endswith('locked.sqlite'): raise PermissionError(13, 'Permission denied', str(p))\n"
    "    return real(p, *a, **k)\n"
    "L.open = deny\n"
)

# (id, builder, {command: exit code}, substrings the error line must hold: the file and what to do;
# a tuple means any one of them).
# Commands absent from the dict are not applicable. "report" collapses every load failure to 3.
ERROR_CASES = [
    (
        "missing path",
        mk_missing,
        {"inspect": 3, "analyze": 3, "report": 3},
        ["missing.sqlite", ("check the path", "pass a run folder")],
    ),
    (
        "empty file",
        mk_empty,
        {"inspect": 3, "analyze": 3, "report": 3},
        ["empty.sqlite", "nsys export --type sqlite"],
    ),
    ("random bytes", mk_random, {"inspect": 3, "analyze": 3, "report": 3}, ["random.sqlite", "nsys export"]),
    ("text file", mk_text, {"inspect": 3, "analyze": 3, "report": 3}, ["notes.sqlite", "nsys export"]),
    (
        "truncated SQLite",
        mk_truncated,
        {"inspect": 3, "analyze": 3, "report": 3},
        ["cut.sqlite", "copy it again"],
    ),
    (
        "corrupt .sqlite.xz",
        mk_bad_xz,
        {"inspect": 3, "analyze": 3, "report": 3},
        ["bad.sqlite.xz", "complete"],
    ),
    (
        "SQLite, not nsys",
        mk_not_nsys,
        {"inspect": 3, "analyze": 3, "report": 3},
        ["other.sqlite", "nsys export"],
    ),
    (
        ".nsys-rep given",
        mk_nsys_rep,
        {"inspect": 3, "analyze": 3, "report": 3},
        ["run.nsys-rep", "nsys export --type sqlite -o run.sqlite run.nsys-rep"],
    ),
    ("no CUDA trace", mk_no_cuda, {"inspect": 4, "analyze": 4, "report": 3}, ["nocuda.sqlite", "-t cuda"]),
    (
        "zero kernels",
        mk_zero_kernels,
        {"inspect": 4, "analyze": 4, "report": 3},
        ["zero.sqlite", "capture range"],
    ),
    (
        "kernel end < start",
        mk_end_before_start,
        {"inspect": 3, "analyze": 3, "report": 3},
        ["backwards.sqlite", "export it again"],
    ),
    (
        "duplicate ranks",
        mk_duplicate_ranks,
        {"inspect": 3, "analyze": 3, "report": 3},
        ["a_rank0", "b_rank0", "different runs"],
    ),
    (
        "mixed runs",
        mk_mixed_runs,
        {"inspect": 3, "analyze": 3, "report": 3},
        ["run_rank0.sqlite", "run_rank1.sqlite", "load one run's files together"],
    ),
    (
        "folder without exports",
        mk_empty_folder,
        {"inspect": 3, "analyze": 3, "report": 3},
        ["nothing", ("nsys export --type sqlite", "pass export paths")],
    ),
    (
        "unreadable file",
        mk_unreadable,
        {"inspect": 3, "analyze": 3, "report": 3},
        ["locked.sqlite", "readable"],
    ),
]
LIBRARY_ERROR = {"no CUDA trace": MissingDataError, "zero kernels": MissingDataError}


def _hashes(folder: Path) -> dict[str, str]:
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            try:
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
            except PermissionError:
                out[str(p)] = "unreadable"
    return out


def _error_line(proc: subprocess.CompletedProcess, command: str) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    if command == "report":
        lines = [ln for ln in lines if not ln.startswith("report:")]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"ddp-profile {command}: error: "), lines[0]
    return lines[0]


def _args(command: str, paths: list[str], out: Path) -> list[str]:
    return [command, *paths] + (["-o", str(out)] if command == "report" else [])


@pytest.mark.parametrize("command", ["inspect", "analyze", "report"])
@pytest.mark.parametrize("case", ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
def test_cli_bad_input(case, command, tmp_path):
    name, make, codes, needles = case
    paths = make(tmp_path)
    before = _hashes(tmp_path)
    prelude = UNREADABLE_PRELUDE if name == "unreadable file" and IS_ROOT else ""
    proc = run_cli(_args(command, paths, tmp_path / "reports"), tmp_path, prelude)
    line = _error_line(proc, command)
    assert proc.returncode == codes[command], (proc.returncode, line)
    for needle in needles:  # a tuple: any of these (library and report word the advice differently)
        assert any(n in line for n in ((needle,) if isinstance(needle, str) else needle)), (needle, line)
    assert _hashes(tmp_path) == before  # inputs untouched
    assert not (tmp_path / "reports").exists()  # nothing half-written


@pytest.mark.parametrize("case", ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
def test_library_bad_input(case, tmp_path, monkeypatch):
    from ddp_profile import report

    name, make, codes, needles = case
    paths = [tmp_path / p for p in make(tmp_path)]
    before = _hashes(tmp_path)
    if name == "unreadable file" and IS_ROOT:
        import ddp_profile.nsys.files as files_mod

        def deny(p, *a, **k):
            raise PermissionError(13, "Permission denied", str(p))

        monkeypatch.setattr(files_mod, "open", deny, raising=False)
    expected = LIBRARY_ERROR.get(name, TraceError)
    with pytest.raises(expected) as info:
        load_trace(paths)
    assert needles[0] in str(info.value)
    with pytest.raises(DdpProfileError) as info:
        report.build_report(paths, tmp_path / "reports")
    assert info.value.exit_code == codes["report"] and needles[0] in str(info.value)
    assert _hashes(tmp_path) == before and not (tmp_path / "reports").exists()


# ---- cases that load (degraded or aligned), not errors ------------------------------------------------------


def test_no_nvtx_loads_with_warning(tmp_path):
    path = synth.build_export(tmp_path / "nonvtx.sqlite", processes=P7, kernels=_kernels())
    before = _hashes(tmp_path)
    trace = load_trace(path)
    assert trace.nvtx.empty and len(trace.kernels) == 4
    assert any("NVTX" in w for w in trace.meta["warnings"])
    for command in ("inspect", "analyze"):
        proc = run_cli([command, path.name], tmp_path)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        assert "nvtx" in proc.stdout.lower()  # the warning / note is shown
    assert _hashes(tmp_path) == before


def test_open_nvtx_ranges_load_with_warning(tmp_path):
    path = synth.build_export(
        tmp_path / "open.sqlite", processes=P7, kernels=_kernels(), nvtx=_nvtx(ends=(500, -1))
    )
    before = _hashes(tmp_path)
    trace = load_trace(path)
    step1 = trace.nvtx[trace.nvtx["name"] == "step 1"]
    assert len(step1) == 1 and step1["end_ns"].isna().all()
    assert any("never closed" in w and "step 1" in w for w in trace.meta["warnings"])
    proc = run_cli(["inspect", path.name], tmp_path)
    assert proc.returncode == 0 and "never closed" in proc.stdout
    proc = run_cli(["analyze", path.name, "--format", "json"], tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    assert _hashes(tmp_path) == before


def test_hosts_with_clock_offsets_are_aligned(tmp_path):
    """Rank 1's host started its session 250 us later, so its local timestamps are 250 us smaller for the
    same instants: after alignment both ranks' first kernels start at the same global time."""
    offset = 250_000
    (tmp_path / "run").mkdir()
    synth.build_export(
        tmp_path / "run/job_rank0.sqlite", processes=P7, kernels=_kernels(t0=1_000_000), host="nodeA"
    )
    synth.build_export(
        tmp_path / "run/job_rank1.sqlite",
        processes=[{"pid": 8, "device": 0}],
        kernels=_kernels(pid=8, t0=1_000_000 - offset),
        host="nodeB",
        session_start_utc_ns=SESSION_UTC + offset,
    )
    before = _hashes(tmp_path)
    trace = load_trace(tmp_path / "run")
    assert trace.meta["clock"]["method"] == "session-start (several hosts)"
    assert sorted(f["offset_ns"] for f in trace.meta["files"]) == [0, offset]
    first = trace.kernels.groupby("rank")["start_ns"].min()
    assert list(first.index) == [0, 1] and first[0] == first[1] == 1_000_000
    proc = run_cli(["inspect", "run"], tmp_path)
    assert proc.returncode == 0 and "several hosts" in proc.stdout, proc.stderr
    assert _hashes(tmp_path) == before


# ---- usage, output and interruption ---------------------------------------------------------------------


def test_bad_regex_is_a_usage_error(tmp_path):
    _good(tmp_path)
    before = _hashes(tmp_path)
    proc = run_cli(["analyze", "good.sqlite", "--step-pattern", "step(("], tmp_path)
    assert proc.returncode == 2 and "--step-pattern" in _error_line(proc, "analyze")
    from ddp_profile.analysis import analyze

    with pytest.raises(UsageError):
        analyze(load_trace(tmp_path / "good.sqlite"), step_pattern="step((")
    assert _hashes(tmp_path) == before


def test_debug_shows_the_traceback(tmp_path):
    proc = run_cli(["--debug", "inspect", "missing.sqlite"], tmp_path)
    assert proc.returncode != 0 and "Traceback" in proc.stderr and "TraceError" in proc.stderr


@pytest.mark.parametrize("command", ["analyze", "report"])
def test_output_folder_not_writable(command, tmp_path):
    """Root can write anywhere, so the unwritable folder is one under a regular file (ENOTDIR for everyone)."""
    _good(tmp_path)
    (tmp_path / "blocker").write_text("a file, not a folder")
    before = _hashes(tmp_path)
    out = "blocker/sub/out.txt" if command == "analyze" else "blocker/sub"
    proc = run_cli([command, "good.sqlite", "-o", out], tmp_path)
    line = _error_line(proc, command)
    assert proc.returncode == 5 and "blocker" in line, line
    assert _hashes(tmp_path) == before


DISK_FULL_PRELUDE = (
    "import errno, os\n"
    "def full(*a, **k): raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))\n"
    "os.replace = full\n"
)


@pytest.mark.parametrize("command", ["analyze", "report"])
def test_disk_full_leaves_no_partial_output(command, tmp_path):
    _good(tmp_path)
    (tmp_path / "out").mkdir()
    before = _hashes(tmp_path)
    target = "out/analysis.txt" if command == "analyze" else "out/reports"
    proc = run_cli([command, "good.sqlite", "-o", target], tmp_path, DISK_FULL_PRELUDE)
    line = _error_line(proc, command)
    assert proc.returncode == 5 and "No space left" in line and "out" in line, line
    assert list((tmp_path / "out").iterdir()) == []  # no temp file or folder left behind
    assert _hashes(tmp_path) == before


def test_disk_full_library(tmp_path, monkeypatch):
    from ddp_profile import report
    from ddp_profile.safeio import write_text_atomic as write_atomic

    def full(*a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OutputError, match="No space left"):
        write_atomic(tmp_path / "a.txt", "x" * 1000)
    with pytest.raises(OutputError, match="No space left"):
        report.write_report_dir(tmp_path / "reports", lambda d: (d / "index.html").write_text("<p>"))
    assert list(tmp_path.iterdir()) == []


def test_streamed_output_failing_midway_keeps_the_previous_file(tmp_path):
    """`analyze --format json` writes its answer as it is built: an error while a later piece is made leaves the
    previous file as it was and no temp file behind."""
    from ddp_profile.safeio import write_text_chunks_atomic

    out = tmp_path / "a.json"
    out.write_text("previous")

    def pieces():
        yield "{\n" + "x" * 100_000
        raise MemoryError("while building the next section")

    with pytest.raises(MemoryError):
        write_text_chunks_atomic(out, pieces())
    assert out.read_text() == "previous" and [p.name for p in tmp_path.iterdir()] == ["a.json"]
    write_text_chunks_atomic(out, iter(["é", "", "b\n"]))
    assert out.read_bytes() == "éb\n".encode() and oct(out.stat().st_mode & 0o777) == "0o644"


def _previous_report(tmp_path: Path) -> tuple[Path, dict]:
    _good(tmp_path)
    assert run_cli(["report", "good.sqlite", "-o", "reports"], tmp_path).returncode == 0
    return tmp_path / "reports", _hashes(tmp_path / "reports")


def test_interrupt_in_process_keeps_previous_report(tmp_path, monkeypatch, capsys):
    from ddp_profile.cli import main

    reports, before = _previous_report(tmp_path)
    calls = []

    def interrupted(path, text):
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt
        path.write_text(text, encoding="utf-8")

    import ddp_profile.report.build as build

    monkeypatch.setattr(build, "_write", interrupted)
    assert main(["report", str(tmp_path / "good.sqlite"), "-o", str(reports)]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert _hashes(reports) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.sqlite", "reports"]


SLOW_WRITE_PRELUDE = (
    "import sys, time, ddp_profile.report.build as R\n"
    "real = R._write\n"
    "def slow(p, t):\n"
    "    real(p, t)\n"
    "    print('WRITING', file=sys.stderr, flush=True)\n"
    "    time.sleep(30)\n"
    "R._write = slow\n"
)


def test_sigint_mid_report_exits_130_and_keeps_previous_report(tmp_path):
    """A real SIGINT to a running ``report`` process while it is writing pages (the write is slowed so the
    signal lands there every time): exit 130, one line, no temp folder, the previous report unchanged."""
    reports, before = _previous_report(tmp_path)
    cmd = [
        PY,
        "-c",
        SLOW_WRITE_PRELUDE + "from ddp_profile.cli import main\nraise SystemExit(main(sys.argv[1:]))",
        "report",
        "good.sqlite",
        "-o",
        "reports",
        "--no-cache",
    ]  # an unchanged report is otherwise kept, not written
    proc = subprocess.Popen(cmd, cwd=tmp_path, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    seen = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        seen.append(line)
        if line.startswith("WRITING") or not line:
            break
    assert seen[-1].startswith("WRITING"), seen
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith(
        "ddp-profile report: interrupted"
    )
    assert _hashes(reports) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.sqlite", "reports"]


# ---- scrub: the same rules (inputs only read, one line, output atomic) ------------------------------------


@pytest.mark.parametrize(
    "case",
    [
        "missing path",
        "empty file",
        "random bytes",
        "text file",
        "SQLite, not nsys",
        ".nsys-rep given",
        "corrupt .sqlite.xz",
    ],
)
def test_scrub_bad_input(case, tmp_path):
    name, make, _, needles = next(c for c in ERROR_CASES if c[0] == case)
    paths = make(tmp_path)
    before = _hashes(tmp_path)
    proc = run_cli(["scrub", *paths, "-o", "clean.sqlite"], tmp_path)
    line = _error_line(proc, "scrub")
    assert proc.returncode == 3 and needles[0] in line, line
    assert (
        _hashes(tmp_path) == before
        and not list(tmp_path.glob("*clean*"))
        and not list(tmp_path.glob(".*.tmp"))
    )


@pytest.mark.parametrize("where", ["disk full", "folder under a file"])
def test_scrub_output_errors(where, tmp_path):
    _good(tmp_path)
    (tmp_path / "blocker").write_text("a file")
    before = _hashes(tmp_path)
    if where == "disk full":
        proc = run_cli(["scrub", "good.sqlite", "-o", "clean.sqlite"], tmp_path, DISK_FULL_PRELUDE)
    else:
        proc = run_cli(["scrub", "good.sqlite", "-o", "blocker/clean.sqlite"], tmp_path)
    line = _error_line(proc, "scrub")
    assert proc.returncode == 5 and "clean.sqlite" in line, line
    assert _hashes(tmp_path) == before and sorted(p.name for p in tmp_path.iterdir()) == [
        "blocker",
        "good.sqlite",
    ]


def test_scrub_disk_full_library(tmp_path, monkeypatch):
    from ddp_profile.nsys import scrub

    _good(tmp_path)
    real = open

    def full_open(p, mode="r", *a, **k):  # writing the temporary copy fails part-way, as on a full disk
        if "w" in mode:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(p))
        return real(p, mode, *a, **k)

    monkeypatch.setattr(scrub, "open", full_open, raising=False)
    with pytest.raises(OutputError, match="No space left"):
        scrub.scrub_file(tmp_path / "good.sqlite", tmp_path / "clean.sqlite")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.sqlite"]


# ---- --export: .nsys-rep converted with the user's nsys, only when asked ----------------------------------


def _fake_nsys(tmp_path: Path, ok: bool = True) -> Path:
    """A stand-in ``nsys``: `nsys export ... -o OUT REP` copies a prepared export to OUT (or fails)."""
    home = tmp_path / "nsys-home"
    home.mkdir()
    prepared = _good(home)
    script = home / "nsys"
    body = (
        (f'while [ $# -gt 0 ]; do if [ "$1" = -o ]; then out=$2; fi; shift; done\ncp "{prepared}" "$out"\n')
        if ok
        else 'echo "ImportError: cannot open report" >&2; exit 1\n'
    )
    script.write_text("#!/bin/bash\n" + body)
    script.chmod(0o755)
    return script


@pytest.mark.parametrize("command", ["inspect", "analyze"])
def test_export_flag_converts_with_nsys(command, tmp_path):
    nsys = _fake_nsys(tmp_path)
    (tmp_path / "run.nsys-rep").write_bytes(b"report bytes")
    before = _hashes(tmp_path)
    proc = subprocess.run(
        [PY, "-m", "ddp_profile", command, "run.nsys-rep", "--export"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, NSYS=str(nsys)),
    )
    assert proc.returncode == 0, proc.stderr
    assert "exported run.nsys-rep -> run.sqlite" in proc.stderr
    assert (tmp_path / "run.sqlite").is_file() and not list(tmp_path.glob(".*exporting*"))
    after = _hashes(tmp_path)
    assert {k: v for k, v in after.items() if not k.endswith("run.sqlite")} == before  # inputs untouched
    # A second run uses the export as it is (never overwritten).
    proc = subprocess.run(
        [PY, "-m", "ddp_profile", command, "run.nsys-rep", "--export"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, NSYS=str(nsys)),
    )
    assert proc.returncode == 0 and "using the existing export" in proc.stderr and _hashes(tmp_path) == after


@pytest.mark.parametrize("situation", ["nsys missing", "nsys fails"])
def test_export_flag_errors(situation, tmp_path):
    (tmp_path / "run.nsys-rep").write_bytes(b"report bytes")
    env = dict(os.environ)
    env.pop("NSYS", None)
    if situation == "nsys missing":
        env["PATH"] = str(Path(PY).parent)  # python only: no nsys to be found
    else:
        env["NSYS"] = str(_fake_nsys(tmp_path, ok=False))
    before = _hashes(tmp_path)
    proc = subprocess.run(
        [PY, "-m", "ddp_profile", "inspect", "run.nsys-rep", "--export"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    line = _error_line(proc, "inspect")
    assert proc.returncode == 3 and "run.nsys-rep" in line, line
    if situation == "nsys missing":
        assert "nsys export --type sqlite -o run.sqlite run.nsys-rep" in line
    else:
        assert "cannot open report" in line
    assert _hashes(tmp_path) == before and not (tmp_path / "run.sqlite").exists()
    assert not list(tmp_path.glob(".*exporting*"))


@pytest.mark.parametrize("argv", [[], ["--bogus", "x.sqlite"], ["--compress", "zip", "x.sqlite"]])
def test_standalone_scrubber_gives_one_line_for_a_bad_argument(argv, tmp_path):
    """``python -m ddp_profile.nsys.scrub`` (what the GPU machines run) answers a bad argument as the CLI
    does: one line on stderr naming the problem, exit 2, no usage block, nothing written."""
    proc = subprocess.run(
        [PY, "-m", "ddp_profile.nsys.scrub", *argv], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("python -m ddp_profile.nsys.scrub: error: ") and "usage:" not in proc.stderr
    assert not proc.stdout and not list(tmp_path.iterdir())
