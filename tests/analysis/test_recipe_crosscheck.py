"""Cross-check of per-kernel overlap against NVIDIA's own ``nsys recipe nccl_gpu_overlap_trace``.

On the GPU machine, ``scripts/recipe_crosscheck.sh`` ran the recipe on the ``.nsys-rep`` of three committed
runs and saved its per-kernel table (``recipe/rank_trace.csv``: Start, End, PID, DeviceID, Communication
Overlap, Compute Overlap, Rank — percentages rounded to 0.1). Here the same kernels are found in our own
scrubbed export of the same run, by (pid, start, end), and our ``overlapped_by_other_class`` is compared:

    compute kernel:  ours = 100 * |k ∩ ∪NCCL| / |k|    vs recipe "Communication Overlap"
    NCCL kernel:     ours = 100 * |k ∩ ∪compute| / |k| vs recipe "Compute Overlap"

The recipe rounds to one decimal, so agreement means |ours − recipe| ≤ 0.05 (+ float slack).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ddp_profile.analysis.kernel_arrays import KernelArrays
from ddp_profile.analysis.overlap import overlapped_by_other_class
from ddp_profile.nsys.loader import load_trace

TRACES = Path(__file__).resolve().parents[2] / "traces"
RUNS = sorted(p.parent.parent for p in TRACES.glob("*/recipe/rank_trace.csv*"))


def compare_with_recipe(run_dir: Path) -> pd.DataFrame:
    """One row per recipe kernel with our percentage beside the recipe's (both for the other class)."""
    trace = load_trace(run_dir)
    k = trace.kernels.reset_index(drop=True)
    karr = KernelArrays(k)
    covered = overlapped_by_other_class(karr)
    dur = (karr.end - karr.start).astype(float)
    ours = pd.DataFrame(
        {
            "pid": karr.pid,
            "start": karr.start,
            "end": karr.end,
            "nccl": karr.is_nccl,
            "compute": karr.is_compute,
            "ours_pct": np.divide(100.0 * covered, dur, out=np.zeros_like(dur), where=dur > 0),
        }
    )
    recipe = pd.read_csv(next((run_dir / "recipe").glob("rank_trace.csv*")))  # .csv.xz as committed
    m = recipe.merge(ours, left_on=["PID", "Start", "End"], right_on=["pid", "start", "end"], how="left")
    m["recipe_pct"] = np.where(m["nccl"], m["Compute Overlap"], m["Communication Overlap"])
    return m


@pytest.mark.skipif(not RUNS, reason="no committed recipe output under traces/*/recipe/")
@pytest.mark.parametrize("run_dir", RUNS, ids=[p.name for p in RUNS])
def test_per_kernel_overlap_matches_nsys_recipe(run_dir):
    m = compare_with_recipe(run_dir)
    # Every kernel the recipe lists is one of ours (compute or NCCL), found by exact timestamps.
    assert m["pid"].notna().all(), f"{(m['pid'].isna()).sum()} recipe kernels not found in our export"
    assert (m["nccl"] | m["compute"]).all()
    assert m["nccl"].any() and m["compute"].any()
    diff = (m["ours_pct"] - m["recipe_pct"]).abs()
    agree = (diff <= 0.05 + 1e-6).mean()
    assert agree == 1.0, (
        f"{run_dir.name}: {agree:.4%} of {len(m)} kernels agree; worst:\n"
        + m.loc[diff.nlargest(5).index, ["PID", "Start", "End", "nccl", "ours_pct", "recipe_pct"]].to_string()
    )
