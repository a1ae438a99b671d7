"""Shared by the gloo tests that run every case in one spawn (two ranks unless asked): each rank saves one file
per case, ``<case>_rank<r>.pt``, and the fixture loads them all (tests/harness/ is on sys.path; no __init__.py)."""

from __future__ import annotations

from pathlib import Path

import torch

from ddp_profile.harness.launch import spawn_local

RANKS = (0, 1)


def result_path(outdir, case_id: str, rank: int) -> str:
    """Where a rank saves its result of one case."""
    return f"{outdir}/{case_id}_rank{rank}.pt"


def spawn_results(outdir: Path, worker, case_ids: list[str], nproc: int = len(RANKS)) -> dict:
    """Run ``worker(info, str(outdir))`` on ``nproc`` gloo ranks, then {(case id, rank): what the rank saved}."""
    spawn_local(nproc, worker, str(outdir))
    return {(c, r): torch.load(result_path(outdir, c, r)) for c in case_ids for r in range(nproc)}
