"""Data loss, secrets surviving scrub, wrong answers and crashes, each built from a committed real
trace (``tests/data/ddp_mlp_2xh200.sqlite``, ``traces/naive_small_fp32_2xh200/*.sqlite.xz``) in a tmp dir.

docs/guarantees.md points at the tests here.
"""

from __future__ import annotations

import gzip
import lzma
import shutil
import sqlite3
import time
from pathlib import Path

import pytest
from conftest import SAMPLE, run_cli, sha256

from ddp_profile.errors import TraceError, UsageError
from ddp_profile.nsys import rawio, scrub
from ddp_profile.nsys.files import open_export
from ddp_profile.nsys.loader import load_trace

ROOT = Path(__file__).resolve().parents[2]
XZ_RUN = ROOT / "traces" / "naive_small_fp32_2xh200"
XZ = XZ_RUN / "naive_small_fp32_2xh200.sqlite.xz"


def _one_error_line(proc, code):
    assert proc.returncode == code, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if not ln.startswith("report:")]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def _copy(tmp: Path, name="run.sqlite") -> Path:
    dst = tmp / name
    shutil.copyfile(SAMPLE, dst)
    return dst


def _hashes(folder: Path) -> dict:
    return {p: sha256(p) for p in sorted(folder.rglob("*")) if p.is_file()}


# ---- data loss ------------------------------------------------------------------------------------------


def test_report_refuses_an_input_inside_its_output_folder(tmp_path):
    out = tmp_path / "rep"
    out.mkdir()
    (out / ".ddp-profile-report").write_text("x")  # an earlier report folder
    run = out / "naive"
    run.mkdir()
    shutil.copyfile(XZ, run / XZ.name)
    before = _hashes(out)
    line = _one_error_line(run_cli(["report", run, "-o", out], tmp_path), 2)
    assert "inside the output folder" in line
    assert _hashes(out) == before  # the input (and the old report) is untouched


def test_report_folder_holding_an_export_is_not_replaced(tmp_path):
    from ddp_profile.report.build import write_report_dir

    out = tmp_path / "rep"
    out.mkdir()
    (out / ".ddp-profile-report").write_text("x")
    shutil.copyfile(SAMPLE, out / "kept.sqlite")
    with pytest.raises(UsageError, match="holds an nsys export"):
        write_report_dir(out, lambda tmp: None)
    assert sha256(out / "kept.sqlite") == sha256(SAMPLE)


@pytest.mark.parametrize("suffix", [".xz", ".gz"])
def test_scrub_in_place_keeps_the_compression_of_the_name(suffix, tmp_path):
    plain = _copy(tmp_path)
    comp = tmp_path / f"run.sqlite{suffix}"
    opener = lzma.open if suffix == ".xz" else gzip.open
    with open(plain, "rb") as fin, opener(comp, "wb") as fout:
        shutil.copyfileobj(fin, fout)
    plain.unlink()
    assert scrub.main([str(comp), "--in-place"]) == 0
    with opener(comp, "rb") as f:
        assert f.read(16) == rawio.SQLITE_MAGIC
    assert load_trace(comp).meta["scrubbed"]


def test_scrub_output_named_xz_is_compressed(tmp_path):
    out = tmp_path / "clean.sqlite.xz"
    scrub.scrub_file(SAMPLE, out)
    with lzma.open(out) as f:
        assert f.read(16) == rawio.SQLITE_MAGIC


def test_scrub_two_inputs_to_one_output_refused_before_writing(tmp_path):
    for d in "ab":
        (tmp_path / d).mkdir()
        _copy(tmp_path / d)
    out = tmp_path / "out"
    out.mkdir()
    line = _one_error_line(run_cli(["scrub", "a/run.sqlite", "b/run.sqlite", "-o", "out"], tmp_path), 2)
    assert "both be written to" in line
    assert list(out.iterdir()) == []


