"""Hostile inputs built from
the committed real exports (``tests/data/ddp_mlp_2xh200.sqlite`` and the harness capture
``traces/naive_small_fp32_2xh200``) in a tmp dir. Each case ends in a result or one clear line with a
documented exit code, within seconds; none blocks, exhausts memory or shows a traceback.
"""

from __future__ import annotations

import json
import lzma
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SAMPLE, run_cli

from ddp_profile.errors import TraceError
from ddp_profile.nsys import rawio
from ddp_profile.nsys.files import open_export
from ddp_profile.nsys.loader import load_trace

ROOT = Path(__file__).resolve().parents[2]
XZ = ROOT / "traces" / "naive_small_fp32_2xh200" / "naive_small_fp32_2xh200.sqlite.xz"


def _one_error_line(proc, code):
    assert proc.returncode == code, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if not ln.startswith("report:")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def _run_folder(tmp: Path, name="run") -> Path:
    d = tmp / name
    d.mkdir()
    shutil.copyfile(SAMPLE, d / "run.sqlite")
    return d


# ---- side files: never block, never read without bound ---------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero", "17 MiB file"])
@pytest.mark.parametrize("name", ["run.json", "program.json"])
def test_side_file_that_is_a_fifo_device_or_huge_never_blocks(name, kind, tmp_path):
    """A FIFO (which would block a reader forever), a link to /dev/zero (never ends) or an oversized file
    named like a run JSON: the run still renders, with a line naming the file; it finishes in seconds."""
    run = _run_folder(tmp_path)
    side = run / name
    if kind == "fifo":
        os.mkfifo(side)
    elif kind == "link to /dev/zero":
        side.symlink_to("/dev/zero")
    else:
        side.write_bytes(b" " * (17 << 20) + b"{}")
    t0 = time.monotonic()
    proc = run_cli(["report", run, "-o", tmp_path / "rep", "--no-findings"], tmp_path, timeout=90)
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - t0 < 60
    if name == "run.json":
        warnings = load_trace(run / "run.sqlite").warnings
        assert any(name in w and "run record not read" in w for w in warnings), warnings
    else:
        assert "not a regular file" in proc.stderr or "too large" in proc.stderr, proc.stderr


