"""`ddp-profile analyze PATH...`: load nsys SQLite export(s) of one run, print or write the analysis."""

from __future__ import annotations

import sys
from pathlib import Path

from ddp_profile import nvtx_names as nn
from ddp_profile.commands.options import (
    add_export_argument,
    add_jobs_argument,
    add_scheduler_arguments,
    add_steps_argument,
    input_paths,
    loaded_run,
    phase_spec,
    regex,
)
from ddp_profile.errors import UsageError
from ddp_profile.safeio import write_text_atomic
from ddp_profile.schema import JSON_SECTIONS

# The CLI's section names are the JSON keys, except the cost model's shorter `model`.
JSON_KEY = {"model": "cost_model"}
SECTIONS = {next((k for k, v in JSON_KEY.items() if v == key), key): attr for key, attr in JSON_SECTIONS.items()}


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "analyze", help="per-step compute, communication, overlap, exposed comm and tail of one run",
        description="Analyse nsys SQLite export(s) of one run (one file per rank or one file for all). "
                    "Sections: steps (per rank and step), phases (GPU windows), ranks (overlap per rank), "
                    "kernels (per kernel name, nsys nccl_gpu_overlap_trace semantics), collectives (NCCL "
                    "kernels matched across ranks: wait vs transfer), model (all-reduce cost fit), "
                    "contention (compute slowdown under NCCL), comm_kinds (NCCL time per rank, step and collective "
                    "kind: exposed, waiting, per phase, after backward), recommendation (the configuration to "
                    "try next, with its predicted step time).",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="nsys SQLite export(s) or a run folder")
    add_export_argument(p)
    p.add_argument("--format", choices=["table", "json", "csv"], default="table",
                   help="table (default), json (all sections, stable keys) or csv (one section)")
    p.add_argument("--section", choices=[*SECTIONS, "all"], default=None,
                   help="what to output (default: every section but comm_kinds and recommendation, which are "
                        "computed only when asked for; all: every one; csv: one, default steps)")
    p.add_argument("--step-pattern", metavar="REGEX", default=None, type=regex,
                   help="regex for step NVTX range names (default: the project's 'step N' ranges, else "
                        + nn.STEP_PATTERN_HELP + "; when no range matches, steps are inferred from the "
                        "repeating kernel-launch sequence and numbered from 0 at the first step every rank ran)")
    p.add_argument("--phase", action="append", default=[], metavar="NAME=REGEX", type=phase_spec,
                   help="override a phase regex: forward, backward, optimizer or grad_wait (repeatable)")
    add_steps_argument(p)
    p.add_argument("-o", "--output", metavar="FILE", default=None, help="write here instead of stdout")
    add_jobs_argument(p)
    add_scheduler_arguments(p)
    p.set_defaults(func=run)


def _phases(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, rx = item.partition("=")
        if not sep or name not in ("forward", "backward", "optimizer", "grad_wait") or not rx:
            raise UsageError(f"--phase {item!r}: use NAME=REGEX with NAME forward, backward, optimizer or grad_wait")
        out[name] = rx
    return out


def chosen_sections(fmt: str, section: str | None) -> list[str]:
    """The CLI sections to output: csv one (default steps); json and table the one asked for, every one for
    ``all``, and by default every section except those computed only on request (``comm_kinds``,
    ``recommendation``: ``analysis.OPTIONAL_SECTIONS``)."""
    from ddp_profile.analysis import OPTIONAL_SECTIONS

    if fmt == "csv":
        section = section or "steps"
        if section == "all":
            raise UsageError("--format csv writes one table: pick --section " + "|".join(SECTIONS))
        return [section]
    if section == "all":
        return list(SECTIONS)
    return [section] if section else [s for s in SECTIONS if JSON_KEY.get(s, s) not in OPTIONAL_SECTIONS]


def render(res, fmt: str, section: str | None) -> str:
    """The analysis as text in the requested format (pure; the CLI writes it)."""
    import pandas as pd

    chosen = chosen_sections(fmt, section)
    if fmt == "csv":
        return getattr(res, SECTIONS[chosen[0]]).to_csv(index=False)
    if fmt == "json":
        from ddp_profile.commands.writers import json_text

        return json_text(res, [JSON_KEY.get(s, s) for s in chosen])
    lines = []
    summary = res.summary()
    lines.append("summary: " + ", ".join(f"{k}={_fmt(v)}" for k, v in summary.items()))
    for note in res.notes:
        lines.append(f"note: {note}")
    with pd.option_context("display.width", 200, "display.max_columns", 40, "display.max_colwidth", 60):
        for s in chosen:
            df = getattr(res, SECTIONS[s])
            lines.append(f"\n== {s} ({len(df)} rows) ==")
            lines.append(df.to_string(index=False) if len(df) else "(none)")
    return "\n".join(lines) + "\n"


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def run(args) -> int:
    from ddp_profile.analysis import analyze

    phases = _phases(args.phase)
    wanted = [JSON_KEY.get(s, s) for s in chosen_sections(args.format, args.section)]  # usage checked first
    paths = input_paths(args)
    with loaded_run(args, paths) as trace:
        res = analyze(trace, step_pattern=args.step_pattern, phase_patterns=phases, steps=args.steps,
                      sections=wanted)
    text = render(res, args.format, args.section)
    if args.output:
        write_text_atomic(Path(args.output), text)
    else:
        sys.stdout.write(text)
    return 0
