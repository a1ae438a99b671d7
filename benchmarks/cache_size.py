"""How big the report cache gets: runs the quick start's report of ``traces/`` into a temporary folder (or
measures a report folder given with ``--report-dir``) and prints the size of its ``.cache`` (entries and
bytes) beside the size of the whole folder. With ``--write docs/performance.md`` the figures replace the
block between ``<!-- cache-size:begin -->`` and ``<!-- cache-size:end -->`` there.

    python benchmarks/cache_size.py --write docs/performance.md            # reports traces/ (minutes)
    python benchmarks/cache_size.py --report-dir reports --write docs/performance.md   # measures reports/
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ddp_profile.report.cache import CACHE_DIR, ENTRY_SUFFIX, LIMIT_BYTES  # noqa: E402


def measure(folder: Path) -> dict:
    files = [p for p in folder.rglob("*") if p.is_file()]
    entries = [p for p in (folder / CACHE_DIR).glob(f"*{ENTRY_SUFFIX}")]
    return {
        "entries": len(entries),
        "cache_bytes": sum(p.stat().st_size for p in entries),
        "largest_bytes": max((p.stat().st_size for p in entries), default=0),
        "report_bytes": sum(p.stat().st_size for p in files),
    }


def text(m: dict, how: str) -> str:
    mb = 1e6
    return (
        f"Measured with `{how}` ({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC): the report of the shipped "
        f"`traces/` keeps {m['entries']} cache entries, {m['cache_bytes'] / mb:.0f} MB in all (the largest "
        f"{m['largest_bytes'] / mb:.1f} MB), in a report folder of {m['report_bytes'] / mb:.0f} MB; the bound "
        f"is {LIMIT_BYTES / (1 << 20):.0f} MiB."
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--report-dir", type=Path, help="measure this report folder instead of reporting traces/")
    ap.add_argument("--write", type=Path, help="a Markdown file holding the cache-size block")
    args = ap.parse_args()
    how = "python benchmarks/cache_size.py" + (f" --report-dir {args.report_dir}" if args.report_dir else "")
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.report_dir
        if folder is None:
            folder = Path(tmp) / "reports"
            subprocess.run(
                [sys.executable, "-m", "ddp_profile", "report", str(ROOT / "traces"), "-o", str(folder)],
                check=True,
                cwd=ROOT,
            )
        line = text(measure(folder), how)
    print(line)
    if args.write:
        doc = args.write.read_text()
        new = re.sub(
            r"(<!-- cache-size:begin -->\n)(?:.*?\n)?(<!-- cache-size:end -->)",
            lambda m: m.group(1) + line + "\n" + m.group(2),
            doc,
            flags=re.S,
        )
        if new == doc and line not in doc:
            raise SystemExit(f"{args.write}: no <!-- cache-size:begin --> ... <!-- cache-size:end --> block")
        args.write.write_text(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
