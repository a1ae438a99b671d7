"""``ddp_profile/nsys/`` is the only code that knows nsys table and CUDA API names (README "Layout").

Every other module is parsed with ``ast`` and its string literals are searched: a CUDA runtime or driver
function (``cudaLaunchKernel``, ``cuCtxSynchronize``), a pattern over such names (``cu(da)?...``,
``cuda*``) or an nsys table (``CUPTI_ACTIVITY_KIND_*``, ``StringIds``...) in code outside nsys/ means that
knowledge leaked out of the reader. Prose is free: docstrings (and the attribute docstrings after a
constant) are string-expression statements and are skipped, comments are not literals at all. Text shown to
users (evidence, advice) that must name a call takes the name from data the nsys layer produced.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "ddp_profile"

LEAKS = [
    # the CUDA libraries' own names (cuBLAS, cuBLASLt, cuDNN, ...) are products users choose, not API calls
    ("CUDA API function", re.compile(r"\bcu(da)?(?!BLAS|DNN|FFT|SPARSE|SOLVER|RAND)[A-Z][A-Za-z0-9_]+")),
    ("pattern over CUDA API names", re.compile(r"\bcu(\(da\)\?|da\*|\*)")),
    (
        "nsys table",
        re.compile(
            r"\b(CUPTI_ACTIVITY_KIND_\w*|NVTX_EVENTS|StringIds|TARGET_INFO_\w*|ANALYSIS_DETAILS"
            r"|ENUM_[A-Z_]+|META_DATA_\w+|OSRT_API|SCHED_EVENTS|ThreadNames)\b"
        ),
    ),
]

ALLOWED = {
    # (module path under ddp_profile/, the name): why
    (
        "harness/strategies/peer_copy.py",
        "cudaMemcpyAsync",
    ): "the harness's own record of how it moves bytes (run JSON 'layout', committed in set J); the harness "
    "reads no trace and may not import nsys/ (torch, nvtx and the standard library only)",
}


def leaks(source: str) -> list[tuple[int, str, str]]:
    """(line, what, matched text) for each non-prose string literal of ``source`` naming an API or table."""
    tree = ast.parse(source)
    prose = {
        id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
    }
    return [
        (n.lineno, what, m.group(0))
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in prose
        for what, rx in LEAKS
        for m in rx.finditer(n.value)
    ]


def test_no_api_or_table_names_outside_nsys():
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if rel.startswith("nsys/"):
            continue
        bad += [
            f"ddp_profile/{rel}:{line}: {what} {text!r}"
            for line, what, text in leaks(path.read_text())
            if (rel, text) not in ALLOWED
        ]
    assert not bad, "names only nsys/ may know:\n" + "\n".join(bad)


def test_library_names_are_prose_but_api_calls_are_not():
    found = [text for _, _, text in leaks('x = "cuBLASLt and cuDNN, then cudaLaunchKernel"')]
    assert found == ["cudaLaunchKernel"]


def test_the_allow_list_is_used():
    """An entry whose literal is gone must leave the list (it would silently allow the name again)."""
    found = {
        (path.relative_to(PKG).as_posix(), text)
        for path in PKG.rglob("*.py")
        for _, _, text in leaks(path.read_text())
    }
    assert set(ALLOWED) <= found


def test_the_scan_finds_planted_names_and_skips_prose():
    src = '''
"""Module docstring: cudaLaunchKernel is prose."""
LAUNCH = r"^cu(da)?(LaunchKernel)"
"""Attribute docstring naming cudaDeviceSynchronize."""
GLOBS = ("cuda*", "cu*Synchronize*")
def f(t):
    """cuMemcpyDtoH in a docstring."""
    # cudaMalloc in a comment
    return f"{t} waited in cudaStreamSynchronize", "SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME", "StringIds"
'''
    got = sorted((line, what) for line, what, _ in leaks(src))
    assert got == [
        (3, "pattern over CUDA API names"),
        (5, "pattern over CUDA API names"),
        (5, "pattern over CUDA API names"),
        (9, "CUDA API function"),
        (9, "nsys table"),
        (9, "nsys table"),
    ]
