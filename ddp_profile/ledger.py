"""The what-if ledger: each advice rule's prediction beside the gain a re-run with the change measured.

One folder per (rule, job) pair, ``traces/whatif/<rule>--<job>/``, holds ``ledger.json``::

    rule                    one of RULES (the ledger's rule ids)
    job, change             what ran, and what was changed
    command_baseline, command_changed, world_size, gpu_name, protocol
    profiled                the scrubbed export the tool reads (path relative to the folder, else to the
                            repository root)
    profiled_truth_step_ms  [[per-rank step ms]]: the program's own timing of its steps under nsys
    repeats                 [{"order": int, "variant": "baseline" | "changed", "step_ms": [floats]}, ...]:
                            un-profiled, interleaved repeats

Per pair (:func:`evaluate`):

- **predicted**: the tool is run on the profiled export (``analysis.analyze``), and the first advice rule of
  the tool's names for the ledger's rule (RULES) gives ``expected_gain_ns`` and ``gain_upper_ns`` (0 when the
  tool gives no such advice: for ``balanced``, the straggler rules, which a job of alike ranks must not get).
  The tool is told the job's profiler overhead, as a user who timed the job both ways would know it:
  100 · (median of ``profiled_truth_step_ms`` / median of the baseline repeats' medians − 1).
- **realized**: the median of the baseline repeats' medians − the median of the changed repeats' medians
  (``harness.spread.upper_median``, the harness's median rule), with a seeded percentile bootstrap interval
  (repeats resampled with replacement within each variant, REALIZED_RESAMPLES times, 95 %).
- **within tolerance** when |predicted − realized| ≤ max(TOLERANCE_SHARE · |realized|, TOLERANCE_NS).

``python -m ddp_profile.ledger`` writes the table (``docs/whatif-ledger.md``) and the per-rule summary the
pages and the terminal quote (``ddp_profile/report/whatif_ledger.json``, read by
``report.answer_text``); ``--check`` exits 1 when either differs from what the committed folders give.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import random
import sys
from dataclasses import dataclass
from pathlib import Path

from ddp_profile.errors import TraceError
from ddp_profile.harness.spread import DEFAULT_LEVEL, DEFAULT_SEED, upper_median

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "traces" / "whatif"
DOC = ROOT / "docs" / "whatif-ledger.md"
SUMMARY = Path(__file__).resolve().parent / "report" / "whatif_ledger.json"
RULES = {
    "straggler-host": ("straggler_host",),
    "straggler-gpu": ("straggler_gpu", "extra_work"),
    "host-sync": ("host_sync",),
    "launch-bound": ("launch_bound",),
    "comm-tail": ("comm_tail", "measured"),
    "contention": ("contention",),
    "optimizer-shard": ("optimizer_shard",),
    "grad-copy-back": ("grad_copy_back",),
    "fsdp-prefetch": ("fsdp_allgather",),
    "balanced": ("straggler_host", "straggler_gpu", "straggler", "extra_work"),
}
"""Ledger rule id -> the tool's advice rule names (``analysis.verdict``) whose prediction it tests."""
TOLERANCE_SHARE = 0.25
TOLERANCE_NS = 0.5e6
REALIZED_RESAMPLES = 4000
VARIANTS = ("baseline", "changed")


class LedgerError(TraceError):
    """A ledger folder that cannot be read: the message names the file and the field."""


@dataclass(frozen=True)
class Entry:
    folder: Path
    rule: str
    job: str
    change: str
    profiled: Path
    truth_step_ms: list
    repeats: dict  # variant -> [[step ms] per repeat, in order]
    world_size: int
    gpu_name: str


