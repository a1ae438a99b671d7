"""Property-based fuzzing of the loader and the analysis: start from exports built by
``ddp_profile.nsys.synth`` (all three nsys layouts), damage them the ways files from strangers' machines are
damaged -- tables or columns dropped, NULLs, huge / negative / non-integer timestamps, non-UTF-8 bytes in
TEXT columns, blobs where integers belong, duplicated rows and ids -- and require that ``load_trace`` either
returns a trace whose frames have exactly the contracted columns, or raises a ``DdpProfileError`` subclass;
the same for ``analyze`` on every trace that loads. Anything else escaping is a bug.

Example counts: ``DDP_FUZZ_EXAMPLES`` (default 200) per property; each test prints and records in
``test-artifacts/fuzz_counts.json`` how many cases ran and how they ended (loaded / which error class).
"""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
from collections import Counter
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import sqlite_utils
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddp_profile import schema
from ddp_profile.errors import DdpProfileError
from ddp_profile.nsys import synth
from ddp_profile.nsys.loader import load_trace

MAX_EXAMPLES = int(os.environ.get("DDP_FUZZ_EXAMPLES", "200"))
settings.register_profile(
    "ddp-fuzz",
    max_examples=MAX_EXAMPLES,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FUZZ = settings.get_profile("ddp-fuzz")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
TALLY: dict[str, Counter] = {}

# Values planted into cells: the odd things a damaged or foreign export can hold.
ODD_VALUES = [
    None,
    0,
    -1,
    1,
    2**62,
    -(2**62),
    2**63 - 1,
    -(2**63),
    1.5,
    float("nan"),
    float("inf"),
    "",
    "x",
    "12",
    b"\xff\xfe\x00",
    "\u2028<script>",
]
NON_UTF8 = "CAST(X'C3FF41E9' AS TEXT)"  # bytes that are not UTF-8, stored with TEXT affinity


@cache
def base_export(kind: str) -> bytes:
    """Bytes of a small, valid export: a 2-rank DDP run in each layout, or a file with copies and an open
    NVTX range. Built once per session."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "base.sqlite"
        if kind.startswith("ddp-"):
            synth.synth_ddp_run(path, n_ranks=2, n_steps=2, kernels_per_step=6, n_buckets=2, layout=kind[4:])
        else:
            n = 4
            cols = {
                "pid": np.full(n, 7),
                "device": np.zeros(n, int),
                "stream": np.full(n, 7),
                "start": np.arange(n) * 100,
                "end": np.arange(n) * 100 + 60,
                "correlation_id": np.arange(1, n + 1),
                "launch_start": np.arange(n) * 100 - 10,
            }
            synth.build_export(
                path,
                processes=[{"pid": 7, "device": 0}],
                kernels={**cols, "name": np.array(["gemm", "ncclDevKernel_AllReduce_Sum_f32_RING_LL"] * 2)},
                memcpy={**cols, "bytes": np.full(n, 4096), "copy_kind": np.array([1, 2, 8, 99])},
                memset={**cols, "bytes": np.full(n, 64)},
                nvtx={
                    "pid": np.array([7, 7]),
                    "tid": np.array([7, 7]),
                    "start": np.array([0, 50]),
                    "end": np.array([400, -1]),
                    "text": np.array(["step 0", "backward"]),
                },
            )
        return path.read_bytes()


KINDS = ["ddp-2025.3", "ddp-2024.x", "ddp-2023.4", "copies"]


@cache
def base_schema(kind: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    con = _open(base_export(kind))
    tables = sorted(r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'"))
    return tuple((t, tuple(r[1] for r in con.execute(f'PRAGMA table_info("{t}")'))) for t in tables)


def _open(data: bytes) -> sqlite3.Connection:
    con = sqlite3.connect(":memory:")
    con.deserialize(data)
    return con


def _loosen(con: sqlite3.Connection, table: str) -> None:
    """Re-create ``table`` without constraints (NOT NULL, PRIMARY KEY), so any value can be planted."""
    con.execute(f'CREATE TABLE "_loose" AS SELECT * FROM "{table}"')
    con.execute(f'DROP TABLE "{table}"')
    con.execute(f'ALTER TABLE "_loose" RENAME TO "{table}"')


# One mutation: (op, table index, column index, value index, row selector). Indices wrap around.
mutation = st.tuples(
    st.sampled_from(
        ["drop_table", "drop_column", "null", "set", "non_utf8", "duplicate", "shift", "delete_rows"]
    ),
    st.integers(0, 10**6),
    st.integers(0, 10**6),
    st.integers(0, len(ODD_VALUES) - 1),
    st.sampled_from(["all", "first", "odd"]),
)


def mutate(kind: str, muts: list[tuple]) -> bytes:
    con = _open(base_export(kind))
    layout = dict(base_schema(kind))
    names = sorted(layout)
    for op, ti, ci, vi, rows in muts:
        table = names[ti % len(names)]
        have = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if table not in have:
            continue
        cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
        col = cols[ci % len(cols)]
        where = {"all": "1", "first": f'rowid = (SELECT MIN(rowid) FROM "{table}")', "odd": "rowid % 2 = 1"}[
            rows
        ]
        if op == "drop_table":
            con.execute(f'DROP TABLE "{table}"')
        elif op == "drop_column":
            if len(cols) > 1:
                # sqlite-utils' transform rebuilds the table keeping every other column's declared type and
                # constraints (CREATE TABLE AS SELECT would silently drop them and change what is tested).
                sqlite_utils.Database(con)[table].transform(drop={col})
        elif op == "delete_rows":
            con.execute(f'DELETE FROM "{table}" WHERE {where}')
        elif op == "duplicate":
            _loosen(con, table)
            con.execute(f'INSERT INTO "{table}" SELECT * FROM "{table}" WHERE {where}')
        else:
            _loosen(con, table)
            if op == "null":
                con.execute(f'UPDATE "{table}" SET "{col}" = NULL WHERE {where}')
            elif op == "set":
                con.execute(f'UPDATE "{table}" SET "{col}" = ? WHERE {where}', (ODD_VALUES[vi],))
            elif op == "non_utf8":
                con.execute(f'UPDATE "{table}" SET "{col}" = {NON_UTF8} WHERE {where}')
            elif op == "shift":  # huge or negative timestamps that stay integers
                delta = [2**61, -(2**61), -(10**12), 10**15][vi % 4]
                con.execute(
                    f'UPDATE "{table}" SET "{col}" = "{col}" + ? WHERE {where} AND typeof("{col}") = '
                    "'integer' AND abs(\"{col}\") < 2000000000000000000",
                    (delta,),
                )
    con.commit()
    return con.serialize()


def _check_trace(trace) -> None:
    assert list(trace.kernels.columns) == schema.KERNEL_COLUMNS
    assert list(trace.nvtx.columns) == schema.NVTX_COLUMNS
    assert list(trace.ranks.columns) == schema.RANK_COLUMNS
    assert list(trace.gpus.columns) == schema.GPU_COLUMNS
    assert not trace.kernels.empty  # an empty capture is an error (MissingDataError), never a silent trace
    assert (trace.kernels["end_ns"] >= trace.kernels["start_ns"]).all()


def _record(test: str, outcome: str) -> None:
    TALLY.setdefault(test, Counter())[outcome] += 1


def _report(test: str) -> Counter:
    tally = TALLY.get(test, Counter())
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / "fuzz_counts.json"
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    known[test] = {"cases": sum(tally.values()), "max_examples": MAX_EXAMPLES, "outcomes": dict(tally)}
    path.write_text(json.dumps(known, indent=2) + "\n")
    print(f"{test}: {sum(tally.values())} cases: {dict(tally)}")
    return tally


def _load_and_analyze(test: str, kind: str, muts: list[tuple], analyse: bool) -> None:
    from ddp_profile.analysis import analyze

    data = mutate(kind, muts)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "fuzzed.sqlite"
        path.write_bytes(data)
        try:
            trace = load_trace(path)
        except DdpProfileError as exc:
            _record(test, f"load:{type(exc).__name__}")
            return
        assert path.read_bytes() == data  # input untouched
        _check_trace(trace)
        if not analyse:
            _record(test, "loaded")
            return
        try:
            res = analyze(trace)
        except DdpProfileError as exc:
            _record(test, f"analyze:{type(exc).__name__}")
            return
        assert list(res.steps.columns) == schema.STEP_SECTION_COLUMNS
        _record(test, "analysed")


def test_fuzz_loader():
    @FUZZ
    @given(kind=st.sampled_from(KINDS), muts=st.lists(mutation, min_size=1, max_size=4))
    def prop(kind, muts):
        _load_and_analyze("loader", kind, muts, analyse=False)

    prop()
    tally = _report("loader")
    assert sum(tally.values()) >= min(MAX_EXAMPLES, 50)
    assert tally["loaded"] > 0 and len(tally) > 1  # both outcomes were exercised


def test_fuzz_loader_and_analysis():
    @FUZZ
    @given(kind=st.sampled_from(KINDS), muts=st.lists(mutation, min_size=1, max_size=3))
    def prop(kind, muts):
        _load_and_analyze("analysis", kind, muts, analyse=True)

    prop()
    tally = _report("analysis")
    assert sum(tally.values()) >= min(MAX_EXAMPLES, 50)
    assert tally["analysed"] > 0


@pytest.mark.parametrize("kind", KINDS)
def test_unmutated_bases_load(kind):
    """The fuzz starts from valid exports: with no mutation every base loads and analyses."""
    from ddp_profile.analysis import analyze

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "base.sqlite"
        path.write_bytes(base_export(kind))
        trace = load_trace(path)
        _check_trace(trace)
        assert not analyze(trace).rank_overlap.empty


def test_enum_ids_are_never_pasted_into_sql(tmp_path):
    """Found by the fuzzer: ENUM_NSYS_EVENT_TYPE ids are used inside later queries, so a text id broke the
    load ("no such column") and could have injected SQL. Non-integer ids now fall back to the constants."""
    con = _open(base_export("ddp-2025.3"))
    _loosen(con, "ENUM_NSYS_EVENT_TYPE")
    con.execute("UPDATE ENUM_NSYS_EVENT_TYPE SET id = '0) OR (1=1' WHERE name = 'NvtxPushPopRange'")
    con.commit()
    path = tmp_path / "enum.sqlite"
    path.write_bytes(con.serialize())
    clean = tmp_path / "clean.sqlite"
    clean.write_bytes(base_export("ddp-2025.3"))
    got, want = load_trace(path).nvtx, load_trace(clean).nvtx
    assert len(got) == len(want) > 0 and got["name"].tolist() == want["name"].tolist()
