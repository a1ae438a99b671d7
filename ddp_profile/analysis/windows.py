"""Training steps and their phases, found in the NVTX ranges and projected onto the GPU.

Which ranges are steps (per process):
  1. the project's own ranges: domain ``nvtx_names.DOMAIN``, message ``"step <i>"`` (payload = i);
  2. otherwise any range, in any domain but NCCL's, whose message matches ``nvtx_names.STEP_PATTERN``
     (``step 3``, ``step3``, ``iteration 7``, ``it 3``, ``train step 3``, ``ProfilerStep#12``...), or the
     user's ``step_pattern`` regex;
  3. otherwise none here: ``analyze`` then infers steps from the kernel sequence (``analysis.infer``).
  When matching ranges nest, only the outermost are steps (by containment: ranges that overlap without
  nesting are all steps, with a note). Step index: the payload
  for the project's ranges, else the last integer in the message, else the order within the process.

Projection onto the GPU (by *launch time within the process*, any thread)::

    host (any thread of pid):   |==== backward range ====|
    launches (autograd thread):    ^    ^      ^
    GPU:                             [k1]  [k2]     [k3]
    GPU window of the range:         [-----------------]
                                     first GPU start .. last GPU end of kernels with
                                     host_start <= launch_ns <= host_end

  Kernels are attributed to a range when the CUDA call that launched them (runtime or driver API) happened
  inside the range on the same process, whatever the thread: PyTorch launches backward kernels and DDP's
  all-reduces from autograd threads, so projecting by thread (as ``nsys stats -r nvtx_gpu_proj_trace``
  does) loses them. A range that launched nothing keeps its host interval as its window.

Phases (``forward``, ``backward``, ``optimizer``, ``grad_wait``; regexes overridable) belong to the step
whose host range contains their start. Several ranges of one phase in one step (e.g. gradient
accumulation) give one window from the earliest GPU start to the latest GPU end.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ddp_profile import nvtx_names as nn
from ddp_profile import schema
from ddp_profile.analysis.kernel_arrays import ints
from ddp_profile.analysis.projection import project

DEFAULT_PHASE_PATTERNS = dict(
    zip(
        schema.PHASES,
        (nn.FORWARD_PATTERN, nn.BACKWARD_PATTERN, rf"^{re.escape(nn.GRAD_WAIT)}\b", nn.OPTIMIZER_PATTERN),
        strict=True,
    )
)
RANGE_COLUMNS = ["rank", "pid", "step", "phase", "host_start_ns", "host_end_ns"]
NO_STEP_RANGE = "no NVTX range matches the step pattern"
NO_NVTX_RANGES = "no NVTX ranges in the trace"
"""How the note for a trace without step ranges begins (dropped when steps are inferred instead)."""
_PROJECT_STEP = re.compile(rf"^{re.escape(nn.STEP)}( \d+)?$")


def _closed(nvtx: pd.DataFrame) -> pd.DataFrame:
    """Closed ranges outside NCCL's own domain (those name collectives, never phases)."""
    if nvtx is None or nvtx.empty:
        return schema.empty_frame(schema.NVTX_COLUMNS)
    dom = nvtx["domain"].astype("object").fillna("")
    keep = nvtx["end_ns"].notna() & nvtx["name"].notna() & (dom != "NCCL")
    return nvtx.loc[keep].reset_index(drop=True)


def _matches(names: pd.Series, pattern: str) -> np.ndarray:
    rx = re.compile(pattern)
    # Unique names are few even when ranges are many: match each once, then index by code (no string
    # per row is made or looked up). Each distinct value is matched as its ``str``, as a row would be.
    codes, uniq = pd.factorize(names, use_na_sentinel=False)
    text = pd.Series(uniq, dtype=names.dtype).astype(str).tolist() if len(uniq) else []
    hit = np.array([bool(rx.search(u)) for u in text], dtype=bool)
    return hit[codes] if len(hit) else np.zeros(len(names), dtype=bool)


def _open_matches(nvtx: pd.DataFrame, pattern: str) -> int:
    """Ranges never closed whose name matches ``pattern`` (outside NCCL's domain)."""
    if nvtx is None or nvtx.empty:
        return 0
    dom = nvtx["domain"].astype("object").fillna("")
    open_ = nvtx.loc[nvtx["end_ns"].isna() & nvtx["name"].notna() & (dom != "NCCL")]
    return int(_matches(open_["name"], pattern).sum()) if len(open_) else 0