def test_ctrl_c_during_scrub_exits_130_and_leaves_nothing(tmp_path, monkeypatch, capsys):
    src = _copy(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    calls = []

    def interrupt(self, value):
        calls.append(1)
        if len(calls) > 50:
            raise KeyboardInterrupt
        return 0

    monkeypatch.setattr(scrub._Scrubber, "dirty", interrupt)
    assert scrub.main([str(src), "-o", str(out / "clean.sqlite")]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert list(out.iterdir()) == []
    assert sha256(src) == sha256(SAMPLE)


# ---- secrets surviving scrub ----------------------------------------------------------------------------


def _plant(path: Path, strings: dict[int, str], kernel_name_id: int | None = None) -> None:
    con = sqlite3.connect(path)
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", strings.items())
    if kernel_name_id is not None:  # one real kernel now carries the planted name
        con.execute(
            "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET shortName = ?, demangledName = ? WHERE rowid = 1",
            (kernel_name_id, kernel_name_id),
        )
    con.commit()
    con.close()


@pytest.mark.parametrize("token", ["AKIAABCDEFGHIJKLMNOP", "hf_abcdefghijKLMNOP123", "sk-proj1234567890abcd"])
def test_token_joined_by_underscore_is_scrubbed(token, tmp_path):
    src = _copy(tmp_path)
    _plant(src, {90001: f"triton_poi_fused_{token}_0", 90002: f"train_{token}"}, kernel_name_id=90001)
    out = tmp_path / "clean.sqlite"
    scrub.scrub_file(src, out)
    assert token.encode() not in out.read_bytes()


def test_single_variable_environment_block_is_scrubbed(tmp_path):
    src = _copy(tmp_path)
    _plant(src, {90003: "WANDB_API_KEY=zzTOPSECRETzz\x00"})
    out = tmp_path / "clean.sqlite"
    scrub.scrub_file(src, out)
    assert b"zzTOPSECRETzz" not in out.read_bytes()


def test_user_learnt_from_a_path_is_scrubbed_everywhere(tmp_path):
    src = _copy(tmp_path)
    # the bare name comes first (a lower id) and far from any path: it must still go
    _plant(src, {89990: "zelda-exp-7", 90004: "loading /home/zelda/ckpt/model.pt"})
    out = tmp_path / "clean.sqlite"
    scrub.scrub_file(src, out)
    assert b"zelda" not in out.read_bytes()


# ---- WAL / journal / writers ----------------------------------------------------------------------------


def _wal_with_committed_change(tmp_path) -> tuple[Path, sqlite3.Connection]:
    path = _copy(tmp_path)
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA wal_autocheckpoint=0")
    con.execute("INSERT INTO StringIds VALUES (90100, 'committed only in the log')")
    con.commit()  # committed, but only in run.sqlite-wal while the writer keeps it open
    return path, con


def test_wal_with_committed_changes_is_refused_not_read_stale(tmp_path):
    path, con = _wal_with_committed_change(tmp_path)
    try:
        assert (tmp_path / "run.sqlite-wal").stat().st_size > 0
        with pytest.raises(TraceError, match="write-ahead log"):
            load_trace(path)
        line = _one_error_line(run_cli(["scrub", path, "-o", tmp_path / "c.sqlite"], tmp_path), 3)
        assert "wal_checkpoint" in line
        assert not (tmp_path / "c.sqlite").exists()
    finally:
        con.close()
    load_trace(path)  # the writer closed: the log was checkpointed and removed


def test_writer_holding_a_journal_is_refused(tmp_path):
    path = _copy(tmp_path)
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("BEGIN EXCLUSIVE")
    con.execute("UPDATE StringIds SET value = 'UNCOMMITTED' WHERE id = (SELECT MIN(id) FROM StringIds)")
    try:
        assert (tmp_path / "run.sqlite-journal").exists()
        line = _one_error_line(run_cli(["inspect", path], tmp_path), 3)
        assert "rollback journal" in line and "damaged" not in line
        with pytest.raises(TraceError, match="rollback journal"):
            scrub.scrub_file(path, tmp_path / "c.sqlite")
    finally:
        con.execute("ROLLBACK")
        con.close()


# ---- decompression bombs --------------------------------------------------------------------------------


def test_header_is_checked_before_decompressing_everything(tmp_path):
    bomb = tmp_path / "bomb.sqlite.xz"
    with lzma.open(bomb, "wb", preset=0) as f:
        block = b"\0" * (16 << 20)
        for _ in range(16):  # 256 MiB of zeros in a small file
            f.write(block)
    t0 = time.perf_counter()
    with pytest.raises(TraceError, match="does not decompress to an SQLite file"):
        open_export(bomb)
    assert time.perf_counter() - t0 < 2


def test_decompression_is_bounded_with_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv(rawio.LIMIT_ENV, "1M")  # the real trace expands to more than that
    with pytest.raises(TraceError, match=rawio.LIMIT_ENV):
        open_export(XZ)
    line = _one_error_line(run_cli(["inspect", XZ], tmp_path, env={rawio.LIMIT_ENV: "1M"}), 3)
    assert "decompression limit" in line
    with pytest.raises(TraceError, match=rawio.LIMIT_ENV):
        scrub.scrub_file(XZ, tmp_path / "c.sqlite")
    assert list(tmp_path.glob("*.sqlite")) == []
    monkeypatch.setenv(rawio.LIMIT_ENV, "lots")
    with pytest.raises(UsageError):
        open_export(XZ)


# ---- run JSONs, suffixes, FINDINGS.md --------------------------------------------------------------------


def _campaign(tmp_path: Path, meta_edit=None, hosts: str | None = None) -> Path:
    """tmp/camp/<run>/ holding the committed naive run, its JSON edited by ``meta_edit``."""
    import json

    run = tmp_path / "camp" / XZ_RUN.name
    run.mkdir(parents=True)
    shutil.copyfile(XZ, run / XZ.name)
    meta = json.loads((XZ_RUN / f"{XZ_RUN.name}.json").read_text())
    if meta_edit:
        meta_edit(meta)
    (run / f"{XZ_RUN.name}.json").write_text(json.dumps(meta))
    if hosts is not None:
        (tmp_path / "camp" / "hosts.txt").write_text(hosts)
    return tmp_path / "camp"


def _bad_types(meta):
    meta["world_size"] = "2"
    meta["config"] = ["not", "an", "object"]
    meta["step_ms_per_rank"] = {"a": 1}
    meta["bucket_mb"] = [1]


def test_run_json_fields_of_the_wrong_type_are_warned_and_ignored(tmp_path):
    camp = _campaign(tmp_path, _bad_types)
    trace = load_trace(camp / XZ_RUN.name)
    assert "world_size" not in trace.run and "config" not in trace.run and trace.run["strategy"] == "naive"
    assert any("'world_size' is str" in w for w in trace.warnings)
    proc = run_cli(["report", camp, "-o", tmp_path / "rep"], tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "rep" / "FINDINGS.md").is_file()
    proc = run_cli(["findings", camp, "-o", tmp_path / "fnd"], tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_report_reads_gz_and_hints_without_doubling_the_suffix(tmp_path):
    gz = tmp_path / "run.sqlite.gz"
    with open(SAMPLE, "rb") as fin, gzip.open(gz, "wb") as fout:
        shutil.copyfileobj(fin, fout)
    from ddp_profile.report.runs import discover_runs

    assert discover_runs([gz]) == [(gz, "run")]
    other = tmp_path / "run.sqlite.bz2"
    other.write_bytes(b"x")
    line = _one_error_line(run_cli(["report", other, "-o", tmp_path / "rep"], tmp_path), 3)
    assert ".sqlite.sqlite" not in line and "*.sqlite.gz" in line


def test_findings_markdown_escapes_html_from_run_json_and_hosts(tmp_path):
    def hostile(meta):
        meta["gpu_name"] = "<img src=x onerror=alert(1)>"
        meta["model"] = "small<script>alert(2)</script>"
        meta["config"]["model"] = meta["model"]

    camp = _campaign(tmp_path, hostile, hosts=f"{XZ_RUN.name} <b onmouseover=alert(3)>node&#65;</b>\n")
    proc = run_cli(["findings", camp, "-o", tmp_path / "fnd"], tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    md = (tmp_path / "fnd" / "FINDINGS.md").read_text()
    html = (tmp_path / "fnd" / "findings.html").read_text()
    for raw in ("<img", "<script>alert", "<b onmouseover", "&#65;"):
        assert raw not in md, raw
    assert "<script>alert" not in html and "<img src=x" not in html
    assert "&lt;" in md  # the hostile values did reach the file, escaped


# ---- wrong answers --------------------------------------------------------------------------------------


def _sql(path: Path, *statements) -> None:
    con = sqlite3.connect(path)
    for s in statements:
        con.execute(s)
    con.commit()
    con.close()


STEP_WHERE = "(text LIKE 'step%' OR textId IN (SELECT id FROM StringIds WHERE value LIKE 'step%'))"


def test_same_export_twice_in_one_folder_is_refused(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    _copy(run)
    with open(SAMPLE, "rb") as fin, lzma.open(run / "run.sqlite.xz", "wb", preset=0) as fout:
        shutil.copyfileobj(fin, fout)
    with pytest.raises(TraceError, match="same export twice"):
        load_trace(run)
    line = _one_error_line(run_cli(["analyze", run], tmp_path), 3)
    assert "same export twice" in line


def test_same_capture_under_two_names_is_refused(tmp_path):
    _copy(tmp_path, "rank0.sqlite")
    _copy(tmp_path, "rank1.sqlite")
    with pytest.raises(TraceError, match="same capture"):
        load_trace([tmp_path / "rank0.sqlite", tmp_path / "rank1.sqlite"])


def test_step_ranges_ending_before_they_start_are_rejected(tmp_path):
    path = _copy(tmp_path)
    _sql(path, f"UPDATE NVTX_EVENTS SET end = start - 1000 WHERE {STEP_WHERE}")
    with pytest.raises(TraceError, match="NVTX range.* end before they start"):
        load_trace(path)
    _one_error_line(run_cli(["analyze", path], tmp_path), 3)


def test_unclosed_step_ranges_are_named_as_such(tmp_path):
    from ddp_profile.analysis import analyze

    path = _copy(tmp_path)
    _sql(path, f"UPDATE NVTX_EVENTS SET end = NULL WHERE {STEP_WHERE}")
    notes = analyze(load_trace(path)).notes
    assert any("none was closed" in n for n in notes), notes
    assert not any("no NVTX range matches" in n for n in notes)


def test_overlapping_step_ranges_are_kept_with_a_note(tmp_path):
    from ddp_profile.analysis import analyze

    path = _copy(tmp_path)
    _sql(path, f"UPDATE NVTX_EVENTS SET end = end + 3000000 WHERE {STEP_WHERE}")
    res = analyze(load_trace(path))
    assert res.summary()["n_steps"] == 6
    assert any("start before the previous step" in n for n in res.notes)


def test_kernels_without_names_are_unknown_not_compute(tmp_path):
    from ddp_profile.analysis import analyze

    path = _copy(tmp_path)
    _sql(path, "DELETE FROM StringIds WHERE value LIKE 'ncclDevKernel%' OR value LIKE 'ncclKernel%'")
    trace = load_trace(path)
    assert any("missing from StringIds" in w for w in trace.warnings)
    assert (trace.kernels["kind"] == "unknown").sum() > 0 and (trace.kernels["kind"] == "nccl").sum() == 0
    notes = analyze(trace).notes
    assert any("no NCCL kernels identified, but" in n for n in notes), notes


def test_duplicated_kernel_rows_are_counted_once(tmp_path):
    path = _copy(tmp_path)
    n = len(load_trace(path).kernels)
    _sql(
        path,
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid <= 10",
    )
    trace = load_trace(path)
    assert len(trace.kernels) == n
    assert any("exact duplicates" in w for w in trace.warnings)


def test_rank_without_nccl_kernels_is_not_reported_as_zero_wait(tmp_path):
    from ddp_profile.analysis import analyze

    path = _copy(tmp_path)
    _sql(
        path,
        "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE globalPid = (SELECT MAX(globalPid) FROM "
        "CUPTI_ACTIVITY_KIND_KERNEL) AND shortName IN (SELECT id FROM StringIds WHERE value LIKE 'nccl%')",
    )
    notes = analyze(load_trace(path)).notes
    assert any("ran no NCCL kernel while others did" in n for n in notes), notes


# ---- crashes and exit codes -----------------------------------------------------------------------------


def test_hostile_numbers_in_nvtx_text_and_rank_markers(tmp_path):
    from ddp_profile.analysis import analyze

    path = _copy(tmp_path)
    _sql(
        path,
        f"UPDATE NVTX_EVENTS SET textId = NULL, text = 'step' || printf('%.4500d', 7) WHERE {STEP_WHERE}",
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) SELECT MIN(start), MIN(start) + 1, 59, "
        "'ddp_profile.rank 99999999999999999999999999/2', globalTid FROM NVTX_EVENTS GROUP BY globalTid",
    )
    res = analyze(load_trace(path))
    assert res.summary()["n_ranks"] == 2
    for args in (["inspect", path], ["analyze", path]):
        proc = run_cli(args, tmp_path)
        assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["analyze", "{S}", "--steps", "5:2"],
        ["analyze", "{S}", "--steps", "1:2:0"],
        ["analyze", "{S}", "--steps=-1:"],
        ["analyze", "{S}", "--jobs", "0"],
        ["analyze", "{S}", "--jobs=-2"],
        ["report", "{S}", "--jobs", "0"],
        ["report", "{S}", "--jobs", "9" * 30],
        ["analyze", "{S}", "--step-pattern", "("],
        ["analyze", "{S}", "--phase", "forward=[a"],
        ["launches", "{S}", "--step-pattern", "*x"],
        ["launches", "{S}", "--steps", "99999999999999999999999:"],
    ],
)
def test_senseless_command_line_values_are_usage_errors(args, tmp_path):
    proc = run_cli([a.replace("{S}", str(SAMPLE)) for a in args], tmp_path)
    _one_error_line(proc, 2)


def test_file_name_with_control_characters_gives_one_line(tmp_path):
    bad = tmp_path / "a\nb\x1b[31mc.sqlite"
    bad.write_bytes(b"not sqlite")
    for cmd in ("inspect", "analyze", "scrub", "report"):
        extra = (
            ["-o", str(tmp_path / ("o.sqlite" if cmd == "scrub" else "rep"))]
            if cmd in ("scrub", "report")
            else []
        )
        line = _one_error_line(run_cli([cmd, bad, *extra], tmp_path), 3)
        assert "\\x1b" in line and "\x1b" not in line


def test_every_test_the_readme_guarantees_cite_exists():
    """docs/guarantees.md and the scrub coverage of docs/privacy.md point at tests by name: none of them may
    disappear or be renamed."""
    import re

    section = (ROOT / "docs" / "guarantees.md").read_text()
    section += (
        (ROOT / "docs" / "privacy.md").read_text().split("## Scrub coverage", 1)[1].split("\n## ", 1)[0]
    )
    cited = set(re.findall(r"`(?:(test_\w+)\.py::)?(test_\w+)`", section))
    assert len(cited) > 15
    sources = {p.stem: p.read_text() for p in (ROOT / "tests").rglob("test_*.py")}
    for module, name in cited:
        where = [sources[module]] if module else sources.values()
        assert any(f"def {name}(" in text for text in where), name


def test_peer_to_peer_copies_are_named_when_no_nccl_kernel_carried_the_exchange(tmp_path):
    """A job whose GPUs exchange gradients by copy engines (PyTorch symmetric memory, as the harness's
    --peer-copy-allreduce does) has no NCCL kernel: the note says how many peer copies the trace holds, so
    a zero communication time is not read as "no communication"."""
    from ddp_profile.analysis import analyze

    path = _copy(tmp_path)
    con = sqlite3.connect(path)
    n_copies = con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY").fetchone()[0]
    con.close()
    assert n_copies > 0
    _sql(
        path,
        "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE shortName IN "
        "(SELECT id FROM StringIds WHERE value LIKE 'nccl%')",
        "UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET copyKind = 10",
    )
    trace = load_trace(path)
    n_peer = int((trace.kernels["name"] == "[CUDA memcpy PtoP]").sum())
    assert 0 < n_peer <= n_copies
    notes = analyze(trace).notes
    assert any(f"the trace has {n_peer} peer-to-peer copies ([CUDA memcpy PtoP]," in n for n in notes), notes
    # with NCCL kernels present the note does not appear
    assert not any(
        "peer-to-peer copies" in n for n in analyze(load_trace(_copy(tmp_path, "plain.sqlite"))).notes
    )
