"""Accuracy of the inferred steps, phases and comm tail against ground truth on the committed traces.

Ground truth: a foreign program's own CUDA-event step times (``truth.json`` ``iter_ms_per_rank`` and its
iterations' micro-step counts, or ``program.json`` ``step_ms_per_rank`` from ``profile_from_step``), else the trace's own
NVTX steps (the harness's traces, analysed with their NVTX ranges removed). Per rank::

    err_pct         = 100 · (median inferred step_ns − median true step) / median true step
    span_err_pct    = (truth.json only) median over the rank's steps after its first of
                      100 · (span_ns / true period − 1), the true period of iteration i = end event(i) −
                      end event(i − 1) (``gpu_start_ms + iter_ms``); steps are paired with the program's
                      last iterations (a step the analysis leaves out is an early one: warm-up, compilation)
    min_fwd_pct     = min over steps of 100 · forward_ns / step_ns     (likewise min_bwd_pct)
    tail_dev_ms     = max over steps of |comm_tail_ns − independent tail|, the independent tail computed
                      here from the raw kernel rows launched in the step's host range: last end of the
                      gradient collectives (AllReduce / ReduceScatter launched from non-main threads, or
                      from any thread after backward began when none is) − last end of the compute kernels
                      launched from non-main threads before the last of those collectives was launched
                      (what they launch after it, FSDP's post-reduce copies, waits for it), at least 0
    tail_ok         = every step within max(25 %, 0.3 ms) of the independent tail
    cuts_in_opt     = inferred step starts that split the kernels of an NVTX optimizer range (``optimizer``,
                      ``opt``; after its first and at or before its last launch), same process, where the
                      trace has such ranges

    python benchmarks/infer_accuracy.py                  # print the table
    python benchmarks/infer_accuracy.py --write-readme   # and replace docs/metrics.md's block between its markers

docs/metrics.md's block is this script's output (tests/analysis/test_infer_truth.py checks it is current).
"""  # noqa: E501

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ddp_profile import load_trace, schema  # noqa: E402
from ddp_profile.analysis import analyze  # noqa: E402
from ddp_profile.safeio import write_text_atomic  # noqa: E402

TRACES = ROOT / "traces"
# Harness traces analysed with their NVTX removed (every strategy's launch pattern, both models).
HARNESS = [
    "bucketed-25mb_small_fp32_2xh200",
    "torch_ddp-25mb_small_fp32_2xh200",
    "naive_small_fp32_2xh200",
    "flat_small_fp32_2xh200",
    "overlap_small_fp32_2xh200",
    "none_small_fp32_1xh200",
    "bucketed-25mb_xl_fp32_2xh200",
]
BEGIN, END = "<!-- infer-accuracy:begin -->", "<!-- infer-accuracy:end -->"
OPT_RANGE = re.compile(r"^(optimizer|opt)\b")
GRADIENT = ("AllReduce", "ReduceScatter")
TAIL_REL, TAIL_ABS_MS = 0.25, 0.3


def foreign_runs() -> list[Path]:
    return sorted(p for p in (TRACES / "foreign").iterdir() if p.is_dir() and any(p.glob("*.sqlite*")))


def stack_of(run: Path) -> str:
    """The training stack that made the trace: the program and its parallelism up to the precision (details
    in parentheses dropped), from truth.json / program.json; the harness's strategy for its own traces."""
    for name in ("truth.json", "program.json"):
        f = run / name
        if f.exists():
            rec = json.loads(f.read_text())
            text = re.sub(r"\([^()]*\)", "", rec.get("parallelism", ""))
            kept = []
            for clause in (c.strip() for c in text.split(",")):
                if re.match(r"(fp32|bf16|fp16)\b", clause):
                    break
                kept.append(" ".join(clause.split()))
            return f"{rec.get('program', run.name)}: {', '.join(kept)}"
    return f"ddp-profile harness: {run.name.split('_')[0]}"


def truth_of(run: Path) -> dict | None:
    """{"step_ms": [per rank: CUDA-event step times], "micro_steps": [per rank: median micro-steps] or None}
    from the program's truth.json (``iter_ms_per_rank``, ``iterations``) or program.json
    (``step_ms_per_rank`` from ``profile_from_step``); None without either."""
    f = run / "truth.json"
    if f.exists():
        rec = json.loads(f.read_text())
        its_ = rec.get("iterations", [])
        micro = [float(np.median([it["micro_steps"] for it in its])) for its in its_]
        ends = [[it["gpu_start_ms"] + it["iter_ms"] for it in its] for its in its_]
        return {"step_ms": rec["iter_ms_per_rank"], "micro_steps": micro or None, "end_ms": ends or None}
    f = run / "program.json"
    if f.exists():
        rec = json.loads(f.read_text())
        frm = rec.get("profile_from_step") or 0
        return {"step_ms": [v[frm:] for v in rec["step_ms_per_rank"]], "micro_steps": None, "end_ms": None}
    return None