def find_steps(nvtx: pd.DataFrame, step_pattern: str | None = None) -> tuple[pd.DataFrame, list[str]]:
    """Step host ranges per process: RANGE_COLUMNS with phase "step". Returns (frame, notes)."""
    notes: list[str] = []
    ranges = _closed(nvtx)
    if ranges.empty:
        notes.append(
            f"{NO_NVTX_RANGES}: per-step metrics need step ranges (profile with "
            "`nsys profile -t cuda,nvtx` and wrap each step in an NVTX range)"
        )
        return schema.empty_frame(RANGE_COLUMNS), notes
    if step_pattern is None:
        dom = ranges["domain"].astype("object").fillna("")
        own = (dom == nn.DOMAIN).to_numpy() & _matches(ranges["name"], _PROJECT_STEP.pattern)
        if own.any():
            hit, source = own, "project"
        else:
            hit, source = _matches(ranges["name"], nn.STEP_PATTERN), "pattern"
    else:
        try:
            hit, source = _matches(ranges["name"], step_pattern), "pattern"
        except re.error as exc:
            from ddp_profile.errors import UsageError

            raise UsageError(f"--step-pattern {step_pattern!r} is not a valid regex: {exc}") from exc
    steps = ranges.loc[hit].copy()
    if steps.empty:
        pat = step_pattern or nn.STEP_PATTERN
        n_open = _open_matches(nvtx, pat)
        if n_open:
            notes.append(
                f"{n_open} NVTX range(s) match the step pattern {pat!r} but none was closed (the capture "
                "stopped before the steps ended, or a range was pushed and never popped): per-step metrics "
                "are missing; extend the capture past the last step or close the ranges"
            )
            return schema.empty_frame(RANGE_COLUMNS), notes
        notes.append(
            f"{NO_STEP_RANGE} {pat!r}: per-step metrics are missing "
            "(name each step's range e.g. 'step 3', or pass --step-pattern REGEX)"
        )
        return schema.empty_frame(RANGE_COLUMNS), notes
    # Outermost only: a matching range inside another one (ProfilerStep#3 > Optimizer.step) is no step. By
    # containment, not NVTX depth: a step overlapping the previous one (not nested in it) is still a step.
    steps = steps.assign(_end=ints(steps["end_ns"])).sort_values(
        ["pid", "start_ns", "_end"], ascending=[True, True, False], kind="stable"
    )
    prev_max = steps.groupby("pid")["_end"].cummax().groupby(steps["pid"]).shift()
    steps = steps.loc[~(prev_max.notna() & (steps["_end"] <= prev_max)).to_numpy()].drop(columns="_end")
    steps = steps.sort_values(["pid", "start_ns"], kind="stable").reset_index(drop=True)
    prev_end = steps.groupby("pid")["end_ns"].shift()
    n_overlap = int((prev_end.notna() & (steps["start_ns"] < prev_end)).sum())
    if n_overlap:
        notes.append(
            f"{n_overlap} step range(s) start before the previous step of the same process ended: every "
            "step is kept, a kernel launched in the overlap counts in both steps, and a phase goes to "
            "the later step"
        )
    index = pd.to_numeric(steps["payload"], errors="coerce") if source == "project" else None
    if index is None or index.isna().any():
        # at most 18 digits (fits int64); a longer digit run is no index, and the order is used instead
        index = pd.to_numeric(
            steps["name"].astype(str).str.extract(r"(?<!\d)(\d{1,18})\D*$")[0], errors="coerce"
        )
    ordinal = steps.groupby("pid").cumcount()
    if index.isna().any() or index.groupby(steps["pid"]).apply(lambda s: s.duplicated().any()).any():
        index = ordinal
    out = pd.DataFrame(
        {
            "rank": steps["rank"].to_numpy(),
            "pid": ints(steps["pid"]),
            "step": index.astype("int64").to_numpy(),
            "phase": "step",
            "host_start_ns": ints(steps["start_ns"]),
            "host_end_ns": ints(steps["end_ns"]),
        }
    )
    return out, notes


def find_phases(
    nvtx: pd.DataFrame, steps: pd.DataFrame, patterns: dict[str, str] | None = None
) -> pd.DataFrame:
    """Phase host ranges (RANGE_COLUMNS) assigned to the step containing their start, same process."""
    pats = dict(DEFAULT_PHASE_PATTERNS)
    pats.update(patterns or {})
    ranges = _closed(nvtx)
    if ranges.empty or steps.empty:
        return schema.empty_frame(RANGE_COLUMNS)
    pid = ints(ranges["pid"])
    start = ints(ranges["start_ns"])
    end = ints(ranges["end_ns"])
    # Each process's step columns and range rows taken once (not once per phase); the rows found are
    # gathered as arrays and made into one frame (a frame per phase and process costs ~1 ms each).
    by_pid = [
        (
            p,
            sg["host_start_ns"].to_numpy(),
            sg["host_end_ns"].to_numpy(),
            sg["rank"].to_numpy(),
            sg["step"].to_numpy(),
            np.flatnonzero(pid == p),
        )
        for p, sg in steps.groupby("pid")
    ]
    parts: dict[str, list] = {c: [] for c in RANGE_COLUMNS}
    for phase, pat in pats.items():
        hit = _matches(ranges["name"], pat)
        for p, hs, he, srank, sstep, mine in by_pid:
            sel = mine[hit[mine]]
            if sel.size == 0:
                continue
            j = np.searchsorted(hs, start[sel], side="right") - 1
            ok = j >= 0
            ok[ok] = start[sel][ok] <= he[j[ok]]
            sel, j = sel[ok], j[ok]
            for col, values in (
                ("rank", srank[j]),
                ("pid", np.full(len(sel), p)),
                ("step", sstep[j]),
                ("phase", np.full(len(sel), phase, dtype=object)),
                ("host_start_ns", start[sel]),
                ("host_end_ns", end[sel]),
            ):
                parts[col].append(values)
    if not parts["rank"]:
        return schema.empty_frame(RANGE_COLUMNS)
    return pd.DataFrame({c: np.concatenate(v) for c, v in parts.items()})


