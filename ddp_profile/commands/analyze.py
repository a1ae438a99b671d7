"""`ddp-profile analyze PATH...`: load nsys SQLite export(s) of one run, print or write the analysis."""

from __future__ import annotations

import sys
from pathlib import Path

from ddp_profile.commands.options import (
    add_export_argument,
    add_jobs_argument,
    add_scheduler_arguments,
    add_step_selection,
    input_paths,
    loaded_run,
    step_selection,
)
from ddp_profile.errors import UsageError
from ddp_profile.safeio import check_output_file, write_text_chunks_atomic
from ddp_profile.schema import JSON_SECTIONS, OPTIONAL_SECTIONS

# The CLI's section names are the JSON keys, except the cost model's shorter `model`.
JSON_KEY = {"model": "cost_model"}
SECTIONS = {
    next((k for k, v in JSON_KEY.items() if v == key), key): attr for key, attr in JSON_SECTIONS.items()
}


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "analyze",
        help="per-step compute, communication, overlap, exposed comm and tail of one run",
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
    p.add_argument(
        "--format",
        choices=["table", "json", "csv"],
        default="table",
        help="table (default: the verdict, a per-rank summary in ms and the headline numbers; "
        "sections on request), json (all sections, stable keys) or csv (one section)",
    )
    p.add_argument(
        "--section",
        choices=[*SECTIONS, "all"],
        default=None,
        action="append",
        metavar="NAME",
        help="section to output, repeatable: " + ", ".join(SECTIONS) + ", or all (table: none "
        "by default; json: every one but comm_kinds and recommendation, which are computed only "
        "when asked for; csv: steps)",
    )
    add_step_selection(p)
    p.add_argument("-o", "--output", metavar="FILE", default=None, help="write here instead of stdout")
    add_jobs_argument(p)
    add_scheduler_arguments(p)
    p.set_defaults(func=run)


def _chosen(sections: list[str] | str | None, default: list[str]) -> list[str]:
    if sections is None:
        return default
    items = [sections] if isinstance(sections, str) else list(sections)
    return list(SECTIONS) if "all" in items else list(dict.fromkeys(items))


def chosen_sections(fmt: str, section: list[str] | str | None) -> list[str]:
    """The sections the format outputs: csv one (default steps); json those asked for, by default every one
    except those computed only on request (``analysis.OPTIONAL_SECTIONS``: comm_kinds, recommendation);
    table those asked for (default none)."""
    if fmt == "csv":
        chosen = _chosen(section, ["steps"])
        if len(chosen) != 1:
            raise UsageError("--format csv writes one table: pick one --section " + "|".join(SECTIONS))
        return chosen
    if fmt == "json":
        return _chosen(section, [s for s in SECTIONS if JSON_KEY.get(s, s) not in OPTIONAL_SECTIONS])
    return _chosen(section, [])


def render(res, fmt: str, section: list[str] | str | None) -> str:
    """The analysis as text in the requested format (pure; the CLI writes it). ``section``: None (the
    format's default), one name or a list of names ("all" for every section)."""
    chosen = chosen_sections(fmt, section)
    if fmt == "csv":
        return _frame(res, chosen[0]).to_csv(index=False)
    if fmt == "json":
        from ddp_profile.commands.writers import json_text

        return json_text(res, [JSON_KEY.get(s, s) for s in chosen])
    return table_text(res, chosen)


def _frame(res, section: str):
    import pandas as pd

    df = getattr(res, SECTIONS[section], None)
    return df if isinstance(df, pd.DataFrame) else pd.DataFrame()


def table_text(res, chosen: list[str]) -> str:
    """The terminal answer: the verdict first (when the analysis has one), a per-rank summary in ms, the
    headline numbers with units (per-rank values where ranks differ > 2×), the notes, then the sections
    asked for; every number through :mod:`ddp_profile.fmt`."""
    from ddp_profile.fmt import text_table
    from ddp_profile.report.answer_text import (
        other_per_rank,
        per_rank_of,
        rank_summary,
        summary_name,
        summary_pairs,
        verdict_lines,
        verdict_of,
    )

    lines = verdict_lines(verdict_of(res))
    if lines:
        lines = ["== verdict =="] + lines + [""]
    ranks = rank_summary(res)
    if len(ranks):
        lines += ["== per rank (medians over each rank's steps) ==", text_table(ranks), ""]
    summary, per_rank = res.summary(), per_rank_of(res)
    lines.append(
        "summary: " + ", ".join(f"{summary_name(k)}={v}" for k, v in summary_pairs(summary, per_rank))
    )
    other = other_per_rank(summary, per_rank)
    if other:
        lines.append("ranks differ > 2× in: " + "; ".join(f"{summary_name(k)}: {v}" for k, v in other))
    lines += [f"note: {note}" for note in res.notes]
    for s in chosen:
        df = _frame(res, s)
        lines += [f"\n== {s} ({len(df)} rows) ==", text_table(df)]
    if not chosen:
        lines.append("\nsections (--section NAME, repeatable; --section all): " + ", ".join(SECTIONS))
    return "\n".join(lines) + "\n"


def run(args) -> int:
    from ddp_profile.analysis import analyze

    if args.output:  # before anything is read: an output that is an input, a device or a folder is refused
        check_output_file(args.output, args.paths)
    selection = step_selection(args)
    wanted = [JSON_KEY.get(s, s) for s in chosen_sections(args.format, args.section)]  # usage checked first
    paths = input_paths(args)
    with loaded_run(args, paths) as trace:
        res = analyze(trace, **selection.analyze_kwargs(), sections=wanted)
        # What loading left out or changed (rows without a process, rebased times, duplicates) is said here too,
        # as inspect says it: the same rows whichever command reads the trace.
        res.notes = [*res.notes, *(f"loading: {w}" for w in (getattr(trace, "warnings", None) or []))]
    if args.format == "json":  # written as it is built: a long run's answer is never one string in memory
        from ddp_profile.commands.writers import json_chunks

        chunks = json_chunks(res, wanted)
    else:
        chunks = iter([render(res, args.format, args.section)])
    if args.output:
        write_text_chunks_atomic(Path(args.output), chunks)
    else:
        for chunk in chunks:
            sys.stdout.write(chunk)
    return 0