def independent_tail_ms(trace, analysis) -> np.ndarray:
    """Per row of ``analysis.steps``: the tail from the raw kernel rows (module docstring)."""
    k = trace.kernels
    off = (k["launch_tid"].astype("Int64") != k["pid"]).fillna(False).to_numpy(dtype=bool)
    grad = (k["kind"].astype(str) == "nccl").to_numpy() & k["collective"].astype(str).isin(
        GRADIENT
    ).to_numpy()
    comp = (k["kind"].astype(str) == "compute").to_numpy()
    launch = k["launch_ns"].astype("Int64").fillna(-1).to_numpy(dtype=np.int64)
    rank, end = k["rank"].to_numpy(), k["end_ns"].to_numpy(dtype=np.int64)
    any_off = (grad & off).any()
    win = analysis.phases[analysis.phases["phase"] == "step"].set_index(["rank", "step"])
    out = []
    for r, s in zip(analysis.steps["rank"], analysis.steps["step"], strict=True):
        hs, he = win.loc[(r, s), ["host_start_ns", "host_end_ns"]]
        inside = (rank == r) & (launch >= hs) & (launch <= he)
        bwd = inside & comp & off
        if not bwd.any():
            out.append(np.nan)
            continue
        g = inside & grad & (off if any_off else launch >= launch[bwd].min())
        if g.any():
            bwd &= launch < launch[g].max()
        if not bwd.any():
            out.append(np.nan)
            continue
        out.append(max(0, int(end[g].max()) - int(end[bwd].max())) / 1e6 if g.any() else 0.0)
    return np.array(out, dtype=float)


def cuts_in_optimizer(trace, nvtx, analysis) -> int | None:
    """Inferred step starts that split an NVTX optimizer range's kernels: strictly after the first and at
    or before the last kernel launch inside the range (same process)."""
    if nvtx is None or nvtx.empty:
        return None
    opt = nvtx[nvtx["name"].astype(str).str.match(OPT_RANGE) & nvtx["end_ns"].notna()]
    if opt.empty:
        return None
    k = trace.kernels
    launch = k["launch_ns"].astype("Int64").fillna(-1).to_numpy(dtype=np.int64)
    steps = analysis.phases[analysis.phases["phase"] == "step"]
    n = 0
    for r in analysis.steps["rank"].unique():  # one process per rank
        lt = np.sort(launch[(k["rank"] == r).to_numpy() & (launch >= 0)])
        o = opt[opt["rank"] == r]
        i0 = np.searchsorted(lt, o["start_ns"].to_numpy(dtype=np.int64), "left")
        i1 = np.searchsorted(lt, o["end_ns"].to_numpy(dtype=np.int64), "right") - 1
        has = i1 >= i0
        first, last = lt[i0[has]][:, None], lt[i1[has]][:, None]
        starts = steps.loc[steps["rank"] == r, "host_start_ns"].to_numpy(dtype=np.int64)[None, :]
        n += int(((starts > first) & (starts <= last)).any(axis=0).sum())
    return n


def measure(run: Path, variant: str) -> list[dict]:
    """One row per rank (module docstring). ``variant``: "as recorded" or "NVTX removed"."""
    trace = load_trace(run)
    nvtx = trace.nvtx
    truth_rec = truth_of(run)
    ref = None if truth_rec else analyze(trace)
    if variant == "NVTX removed":
        trace = replace(trace, nvtx=schema.empty_frame(schema.NVTX_COLUMNS))
    res = analyze(trace)
    inferred = any("steps inferred from the GPU trace" in n for n in res.notes)
    tail = independent_tail_ms(trace, res)
    rows = []
    for r, g in res.steps.groupby("rank"):
        if truth_rec:
            truth = np.asarray(truth_rec["step_ms"][int(r)], dtype=float)
        else:
            truth = ref.steps.loc[ref.steps["rank"] == r, "step_ns"].to_numpy(dtype=float) / 1e6
        step_ms = g["step_ns"].to_numpy(dtype=float) / 1e6
        mine = (res.steps["rank"] == r).to_numpy()
        dev = np.abs(g["comm_tail_ns"].to_numpy(dtype=float) / 1e6 - tail[mine])
        ok = dev <= np.maximum(TAIL_REL * tail[mine], TAIL_ABS_MS)
        rows.append(
            {
                "span_err_pct": span_error_pct(g, truth_rec["end_ms"][int(r)])
                if truth_rec and truth_rec["end_ms"]
                else None,
                "trace": str(run.relative_to(TRACES)),
                "stack": stack_of(run),
                "variant": variant,
                "steps_from": "inferred" if inferred else "NVTX",
                "rank": int(r),
                "n_steps": len(g),
                "n_true": len(truth),
                "median_ms": float(np.median(step_ms)),
                "true_ms": float(np.median(truth)),
                "err_pct": float(100 * (np.median(step_ms) - np.median(truth)) / np.median(truth)),
                "min_fwd_pct": float(np.nanmin(100 * g["forward_ns"] / g["step_ns"])),
                "min_bwd_pct": float(np.nanmin(100 * g["backward_ns"] / g["step_ns"])),
                "micro_steps": float(np.nanmedian(g["micro_steps"]))
                if g["micro_steps"].notna().any()
                else None,
                "true_micro_steps": truth_rec["micro_steps"][int(r)]
                if truth_rec and truth_rec["micro_steps"]
                else None,
                "tail_dev_ms": float(np.nanmax(dev)) if np.isfinite(dev).any() else None,
                "tail_ok": bool(ok[np.isfinite(dev)].all()),
                "cuts_in_opt": cuts_in_optimizer(trace, nvtx, res),
            }
        )
    return rows


