"""``bench_analyzer.py --from-json``: RESULTS.md and README.md's Performance block re-rendered from recorded
results without measuring anything; the README changes only between its markers, atomically, and a README
without markers is refused with one line. Fast: no benchmark runs."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_analyzer.py"
sys.path.insert(0, str(ROOT / "benchmarks"))
import results_md  # noqa: E402

BEFORE = "# Project\n\nIntro.\n\n## Performance\n\n"
AFTER = "\n\n## Tests\n\nRun pytest.\n"


def small_results() -> dict:
    """The recorded results cut to one size (the real record's fields, so the renderer sees real data)."""
    res = json.loads((ROOT / "benchmarks" / "results.json").read_text())
    res["sizes"] = res["sizes"][-1:]
    return res


def run(*args, cwd):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=60, cwd=cwd
    )


@pytest.fixture
def setup(tmp_path):
    res = small_results()
    (tmp_path / "results.json").write_text(json.dumps(res))
    readme = tmp_path / "README.md"
    readme.write_text(BEFORE + f"{results_md.BEGIN}\nstale text 1.00x\n{results_md.END}" + AFTER)
    (tmp_path / "out").mkdir()
    return res, readme, tmp_path


def test_from_json_renders_the_readme_block_and_results_md(setup):
    res, readme, tmp = setup
    proc = run("--from-json", tmp / "results.json", "--out", tmp / "out", "--readme", readme, cwd=tmp)
    assert proc.returncode == 0, proc.stderr
    text = readme.read_text()
    block = results_md.readme_block(res)
    assert text == BEFORE + f"{results_md.BEGIN}\n{block.strip()}\n{results_md.END}" + AFTER
    assert "stale text" not in text
    size = res["sizes"][0]  # figures come from the JSON
    assert f"| {size['rows']:,} |" in block and f"{size['ratio']:.2f}x" in block
    assert block in (tmp / "out" / "RESULTS.md").read_text()
    assert not (tmp / "out" / "results.json").exists()  # recorded results are only read
    assert [p.name for p in tmp.iterdir() if p.name.startswith(".")] == []  # no temp file left behind
    proc = run("--from-json", tmp / "results.json", "--out", tmp / "out", "--readme", readme, cwd=tmp)
    assert proc.returncode == 0 and "unchanged" in proc.stdout and readme.read_text() == text


def test_committed_results_md_is_what_the_json_renders(tmp_path):
    """benchmarks/RESULTS.md and docs/performance.md's block are exactly the rendering of benchmarks/results.json."""
    res = json.loads((ROOT / "benchmarks" / "results.json").read_text())
    proc = run("--from-json", ROOT / "benchmarks" / "results.json", "--out", tmp_path, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "RESULTS.md").read_text() == (ROOT / "benchmarks" / "RESULTS.md").read_text()
    page = (ROOT / "docs" / "performance.md").read_text()
    assert results_md.with_block(page, results_md.readme_block(res)) == page


@pytest.mark.parametrize(
    "body",
    [
        "no markers here\n",
        f"{results_md.END}\n{results_md.BEGIN}\n",
        f"{results_md.BEGIN}\n{results_md.BEGIN}\n{results_md.END}\n",
    ],
)
def test_readme_without_one_pair_of_markers_is_refused_in_one_line(setup, body):
    _, readme, tmp = setup
    readme.write_text(BEFORE + body)
    proc = run("--from-json", tmp / "results.json", "--out", tmp / "out", "--readme", readme, cwd=tmp)
    assert proc.returncode == 2
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "README.md" in err[0] and "perf:begin" in err[0]
    assert readme.read_text() == BEFORE + body
    assert not (tmp / "out" / "RESULTS.md").exists()  # refused before anything is written


def test_unreadable_results_json_is_one_line(setup):
    _, readme, tmp = setup
    (tmp / "bad.json").write_text("{")
    proc = run("--from-json", tmp / "bad.json", "--out", tmp / "out", cwd=tmp)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "bad.json" in proc.stderr


def test_results_without_synthetic_sizes_render(tmp_path):
    """``--sizes ''`` (only the replica, the sweep or the render measured) renders instead of failing on the
    first size's rank count: the replica row stands alone and the text drops what only sizes give."""
    res = small_results()
    res["replica"] = res.get("replica") or res["sizes"][0]
    res["sizes"] = []
    block = results_md.readme_block(res)
    assert "| kernels | floor |" in block and f"{res['replica']['rows']:,}" in block
    assert "ranks, compute" not in block
    assert results_md.write_results(res, tmp_path, write_json=False).is_file()


def test_report_size_is_rendered_when_recorded():
    """A report record with the output folder's size (pages and files, cache apart) says it; one without
    (results from before the size was measured) says nothing of it."""
    res = small_results()
    res["report"] = {k: v for k, v in res["report"].items() if k not in ("size_mb", "cache_mb")}
    assert "MB written" not in "\n".join(results_md.arrow_targets(res))
    res["report"] = dict(res["report"], size_mb=135.2, cache_mb=80.4)
    line = next(x for x in results_md.arrow_targets(res) if "shipped trace set" in x)
    assert f"{res['report']['pages']} pages, 135 MB written beside a 80 MB cache)" in line
