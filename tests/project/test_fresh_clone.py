"""The README's main job on a fresh clone: `reports/` then holds only what git tracks there (the findings
Markdown and the report marker), and `ddp-profile report` must accept it as its own folder and replace it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from ddp_profile.report import MARKER, write_report_dir

ROOT = Path(__file__).resolve().parents[2]


def tracked_report_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "reports"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ln for ln in out.stdout.splitlines() if ln]


def test_committed_reports_folder_is_one_the_report_may_replace(tmp_path):
    files = tracked_report_files()
    assert f"reports/{MARKER}" in files, (
        "the report marker must be committed, or a fresh clone's report fails"
    )
    out = tmp_path / "reports"
    out.mkdir()
    for rel in files:
        shutil.copy(ROOT / rel, out / Path(rel).name)

    def fill(tmp: Path) -> None:
        (tmp / "index.html").write_text("<html></html>")

    write_report_dir(out, fill)
    assert (out / "index.html").exists() and (out / MARKER).exists()
