"""`analyze`'s output at speed: the column-at-a-time JSON writer gives json.dumps' exact text, the optional
sections (comm_kinds, recommendation) and the per-name kernel table are computed only when asked for (or read),
and read later they equal the eager ones; the CLI imports only the command it runs."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ddp_profile.analysis import OPTIONAL_SECTIONS, analyze
from ddp_profile.cli import main
from ddp_profile.commands.writers import json_text, records_chunks, records_text
from ddp_profile.nsys.loader import load_trace
from ddp_profile.nsys.synth import synth_ddp_run

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "ddp_mlp_2xh200.sqlite"
ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "traces" / "torch_ddp-25mb_xl_fp32_2xh200" / "torch_ddp-25mb_xl_fp32_2xh200.sqlite.xz"
CORE = ["steps", "phases", "ranks", "kernels", "collectives", "cost_model", "contention"]


@pytest.mark.parametrize("path", [SAMPLE, REAL], ids=["sample", "real-torch_ddp"])
def test_json_writer_gives_json_dumps_text(path):
    res = analyze(load_trace(path))
    full = res.to_json_dict()
    keys = [k for k in full if k not in ("version", "summary", "notes")]
    assert json_text(res, keys) == json.dumps(full, indent=2) + "\n"


def test_json_writer_tokens_of_awkward_values():
    """NaN, infinities, <NA>, None, booleans, categoricals with missing values, quotes and non-ASCII text."""
    df = pd.DataFrame(
        {
            "f": [1.5, np.nan, np.inf, -np.inf, 1e-7, 123456789012345678.0],
            "i": np.array([0, -1, 2**62, 5, 6, 7], dtype=np.int64),
            "ni": pd.array([1, None, 3, None, 5, 6], dtype="Int64"),
            "b": [True, False, True, True, False, False],
            "s": ['a"b', None, "é\n", "x", "x", 'a"b'],
            "c": pd.Categorical(["k", None, "k", "m", "m", "k"]),
            "o": [None, 1, "two", 3.5, np.int64(4), np.nan],
        }
    )
    from ddp_profile.analysis import records

    want = json.dumps(records(df), indent=2)
    assert records_text(df, 1, None) == want
    # written in blocks of a few rows (a 450 MB answer is written as it is built): the same text, whatever
    # the block size, the kernels section's extra key included
    for rows in (1, 4, 6, 100):
        pieces = list(records_chunks(df, 1, None, rows=rows))
        assert len(pieces) == -(-len(df) // rows) + 1 and "".join(pieces) == want
    extra = ("e", "f", "b", True)
    assert "".join(records_chunks(df, 2, extra, rows=4)) == records_text(df, 2, extra)
    assert records_text(df, 2, extra).count('"e": ') == int(df["b"].sum())


def test_float_tokens_are_json_dumps_text_at_every_magnitude():
    """Floats written by Arrow where whole (integer digits and '.0') and by repr otherwise: json.dumps' text for
    whole numbers around 2**53, -0.0, the smallest subnormal, values from 1e-12 to 1e25; NaN as null."""
    rng = np.random.default_rng(0)
    special = [
        0.0,
        -0.0,
        2.0**53,
        2.0**53 - 1,
        -(2.0**53) + 1,
        2.0**53 + 2,
        1e16,
        1e15,
        5e-324,
        1e-5,
        1e-4,
        0.1,
    ]
    values = np.concatenate(
        [
            rng.random(3000) * 10.0 ** rng.integers(-12, 25, 3000),
            rng.integers(-(2**60), 2**60, 3000).astype(float),
            -rng.integers(0, 10**6, 3000).astype(float),
            special,
            [np.nan, np.inf, -np.inf],
        ]
    )
    df = pd.DataFrame({"f": values})
    want = json.dumps([{"f": None if v != v else v} for v in values.tolist()], indent=2)
    assert records_text(df, 1, None) == want


def test_analyze_json_streamed_to_the_file_is_the_json_dumps_text(tmp_path):
    out = tmp_path / "a.json"
    assert main(["analyze", str(SAMPLE), "--format", "json", "-o", str(out)]) == 0
    res = analyze(load_trace(SAMPLE))
    from ddp_profile.commands.analyze import JSON_KEY, chosen_sections

    keep = set(res.json_head()) | {JSON_KEY.get(s, s) for s in chosen_sections("json", None)}
    want = json.dumps({k: v for k, v in res.to_json_dict().items() if k in keep}, indent=2) + "\n"
    assert out.read_text(encoding="utf-8") == want


def test_default_json_leaves_out_the_optional_sections_and_all_puts_them_in(capsys):
    assert main(["analyze", str(SAMPLE), "--format", "json"]) == 0
    default = json.loads(capsys.readouterr().out)
    assert not set(OPTIONAL_SECTIONS) & set(default) and set(CORE) <= set(default)
    assert main(["analyze", str(SAMPLE), "--format", "json", "--section", "all"]) == 0
    every = json.loads(capsys.readouterr().out)
    assert set(OPTIONAL_SECTIONS) <= set(every)
    assert main(["analyze", str(SAMPLE), "--format", "json", "--section", "recommendation"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert one["recommendation"] == every["recommendation"] and "steps" not in one


def test_optional_sections_are_deferred_and_equal_when_read(tmp_path, monkeypatch):
    trace = load_trace(synth_ddp_run(tmp_path / "run.sqlite", n_ranks=2, n_steps=4)["path"])
    eager = analyze(trace)
    calls = []
    from ddp_profile.analysis import pipeline

    real = pipeline.rec.recommend
    monkeypatch.setattr(pipeline.rec, "recommend", lambda *a, **k: calls.append(1) or real(*a, **k))
    lazy = analyze(trace, sections=CORE)
    assert "comm_kinds" not in lazy.__dict__
    # the recommendation is deferred too, but the verdict (analysis.answers) reads it when the run has a
    # critical path, so it may have been computed already: once at most
    assert len(calls) <= 1 and ("recommendation" in lazy.__dict__) == (len(calls) == 1)
    assert len(
        eager.comm_kinds
    )  # the synthetic run has NCCL kernels: the deferred frame is not trivially empty
    pd.testing.assert_frame_equal(lazy.comm_kinds, eager.comm_kinds)
    pd.testing.assert_frame_equal(lazy.recommendation, eager.recommendation)
    assert calls == [1]
    again = analyze(trace, sections=CORE)
    restored = pickle.loads(pickle.dumps(again))  # pickled with the deferred sections computed
    pd.testing.assert_frame_equal(restored.comm_kinds, eager.comm_kinds)
    pd.testing.assert_frame_equal(restored.recommendation, eager.recommendation)


def test_deferred_sections_equal_eager_ones_on_a_real_torch_ddp_run():
    """A run whose recommendation replays gradient-ready times (stock torch_ddp, bucket sizes in its JSON)."""
    trace = load_trace(REAL.parent)
    eager, lazy = analyze(trace), analyze(trace, sections=CORE)
    assert len(eager.recommendation) and len(eager.comm_kinds)
    pd.testing.assert_frame_equal(lazy.recommendation, eager.recommendation)
    pd.testing.assert_frame_equal(lazy.comm_kinds, eager.comm_kinds)


def _refuse(*_a, **_k):
    raise AssertionError("a section nobody asked for was computed")


@pytest.mark.parametrize(
    "argv",
    [["--section", "steps"], ["--format", "json", "--section", "steps"], []],
    ids=["table-steps", "json-steps", "table"],
)
def test_a_section_not_asked_for_is_not_computed(argv, monkeypatch, capsys):
    """The per-name kernel table (``kernels``) is read by neither the verdict nor the summary: a table or
    ``--section steps`` run never computes it (its per-name sums monkeypatched to raise), and still prints the
    verdict and the steps (the comm kinds: ``test_optional_sections_are_deferred_and_equal_when_read``)."""
    from ddp_profile.analysis import overlap

    monkeypatch.setattr(overlap, "kernel_sums", _refuse)
    assert main(["analyze", str(REAL.parent), *argv]) == 0
    out = capsys.readouterr().out
    if "json" in argv:
        got = json.loads(out)
        assert got["verdict"] and len(got["steps"]) and "kernels" not in got
    else:
        assert "== verdict ==" in out and ("== steps (" in out) == ("steps" in argv)


def test_deferred_kernels_section_equals_the_eager_one(tmp_path):
    """Read later (the kernel arrays built again), the ``kernels`` section is the eager one, with and without
    a ``--steps`` selection."""
    trace = load_trace(synth_ddp_run(tmp_path / "run.sqlite", n_ranks=2, n_steps=4)["path"])
    for steps in ("all", "1:3"):
        eager, lazy = analyze(trace, steps=steps), analyze(trace, steps=steps, sections=["steps"])
        assert "kernel_overlap" not in lazy.__dict__ and len(eager.kernel_overlap)
        pd.testing.assert_frame_equal(lazy.kernel_overlap, eager.kernel_overlap)


def test_analyze_imports_neither_the_scrubber_nor_the_harness():
    code = (
        "import sys; from ddp_profile.cli import main; main(['analyze', '--help'])\n"
        "bad = [m for m in sys.modules if m.startswith(('ddp_profile.nsys.scrub', 'ddp_profile.harness', 'plotly'))]\n"
        "sys.stderr.write(repr(bad))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.stderr.strip() == "[]", proc.stderr


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_analyze_imports_no_page_writer(fmt):
    """The terminal answer imports ``report.answer_text`` only: the report package's face is imported on first
    use, so neither output pays for the page writers, the timeline or plotly at process start."""
    code = (
        f"import sys; from ddp_profile.cli import main; main(['analyze', sys.argv[1], '--format', '{fmt}'])\n"
        "bad = [m for m in sys.modules if m.startswith(('ddp_profile.report.build', 'ddp_profile.report.run_page',"
        " 'ddp_profile.plots', 'plotly'))]\n"
        "sys.stderr.write(repr(bad))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(REAL.parent)], capture_output=True, text=True, cwd=ROOT
    )
    # the last line: a slow load (a loaded machine) prints its progress line first
    assert proc.returncode == 0 and proc.stderr.strip().splitlines()[-1:] == ["[]"], proc.stderr[-2000:]
    from ddp_profile.report import MARKER, build_report  # the face still gives its names

    assert callable(build_report) and MARKER