@pytest.mark.parametrize("content", ["deep", "world_size 10^18"])
def test_hostile_run_json_is_a_warning_not_a_traceback(content, tmp_path):
    run = _run_folder(tmp_path)
    if content == "deep":
        (run / "run.json").write_text("[" * 200_000 + "]" * 200_000)
    else:
        (run / "run.json").write_text(json.dumps({"world_size": 10**18, "config": {"world_size": 10**18}}))
    warnings = load_trace(run / "run.sqlite").warnings
    assert any("run.json" in w for w in warnings), warnings
    proc = run_cli(["report", run, "-o", tmp_path / "rep", "--no-findings"], tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr


# ---- decompression: memory-aware default, the header's size, a limit below the header ---------------------


def _header_bomb(tmp: Path, pages: int = 0x7FFFFFF0) -> Path:
    """A small .xz whose first bytes are the real export's SQLite header, stating ``pages`` 4 KiB pages."""
    head = bytearray(SAMPLE.read_bytes()[:100])
    head[28:32] = pages.to_bytes(4, "big")
    bomb = tmp / "bomb.sqlite.xz"
    with lzma.open(bomb, "wb", preset=0) as f:
        f.write(bytes(head))
        f.write(b"\0" * (8 << 20))
    return bomb


def test_header_stating_more_than_the_limit_is_refused_before_expanding(tmp_path):
    bomb = _header_bomb(tmp_path)
    t0 = time.perf_counter()
    with pytest.raises(TraceError, match="header states .* decompression limit"):
        open_export(bomb)
    assert time.perf_counter() - t0 < 1
    line = _one_error_line(run_cli(["inspect", bomb], tmp_path), 3)
    assert rawio.LIMIT_ENV in line


def test_default_decompression_limit_follows_the_machines_memory(monkeypatch):
    sizes = {"SC_PHYS_PAGES": 1 << 20, "SC_PAGE_SIZE": 4096}  # a 4 GiB machine
    monkeypatch.setattr(os, "sysconf", lambda name: sizes[name])
    monkeypatch.delenv(rawio.LIMIT_ENV, raising=False)
    assert rawio.max_decompressed() == 2 << 30
    sizes["SC_PHYS_PAGES"] = 1 << 30  # a 4 TiB machine: capped
    assert rawio.max_decompressed() == rawio.DEFAULT_LIMIT


@pytest.mark.parametrize("limit", ["50", "1K"])
def test_limit_below_the_header_size_is_one_clear_line(limit, tmp_path):
    line = _one_error_line(run_cli(["inspect", XZ], tmp_path, env={rawio.LIMIT_ENV: limit}), 3)
    assert "decompression limit" in line and rawio.LIMIT_ENV in line


# ---- exports that are not regular files, and symlinked exports ---------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "device"])
@pytest.mark.parametrize("command", ["inspect", "scrub"])
def test_fifo_or_device_given_as_an_export_is_named_as_such(kind, command, tmp_path):
    path = tmp_path / "run.sqlite"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(os.devnull)
    extra = ["-o", tmp_path / "c.sqlite"] if command == "scrub" else []
    line = _one_error_line(run_cli([command, path, *extra], tmp_path, timeout=60), 3)
    assert ("FIFO" if kind == "fifo" else "character device") in line and "no such file" not in line, line


def test_wal_guard_looks_beside_the_real_file_of_a_symlinked_export(tmp_path):
    import sqlite3

    real = tmp_path / "store"
    real.mkdir()
    shutil.copyfile(SAMPLE, real / "run.sqlite")
    (tmp_path / "link.sqlite").symlink_to(real / "run.sqlite")
    con = sqlite3.connect(real / "run.sqlite", isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA wal_autocheckpoint=0")
    con.execute("UPDATE StringIds SET value = 'COMMITTED' WHERE id = (SELECT MIN(id) FROM StringIds)")
    try:
        assert (real / "run.sqlite-wal").stat().st_size > 0
        with pytest.raises(TraceError, match="write-ahead log"):
            load_trace(tmp_path / "link.sqlite")
    finally:
        con.close()


# ---- --scheduler -----------------------------------------------------------------------------------------


def test_malformed_scheduler_address_is_one_line_at_once(tmp_path):
    t0 = time.monotonic()
    line = _one_error_line(run_cli(["analyze", SAMPLE, "--scheduler", "garbage::://"], tmp_path), 2)
    assert "not an address" in line and time.monotonic() - t0 < 30


def test_unreachable_scheduler_fails_within_seconds(tmp_path):
    pytest.importorskip("distributed")
    t0 = time.monotonic()
    line = _one_error_line(run_cli(["analyze", SAMPLE, "--scheduler", "tcp://127.0.0.1:9"], tmp_path), 2)
    assert "cannot connect" in line and time.monotonic() - t0 < 40


# ---- tracebacks ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["inspect", "analyze", "launches", "export", "report", "scrub"])
def test_non_utf8_file_name_works_in_every_command(command, tmp_path):
    """A file name whose bytes are not UTF-8 (``r\\xff\\xfe.sqlite``): every command runs; names are shown with
    ``\\xff`` escapes."""
    name = os.fsdecode(b"r\xff\xfe.sqlite")
    shutil.copyfile(SAMPLE, tmp_path / name)
    extra = {"export": ["-o", "p.json"], "report": ["-o", "rep"], "scrub": ["-o", "c.sqlite"]}.get(
        command, []
    )
    proc = subprocess.run(
        [sys.executable, "-m", "ddp_profile", command, name, *extra],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr.decode(errors="replace")


def test_stream_id_minus_one_is_a_stream_like_any_other(tmp_path):
    """CUDA stream ids are whatever the export says; -1 once collided with the timeline's NVTX-row marker."""
    import sqlite3

    path = tmp_path / "run.sqlite"
    shutil.copyfile(SAMPLE, path)
    con = sqlite3.connect(path)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET streamId = -1 WHERE rowid % 3 = 0")
    con.commit()
    con.close()
    proc = run_cli(["report", path, "-o", tmp_path / "rep"], tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "stream -1" in (tmp_path / "rep" / "run-run.html").read_text()


def test_per_rank_files_with_session_starts_2_63_apart_are_one_line(tmp_path):
    import sqlite3

    src = ROOT / "traces" / "per-rank" / "bucketed-25mb_small_fp32_2xh200"
    for r, utc in ((0, 1), (1, 2**63 - 1000)):
        dst = tmp_path / f"run_rank{r}.sqlite"
        with (
            lzma.open(src / f"bucketed-25mb_small_fp32_2xh200_rank{r}.sqlite.xz") as fin,
            open(dst, "wb") as fout,
        ):
            shutil.copyfileobj(fin, fout)
        con = sqlite3.connect(dst)
        con.execute("UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = ?", (utc,))
        con.commit()
        con.close()
    for command in ("inspect", "analyze"):
        line = _one_error_line(run_cli([command, tmp_path], tmp_path), 3)
        assert "session start times" in line and "not one run" in line


KILL_WORKER = (
    "import os, signal, sys, ddp_profile.report.build as R\n"
    "real = R.load_one\n"
    "def load_one(p, *args, **kwargs):\n"
    "    if 'doomed' in str(p):\n"
    "        os.kill(os.getpid(), signal.SIGKILL)\n"
    "    return real(p, *args, **kwargs)\n"
    "R.load_one = load_one\n"
    "from ddp_profile.cli import main\nraise SystemExit(main(sys.argv[1:]))\n"
)


def test_report_worker_killed_mid_run_is_a_listed_failure(tmp_path):
    for name in ("good", "doomed"):
        _run_folder(tmp_path, name)
    proc = subprocess.run(
        [sys.executable, "-c", KILL_WORKER, "report", "good", "doomed", "-o", "rep", "--jobs", "2"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 3, proc.stderr
    assert "worker process died" in proc.stderr


# ---- exactness ---------------------------------------------------------------------------------------------


def _shifted_harness_capture(tmp: Path, shift: int) -> tuple[Path, Path]:
    """The harness capture, decompressed, and a copy with every GPU, API and NVTX time moved by ``shift``."""
    import sqlite3

    src = tmp / "naive.sqlite"
    with lzma.open(XZ) as fin, open(src, "wb") as fout:
        shutil.copyfileobj(fin, fout)
    dst = tmp / "shifted.sqlite"
    shutil.copyfile(src, dst)
    con = sqlite3.connect(dst)
    for table in (
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_MEMCPY",
        "CUPTI_ACTIVITY_KIND_MEMSET",
        "CUPTI_ACTIVITY_KIND_RUNTIME",
        "NVTX_EVENTS",
    ):
        con.execute(
            f"UPDATE {table} SET start = start + ?, end = CASE WHEN end IS NULL THEN NULL ELSE end + ? END",
            (shift, shift),
        )
    con.commit()
    con.close()
    return src, dst


DURATIONS = (
    "compute_ns",
    "comm_ns",
    "overlap_ns",
    "exposed_comm_ns",
    "comm_tail_ns",
    "job_comm_tail_ns",
    "idle_ns",
    "step_ns",
    "exposed_wait_ns",
    "exposed_transfer_ns",
)


@pytest.mark.parametrize("shift", [2**63 - 2**33, -(10**12)], ids=["near 2^63", "negative"])
def test_odd_but_legal_timestamps_give_exactly_the_same_analysis(shift, tmp_path):
    """Times near 2^63 lost ~300 ns to float arithmetic in comm_tail_ns; negative ones collided with -1 ("no
    launch") and changed every step. Both now analyse number for number as the source (times are counted in
    exact integers from the earliest activity, with a warning saying so)."""
    from ddp_profile.analysis import analyze

    src, dst = _shifted_harness_capture(tmp_path, shift)
    before, after = load_trace(src), load_trace(dst)
    assert any("counted from" in w for w in after.warnings)
    a, b = analyze(before), analyze(after)
    assert a.summary() == b.summary()
    for col in DURATIONS:
        if col in a.steps:
            assert a.steps[col].equals(b.steps[col]), col
    assert (after.kernels["launch_ns"] >= 0).all() and (after.kernels["start_ns"] >= 0).all()


def test_null_global_pid_is_left_out_alike_by_inspect_and_analyze(tmp_path):
    import sqlite3

    path = tmp_path / "run.sqlite"
    shutil.copyfile(SAMPLE, path)
    con = sqlite3.connect(path)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET globalPid = NULL WHERE rowid % 5 = 0")
    con.commit()
    con.close()
    inspect = json.loads(run_cli(["inspect", path, "--format", "json"], tmp_path).stdout)
    analysis = json.loads(run_cli(["analyze", path, "--format", "json"], tmp_path).stdout)
    clean = load_trace(SAMPLE)
    assert [r["pid"] for r in inspect["ranks"]] == clean.ranks["pid"].tolist()  # no phantom rank
    assert analysis["summary"]["n_ranks"] == len(inspect["ranks"]) == 2
    assert any("NULL globalPid" in w for w in inspect["warnings"])


def test_kernel_table_with_demangled_name_only_is_read(tmp_path):
    import sqlite3

    path = tmp_path / "run.sqlite"
    shutil.copyfile(SAMPLE, path)
    con = sqlite3.connect(path)
    con.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN shortName")
    con.commit()
    con.close()
    for command in ("inspect", "analyze", "launches"):
        proc = run_cli([command, path], tmp_path)
        assert proc.returncode == 0, proc.stderr
    assert load_trace(path).meta["nccl_channels"] == load_trace(SAMPLE).meta["nccl_channels"]


def test_bad_environment_value_in_report_is_a_usage_error(tmp_path):
    line = _one_error_line(
        run_cli(["report", XZ.parent, "-o", tmp_path / "rep"], tmp_path, env={rawio.LIMIT_ENV: "lots"}), 2
    )
    assert rawio.LIMIT_ENV in line


SLOW_WORKERS = (
    "import sys, time, ddp_profile.report.build as R\n"
    "def load_one(p, *args, **kwargs):\n"
    "    print('LOADING', file=sys.stderr, flush=True)\n"
    "    time.sleep(120)\n"
    "R.load_one = load_one\n"
    "from ddp_profile.cli import main\nraise SystemExit(main(sys.argv[1:]))\n"
)


def test_sigterm_during_report_jobs_ends_the_workers_at_once(tmp_path):
    """SIGTERM while ``report --jobs 2`` workers load: exit 143 within seconds (the workers' loads are not
    waited for), no hidden folder left."""
    import signal

    for name in ("a", "b"):
        _run_folder(tmp_path, name)
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_WORKERS, "report", "a", "b", "-o", "rep", "--jobs", "2"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    while not (line := proc.stderr.readline()).startswith("LOADING"):
        assert line, "the report ended before its workers started"
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "Traceback" not in err, err
    assert time.monotonic() - t0 < 20
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]


def test_rebased_times_are_refused_by_dask_not_misaligned(tmp_path):
    pytest.importorskip("distributed")
    _, dst = _shifted_harness_capture(tmp_path, -(10**12))
    proc = run_cli(["analyze", dst, "--dask", "--jobs", "1"], tmp_path, timeout=180)
    assert proc.returncode == 3, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]  # Dask's worker logs its task's error above the one line
    assert line.startswith("ddp-profile analyze: error:") and "rebased" in line and "without --dask" in line
