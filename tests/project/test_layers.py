"""The layer rules of ``ddp_profile/``, checked by walking every module's imports with ``ast``.

Layers (README "Layout"): ``nsys/`` reads exports and is the only code that knows nsys tables;
``analysis/`` turns frames into frames and opens no file; ``plots/`` turns frames into figures;
``report/`` writes pages; ``findings/`` answers the CS336 questions above the report, adding its pages
through the report's extras hook; ``harness/`` trains (torch, nvtx and the standard
library only); ``commands/`` + ``cli.py`` are the thin CLI. Inside ``analysis/``, every module's layer
(conductor, answer, measure, boundary, ground) is declared in :data:`ANALYSIS_LAYERS` and what each may
import in :data:`MAY_IMPORT`. Imports inside functions count as imports: a lazy import still ties two
modules together.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "ddp_profile"
MAX_LINES = 750
# Counted as `ruff format` writes the code (one argument per line once a call passes the line length), which
# turned the 500 hand-wrapped lines this cap allowed into up to 737; the modules did not grow.


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[str, list[str], int]]:
    """(imported module, names imported from it, line) for every import statement in the file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    me = _module_name(path)
    package = me if path.name == "__init__.py" else me.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, [], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            out.append((base, [a.name for a in node.names], node.lineno))
    return out


MODULES = {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}
IMPORTS = {name: _imports(path) for name, path in MODULES.items()}


def _targets(name: str) -> list[tuple[str, int]]:
    """Our modules that ``name`` imports (``from pkg import mod`` resolves to ``pkg.mod`` when that exists)."""
    out = []
    for mod, names, line in IMPORTS[name]:
        if not mod.startswith("ddp_profile"):
            continue
        subs = [f"{mod}.{n}" for n in names if f"{mod}.{n}" in MODULES]
        out += [(s, line) for s in subs] or [(mod, line)]
    return out


def _in(name: str, layer: str) -> bool:
    return name == f"ddp_profile.{layer}" or name.startswith(f"ddp_profile.{layer}.")


FORBIDDEN = [
    # (layer of the importer, layers it must not import, why)
    (
        "analysis",
        ("nsys", "plots", "report", "harness", "commands", "cli"),
        "analysis opens no file and draws nothing",
    ),
    (
        "nsys",
        ("analysis", "plots", "report", "harness", "commands", "cli"),
        "the reader knows nothing above it",
    ),
    (
        "plots",
        ("analysis", "nsys", "report", "harness", "commands", "cli"),
        "plots take frames, return figures",
    ),
    (
        "harness",
        ("analysis", "nsys", "plots", "report", "commands", "cli", "schema", "trace", "intervals", "memory"),
        "the harness runs on GPU machines without the reporting stack",
    ),
    (
        "report",
        ("commands", "cli", "harness", "findings"),
        "the report is a library; the CLI sits above it, the findings beside it (added through build_report's extras)",
    ),
    ("findings", ("commands", "cli", "harness"), "the findings are a library; the CLI sits above them"),
]


def test_no_forbidden_imports_between_layers():
    bad = []
    for name in MODULES:
        for layer, banned, why in FORBIDDEN:
            if not _in(name, layer):
                continue
            for target, line in _targets(name):
                if any(_in(target, b) for b in banned):
                    bad.append(f"{name}:{line} imports {target} ({why})")
    assert not bad, "\n".join(bad)


def test_only_the_cli_imports_commands():
    bad = [
        f"{name}:{line} imports {t}"
        for name in MODULES
        if not (_in(name, "commands") or name == "ddp_profile.cli")
        for t, line in _targets(name)
        if _in(t, "commands")
    ]
    assert not bad, "\n".join(bad)