def phase_windows(steps: pd.DataFrame, phases: pd.DataFrame, karr) -> pd.DataFrame:
    """PHASE_COLUMNS + pid + WINDOW_FACT_COLUMNS: every step and phase with its GPU window (merged per (rank,
    step, phase)). A backward range's window spans the *compute* kernels launched in it (NCCL kernels and
    copies are not backward). ``phase_ns`` = length of the union of the phase's ranges' windows in the step
    (the micro-steps' forward or backward summed; = end − start for one range); ``micro_steps`` (step rows) =
    backward ranges in the step (NaN: none); the step rows' ``extra_*`` facts are carried (NaN: none)."""
    ranges = pd.concat([steps, phases], ignore_index=True) if not phases.empty else steps.copy()
    if ranges.empty:
        return schema.empty_frame(schema.PHASE_COLUMNS + ["pid"] + schema.WINDOW_FACT_COLUMNS)
    is_bwd = (ranges["phase"] == "backward").to_numpy()
    gs, ge = np.zeros(len(ranges), dtype=np.int64), np.zeros(len(ranges), dtype=np.int64)
    for rows, mask in ((np.flatnonzero(~is_bwd), None), (np.flatnonzero(is_bwd), karr.is_compute)):
        if rows.size:
            gs[rows], ge[rows], _ = project(
                ranges.iloc[rows], karr.start, karr.end, karr.launch, karr.pid, mask
            )
    ranges = ranges.assign(start_ns=gs, end_ns=ge)
    keys = ["rank", "pid", "step", "phase"]
    out = (
        ranges.groupby(keys, sort=False)
        .agg(
            start_ns=("start_ns", "min"),
            end_ns=("end_ns", "max"),
            host_start_ns=("host_start_ns", "min"),
            host_end_ns=("host_end_ns", "max"),
        )
        .reset_index()
    )
    if len(out) == len(ranges):  # one range per (rank, step, phase): the union is the window
        out["phase_ns"] = (out["end_ns"] - out["start_ns"]).astype(float)
    else:
        out = out.merge(_union_lengths(ranges, keys), on=keys, how="left")
    n_bwd = (
        ranges.loc[ranges["phase"] == "backward"]
        .groupby(["rank", "pid", "step"])
        .size()
        .rename("micro_steps")
    )
    out = out.merge(n_bwd.reset_index().assign(phase="step"), on=keys, how="left")
    facts = [c for c in schema.WINDOW_FACT_COLUMNS if c.startswith("extra_")]
    have = [c for c in facts if c in steps.columns]
    if have:
        out = out.merge(steps[["rank", "pid", "step", *have]].assign(phase="step"), on=keys, how="left")
    for c in ["micro_steps", *facts]:
        out[c] = out[c].astype(float) if c in out else np.nan
    order = {name: i for i, name in enumerate(("step", *schema.PHASES))}
    out["_o"] = out["phase"].map(order).fillna(9)
    out = out.sort_values(["rank", "step", "_o", "start_ns"], kind="stable")
    # pid is kept (after the contract's columns) for later projections; analyze() drops it for the user.
    return schema.select(out, schema.PHASE_COLUMNS + ["pid"] + schema.WINDOW_FACT_COLUMNS)


def _union_lengths(ranges: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """keys + phase_ns: per group, the length of the union of its rows' [start_ns, end_ns] windows."""
    r = ranges[[*keys, "start_ns", "end_ns"]].sort_values([*keys, "start_ns"], kind="stable")
    s, e = r["start_ns"].to_numpy(np.int64), r["end_ns"].to_numpy(np.int64)
    g = r.groupby(keys, sort=False, dropna=False).ngroup().to_numpy()  # first-appearance order, as below
    reach = pd.Series(e).groupby(g).cummax().to_numpy()  # latest end so far in the group
    prev = np.r_[np.iinfo(np.int64).min, reach[:-1]]
    prev = np.where(np.r_[True, g[1:] != g[:-1]], np.iinfo(np.int64).min, prev)
    add = np.maximum(e - np.maximum(s, prev), 0)
    total = pd.Series(add).groupby(g).sum()
    head = r.drop_duplicates(keys)[keys].reset_index(drop=True)
    return head.assign(phase_ns=total.to_numpy(dtype=float))
