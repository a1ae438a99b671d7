"""Several runs side by side: strategies, bucket sweeps, scaling over world sizes.

Per run, the per-step numbers are medians over all (rank, step) rows; overlap_pct is Σ|C∩N| / Σ|N| over
ranks (whole trace). Run facts (strategy, bucket size, model, dtype, world size) come from the run's
run.json (``trace.run``) when present; otherwise world_size = number of ranks in the trace and the rest NA.

Scaling, data-parallel with a fixed per-GPU batch (weak scaling: n GPUs process n times the samples per
step), against the run with world_size 1 of the same model and dtype::

    speedup_vs_1gpu = n · step_ns(1 GPU) / step_ns(n GPUs)        (throughput ratio)
    efficiency_pct  = 100 · speedup_vs_1gpu / n = 100 · step_ns(1) / step_ns(n)
    serial_fraction = (1/S − 1/n) / (1 − 1/n)                      (Amdahl's law solved for the serial
                                                                    share; the Karp–Flatt metric)

predicted_overhead_ns (bucketed runs with a fitted all-reduce cost model): n_b·o + s/(n_b·w) with s the
median all-reduce bytes per step and n_b the median number of all-reduces per step; compare it with the
measured comm_tail_ns across a bucket sweep (see ``costmodel``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddp_profile import schema
from ddp_profile.analysis.costmodel import predict_overhead


def amdahl_serial_fraction(speedup: float, n: int) -> float:
    """Serial fraction f with S = 1 / (f + (1 − f)/n), i.e. f = (1/S − 1/n) / (1 − 1/n); NaN for n <= 1."""
    if n is None or n <= 1 or not speedup or speedup <= 0:
        return float("nan")
    return (1.0 / speedup - 1.0 / n) / (1.0 - 1.0 / n)


def _fact(run: dict | None, *keys):
    """First present key of run.json, looked up at top level then under "config"."""
    for d in (run or {}, (run or {}).get("config") or {}):
        for k in keys:
            if isinstance(d, dict) and d.get(k) is not None:
                return d[k]
    return None


def _gpu_name(trace) -> object:
    ranks = getattr(trace, "ranks", None)
    if ranks is not None and len(ranks) and ranks["gpu_name"].notna().any():
        return str(ranks["gpu_name"].dropna().iloc[0])
    gpus = getattr(trace, "gpus", None)
    if gpus is not None and len(gpus) and gpus["name"].notna().any():
        return str(gpus["name"].dropna().iloc[0])
    return None


def _predicted(res) -> float:
    cm, coll = res.cost_model, res.collectives
    if cm.empty or coll.empty:
        return float("nan")
    ar = cm.loc[cm["collective"].astype(str).str.lower().str.contains("allreduce")]
    if ar.empty or not np.isfinite(ar["w_gb_per_s"].iloc[0]):
        return float("nan")
    c = coll.loc[
        coll["collective"].astype(str).str.lower().str.contains("allreduce")
        & coll["step"].notna()
        & coll["bytes"].notna()
    ]
    if c.empty:
        return float("nan")
    per = c.groupby(["rank", "step"]).agg(s=("bytes", "sum"), n=("bytes", "size"))
    return predict_overhead(
        float(ar["o_us"].iloc[0]) * 1e3,
        float(ar["w_gb_per_s"].iloc[0]),
        float(per["s"].median()),
        float(per["n"].median()),
    )


def compare_runs(runs: list[tuple]) -> pd.DataFrame:
    """COMPARISON_COLUMNS, one row per (trace, analysis) pair, in the given order."""
    rows = []
    for i, (trace, res) in enumerate(runs):
        run = getattr(trace, "run", None) or {}
        meta = getattr(trace, "meta", None) or {}
        s = res.steps
        ro = res.rank_overlap
        n_ranks = int(ro["rank"].nunique()) if not ro.empty else None
        comm = float(ro["comm_ns"].sum()) if not ro.empty else 0.0

        def med(col, s=s):
            return float(s[col].median()) if not s.empty else float("nan")

        rows.append(
            {
                "run": _fact(run, "run_name", "name") or meta.get("name") or meta.get("path") or f"run{i}",
                "strategy": _fact(run, "strategy"),
                "bucket_mb": _fact(run, "bucket_mb"),
                "model": _fact(run, "model"),
                "dtype": _fact(run, "dtype"),
                "world_size": _fact(run, "world_size") or n_ranks,
                "gpu_name": _fact(run, "gpu_name") or _gpu_name(trace),
                "n_steps": int(s["step"].nunique()) if not s.empty else 0,
                "step_ns": med("step_ns"),
                "compute_ns": med("compute_ns"),
                "comm_ns": med("comm_ns"),
                "exposed_comm_ns": med("exposed_comm_ns"),
                "comm_tail_ns": med("comm_tail_ns"),
                "comm_pct": med("comm_pct"),
                "overlap_pct": 100.0 * float(ro["overlap_ns"].sum()) / comm if comm > 0 else float("nan"),
                "predicted_overhead_ns": _predicted(res),
            }
        )
    if not rows:
        return schema.empty_frame(schema.COMPARISON_COLUMNS)
    df = pd.DataFrame(rows)
    df["speedup_vs_1gpu"] = np.nan
    df["efficiency_pct"] = np.nan
    df["serial_fraction"] = np.nan
    ws = pd.to_numeric(df["world_size"], errors="coerce")
    key = (
        df["model"].astype("object").fillna("?").astype(str)
        + "|"
        + df["dtype"].astype("object").fillna("?").astype(str)
    )
    for k in key.unique():
        base = df.loc[(key == k) & (ws == 1) & df["step_ns"].notna()]
        if base.empty:
            continue
        t1 = float(base["step_ns"].iloc[0])
        sel = (key == k) & ws.notna()
        speed = ws[sel] * t1 / df.loc[sel, "step_ns"]
        df.loc[sel, "speedup_vs_1gpu"] = speed
        df.loc[sel, "efficiency_pct"] = 100.0 * speed / ws[sel]
        df.loc[sel, "serial_fraction"] = [
            amdahl_serial_fraction(sp, n) for sp, n in zip(speed, ws[sel], strict=False)
        ]
    return schema.select(df, schema.COMPARISON_COLUMNS)