def read_entry(folder: Path) -> Entry:
    """The folder's ``ledger.json``, checked (LedgerError names the file and the field)."""
    path = Path(folder) / "ledger.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise LedgerError(f"{path}: cannot read the ledger ({e})") from None
    if not isinstance(data, dict):
        raise LedgerError(f"{path}: not a JSON object")

    def need(key, kind):
        v = data.get(key)
        if not isinstance(v, kind) or isinstance(v, bool):
            raise LedgerError(f"{path}: field {key!r} missing or not {getattr(kind, '__name__', kind)}")
        return v

    rule = need("rule", str)
    if rule not in RULES:
        raise LedgerError(f"{path}: rule {rule!r} is not one of {', '.join(RULES)}")
    reps: dict[str, list] = {v: [] for v in VARIANTS}
    for i, r in enumerate(
        sorted(need("repeats", list), key=lambda r: r.get("order", 0) if isinstance(r, dict) else 0)
    ):
        if not isinstance(r, dict) or r.get("variant") not in VARIANTS:
            raise LedgerError(f"{path}: repeats[{i}] has no variant baseline or changed")
        steps = r.get("step_ms")
        if not isinstance(steps, list) or not steps or not all(_finite(x) for x in steps):
            raise LedgerError(f"{path}: repeats[{i}].step_ms is not a list of finite numbers")
        reps[r["variant"]].append([float(x) for x in steps])
    if not all(reps.values()):
        raise LedgerError(f"{path}: needs repeats of both variants")
    truth = need("profiled_truth_step_ms", list)
    flat = [x for rank in truth for x in (rank if isinstance(rank, list) else [rank])]
    if not flat or not all(_finite(x) for x in flat):
        raise LedgerError(f"{path}: field 'profiled_truth_step_ms' is not lists of finite numbers")
    rel = need("profiled", str)
    inside = (Path(folder).resolve().parent, ROOT)  # the ledger's root (a pair may share another's export)
    export = next(
        (
            p
            for p in ((Path(folder) / rel).resolve(), (ROOT / rel).resolve())
            if p.exists() and any(p.is_relative_to(r) for r in inside)
        ),
        None,
    )
    if export is None or Path(rel).is_absolute():
        raise LedgerError(
            f"{path}: field 'profiled' ({rel}) is not a file inside the ledger folders or the repository"
        )
    return Entry(
        Path(folder),
        rule,
        need("job", str),
        need("change", str),
        export,
        truth,
        reps,
        need("world_size", int),
        need("gpu_name", str),
    )


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def realized_ms(
    repeats: dict, resamples: int = REALIZED_RESAMPLES, seed: int = DEFAULT_SEED, level: float = DEFAULT_LEVEL
) -> tuple[float, float, float]:
    """(gain, low, high) in ms: median of the baseline repeats' medians − median of the changed ones', and
    its percentile bootstrap interval (module docstring). Deterministic for a seed."""
    base = [upper_median(r) for r in repeats["baseline"]]
    changed = [upper_median(r) for r in repeats["changed"]]
    gain = upper_median(base) - upper_median(changed)
    rng = random.Random(seed)
    draws = sorted(
        upper_median(rng.choices(base, k=len(base))) - upper_median(rng.choices(changed, k=len(changed)))
        for _ in range(resamples)
    )
    tail = (1.0 - level) / 2.0

    def pick(q):
        return draws[min(len(draws) - 1, max(0, round(q * (len(draws) - 1))))]

    return gain, min(pick(tail), gain), max(pick(1.0 - tail), gain)


def overhead_pct(entry: Entry) -> float:
    """The job's profiler overhead (%): the program's median step under nsys against the baseline's
    un-profiled median (medians of repeat medians)."""
    prof = upper_median(
        [float(x) for rank in entry.truth_step_ms for x in (rank if isinstance(rank, list) else [rank])]
    )
    unprof = upper_median([upper_median(r) for r in entry.repeats["baseline"]])
    return 100.0 * (prof / unprof - 1.0) if unprof > 0 else float("nan")


@functools.cache
def _analysis(export: Path, overhead: float):
    from ddp_profile.analysis import analyze
    from ddp_profile.nsys.loader import load_trace

    trace = load_trace(export)
    trace.run = {"profiler_overhead_pct": overhead}  # a job of one's own, timed both ways (module docstring)
    return analyze(trace)