def test_harness_imports_no_data_stack():
    bad = [
        f"{name}:{line} imports {mod}"
        for name in MODULES
        if _in(name, "harness")
        for mod, _, line in IMPORTS[name]
        if mod.split(".")[0] in {"pandas", "numpy", "plotly", "sqlite_utils"}
    ]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    "name",
    [
        "ddp_profile.nsys.scrub",
        "ddp_profile.nsys.rawio",
        "ddp_profile.errors",
        "ddp_profile.safeio",
        "ddp_profile.nsys.progress",
        "ddp_profile.nvtx_names",
        "ddp_profile.nsys.secrets",
        "ddp_profile.nsys.names",
        "ddp_profile.activity_names",
    ],
)
def test_stdlib_only_modules(name):
    """The scrubber runs on GPU machines before anything is committed; the error family, atomic writes and the
    NVTX names are shared with the harness, which has no numpy or pandas there."""
    allowed = set(sys.stdlib_module_names) | {"__future__"}
    ours = {
        "ddp_profile.errors",
        "ddp_profile.safeio",
        "ddp_profile.nsys.rawio",
        "ddp_profile.nsys.secrets",
        "ddp_profile.nvtx_names",
        "ddp_profile.nsys.names",
        "ddp_profile.activity_names",
        "ddp_profile",
        "ddp_profile.nsys",
    }
    bad = [
        f"{name}:{line} imports {mod}"
        for mod, _, line in IMPORTS[name]
        if mod.split(".")[0] not in allowed and mod not in ours
    ]
    assert not bad, "\n".join(bad)


def test_findings_never_use_the_report_face_or_its_entry():
    bad = [
        f"{name}:{line} imports {t}"
        for name in MODULES
        if _in(name, "findings")
        for t, line in _targets(name)
        if t in ("ddp_profile.report", "ddp_profile.report.build")
    ]
    assert not bad, "\n".join(bad)


def test_no_private_name_imported_across_modules():
    bad = [
        f"{name}:{line} imports {n} from {mod}"
        for name in MODULES
        for mod, names, line in IMPORTS[name]
        if mod.startswith("ddp_profile")
        for n in names
        if n.startswith("_") and not n.startswith("__")
    ]
    assert not bad, "\n".join(bad)


def _cycles() -> list[list[str]]:
    graph = {name: sorted({t for t, _ in _targets(name) if t in MODULES and t != name}) for name in MODULES}
    # Importing a package's submodule runs the package's __init__, but that is Python's mechanics, not a
    # dependency of the importer on the face: edges go to the module named, as written.
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_circles():
    assert _cycles() == []


def test_the_cycle_finder_finds_a_planted_circle(monkeypatch):
    """The check above can fail: a planted a -> b -> a circle is reported."""
    monkeypatch.setitem(MODULES, "ddp_profile.fake_a", PKG / "fake_a.py")
    monkeypatch.setitem(MODULES, "ddp_profile.fake_b", PKG / "fake_b.py")
    monkeypatch.setitem(IMPORTS, "ddp_profile.fake_a", [("ddp_profile.fake_b", [], 1)])
    monkeypatch.setitem(IMPORTS, "ddp_profile.fake_b", [("ddp_profile", ["fake_a"], 1)])
    assert ["ddp_profile.fake_a", "ddp_profile.fake_b"] in _cycles()


