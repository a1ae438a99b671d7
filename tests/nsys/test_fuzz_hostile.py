"""Fuzzing extended to file names (any bytes), side-file types and the environment. Each
property requires that the toolkit works or raises a ``DdpProfileError`` (one line at the CLI), never blocks
and never shows a traceback. Examples per property: ``DDP_FUZZ_EXAMPLES`` (tests/nsys/test_fuzz.py's knob),
capped small: CI has 2 cores for everything.
"""

from __future__ import annotations

import lzma
import os
import tempfile
from pathlib import Path

from conftest import run_cli_in_process
from hypothesis import given
from hypothesis import strategies as st
from test_fuzz import base_export
from test_fuzz_inputs import _settings

from ddp_profile.errors import DdpProfileError, UsageError
from ddp_profile.nsys import rawio
from ddp_profile.nsys.loader import load_trace

file_name = st.binary(min_size=1, max_size=40).filter(
    lambda b: b"/" not in b and b"\x00" not in b and b not in (b".", b"..")
)


@_settings(15)
@given(name=file_name, command=st.sampled_from(["inspect", "analyze", "scrub"]))
def test_fuzz_file_names_of_any_bytes(name, command):
    """Any file name the file system allows (non-UTF-8 bytes, control characters, spaces, quotes): the command
    works, or fails with one line and a documented code."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, os.fsdecode(name + b".sqlite"))
        Path(path).write_bytes(base_export("ddp-2025.3"))
        extra = {"scrub": ["-o", os.path.join(d, "clean.sqlite")], "analyze": ["--format", "json"]}.get(
            command, []
        )
        code, err = run_cli_in_process([command, path, *extra], d)
        assert code in (0, 2, 3, 4, 5), (name, code, err)
        assert "Traceback" not in err
        if code:
            assert len([ln for ln in err.splitlines() if ln.strip()]) == 1, err


side_kind = st.sampled_from(
    [
        "json",
        "fifo",
        "dev-zero link",
        "folder",
        "dangling link",
        "deep",
        "not utf-8",
        "huge",
        "link to folder",
    ]
)


def _make_side(path: Path, kind: str) -> None:
    if kind == "json":
        path.write_text('{"strategy": "bucketed", "world_size": 2}')
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero link":
        path.symlink_to("/dev/zero")
    elif kind == "folder":
        path.mkdir()
    elif kind == "dangling link":
        path.symlink_to(path.parent / "nowhere")
    elif kind == "deep":
        path.write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    elif kind == "not utf-8":
        path.write_bytes(b'{"run": "\xff\xfe"}')
    elif kind == "huge":
        path.write_bytes(b"[" + b"0," * (9 << 20) + b"0]")
    else:
        path.symlink_to(path.parent)


@_settings(20)
@given(
    kinds=st.dictionaries(
        st.sampled_from(["run.json", "program.json", "r.json", "hosts.txt"]), side_kind, max_size=3
    )
)
def test_fuzz_side_file_types(kinds):
    """Run JSONs, program.json and hosts.txt of every file type: loading and the report's side-file reads
    finish (no FIFO blocks, /dev/zero is not read to the end) with a result or a DdpProfileError."""
    from ddp_profile.report.build import read_program
    from ddp_profile.report.hosts import read_hosts

    with tempfile.TemporaryDirectory() as d:
        run = Path(d) / "r"
        run.mkdir()
        (run / "r.sqlite").write_bytes(base_export("ddp-2025.3"))
        for name, kind in kinds.items():
            _make_side(run / name, kind)
        load_trace(run / "r.sqlite")
        read_program(run)
        try:
            read_hosts(run)
        except DdpProfileError:
            pass


env_value = st.one_of(
    st.text(max_size=20),
    st.sampled_from(
        [
            "0",
            "1",
            "99",
            "1K",
            "64G",
            "5000000000",
            "1T",
            "-5",
            "1e9",
            "G",
            "9" * 40,
            " 12M ",
            "12MiB",
            "\x00",
        ]
    ),
)


@_settings(60)
@given(value=env_value)
def test_fuzz_decompression_limit_environment(value):
    """``DDP_PROFILE_MAX_DECOMPRESSED`` of any text: a positive bound or a UsageError; reading a compressed
    export under it works or fails with a DdpProfileError."""
    from ddp_profile.nsys.files import open_export

    if "\x00" in value:
        return  # no environment can hold NUL
    old = os.environ.get(rawio.LIMIT_ENV)
    os.environ[rawio.LIMIT_ENV] = value
    try:
        try:
            assert rawio.max_decompressed() > 0
        except UsageError:
            return
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "r.sqlite.xz"
            path.write_bytes(lzma.compress(base_export("ddp-2025.3"), preset=0))
            try:
                open_export(path).close()
            except DdpProfileError:
                pass
    finally:
        if old is None:
            os.environ.pop(rawio.LIMIT_ENV, None)
        else:
            os.environ[rawio.LIMIT_ENV] = old
