"""Loader tests: the real 2025.3 sample (expected numbers from raw SQL) and synthetic exports."""

from __future__ import annotations

import gzip
import lzma
import shutil
import sqlite3

import numpy as np
import pandas as pd
import pytest
from conftest import sha256

from ddp_profile import schema
from ddp_profile.errors import MissingDataError, TraceError
from ddp_profile.nsys.loader import load_trace


def raw(path, query):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def test_sample_counts_match_raw_sql(sample_path):
    tr = load_trace(sample_path)
    assert list(tr.kernels.columns) == schema.KERNEL_COLUMNS
    assert list(tr.nvtx.columns) == schema.NVTX_COLUMNS
    counts = tr.kernels["kind"].value_counts()
    n_kernel = raw(sample_path, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
    n_nccl = raw(
        sample_path,
        "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s "
        "ON s.id = k.shortName WHERE s.value LIKE 'nccl%Kernel%'",
    )[0][0]
    assert counts["compute"] + counts["nccl"] == n_kernel
    assert counts["nccl"] == n_nccl > 0
    assert counts["memcpy"] == raw(sample_path, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY")[0][0]
    assert counts["memset"] == raw(sample_path, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMSET")[0][0]
    n_ranges = raw(sample_path, "SELECT COUNT(*) FROM NVTX_EVENTS WHERE eventType IN (34, 59, 60)")[0][0]
    assert len(tr.nvtx) == n_ranges
    assert tr.meta["nsys_version"] == "2025.3.2.0" and tr.meta["schema_version"] == "3.20.3"


def test_sample_ranks_streams_and_launches(sample_path):
    tr = load_trace(sample_path)
    assert tr.ranks["rank"].tolist() == [0, 1]
    assert tr.ranks["device"].tolist() == [0, 1]
    assert set(tr.ranks["rank_source"]) == {"device-order"}
    assert set(tr.ranks["gpu_name"]) == {"NVIDIA H200"}
    # stream ids repeat across processes: the same stream number appears under both pids
    streams = tr.kernels.groupby("stream")["pid"].nunique()
    assert (streams == 2).any()
    # every kernel found its launching API call on (pid, correlationId); NCCL ones via the driver API
    assert tr.kernels["launch_ns"].notna().all()
    assert (tr.kernels["launch_ns"] <= tr.kernels["start_ns"]).all()
    nccl = tr.kernels[tr.kernels["kind"] == "nccl"]
    assert set(nccl["stream"]) == {17}
    assert "AllReduce" in set(nccl["collective"].dropna())


def test_sample_nvtx_text_resolution_and_depth(sample_path):
    tr = load_trace(sample_path)
    nccl = tr.nvtx[tr.nvtx["domain"] == "NCCL"]
    expected = raw(
        sample_path,
        "SELECT COUNT(*) FROM NVTX_EVENTS WHERE eventType = 59 AND text IS NULL AND textId IS NOT NULL",
    )[0][0]
    assert len(nccl) == expected > 0  # names came through textId -> StringIds
    assert nccl["name"].str.startswith("nccl").all()
    steps = tr.nvtx[tr.nvtx["name"].str.match(r"^step\d+$")]
    assert (steps["depth"] == 0).all() and len(steps) == 12
    phases = tr.nvtx[tr.nvtx["name"].isin(["forward", "backward", "optimizer"])]
    assert (phases["depth"] == 1).all()


@pytest.mark.parametrize("layout", ["2025.3", "2024.x", "2023.4"])
def test_synth_layouts_load(ddp_run, layout):
    truth = ddp_run(f"run_{layout}.sqlite", layout=layout, n_ranks=3)
    tr = load_trace(truth["path"])
    assert len(tr.kernels) == truth["n_kernels"]
    assert (tr.kernels["kind"] == "nccl").sum() == truth["n_nccl"]
    assert tr.meta["rank_source"] == "nvtx-marker"
    assert tr.ranks["rank"].tolist() == [0, 1, 2]
    assert tr.kernels["launch_ns"].notna().all()
    # backward kernels were launched from the autograd thread (pid + 1)
    bwd = tr.kernels[tr.kernels["name"] == "bwd_gemm"]
    assert (bwd["launch_tid"] == bwd["pid"] + 1).all()
    step = tr.nvtx[tr.nvtx["name"].str.startswith("step ")]
    assert step["payload"].notna().all()
    assert (step["payload"] == step["name"].str.split(" ").str[1].astype(int)).all()
    assert set(tr.gpus["device"]) == {0, 1, 2}


def _kernels(pids, devices, name="gemm"):
    n = len(pids)
    return {
        "pid": np.array(pids),
        "device": np.array(devices),
        "stream": np.full(n, 7),
        "start": np.arange(n) * 100 + 1000,
        "end": np.arange(n) * 100 + 1050,
        "name": np.array([name] * n),
        "correlation_id": np.arange(1, n + 1),
    }


def test_rank_from_filename_and_device_order(build_export, tmp_path):
    # two files, one process each, named by rank in reverse device order
    build_export("job_rank1.sqlite", processes=[{"pid": 10, "device": 0}], kernels=_kernels([10, 10], [0, 0]))
    build_export("job_rank0.sqlite", processes=[{"pid": 20, "device": 1}], kernels=_kernels([20, 20], [1, 1]))
    tr = load_trace(tmp_path)
    assert tr.meta["rank_source"] == "filename"
    assert dict(zip(tr.ranks["pid"], tr.ranks["rank"], strict=True)) == {10: 1, 20: 0}
    assert len(tr.kernels) == 4
    # one file, two processes, no markers: device order, not pid order
    path = build_export(
        "all.sqlite",
        processes=[{"pid": 5, "device": 1}, {"pid": 9, "device": 0}],
        kernels=_kernels([5, 9], [1, 0]),
    )
    tr = load_trace(path)
    assert tr.meta["rank_source"] == "device-order"
    assert dict(zip(tr.ranks["pid"], tr.ranks["rank"], strict=True)) == {9: 0, 5: 1}


def test_duplicate_ranks_across_files_raise(build_export, tmp_path):
    build_export("a_rank0.sqlite", processes=[{"pid": 10}], kernels=_kernels([10], [0]))
    build_export("b_rank0.sqlite", processes=[{"pid": 11}], kernels=_kernels([11], [0]))
    with pytest.raises(TraceError, match="appears more than once"):
        load_trace(tmp_path)


def test_clock_alignment_by_session_start(build_export, tmp_path):
    build_export(
        "h_rank0.sqlite",
        processes=[{"pid": 1}],
        kernels=_kernels([1] * 10, [0] * 10),
        host="a",
        session_start_utc_ns=10**18,
    )
    build_export(
        "h_rank1.sqlite",
        processes=[{"pid": 1}],
        kernels=_kernels([1] * 10, [0] * 10),
        host="b",
        session_start_utc_ns=10**18 + 500,
    )
    tr = load_trace(tmp_path)
    first = tr.kernels.groupby("rank")["start_ns"].min()
    assert first[1] - first[0] == 500  # same raw timestamps, session started 500 ns later
    assert "several hosts" in tr.meta["clock"]["method"]


def test_nvtx_text_vs_textid_and_missing_payload(build_export):
    nvtx = {
        "pid": np.array([1, 1, 1]),
        "tid": np.array([1, 1, 1]),
        "start": np.array([0, 10, 20]),
        "end": np.array([100, 50, -1]),
        "text": np.array(["outer", "inner", "open"]),
        "registered": np.array([0, 1, 0]),
        "payload": np.array([7, -1, -1]),
        "domain": np.array(["d", "d", ""]),
    }
    path = build_export(processes=[{"pid": 1}], kernels=_kernels([1], [0]), nvtx=nvtx)
    n = load_trace(path).nvtx.set_index("name")
    assert n.loc["inner", "depth"] == 1 and n.loc["outer", "depth"] == 0
    assert n.loc["outer", "payload"] == 7 and pd.isna(n.loc["inner", "payload"])
    assert pd.isna(n.loc["open", "end_ns"])
    assert n.loc["inner", "domain"] == "d" and n.loc["open", "domain"] == ""


def test_missing_tables_and_bad_files(build_export, tmp_path):
    no_kernels = build_export("nok.sqlite", processes=[{"pid": 1}])
    with pytest.raises(MissingDataError, match="-t cuda"):
        load_trace(no_kernels)
    no_nvtx = build_export("non.sqlite", processes=[{"pid": 1}], kernels=_kernels([1], [0]))
    tr = load_trace(no_nvtx)
    assert tr.nvtx.empty and list(tr.nvtx.columns) == schema.NVTX_COLUMNS
    assert any("-t cuda,nvtx" in w for w in tr.meta["warnings"])
    rep = tmp_path / "p.nsys-rep"
    rep.write_bytes(b"x")
    with pytest.raises(TraceError, match="nsys export --type sqlite -o p.sqlite p.nsys-rep"):
        load_trace(rep)
    junk = tmp_path / "junk.sqlite"
    junk.write_text("hello")
    with pytest.raises(TraceError, match="junk.sqlite"):
        load_trace(junk)
    truncated = tmp_path / "cut.sqlite"
    truncated.write_bytes(no_nvtx.read_bytes()[:5000])
    with pytest.raises(TraceError, match="cut.sqlite"):
        load_trace(truncated)
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).execute("CREATE TABLE t(x)").connection.close()
    with pytest.raises(TraceError, match="not an nsys export"):
        load_trace(other)


def test_read_only_and_compressed_inputs(sample_export, tmp_path):
    before = sha256(sample_export)
    plain = load_trace(sample_export)
    assert sha256(sample_export) == before
    xz = tmp_path / "s.sqlite.xz"
    xz.write_bytes(lzma.compress(sample_export.read_bytes()))
    gz = tmp_path / "s.sqlite.gz"
    with gzip.open(gz, "wb") as f, open(sample_export, "rb") as src:
        shutil.copyfileobj(src, f)
    for packed in (xz, gz):
        tr = load_trace(packed)
        pd.testing.assert_frame_equal(tr.kernels, plain.kernels)
        pd.testing.assert_frame_equal(tr.nvtx, plain.nvtx)


def test_files_from_different_runs_raise(build_export, tmp_path):
    build_export(
        "x_rank0.sqlite", processes=[{"pid": 1}], kernels=_kernels([1], [0]), session_start_utc_ns=10**18
    )
    build_export(
        "x_rank1.sqlite",
        processes=[{"pid": 1}],
        kernels=_kernels([1], [0]),
        session_start_utc_ns=10**18 + 3600 * 10**9,
    )
    with pytest.raises(TraceError, match="different runs"):
        load_trace(tmp_path)


# ---- the run record beside the exports (trace.run) ------------------------------------------------------

TRACES = __import__("pathlib").Path(__file__).resolve().parents[2] / "traces"


def test_committed_trace_gets_its_run_json_named_after_the_run():
    """The campaign writes ``<run>/<run>.json``: the loader attaches it, from the folder or the export."""
    import json

    folder = TRACES / "naive_small_fp32_2xh200"
    expected = json.loads((folder / f"{folder.name}.json").read_text())
    for where in (folder, folder / f"{folder.name}.sqlite.xz"):
        tr = load_trace(where)
        assert tr.run == expected
        assert tr.run["config"]["strategy"] == "naive"
        assert not [w for w in tr.warnings if "run record" in w]


@pytest.mark.parametrize("json_name", ["run.json", "job.json", "exp7.json"])
def test_run_json_by_stem_rank_suffix_or_folder_name(tmp_path, sample_path, json_name):
    """run.json, ``<stem>.json`` with the rank suffix dropped (``job_rank0.sqlite`` -> ``job.json``) and
    ``<folder name>.json`` are all found."""
    import json

    folder = tmp_path / "exp7"
    folder.mkdir()
    shutil.copyfile(sample_path, folder / "job_rank0.sqlite")
    (folder / json_name).write_text(json.dumps({"strategy": "overlap", "found": json_name}))
    tr = load_trace(folder / "job_rank0.sqlite")
    assert tr.run == {"strategy": "overlap", "found": json_name}


def test_unrelated_json_is_not_taken_and_bad_json_is_a_warning(tmp_path, sample_path):
    shutil.copyfile(sample_path, tmp_path / "a.sqlite")
    (tmp_path / "other.json").write_text('{"strategy": "naive"}')
    assert load_trace(tmp_path / "a.sqlite").run is None
    (tmp_path / "a.json").write_text('{"strategy": ')  # cut short
    tr = load_trace(tmp_path / "a.sqlite")
    assert tr.run is None
    assert any("a.json: run record not read" in w for w in tr.warnings)
    (tmp_path / "run.json").write_text("[1, 2]")  # valid JSON, not an object: skipped, next candidate tried
    (tmp_path / "a.json").write_text('{"strategy": "overlap"}')
    tr = load_trace(tmp_path / "a.sqlite")
    assert tr.run == {"strategy": "overlap"}
    assert any("run.json: run record is a JSON list" in w for w in tr.warnings)


def test_nccl_channel_count_is_read_from_the_grid_of_nccl_kernels():
    """NCCL launches one CTA per channel: gridX of its kernels is the channel count (24 by default on the
    committed H100 runs, 2 where the harness capped it with --nccl-channels 2); None without NCCL."""
    campaign = TRACES / "campaign" / "C"
    assert load_trace(campaign / "torch_ddp-25mb_xl_fp32_4xh100").meta["nccl_channels"] == 24
    capped = load_trace(campaign / "torch_ddp-25mb-ch2-hiprio_xl_fp32_4xh100")
    assert capped.run["config"]["nccl_channels"] == 2 and capped.meta["nccl_channels"] == 2
    assert load_trace(campaign / "none_xl_fp32_1xh100").meta["nccl_channels"] is None


def edited_copy(src, dst, *statements):
    """A copy of the export ``src`` at ``dst`` with the SQL ``statements`` applied (the input is untouched)."""
    shutil.copy(src, dst)
    con = sqlite3.connect(dst)
    with con:
        for statement in statements:
            con.execute(statement)
    con.close()
    return dst


def test_nvtx_texts_equal_a_per_row_join(sample_path, tmp_path):
    """NVTX texts are read without a per-row join (own text rows, then each registered id once): on a copy
    whose rows mix own text, registered ids, both (own text wins) and an id missing from StringIds (no
    name), every range's name and start equal the per-row ``COALESCE(text, StringIds.value)`` answer."""
    path = edited_copy(
        sample_path,
        tmp_path / "mixed.sqlite",
        "UPDATE NVTX_EVENTS SET text = 'own ' || rowid WHERE textId IS NOT NULL AND rowid % 3 = 0",
        "UPDATE NVTX_EVENTS SET textId = 987654321, text = NULL WHERE rowid % 7 = 0 AND eventType = 59",
    )
    expected = raw(
        path,
        "SELECT e.start, COALESCE(e.text, (SELECT value FROM StringIds s WHERE s.id = e.textId)) "
        "FROM NVTX_EVENTS e WHERE e.eventType IN (34, 59, 60) ORDER BY e.start, e.rowid",
    )
    tr = load_trace(path)
    got = tr.nvtx.sort_values("start_ns", kind="stable")
    texts = [None if pd.isna(t) else t for t in got["name"]]
    assert sorted(zip(got["start_ns"].tolist(), map(str, texts), strict=True)) == sorted(
        (s, str(t)) for s, t in expected
    )
    assert any(t is None for _, t in expected) and any(str(t).startswith("own ") for _, t in expected)


def test_join_launches_equals_a_dict_join_across_chunks(monkeypatch):
    """Activities find the first API row (table order) with their (pid, low 32 bits of the correlation id);
    several processes interleaved, ids out of order, repeated and past 32 bits, activities without a match
    or without an id (-1), and lookups spread over several chunks."""
    from ddp_profile.nsys import read

    rng = np.random.default_rng(3)
    m = 5000
    lpid = rng.integers(1, 4, m).astype(np.int32)
    lcorr = rng.integers(1, 3000, m).astype(np.int64)
    lcorr[:50] += 1 << 32  # the same low 32 bits as a small id
    lstart = rng.integers(0, 10**9, m)
    ltid = rng.integers(1, 99, m).astype(np.int32)
    n = 7000
    pid = rng.integers(0, 4, n).astype(np.int32)
    corr = rng.integers(-1, 3200, n).astype(np.int32)
    first: dict = {}
    for p, c, s, t in zip(lpid.tolist(), lcorr.tolist(), lstart.tolist(), ltid.tolist(), strict=True):
        first.setdefault((p, c & 0xFFFFFFFF), (s, t))
    want = [
        first.get((p, c), (-1, -1)) if c > 0 else (-1, -1)
        for p, c in zip(pid.tolist(), corr.tolist(), strict=True)
    ]
    got_ns, got_tid = read.join_launches(pid, corr, [lpid, lcorr.copy(), lstart, ltid])
    assert list(zip(got_ns.tolist(), got_tid.tolist(), strict=True)) == want
    assert sum(s >= 0 for s, _ in want) > n // 4  # many activities matched: the test exercises the lookup


def test_frame_columns_are_narrow_where_values_fit(sample_path, tmp_path):
    """Ranks, devices and streams load as int16 and byte counts as Int32 where their values fit; a value
    that does not fit widens the column (never truncated)."""
    tr = load_trace(sample_path)
    assert {str(tr.kernels[c].dtype) for c in ("rank", "device", "stream")} == {"int16"}
    assert str(tr.kernels["bytes"].dtype) == "Int32" and tr.kernels["bytes"].notna().any()
    path = edited_copy(
        sample_path,
        tmp_path / "wide.sqlite",
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET streamId = 70000 WHERE streamId = 17",
        "UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET bytes = 5000000000 WHERE rowid = 1",
    )
    wide = load_trace(path)
    assert wide.kernels["stream"].dtype.itemsize >= 4 and (wide.kernels["stream"] == 70000).any()
    assert str(wide.kernels["bytes"].dtype) == "Int64" and int(wide.kernels["bytes"].max()) == 5000000000


def test_loading_and_analysing_leave_pandas_string_options_as_they_were(sample_path):
    """The library sets no pandas option (a program that imports it keeps its own; the string storage was once
    set to "python" on import of nsys/frames.py): in a fresh process, the string options read the same after
    ``load_trace`` + ``analyze`` as before the import."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys, pandas as pd\n"
        "keys = ['mode.string_storage', 'future.infer_string']\n"
        "before = [pd.get_option(k) for k in keys]\n"
        "from ddp_profile.analysis import analyze\n"
        "from ddp_profile.nsys.loader import load_trace\n"
        "analyze(load_trace(sys.argv[1]))\n"
        "print(before == [pd.get_option(k) for k in keys], before)\n"
    )
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-c", code, str(sample_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("True "), proc.stdout


def test_whole_graph_traces_warn_that_their_kernels_are_missing(sample_export):
    """nsys's default --cuda-graph-trace=graph records each graph launch as one row of
    CUPTI_ACTIVITY_KIND_GRAPH_TRACE and none of its kernels: the loader says so, naming the option to use."""
    assert not any("CUDA graph" in w for w in load_trace([sample_export]).meta["warnings"])
    con = sqlite3.connect(sample_export)
    con.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start INT, end INT, deviceId INT, streamId INT, "
        "correlationId INT, globalPid INT, graphId INT, graphExecId INT)"
    )
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES (?, ?, 0, 7, ?, 0, 1, 1)",
        [(1000 * i, 1000 * i + 500, i) for i in range(3)],
    )
    con.commit()
    con.close()
    warned = [w for w in load_trace([sample_export]).meta["warnings"] if "CUDA graph" in w]
    assert len(warned) == 1 and warned[0].startswith("3 CUDA graph launch(es) were traced as whole graphs")
    assert "--cuda-graph-trace=node" in warned[0]
