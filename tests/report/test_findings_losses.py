"""Findings section "where the multi-GPU step loses its time": the critical-path medians of the profiled 1-GPU
and stock runs of a campaign set, part by part. Runs are RunData built in code; expected values follow from the
numbers written here."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from ddp_profile.report.findings.data import CAMPAIGN, RunData
from ddp_profile.report.findings.losses import critical_medians, q13_where_lost

MS = 1_000_000


def _run(name, strategy, world, parts_ms, *, batch=16, folder="B"):
    """A campaign run whose critical path has three steps with the given parts (ms) on each; span = their sum."""
    cp = pd.DataFrame([{**{k: v * MS for k, v in parts_ms.items()}, "step": s, "critical_rank": 0} for s in range(3)])
    cp["span_ns"] = cp[["compute_ns", "exposed_transfer_ns", "wait_ns", "host_ns", "idle_ns"]].sum(axis=1)
    meta = {"strategy": strategy, "world_size": world, "model": "xl", "dtype": "bf16",
            "config": {"strategy": strategy, "bucket_mb": 25.0, "batch": batch}}
    return RunData(set=CAMPAIGN, name=name, folder=Path(f"traces/campaign/{folder}") / name, meta=meta, trace=None,
                   analysis=SimpleNamespace(critical_path=cp), row={})


ONE = {"compute_ns": 168, "exposed_transfer_ns": 0, "wait_ns": 0, "host_ns": 97, "idle_ns": 11}
TWO = {"compute_ns": 198, "exposed_transfer_ns": 3, "wait_ns": 3, "host_ns": 25, "idle_ns": 11}


def test_parts_and_their_differences_are_stated_for_the_set():
    runs = [_run("none_xl_bf16_1x", "none", 1, ONE), _run("torch_ddp-25mb_xl_bf16_2x", "torch_ddp", 2, TWO)]
    assert critical_medians(runs[1])["span_ns"] == 240 * MS
    s = q13_where_lost(runs)
    text = " ".join(s.paragraphs())
    assert ("Campaign set B (bf16): the 2-GPU step span is 240.000 ms against 276.000 ms on one GPU; by part, "
            "compute +30.000 ms, exposed transfer +3.000 ms, wait +3.000 ms, host −72.000 ms, idle +0.000 ms; "
            "the largest growth is compute; the span is 36.000 ms shorter on 2 GPUs because host drops by "
            "72.000 ms, more than compute grows.") in text
    # a longer span on 2 GPUs gets no such clause
    longer = [_run("none_xl_bf16_1x", "none", 1, dict(ONE, host_ns=20)), _run("torch_ddp-25mb_xl_bf16_2x", "torch_ddp", 2, TWO)]
    assert "shorter on" not in " ".join(q13_where_lost(longer).paragraphs())


def test_no_section_without_a_matching_one_gpu_run():
    # the 1-GPU run has another batch: not the same workload, so no pair and no section
    runs = [_run("none_xl_bf16_1x", "none", 1, ONE, batch=8), _run("torch_ddp-25mb_xl_bf16_2x", "torch_ddp", 2, TWO)]
    assert q13_where_lost(runs) is None
