"""Condense a loaded trace into plain data for ``ddp-profile inspect`` (JSON-serialisable dict)."""

from __future__ import annotations

import re

from ddp_profile.trace import Trace

NUMBER = re.compile(r"\d+")
EXAMPLES = 3  # distinct names kept per group, in numeric order


def _numeric_key(name: str) -> tuple:
    """Sort key comparing digit runs as numbers: ``step 2`` before ``step 10``."""
    # a digit run compares by (length, digits): numeric order without int() (which refuses > 4300 digits)
    return tuple((len(p.lstrip("0")), p.lstrip("0")) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def group_names(counts) -> list[dict]:
    """NVTX range counts by (domain, name) -> one entry per (domain, names equal but for their numbers).

    The harness names a range per step (``step 12``) and per bucket all-reduce (``allreduce b3 26214400B``),
    so an XL run has hundreds of names that say one thing; grouped, ``inspect`` stays one screen. A group
    with one distinct name keeps that name (``bf16`` in a lone name is not a counter); otherwise its name is
    the pattern with ``<N>`` for each digit run. Entries: domain, name, grouped (name is a pattern), count
    (ranges), distinct (names), examples (up to EXAMPLES names in numeric order); sorted by domain, name.
    """
    groups: dict[tuple[str, str], dict[str, int]] = {}
    for (domain, name), c in counts:
        groups.setdefault((domain, NUMBER.sub("<N>", name)), {})[name] = int(c)
    out = []
    for (domain, pattern), names in groups.items():
        grouped = len(names) > 1
        ordered = sorted(names, key=_numeric_key)
        out.append(
            {
                "domain": domain,
                "name": pattern if grouped else ordered[0],
                "grouped": grouped,
                "count": sum(names.values()),
                "distinct": len(names),
                "examples": ordered[:EXAMPLES],
            }
        )
    return sorted(out, key=lambda g: (g["domain"], g["name"]))


def summarize(trace: Trace) -> dict:
    """Files, versions, scrubbed flag, ranks, kernel counts by kind, NCCL kernels by collective, NVTX
    ranges by domain and name (names differing only in numbers grouped: :func:`group_names`), and the time
    span covered by GPU work (ns)."""
    k, n = trace.kernels, trace.nvtx
    kinds = k.groupby("kind", observed=False).size()
    nccl = k[k["kind"] == "nccl"]
    by_coll = nccl.groupby("collective", observed=True).size() if not nccl.empty else {}
    ranges = (
        n.assign(domain=n["domain"].astype(str)).groupby(["domain", "name"], observed=True).size()
        if not n.empty
        else {}
    )
    return {
        "files": [
            {
                "path": f["path"],
                "nsys_version": f["nsys_version"],
                "schema_version": f["schema_version"],
                "scrubbed": f["scrubbed"],
                "offset_ns": f["offset_ns"],
            }
            for f in trace.meta["files"]
        ],
        "nsys_version": trace.meta["nsys_version"],
        "schema_version": trace.meta["schema_version"],
        "scrubbed": trace.meta["scrubbed"],
        "rank_source": trace.meta["rank_source"],
        "clock": trace.meta["clock"]["method"],
        "ranks": [
            {
                "rank": int(r.rank),
                "pid": int(r.pid),
                "device": int(r.device),
                "gpu_name": r.gpu_name,
                "rank_source": r.rank_source,
            }
            for r in trace.ranks.itertuples()
        ],
        "kernels_by_kind": {str(kind): int(c) for kind, c in kinds.items()},
        "nccl_by_collective": {str(c): int(v) for c, v in dict(by_coll).items()},
        "nvtx_ranges": group_names(dict(ranges).items()),
        "time_span_ns": [int(k["start_ns"].min()), int(k["end_ns"].max())] if not k.empty else None,
        "warnings": list(trace.meta["warnings"]),
    }


def format_table(summary: dict) -> str:
    """Human-readable rendering of :func:`summarize`'s result."""
    lines = [
        f"nsys {summary['nsys_version']} (schema {summary['schema_version']}), "
        f"{'scrubbed' if summary['scrubbed'] else 'NOT scrubbed'}, clock: {summary['clock']}"
    ]
    lines += [
        f"  file {f['path']}  nsys {f['nsys_version']}  offset {f['offset_ns']} ns"
        f"{'  scrubbed' if f['scrubbed'] else ''}"
        for f in summary["files"]
    ]
    lines.append(f"ranks (source: {summary['rank_source']}):")
    lines += [
        f"  rank {r['rank']}  pid {r['pid']}  device {r['device']}  {r['gpu_name']}" for r in summary["ranks"]
    ]
    lines.append("kernels: " + ", ".join(f"{k} {v}" for k, v in summary["kernels_by_kind"].items()))
    if summary["nccl_by_collective"]:
        lines.append(
            "NCCL kernels: " + ", ".join(f"{k} {v}" for k, v in summary["nccl_by_collective"].items())
        )
    lines.append("NVTX ranges (domain / name: count; <N> stands for numbers that vary):")
    lines += [
        f"  {r['domain'] or '(default)'} / {r['name']}: {r['count']} range{'s' if r['count'] != 1 else ''}"
        + (f" ({r['distinct']} distinct)" if r["grouped"] else "")
        for r in summary["nvtx_ranges"]
    ]
    steps = summary.get("steps")  # added by the inspect command (the analysis finds the steps)
    if steps:
        counts = ", ".join(f"rank {r}: {c}" for r, c in steps["per_rank"].items()) or "none"
        lines.append(
            f"steps ({steps['source']}): {counts}"
            + (f" ({steps['labels']})" if steps.get("per_rank") else "")
        )
        lines += [f"  {n}" for n in steps["notes"]]
    if summary["time_span_ns"]:
        a, b = summary["time_span_ns"]
        lines.append(f"time span: {a} .. {b} ns ({(b - a) / 1e9:.3f} s)")
    lines += [f"warning: {w}" for w in summary["warnings"]]
    return "\n".join(lines)
