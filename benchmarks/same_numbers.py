"""Same numbers before and after a refactor: sha256 digests of what the commands write for every committed trace.

For every run under ``traces/`` (a folder holding ``*.sqlite`` or ``*.sqlite.xz`` exports: one file for all ranks
or one per rank, found as ``tests/project/test_committed_traces.py`` finds them) and every ``*.sqlite`` under
``tests/data/``, this runs, through the CLI (``ddp_profile.cli.main``, in this process):

- ``analyze PATH --format json --section all -o FILE``
- ``launches PATH -o FILE.json``
- ``export PATH -o FILE.json`` (Perfetto trace-event JSON)

and once ``report traces/ -o DIR --no-cache`` (every page of the folder, the findings included). It writes one
JSON object: ``{"command trace": {"rc": exit code, "sha256": digest of the output file or null}}`` and
``{"report PAGE": {...}}`` per page, plus the report's own exit code.

Normalised before hashing, and only this: the temporary output folder's path (report pages name where they
were written; it differs between runs) is replaced by ``<OUT>``, and the checkout's path by ``<ROOT>`` (so a
copy of the old tree elsewhere compares with the new one). Nothing else is touched, so any other difference is
a real one.

    python benchmarks/same_numbers.py -o /tmp/before.json                 # on the old tree
    python benchmarks/same_numbers.py -o /tmp/after.json --compare /tmp/before.json   # on the new one
    python benchmarks/same_numbers.py --only flat_xl --keep /tmp/out      # a subset; keep the outputs to diff
    python benchmarks/same_numbers.py -o a0.json --shard 0/2 --no-report & # the work in several processes,
    python benchmarks/same_numbers.py -o a1.json --shard 1/2 --no-report & #   the report in one more,
    python benchmarks/same_numbers.py -o ar.json --no-traces & wait       #   then joined:
    python benchmarks/same_numbers.py -o after.json --merge a0.json a1.json ar.json --compare before.json

``--compare`` prints every key whose digest or exit code differs and exits 1 when any does. This is a
measurement script (minutes on the committed set), not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "traces"


def committed_runs() -> list[Path]:
    """Every folder under traces/ holding exports, and every export under tests/data/, sorted."""
    runs = {p.parent for pat in ("*.sqlite.xz", "*.sqlite") for p in TRACES.rglob(pat)}
    return sorted(runs) + sorted((ROOT / "tests" / "data").rglob("*.sqlite"))


def digest(path: Path, out_dir: Path | None = None) -> str | None:
    if not path.is_file():
        return None
    data = path.read_bytes()
    if out_dir is not None:
        data = data.replace(str(out_dir).encode(), b"<OUT>")
    data = data.replace(str(ROOT).encode(), b"<ROOT>")
    return hashlib.sha256(data).hexdigest()


def cli(argv: list[str]) -> int:
    """One ddp-profile command in this process; its stdout and stderr are swallowed."""
    from ddp_profile.cli import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return main(argv)


def name_of(run: Path) -> str:
    return str(run.relative_to(ROOT))


def per_trace(runs: list[Path], work: Path) -> dict:
    out: dict = {}
    for i, run in enumerate(runs):
        name, t0 = name_of(run), time.perf_counter()
        safe = name.replace("/", "__")
        for command, argv, target in [
            (
                "analyze",
                ["analyze", str(run), "--format", "json", "--section", "all"],
                f"{safe}.analyze.json",
            ),
            ("launches", ["launches", str(run)], f"{safe}.launches.json"),
            ("export", ["export", str(run)], f"{safe}.perfetto.json"),
        ]:
            path = work / target
            rc = cli([*argv, "-o", str(path)])
            out[f"{command} {name}"] = {"rc": rc, "sha256": digest(path)}
        print(f"[{i + 1}/{len(runs)}] {name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    return out


def report(work: Path) -> dict:
    out_dir = work / "report"
    t0 = time.perf_counter()
    rc = cli(["report", str(TRACES), "-o", str(out_dir), "--no-cache"])
    print(f"report: {time.perf_counter() - t0:.1f} s, exit {rc}", file=sys.stderr, flush=True)
    out: dict = {"report rc": {"rc": rc, "sha256": None}}
    for page in sorted(p for p in out_dir.rglob("*") if p.is_file() and ".cache" not in p.parts):
        out[f"report {page.relative_to(out_dir)}"] = {"rc": rc, "sha256": digest(page, out_dir)}
    return out


SUFFIX = {"analyze": "analyze.json", "launches": "launches.json", "export": "perfetto.json"}


def kept_digests(dirs: list[Path]) -> dict:
    """{key: {"rc": None, "sha256": ...}} of the per-trace outputs and report pages kept in ``dirs``."""
    out: dict = {}
    for d in dirs:
        for command, suffix in SUFFIX.items():
            for f in sorted(d.glob(f"*.{suffix}")):
                out[f"{command} {f.name[: -len(suffix) - 1].replace('__', '/')}"] = {
                    "rc": None,
                    "sha256": digest(f),
                }
        page_dir = d / "report"
        for page in sorted(p for p in page_dir.rglob("*") if p.is_file() and ".cache" not in p.parts):
            out[f"report {page.relative_to(page_dir)}"] = {"rc": None, "sha256": digest(page, page_dir)}
    return out


def compare(now: dict, before: dict) -> list[str]:
    """One line per key whose entry differs; entries with an unknown exit code (--from-kept) compare only
    their digests, and keys the unfinished run never reached are counted, not listed."""
    partial = any(v.get("rc") is None and not k.startswith("report rc") for k, v in now.items())
    lines = []
    keys = sorted(set(now) if partial else set(now) | set(before))
    for key in keys:
        a, b = before.get(key), now.get(key)
        if partial and a is not None and b is not None and b["rc"] is None:
            a, b = a["sha256"], b["sha256"]
        if a != b:
            lines.append(f"DIFFERS {key}: before {a} after {b}")
    if partial:
        lines.append(f"partial: {len(now)} of {len(before)} outputs compared")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", required=True, help="JSON of digests to write")
    ap.add_argument(
        "--compare", metavar="BEFORE", help="a JSON this script wrote earlier: list the differences"
    )
    ap.add_argument("--only", metavar="TEXT", help="only the traces whose path contains TEXT (no report)")
    ap.add_argument("--no-report", action="store_true", help="skip the report of traces/")
    ap.add_argument("--no-traces", action="store_true", help="only the report of traces/")
    ap.add_argument(
        "--shard",
        metavar="K/N",
        default="0/1",
        help="only every N-th trace from the K-th (several processes share the work; merge their "
        "JSON files with --merge)",
    )
    ap.add_argument(
        "--merge", nargs="+", metavar="JSON", help="JSON files of this script to join into -o (nothing run)"
    )
    ap.add_argument(
        "--from-kept",
        nargs="+",
        metavar="DIR",
        help="digests of the outputs kept in DIRs (--keep) by a run that did not finish; exit codes "
        "unknown (null): with --compare only the digests of what is there are compared",
    )
    ap.add_argument(
        "--keep", metavar="DIR", help="keep the outputs in DIR (to diff them) instead of a temp folder"
    )
    args = ap.parse_args(argv)
    if args.from_kept:
        return finish(kept_digests([Path(d) for d in args.from_kept]), args, 0)
    if args.merge:
        result = {}
        for f in args.merge:
            result.update(json.loads(Path(f).read_text()))
        return finish(result, args, 0)
    k, n = (int(x) for x in args.shard.split("/"))
    runs = [
        r
        for i, r in enumerate(committed_runs())
        if i % n == k and (args.only is None or args.only in name_of(r))
    ]
    runs = [] if args.no_traces else runs
    with tempfile.TemporaryDirectory(prefix="same_numbers_") as tmp:
        work = Path(args.keep) if args.keep else Path(tmp)
        if args.keep:
            shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True, exist_ok=True)
        result = per_trace(runs, work)
        if args.only is None and not args.no_report:
            result.update(report(work))
    return finish(result, args, len(runs))


def finish(result: dict, args, n_traces: int) -> int:
    Path(args.output).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.output}: {len(result)} digests over {n_traces} traces", file=sys.stderr)
    if args.compare:
        diffs = compare(result, json.loads(Path(args.compare).read_text()))
        print("\n".join(diffs) if diffs else "same: every digest and exit code equal", flush=True)
        return 1 if diffs else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
