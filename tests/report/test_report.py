"""The page writer: escaping of trace-controlled strings, no remote resources, atomic folder swap,
run discovery and grouping, and the `report` command's exit codes."""

import json
import re
from pathlib import Path

import pytest
from conftest import HOSTILE, patch_analysis, run_set

from ddp_profile import report
from ddp_profile.cli import main
from ddp_profile.errors import OutputError, TraceError
from ddp_profile.plots.timeline import decode_page_data

pytest.importorskip("plotly")


@pytest.fixture
def written(tmp_path, monkeypatch):
    patch_analysis(monkeypatch)
    runs = run_set(hostile_run=True)
    out = tmp_path / "reports"
    sizes = report.write_report(runs, out, failures=[f"traces/bad: {HOSTILE}"])
    return out, sizes, runs


def test_script_json_cannot_close_the_script_element():
    text = report.script_json({"k": "</script><script>alert(1)</script>&\u2028\u2029<!--"})
    assert "<" not in text and ">" not in text and "&" not in text
    assert "\u2028" not in text and "\u2029" not in text
    assert json.loads(text) == {"k": "</script><script>alert(1)</script>&\u2028\u2029<!--"}


def test_every_page_written_with_plotly_once(written):
    out, sizes, _ = written
    pages = sorted(p.name for p in out.glob("*.html"))
    assert pages == sorted(sizes)
    assert "index.html" in pages and len([p for p in pages if p.startswith("run-")]) == 7
    assert [p.name for p in out.glob("*.js")] == ["plotly.min.js"]
    # strategies (1-GPU baseline + five 2-GPU runs) and the 3-size sweep; no strategy at 2+ world sizes, so
    # no scaling page
    assert sum(1 for p in pages if p.startswith(("strategies-", "sweep-", "scaling-"))) == 2
    assert not list(out.parent.glob(".reports.*"))  # no temp or old folders left behind


def test_hostile_names_are_text_everywhere(written):
    out, _, _ = written
    for page in out.glob("*.html"):
        text = page.read_text()
        assert "<script>window.__pwned" not in text, page.name
        assert "<img src=x" not in text, page.name
        assert "__pwned" not in text or "&lt;script&gt;window.__pwned" in text or "\\u003cscript" in text
        # the only script tags are ours: the plotly loader, inline figure code, the timeline data
        for tag in re.findall(r"<script[^>]*>", text):
            assert tag in (
                '<script src="plotly.min.js">',
                "<script>",
                "<script type='application/json' id='tl-data'>",
            )
    run_page = (out / "run-hostile-run.html").read_text()
    assert (
        "&lt;script&gt;window.__pwned=1&lt;/script&gt;&quot;&#x27;&amp;amp;" in run_page
    )  # contention table
    assert "Run hostile&lt;run&gt;" in run_page
    assert "&lt;script&gt;window.__pwned" in (out / "index.html").read_text()  # failure list


def test_no_remote_resources(written):
    out, _, _ = written
    for page in out.glob("*.html"):
        text = page.read_text()
        assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", text, re.I), page.name
        assert "@import" not in text and "url(" not in text


def test_run_page_embeds_every_step_and_a_selector(written):
    out, _, _ = written
    text = (out / "run-naive_xl_fp32_2xh100.html").read_text()
    data = decode_page_data(json.loads(re.search(r"id='tl-data'>(.*?)</script>", text, re.S).group(1)))
    assert [s["label"] for s in data["steps"]] == ["step 0", "step 1", "step 2"]
    steps = re.search(r"<select id='step-select'>(.*?)</select>", text).group(1)
    assert steps.count("<option") == 4 and "selected>step 1<" in steps  # 3 steps, then all steps
    assert steps.endswith("<option value='all'>all steps</option>")
    ranks = re.search(r"<select id='rank-select'>(.*?)</select>", text).group(1)
    assert re.findall(r"<option value='(\d*)'", ranks) == ["", "0", "1"]  # every rank, then each rank
    # every kernel of the step is kept (per trace and row), for the page to aggregate at any zoom
    assert all(
        sum(len(t["s"]) for t in s["tracks"] if t["k"] < 4) == 2 * (3 * 4 + 2 + 1) for s in data["steps"]
    )


def test_groups_strategies_sweep_scaling():
    groups = report.group_runs(run_set())
    kinds = sorted((g.kind, len(g.runs)) for g in groups)
    # strategies: 1-GPU baseline + 5 two-GPU runs; sweep: 3 bucketed sizes; scaling needs one strategy at
    # two or more world sizes, which this set lacks
    assert kinds == [("strategies", 6), ("sweep", 3)]


def _good_report(path: Path):
    path.mkdir()
    (path / report.MARKER).write_text("x")
    (path / "index.html").write_text("GOOD")


@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyboardInterrupt()])
def test_failed_or_interrupted_write_keeps_previous_report(tmp_path, exc):
    out = tmp_path / "reports"
    _good_report(out)

    def fill(tmp):
        (tmp / "index.html").write_text("HALF")
        raise exc

    with pytest.raises(type(exc)):
        report.write_report_dir(out, fill)
    assert (out / "index.html").read_text() == "GOOD"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reports"]


def test_successful_write_replaces_and_cleans_up(tmp_path):
    out = tmp_path / "reports"
    _good_report(out)
    (out / "stale.html").write_text("old page")
    report.write_report_dir(out, lambda tmp: (tmp / "index.html").write_text("NEW"))
    assert (out / "index.html").read_text() == "NEW" and not (out / "stale.html").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reports"]


def test_refuses_to_replace_a_folder_that_is_not_a_report(tmp_path):
    (tmp_path / "precious.txt").write_text("keep")
    with pytest.raises(OutputError, match="not a ddp-profile report folder"):
        report.write_report_dir(tmp_path, lambda tmp: None)
    assert (tmp_path / "precious.txt").read_text() == "keep"


def test_discover_run_folders_and_files(tmp_path):
    for run in ("a", "b"):
        (tmp_path / "traces" / run).mkdir(parents=True)
        (tmp_path / "traces" / run / "rank0.sqlite.xz").write_bytes(b"")
    (tmp_path / "traces" / "notes").mkdir()
    single = tmp_path / "x.sqlite"
    single.write_bytes(b"")
    found = report.discover([tmp_path / "traces", tmp_path / "traces" / "a", single])
    assert found == [tmp_path / "traces" / "a", tmp_path / "traces" / "b", single]
    rep = tmp_path / "p.nsys-rep"
    rep.write_bytes(b"")
    with pytest.raises(TraceError, match="nsys export --type sqlite"):
        report.discover([rep])
    with pytest.raises(TraceError, match="no such file"):
        report.discover([tmp_path / "missing"])


def test_cli_empty_traces_folder_is_an_error_and_writes_nothing(tmp_path, capsys):
    (tmp_path / "traces").mkdir()
    code = main(["report", str(tmp_path / "traces"), "-o", str(tmp_path / "reports")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 3 and len(err) == 1 and "no nsys exports" in err[0]
    assert not (tmp_path / "reports").exists()


def test_cli_rejects_bad_jobs(tmp_path, capsys):
    assert main(["report", str(tmp_path), "--jobs", "0"]) == 2
    assert "--jobs" in capsys.readouterr().err