def predicted(entry: Entry) -> dict:
    """{advice: the tool's rule name or None, expected_ns, upper_ns} from the tool's advice on the export."""
    v = _analysis(entry.profiled, overhead_pct(entry)).verdict or {}
    names = RULES[entry.rule]
    got = next((a for a in v.get("advice") or [] if a.get("rule") in names), None)
    if got is None:
        return {"advice": None, "expected_ns": 0.0, "upper_ns": 0.0}
    return {
        "advice": got["rule"],
        "expected_ns": float(got.get("expected_gain_ns") or 0.0),
        "upper_ns": float(got.get("gain_upper_ns") or 0.0),
    }


def withdrawn(rule: str) -> str | None:
    """Why the ledger rule's advice was withdrawn (``analysis.verdict.WITHDRAWN``), else None."""
    from ddp_profile.analysis.verdict import WITHDRAWN

    reasons = [WITHDRAWN[n] for n in RULES.get(rule, ()) if n in WITHDRAWN]
    return reasons[0] if reasons and len(reasons) == len(RULES[rule]) else None


def within(predicted_ns: float, realized_ns: float) -> bool:
    """|predicted − realized| ≤ max(TOLERANCE_SHARE · |realized|, TOLERANCE_NS)."""
    return abs(predicted_ns - realized_ns) <= max(TOLERANCE_SHARE * abs(realized_ns), TOLERANCE_NS)


def evaluate(entry: Entry) -> dict:
    """One ledger row (module docstring), times in ms."""
    gain, lo, hi = realized_ms(entry.repeats)
    p = predicted(entry)
    return {
        "pair": entry.folder.name,
        "rule": entry.rule,
        "job": entry.job,
        "change": entry.change,
        "advice": p["advice"],
        "predicted_ms": p["expected_ns"] / 1e6,
        "upper_ms": p["upper_ns"] / 1e6,
        "realized_ms": gain,
        "realized_low_ms": lo,
        "realized_high_ms": hi,
        "repeats": [len(entry.repeats["baseline"]), len(entry.repeats["changed"])],
        "world_size": entry.world_size,
        "gpu_name": entry.gpu_name,
        "within": within(p["expected_ns"], gain * 1e6),
        "withdrawn": withdrawn(entry.rule),
    }


def entries(root: Path = FOLDER) -> list[Entry]:
    """Every ``<rule>--<job>`` folder under ``root`` with a ledger.json, in name order."""
    if not Path(root).is_dir():
        return []
    return [read_entry(p) for p in sorted(Path(root).iterdir()) if (p / "ledger.json").is_file()]


def summary(rows: list[dict]) -> dict:
    """{tool rule name: {pairs, within, worst_miss_pct, worst_miss_ms}} over the ledger rows whose advice
    it gave (and, for a ledger rule the tool did not advise, under the ledger's first name for it); the
    ``balanced`` pairs (alike ranks: no straggler advice expected) under ``balanced``, so that they never
    count as a straggler rule's record."""
    out: dict[str, dict] = {}
    for r in rows:
        if r.get("withdrawn"):  # not advised for a job of one's own; the harness's pages quote why
            for n in RULES[r["rule"]]:
                out.setdefault(n, {"pairs": 0, "within": 0, "worst_miss_pct": 0.0, "worst_miss_ms": 0.0})
                out[n]["withdrawn"] = r["withdrawn"]
            continue
        name = "balanced" if r["rule"] == "balanced" else r["advice"] or RULES[r["rule"]][0]
        s = out.setdefault(name, {"pairs": 0, "within": 0, "worst_miss_pct": 0.0, "worst_miss_ms": 0.0})
        miss = abs(r["predicted_ms"] - r["realized_ms"])
        s["pairs"] += 1
        s["within"] += int(r["within"])
        s["worst_miss_ms"] = round(max(s["worst_miss_ms"], miss), 3)
        if abs(r["realized_ms"]) > 0:
            s["worst_miss_pct"] = round(max(s["worst_miss_pct"], 100.0 * miss / abs(r["realized_ms"])), 1)
    return dict(sorted(out.items()))


