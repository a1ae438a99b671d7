"""Docs that cannot drift: every CLI sub-command is documented in the README, the README's test command is
the one .ci/run runs, the quick start has exactly two commands, the README stays a front page from which
every page of docs/ is reachable, and every link between them resolves."""

from __future__ import annotations

import re
from pathlib import Path

from ddp_profile.cli import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
DOCS = sorted((ROOT / "docs").glob("*.md"))
README_MAX_LINES = 250


def test_every_subcommand_is_registered_and_documented():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    registered = set(sub.choices)
    assert registered == set(COMMANDS), f"commands not registered: {set(COMMANDS) - registered}"
    for name in COMMANDS:
        assert f"`ddp-profile {name}" in README, f"README does not document `ddp-profile {name}`"
        help_text = sub.choices[name].format_help()
        assert "usage: ddp-profile " + name in help_text


def test_quick_start_is_two_commands_and_ci_runs_the_readme_test_command():
    block = README.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [ln for ln in block.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    assert len(commands) == 2, commands
    assert "ddp-profile report" in commands[0] and ".ci/run" in commands[1]
    tests_block = README.split("## Tests", 1)[1].split("```bash", 1)[1].split("```", 1)[0].strip()
    ci = (ROOT / ".ci" / "run").read_text()
    assert tests_block in ci, f"README test command {tests_block!r} is not what .ci/run runs"


def test_exit_codes_in_readme_match_the_error_classes():
    from ddp_profile import errors

    table = dict(re.findall(r"^\| (\d+) \| (.+?) \|$", README, flags=re.M))
    for cls in (errors.UsageError, errors.TraceError, errors.MissingDataError, errors.OutputError):
        assert str(cls.exit_code) in table, f"exit code {cls.exit_code} ({cls.__name__}) not in README"


def test_readme_library_example_runs(monkeypatch):
    """The README's Python example runs as written, from the repository root, on a committed trace."""
    block = README.split("## The library", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    assert len(namespace["res"].steps) > 0
    assert type(namespace["fig"]).__name__ == "Figure"


def test_hook_figures_are_the_recorded_benchmark_output():
    """The stock-vs-hook figures in docs/campaigns.md are the summary lines of benchmarks/ddp_hook_ab.txt
    (scripts/ddp_hook_ab.sh output), not typed: each must appear there verbatim."""
    recorded = (ROOT / "benchmarks" / "ddp_hook_ab.txt").read_text(encoding="utf-8").splitlines()
    summaries = [line.split("median of runs: ") for line in recorded if "median of runs: " in line]
    assert len(summaries) == 2
    page = (ROOT / "docs" / "campaigns.md").read_text(encoding="utf-8")
    for config, figures in summaries:
        assert f"- {config.strip()}: {figures}" in page


def test_readme_is_a_front_page_that_reaches_every_docs_page():
    lines = README.count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail into docs/"
    assert len(DOCS) >= 8, [p.name for p in DOCS]
    linked = set(re.findall(r"\]\(docs/([\w.-]+\.md)(?:#[\w-]*)?\)", README))
    missing = {p.name for p in DOCS} - linked
    assert not missing, f"docs pages not linked from README.md: {sorted(missing)}"


def _anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(text: str) -> set[str]:
    body = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)  # a '#' comment in a code block is no heading
    return {_anchor(h) for h in re.findall(r"^#{1,6} (.+)$", body, flags=re.M)}


def test_every_relative_link_in_readme_and_docs_resolves():
    """Every link from the README or a docs page to a file of the repository names a file that exists, and
    its '#anchor' (also a same-page one) names a heading of that page."""
    broken = []
    for page in [ROOT / "README.md", *DOCS]:
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest.read_text(encoding="utf-8")):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, broken


def test_anchor_is_githubs_for_the_headings_the_docs_link_to():
    assert _anchor("Time in a step") == "time-in-a-step"
    assert _anchor("What bounds the step, and what to change") == "what-bounds-the-step-and-what-to-change"
    assert _anchor("`step_ns`, `span_ns` and the step's parts") == "step_ns-span_ns-and-the-steps-parts"
    assert _anchors("# A\n```bash\n# not a heading\n```\n## B c\n") == {"a", "b-c"}


TEST_FOLDERS = {"nsys", "analysis", "plots", "report", "harness", "cli", "core", "project"}


def test_tests_are_grouped_by_layer_and_every_cited_test_file_exists():
    """Tests live in one folder per layer (README "Layout"), none at the top of tests/, basenames are unique
    (pytest imports them as top-level modules), and every `tests/...py` path the README, docs/ or the code
    cites exists."""
    tests = ROOT / "tests"
    files = sorted(tests.rglob("test_*.py"))
    assert files, "no tests found"
    top = [p.name for p in files if p.parent == tests]
    assert not top, f"test files at the top of tests/: {top}"
    folders = {p.relative_to(tests).parts[0] for p in files}
    assert folders <= TEST_FOLDERS, f"unknown test folders: {folders - TEST_FOLDERS}"
    names = [p.name for p in files]
    assert len(names) == len(set(names)), "two test files share a basename"
    cited_in = [
        ROOT / "README.md",
        *DOCS,
        *(ROOT / "ddp_profile").rglob("*.py"),
        *(ROOT / "scripts").rglob("*.sh"),
    ]
    missing = set()
    for path in cited_in:
        for cited in re.findall(r"tests/[\w/]+\.py", path.read_text(encoding="utf-8")):
            if not (ROOT / cited).is_file():
                missing.add(f"{path.relative_to(ROOT)}: {cited}")
    assert not missing, sorted(missing)
