"""Property-based fuzzing beyond the export tables: NVTX text, run JSONs, folder layouts and
command-line arguments. Each property requires that the toolkit either works or raises a
``DdpProfileError`` (the CLI: returns a documented exit code with one line); anything else is a bug.

Examples per property: ``DDP_FUZZ_EXAMPLES`` (the knob of tests/nsys/test_fuzz.py), capped per property so the
whole file stays within a CI budget on 2 cores (the CLI property runs a real command per example).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fuzz import MAX_EXAMPLES, base_export

from ddp_profile import cli
from ddp_profile.errors import DdpProfileError
from ddp_profile.nsys.loader import load_trace


def _settings(cap: int):
    return settings(
        max_examples=max(1, min(MAX_EXAMPLES, cap)),
        deadline=None,
        print_blob=True,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.function_scoped_fixture,
        ],
    )


digits = st.from_regex(r"[0-9]{1,6000}", fullmatch=True)
nvtx_text = st.one_of(
    st.text(max_size=200),
    st.builds(lambda d: f"step {d}", digits),
    st.builds(lambda d: f"step{d}", digits),
    st.builds(lambda a, b: f"ddp_profile.rank {a}/{b}", digits, digits),
    st.builds(lambda a, b: f"allreduce b{a} {b}B", digits, digits),
    st.sampled_from(["", "\x00", "step \u0663", "step ²", "\u2028<script>", "step -1", "step 1e309"]),
)


def _export_with_texts(d: Path, texts: list[str]) -> Path:
    import sqlite3

    path = d / "run.sqlite"
    path.write_bytes(base_export("ddp-2025.3"))
    con = sqlite3.connect(path)
    rows = [r[0] for r in con.execute("SELECT rowid FROM NVTX_EVENTS ORDER BY rowid")]
    for rowid, text in zip(rows, texts, strict=False):
        con.execute("UPDATE NVTX_EVENTS SET text = ?, textId = NULL WHERE rowid = ?", (text, rowid))
    con.commit()
    con.close()
    return path


def _load_analyze(path) -> None:
    from ddp_profile.analysis import analyze

    try:
        analyze(load_trace(path))
    except DdpProfileError:
        pass


@_settings(40)
@given(texts=st.lists(nvtx_text, min_size=1, max_size=12))
def test_fuzz_nvtx_text(texts):
    with tempfile.TemporaryDirectory() as d:
        _load_analyze(_export_with_texts(Path(d), texts))


json_value = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**80), max_value=2**80),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=30),
    ),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
KEYS = [
    "run",
    "run_name",
    "strategy",
    "model",
    "dtype",
    "world_size",
    "bucket_mb",
    "gpu_name",
    "config",
    "step_ms_per_rank",
    "host_step_ms_per_rank",
    "bucket_bytes",
    "measured_steps",
]
run_json = st.one_of(
    json_value,
    st.dictionaries(st.sampled_from(KEYS), json_value, max_size=8),
    st.builds(
        lambda cfg: {"strategy": "bucketed", "world_size": 2, "config": cfg},
        st.dictionaries(st.sampled_from(["batch", "seq_len", "bucket_mb", "model", "steps"]), json_value),
    ),
)


@_settings(60)
@given(record=run_json)
def test_fuzz_run_json(record):
    from ddp_profile.findings.data import RunData
    from ddp_profile.report.runs import normalise_meta, strategy_key

    with tempfile.TemporaryDirectory() as d:
        run = Path(d) / "r"
        run.mkdir()
        (run / "run.sqlite").write_bytes(base_export("ddp-2025.3"))
        (run / "run.json").write_text(json.dumps(record, allow_nan=True))
        trace = load_trace(run)
        meta = normalise_meta(trace.run or {})
        if meta.get("world_size") is not None:
            from ddp_profile.report.runs import Run

            strategy_key(Run("r", trace, None, meta))
        rd = RunData("main", "r", run, trace.run or {}, trace, None)
        for attr in (
            "strategy",
            "model",
            "dtype",
            "world_size",
            "bucket_mb",
            "label",
            "units_per_rank_step",
            "batch_label",
            "run_id",
        ):
            getattr(rd, attr)


names = st.sampled_from(
    [
        "run.sqlite",
        "run.sqlite.xz",
        "run.sqlite.gz",
        "rank0.sqlite",
        "rank1.sqlite",
        "run.json",
        "x.nsys-rep",
        "notes.txt",
        "a\nb.sqlite",
        ".hidden.sqlite",
        "run.sqlite-wal",
    ]
)
contents = st.sampled_from(["export", "empty", "garbage", "json"])
layout = st.lists(st.tuples(st.sampled_from(["", "a", "a/b", "scaling/c"]), names, contents), max_size=6)


def _write(path: Path, what: str) -> None:
    import gzip
    import lzma

    data = {
        "export": base_export("ddp-2025.3"),
        "empty": b"",
        "garbage": b"SQLite format 3\x00" + b"\x07" * 300,
        "json": b'{"world_size": "2"}',
    }[what]
    if what == "export" and path.name.endswith(".xz"):
        data = lzma.compress(data, preset=0)
    elif what == "export" and path.name.endswith(".gz"):
        data = gzip.compress(data, compresslevel=1)
    path.write_bytes(data)


@_settings(40)
@given(files=layout)
def test_fuzz_folder_layouts(files):
    from ddp_profile.report.runs import discover_runs

    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "traces"
        root.mkdir()
        for folder, name, what in files:
            (root / folder).mkdir(parents=True, exist_ok=True)
            _write(root / folder / name, what)
        try:
            found = discover_runs([root])
        except DdpProfileError:
            return
        for location, _rid in found:
            try:
                load_trace(location)
            except DdpProfileError:
                pass


option = st.one_of(
    st.tuples(
        st.just("--steps"),
        st.one_of(st.sampled_from(["all", "5:2", "1:", ":3", "-1:", "1:2:3", "x", ""]), st.text(max_size=8)),
    ),
    st.tuples(st.just("--jobs"), st.one_of(st.integers(-3, 3).map(str), st.text(max_size=5))),
    st.tuples(
        st.just("--step-pattern"),
        st.one_of(st.sampled_from(["(", "step", "*", "[", "(?P<x", "a{99999999999}"]), st.text(max_size=10)),
    ),
    st.tuples(
        st.just("--phase"),
        st.builds(lambda n, r: f"{n}={r}", st.sampled_from(["forward", "x", ""]), st.text(max_size=6)),
    ),
    st.tuples(st.just("--format"), st.sampled_from(["json", "csv", "table", "xml"])),
    st.tuples(st.just("--section"), st.sampled_from(["steps", "all", "nope"])),
)


@_settings(25)
@given(command=st.sampled_from(["analyze", "launches", "inspect"]), opts=st.lists(option, max_size=3))
def test_fuzz_cli_arguments(command, opts):
    """Random option values through the real CLI entry: an exit code from the documented set, never an
    escaping exception; an error is one line on stderr."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "run.sqlite"
        path.write_bytes(base_export("ddp-2025.3"))
        argv = [command, str(path)] + [x for pair in opts for x in pair]
        err, out = io.StringIO(), io.StringIO()
        cwd = os.getcwd()
        try:
            os.chdir(d)
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
                try:
                    code = cli.main(argv)
                except SystemExit as exc:
                    code = exc.code
        finally:
            os.chdir(cwd)
        assert code in (0, 2, 3, 4, 5), (argv, code, err.getvalue())
        if code:
            lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
            assert len(lines) == 1, (argv, err.getvalue())


@pytest.mark.parametrize("text", ["step " + "9" * 5000, "ddp_profile.rank " + "9" * 30 + "/2", "step ²"])
def test_hostile_nvtx_text_examples(text, tmp_path):
    """Fixed examples of the NVTX-text property (found by it: ``step ²``-style digits, 5000-digit runs)."""
    _load_analyze(_export_with_texts(tmp_path, [text] * 3))