def table(rows: list[dict]) -> str:
    """The ledger as a markdown page: advice → predicted → realized (interval) → within tolerance."""
    head = [
        "# What-if ledger",
        "",
        "Each row: a job profiled, the tool's advice for it, and the same job re-run un-profiled with the change "
        "applied, in interleaved repeats. Generated by `python -m ddp_profile.ledger` from `traces/whatif/`; "
        "`tests/project/test_ledger.py` fails when this page differs from what the committed folders give. "
        "Predicted: the advice's `expected_gain_ns` (upper bound beside it); realized: median of the baseline "
        "repeats' medians − median of the changed ones', with its 95 % bootstrap interval over repeats; within: "
        f"|predicted − realized| ≤ max({TOLERANCE_SHARE:.0%} of realized, {TOLERANCE_NS / 1e6:g} ms). "
        "How each rule's prediction is modelled: [metrics](metrics.md#advice-gains).",
        "",
    ]
    if not rows:
        return "\n".join(
            head + ["No ledger entry yet: `traces/whatif/` holds no `<rule>--<job>/ledger.json`.", ""]
        )
    lines = [
        "| pair | change | advice | predicted (ms) | upper (ms) | realized (ms), 95 % interval | repeats | "
        "within |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| `{r['pair']}` | {r['change']} | {r['advice'] or 'none'} | {r['predicted_ms']:.2f} | "
            f"{r['upper_ms']:.2f} | {r['realized_ms']:.2f} ({r['realized_low_ms']:.2f} to "
            f"{r['realized_high_ms']:.2f}) | {r['repeats'][0]} + {r['repeats'][1]} | "
            + (
                f"advice withdrawn: {r['withdrawn']} |"
                if r.get("withdrawn")
                else f"{'yes' if r['within'] else 'no'} |"
            )
        )
    live = [r for r in rows if not r.get("withdrawn")]
    gone = sorted({r["rule"] for r in rows if r.get("withdrawn")})
    n_ok = sum(r["within"] for r in live)
    tail = f"{n_ok} of {len(live)} pairs within tolerance"
    if gone:
        tail += (
            f"; {len(gone)} rule{'s' if len(gone) != 1 else ''} ({', '.join(gone)}) withdrawn after "
            f"{'their' if len(gone) != 1 else 'its'} ledger pair{'s' if len(rows) - len(live) != 1 else ''} "
            f"({len(rows) - len(live)} pair{'s' if len(rows) - len(live) != 1 else ''} kept as evidence, not "
            "counted)"
        )
    return "\n".join(head + lines + ["", tail + ".", ""])


def outputs(root: Path = FOLDER) -> tuple[str, str]:
    """(the markdown page, the summary JSON text) the committed folders give."""
    rows = [evaluate(e) for e in entries(root)]
    return table(rows), json.dumps(
        {"tolerance_share": TOLERANCE_SHARE, "tolerance_ms": TOLERANCE_NS / 1e6, "rules": summary(rows)},
        indent=1,
        sort_keys=True,
    ) + "\n"


def main(argv: list[str] | None = None) -> int:
    from ddp_profile.safeio import write_text_atomic

    ap = argparse.ArgumentParser(prog="python -m ddp_profile.ledger", description=__doc__.split("\n")[0])
    ap.add_argument("--root", type=Path, default=FOLDER)
    ap.add_argument("--doc", type=Path, default=DOC)
    ap.add_argument("--summary", type=Path, default=SUMMARY)
    ap.add_argument("--check", action="store_true", help="exit 1 when the committed page or summary is stale")
    args = ap.parse_args(argv)
    try:
        page, summ = outputs(args.root)
    except TraceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.check:
        stale = [
            str(p)
            for p, text in ((args.doc, page), (args.summary, summ))
            if not p.is_file() or p.read_text() != text
        ]
        for p in stale:
            print(f"stale: {p} (run python -m ddp_profile.ledger)", file=sys.stderr)
        return 1 if stale else 0
    write_text_atomic(args.doc, page)
    write_text_atomic(args.summary, summ)
    print(f"wrote {args.doc} and {args.summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
