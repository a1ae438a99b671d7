"""Which lent host ran which run: the optional ``hosts.txt`` beside the runs (the index's host column, the
findings' notes on sets that mix hosts)."""

from __future__ import annotations

from pathlib import Path

from ddp_profile.errors import TraceError
from ddp_profile.safeio import read_side_file

HOSTS_FILE = "hosts.txt"


def read_hosts(root: Path) -> dict[str, str]:
    """{run id: host label} from the optional ``<root>/hosts.txt``; {} when there is none.

    The run JSONs and exports do not name the machine, so which runs share a host is recorded by hand
    beside them, one run per line: ``<run id> <host label>``, the run id being the folder name
    (``scaling/<name>`` for the scaling runs); ``#`` starts a comment. The findings use it to say which sets
    mix hosts. Lines naming runs that are not loaded are ignored (the file may cover more runs)."""
    path = Path(root) / HOSTS_FILE
    text = read_side_file(path)  # a regular file only, size-capped
    if text is None:
        return {}
    out = {}
    for i, line in enumerate(text.decode("utf-8", errors="replace").splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split(None, 1)
        if len(parts) != 2:
            raise TraceError(
                f"{path}:{i}: expected '<run folder> <host label>', got {line!r}; fix or delete the line"
            )
        out[parts[0].strip("/")] = parts[1].strip()
    return out