def span_error_pct(g, end_ms: list[float]) -> float:
    """``span_err_pct`` of one rank (module docstring); ``g``: its rows of the step table."""
    span = g.sort_values("step")["span_ns"].to_numpy(dtype=float)[1:] / 1e6
    ends = np.asarray(end_ms, dtype=float)
    period = np.diff(ends)[len(ends) - 1 - len(span) :]
    return float(np.median(100 * (span / period - 1)))


def extra_found(run: Path) -> list[dict]:
    """The program's own extra-work records (truth.json ``extra_work``: rank, kind, after_iteration, gpu_ms)
    for iterations followed by another one, each with ``found``: whether the inferred step of that
    iteration (steps counted from the first, all found) reports extra kernels or extra host time."""
    f = run / "truth.json"
    if not f.exists():
        return []
    rec = json.loads(f.read_text())
    res = analyze(load_trace(run))
    s = res.steps.set_index(["rank", "step"])
    out = []
    for e in rec.get("extra_work", []):
        r, k = int(e["rank"]), int(e["after_iteration"])
        n_true = len(rec["iter_ms_per_rank"][r])
        if k < 0 or k + 1 >= n_true or (res.steps["rank"] == r).sum() != n_true:
            continue
        row = s.loc[(r, k)]
        out.append(
            {
                "trace": str(run.relative_to(TRACES)),
                "rank": r,
                "after_iteration": k,
                "kind": e["kind"],
                "gpu_ms": e.get("gpu_ms"),
                "found": bool(row["extra_kernels"] > 0 or row["extra_host_ns"] > 0),
            }
        )
    return out


def all_rows() -> list[dict]:
    rows = []
    for run in foreign_runs():
        nvtx = load_trace(run).nvtx
        has_nvtx = bool((nvtx["domain"].astype(str) != "NCCL").any()) if not nvtx.empty else False
        rows += measure(run, "as recorded")
        if has_nvtx:
            rows += measure(run, "NVTX removed")
    for name in HARNESS:
        if (TRACES / name).exists():
            rows += measure(TRACES / name, "NVTX removed")
    return rows


def render(rows: list[dict]) -> str:
    def f(v, fmt):
        return "–" if v is None else format(v, fmt)

    lines = [
        "| trace | stack | NVTX | steps | rank | steps found / true | median step ms (true) | error | min forward "
        "| min backward | micro-steps | max tail deviation ms | cuts inside optimizer | span vs true period |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['trace']} | {r['stack']} | {r['variant']} | {r['steps_from']} | {r['rank']} | {r['n_steps']} / "
            f"{r['n_true']} | {r['median_ms']:.3f} ({r['true_ms']:.3f}) | {r['err_pct']:+.2f} % | "
            f"{r['min_fwd_pct']:.1f} % | {r['min_bwd_pct']:.1f} % | {f(r['micro_steps'], '.0f')}"
            f"{'' if r['true_micro_steps'] is None else ' (' + format(r['true_micro_steps'], '.0f') + ')'} | "
            f"{f(r['tail_dev_ms'], '.3f')} | {f(r['cuts_in_opt'], 'd')} | "
            f"{'–' if r['span_err_pct'] is None else format(r['span_err_pct'], '+.2f') + ' %'} |"
        )
    return "\n".join(lines)


def readme_block(table: str) -> str:
    return f"{BEGIN}\n{table}\n{END}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--write-readme", action="store_true", help="replace docs/metrics.md's block between its markers"
    )
    a = ap.parse_args()
    table = render(all_rows())
    print(table)
    if a.write_readme:
        readme = ROOT / "docs" / "metrics.md"
        text = readme.read_text()
        if BEGIN not in text or END not in text:
            print(f"docs/metrics.md lacks the markers {BEGIN} ... {END}", file=sys.stderr)
            return 2
        head, rest = text.split(BEGIN, 1)
        write_text_atomic(readme, head + readme_block(table) + rest.split(END, 1)[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
