"""``--export``: turn ``.nsys-rep`` inputs into SQLite exports with the user's own ``nsys export``.

Why opt-in: converting runs a foreign binary and writes a file next to the report, so it only happens when the
user asks (without the flag, the loader says the exact command instead). The export is written to a
temporary name in the same folder and moved into place, so an interrupted or failed export leaves nothing;
an existing ``X.sqlite`` is used as it is, never overwritten. The ``.nsys-rep`` is only read.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from ddp_profile.errors import OutputError, TraceError, commit_output

REPORT_SUFFIXES = (".nsys-rep", ".qdrep")


def find_nsys() -> str | None:
    """``$NSYS`` when it is an executable file, else ``nsys`` on PATH."""
    env = os.environ.get("NSYS")
    if env and os.access(env, os.X_OK) and Path(env).is_file():
        return env
    return shutil.which("nsys")


def export_command(report: Path, out: Path, nsys: str = "nsys", force: bool = False) -> list[str]:
    return [
        nsys,
        "export",
        "--type",
        "sqlite",
        *(["--force-overwrite=true"] if force else []),
        "-o",
        str(out),
        str(report),
    ]


def export_reports(paths: list, *, nsys: str | None = None, log=sys.stderr) -> list[Path]:
    """Each ``.nsys-rep`` in ``paths`` replaced by its ``.sqlite`` export (made if missing); others unchanged."""
    out_paths = []
    for p in map(Path, paths):
        if not p.name.endswith(REPORT_SUFFIXES):
            out_paths.append(p)
            continue
        target = p.with_suffix(".sqlite")
        if not p.is_file():
            raise TraceError(f"{p}: no such file; check the path")
        if target.exists():
            print(f"using the existing export {target} (delete it to export {p.name} again)", file=log)
            out_paths.append(target)
            continue
        binary = nsys or find_nsys()
        if binary is None:
            raise TraceError(
                f"{p}: --export needs nsys, which is not on PATH (or set NSYS=/path/to/nsys); or run "
                f"`{' '.join(export_command(Path(p.name), Path(target.name)))}` where Nsight Systems is "
                f"installed and load {target.name}"
            )
        tmp = target.with_name(f".{target.stem}.exporting.sqlite")
        tmp.unlink(missing_ok=True)
        try:
            try:
                proc = subprocess.run(
                    export_command(p, tmp, binary, force=True), capture_output=True, text=True
                )
            except OSError as exc:
                raise TraceError(
                    f"{p}: cannot run {binary} ({exc.strerror or exc}); set NSYS=/path/to/nsys"
                ) from exc
            if proc.returncode != 0 or not tmp.is_file():
                last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
                raise TraceError(
                    f"{p}: `nsys export` failed (exit {proc.returncode}: {last[0][:200]}); check the "
                    "report opens in nsys-ui or record it again"
                )
            commit_output(tmp, target)  # under the CLI, put back as it was if a signal ends the command
        except OSError as exc:
            raise OutputError(
                f"{target}: cannot write the export ({exc.strerror or exc}); check the folder is writable"
            ) from exc
        finally:
            tmp.unlink(missing_ok=True)
        print(f"exported {p} -> {target}", file=log)
        out_paths.append(target)
    return out_paths