def test_modules_fit_in_one_sitting():
    long = {
        name: n for name, path in MODULES.items() if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


# ---- analysis/ as layers --------------------------------------------------------------------------------------
# Every module of analysis/ and its layer, decided here (one place). Reading down the table:
# - face: ``analysis/__init__``, re-exports only; result: ``Analysis`` and its JSON (``result.py``);
# - conductor: ``pipeline`` (the stages and ``analyze``), ``answers`` (the answers' stage it calls) and
#   ``notes`` (the parts' notes as one trace's);
# - answers: read the measures' tables and say what they mean (straggler, critical path, verdict, ...);
# - measures: one number family each over given windows (overlap, collectives, comm kinds, ...);
# - boundaries: where steps and phases are (NVTX, inference, the launch cycle, one identity across ranks);
# - ground: helpers every layer shares (kernel arrays, kernel naming and kind codes, projection, cost model),
#   with the top-level ``schema``, ``intervals``, ``memory``, ``fmt``, ``errors`` and the names modules.
ANALYSIS_LAYERS = {
    "__init__": "face",
    "result": "result",
    "pipeline": "conductor",
    "answers": "conductor",
    "notes": "conductor",
    "straggler": "answer",
    "critical_path": "answer",
    "verdict": "answer",
    "recommend": "answer",
    "channel_model": "answer",
    "kernel_families": "answer",
    "compare": "answer",
    "overlap": "measure",
    "collectives": "measure",
    "comm_kinds": "measure",
    "contention": "measure",
    "contention_rows": "measure",
    "after_backward": "measure",
    "launches": "measure",
    "host_calls": "measure",
    "steps": "measure",
    "kernel_diff": "measure",
    "windows": "boundary",
    "infer": "boundary",
    "cycles": "boundary",
    "identity": "boundary",
    "clocks": "boundary",
    "unknowns": "boundary",
    "kernel_arrays": "ground",
    "kernel_groups": "ground",
    "projection": "ground",
    "costmodel": "ground",
    "gains": "ground",
}
MAY_IMPORT = {  # layer -> the layers of analysis/ its modules may import (the top-level ground always)
    "ground": {"ground"},
    "boundary": {"ground", "boundary"},
    "measure": {"ground"},
    "answer": {"ground", "measure"},
    "result": {"ground"},
    "conductor": {"ground", "boundary", "measure", "answer", "result", "conductor"},
    "face": {"ground", "boundary", "measure", "answer", "result", "conductor"},
}
SAME_PASS = {
    # (measure, measure it may import, why): halves of one measure, computed in one pass over the kernels
    ("steps", "comm_kinds", "the per-kind rows are cut from the step table's own interval sets, in its pass"),
    ("contention", "contention_rows", "the per-row classification of the contention table, split for size"),
}
TOP_GROUND = {
    "ddp_profile.schema",
    "ddp_profile.intervals",
    "ddp_profile.memory",
    "ddp_profile.fmt",
    "ddp_profile.errors",
    "ddp_profile.nvtx_names",
    "ddp_profile.activity_names",
    "ddp_profile",
}


def _analysis_module(name: str) -> str | None:
    if name == "ddp_profile.analysis":
        return "__init__"
    return name.removeprefix("ddp_profile.analysis.") if _in(name, "analysis") else None


def _layer_violations(layers: dict, imports) -> list[str]:
    """Imports of analysis/ modules that break :data:`MAY_IMPORT` (``imports``: name -> [(target, line)])."""
    allowed_pairs = {(a, b) for a, b, _ in SAME_PASS}
    bad = []
    for name, targets in imports.items():
        me = _analysis_module(name)
        if me is None:
            continue
        for target, line in targets:
            other = _analysis_module(target)
            if other is None:
                if target.startswith("ddp_profile") and target not in TOP_GROUND:
                    bad.append(f"{name}:{line} imports {target} (outside analysis/ and the ground)")
                continue
            if other == me or (me, other) in allowed_pairs:
                continue
            if layers[other] not in MAY_IMPORT[layers[me]]:
                bad.append(f"{name}:{line} ({layers[me]}) imports {target} ({layers[other]})")
    return bad


def test_every_analysis_module_has_a_layer():
    names = {m for n in MODULES if (m := _analysis_module(n)) is not None}
    assert names == set(ANALYSIS_LAYERS), names ^ set(ANALYSIS_LAYERS)


def test_analysis_layers():
    """Only the conductor imports the stages; a measure imports only the ground (or its other half,
    SAME_PASS); an answer may read measures; a boundary reads the ground and other boundaries."""
    bad = _layer_violations(ANALYSIS_LAYERS, {n: _targets(n) for n in MODULES})
    assert not bad, "\n".join(bad)


def test_layer_check_finds_a_measure_reading_a_sibling():
    """The check above can fail: a measure importing another measure, or an answer's helper, is reported."""
    planted = {
        "ddp_profile.analysis.overlap": [
            ("ddp_profile.analysis.collectives", 1),
            ("ddp_profile.analysis.recommend", 2),
            ("ddp_profile.analysis.kernel_arrays", 3),
        ]
    }
    assert _layer_violations(ANALYSIS_LAYERS, planted) == [
        "ddp_profile.analysis.overlap:1 (measure) imports ddp_profile.analysis.collectives (measure)",
        "ddp_profile.analysis.overlap:2 (measure) imports ddp_profile.analysis.recommend (answer)",
    ]


TICKET = re.compile(r"\b[Ii]ssues? ?#?\d+\b")


def _ticket_mentions(root: Path) -> list[str]:
    return [
        f"{p}:{i}"
        for p in sorted(root.rglob("*.py"))
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if TICKET.search(line)
    ]


def test_no_ticket_numbers_in_code():
    """Code says what a thing does, not which ticket asked for it: ticket numbers rot as the tracker moves."""
    assert _ticket_mentions(PKG) == []
    assert _ticket_mentions(PKG.parent / "tests") == []


def test_ticket_check_finds_a_planted_mention(tmp_path):
    (tmp_path / "m.py").write_text('"""Steps as ' + "issue" + ' 26 asked."""\n')
    assert _ticket_mentions(tmp_path) == [f"{tmp_path / 'm.py'}:1"]
