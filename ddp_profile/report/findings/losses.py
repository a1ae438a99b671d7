"""Where the multi-GPU step loses its time against one GPU (issue 30 item 2), from the profiled campaign sets.

Per campaign set with a profiled 1-GPU run and a profiled stock torch_ddp run of the same workload, the
critical path of each (``analysis.critical_path``: per step, the parts of the rank that ends it, adding up to
the step span ``span_ns``) as medians over steps, and the difference part by part:

    compute          GPU busy with anything but NCCL: more of it on N GPUs = compute kernels slowed by the
                     NCCL kernels beside them (contention for SMs and memory bandwidth), or extra copies
    exposed transfer NCCL running alone, moving data
    wait             NCCL running alone, waiting for a later peer
    host             GPU idle because the host had not launched the next work yet
    idle             the rest (work issued, not started)

Medians of parts need not add up to the median span; the table says so. Opens no file: the runs are
``data.RunData`` with their analyses.
"""

from __future__ import annotations

import pandas as pd

from ddp_profile.report.findings.campaign import campaign_sets, set_label, stock_reference
from ddp_profile.report.findings.data import RunData
from ddp_profile.report.findings.text import Section, ms

PARTS = [("span_ns", "step span"), ("compute_ns", "compute"), ("exposed_transfer_ns", "exposed transfer"),
         ("wait_ns", "wait"), ("host_ns", "host"), ("idle_ns", "idle")]


def critical_medians(run) -> dict[str, float] | None:
    """{part: median over steps} of the run's critical path, None without one."""
    cp = getattr(run.analysis, "critical_path", None) if run.analysis is not None else None
    if not isinstance(cp, pd.DataFrame) or cp.empty:
        return None
    return {col: float(cp[col].median()) for col, _ in PARTS}


def pairs(runs) -> list[tuple[str, RunData, RunData]]:
    """(set label, 1-GPU run, stock run) per campaign set that profiled both with the same workload."""
    out = []
    for name, rs in sorted(campaign_sets(runs).items()):
        ref = stock_reference(rs)
        ones = [r for r in rs if r.world_size == 1 and ref is not None and r.model == ref.model
                and r.dtype == ref.dtype and r.config.get("batch") == ref.config.get("batch")]
        if ref is not None and ones:
            out.append((set_label(name, True), ones[0], ref))
    return out


def q13_where_lost(runs) -> Section | None:
    """The section, None when no campaign set has both profiled runs."""
    found: list[tuple[str, RunData, RunData, dict[str, float], dict[str, float]]] = []
    for label, one, ref in pairs(runs):
        a, b = critical_medians(one), critical_medians(ref)
        if a is not None and b is not None:
            found.append((label, one, ref, a, b))
    if not found:
        return None
    s = Section("losses", "Where the multi-GPU step loses its time against one GPU")
    s.p("Critical path of the profiled 1-GPU run and of the profiled stock torch_ddp run of each campaign set "
        "(per step, the parts of the rank whose step ends last, adding up to its step span; medians over the "
        "profiled steps, which need not add up to the median span). More compute on N GPUs is compute kernels "
        "slowed by the NCCL kernels running beside them (or extra copy kernels); host is the GPU idle because "
        "the host had not launched the next work yet.")
    for label, one, ref, a, b in found:
        rows = [{"part": name, "1 GPU": ms(a[col]), f"{ref.world_size} GPUs": ms(b[col]),
                 "difference": ("+" if b[col] >= a[col] else "−") + ms(abs(b[col] - a[col]))} for col, name in PARTS]
        s.table(pd.DataFrame(rows), f"{label}: {ref.model} {ref.dtype}, critical path of {one.name} and {ref.name}")
        diffs = {name: b[col] - a[col] for col, name in PARTS[1:]}
        biggest = max(diffs, key=lambda k: diffs[k])
        clause = (f"{label} ({ref.dtype}): the {ref.world_size}-GPU step span is {ms(b['span_ns'])} against "
                  f"{ms(a['span_ns'])} on one GPU; by part, " + ", ".join(
                      f"{name} {'+' if d >= 0 else '−'}{ms(abs(d))}" for name, d in diffs.items())
                  + f"; the largest growth is {biggest}")
        drop = min(diffs, key=lambda k: diffs[k])
        if b["span_ns"] < a["span_ns"] and diffs[drop] < 0:  # a shorter span needs its reason beside the growth
            clause += (f"; the span is {ms(a['span_ns'] - b['span_ns'])} shorter on {ref.world_size} GPUs because "
                       f"{drop} drops by {ms(-diffs[drop])}, more than {biggest} grows")
        s.p(clause + ".")
        s.add_summary("Where the multi-GPU step loses its time (critical-path medians, profiled campaign runs)", clause)
    return s
