"""Launch-bound diagnosis: the CUDA API reader (nsys.api), the per-step analysis (analysis.launches) and
`ddp-profile launches`, on synthetic exports with known answers and on committed real traces."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ddp_profile import intervals as iv
from ddp_profile import nvtx_names as nn
from ddp_profile import schema
from ddp_profile.analysis.launches import IDLE_THRESHOLD_PCT
from ddp_profile.cli import main
from ddp_profile.errors import MissingDataError
from ddp_profile.nsys.api import CALL_KINDS, api_name, call_kinds, load_api_calls, load_calls_and_waits
from ddp_profile.nsys.loader import load_trace

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "traces"
SAMPLE = Path(__file__).resolve().parents[1] / "data" / "ddp_mlp_2xh200.sqlite"
PID = 4242
H = 100_000  # every synthetic step's host range is [t0, t0 + H]
T0 = (1_000_000, 2_000_000)  # step 0 (launch-bound by construction), step 1 (GPU-bound by construction)


def _launch_bound_run(build_export, layout="2025.3", name="lb.sqlite", rank=0, world=1, **kw):
    """One process, two steps whose every number is set by construction (see the expectations below).

    Step 0 (t0 = 1 ms): 4 kernels of 2 us, launched 10 us apart (cudaLaunchKernel, 500 ns each), each
    starting 1 us after its launch; one 1 us memset; a cudaDeviceSynchronize [50, 60) us on the main thread
    and a cudaStreamSynchronize [55, 65) us on a second thread (union: 15 us).
    Step 1 (t0 = 2 ms): 4 kernels of 24 us back to back from 1 us (launched at 0, 0.6, 1.2, 1.8 us), one
    cudaDeviceSynchronize [2.5, 98) us. A cudaMalloc before step 0 lies in no step."""
    t0, t1 = T0
    k_launch = [t0 + 10_000 * i for i in range(4)] + [t1 + 600 * i for i in range(4)]
    k_start = [t + 1_000 for t in k_launch[:4]] + [t1 + 1_000 + 24_000 * i for i in range(4)]
    k_end = [s + 2_000 for s in k_start[:4]] + [s + 24_000 for s in k_start[4:]]
    kernels = {
        "pid": [PID] * 8,
        "device": [0] * 8,
        "stream": [7] * 8,
        "start": k_start,
        "end": k_end,
        "name": ["vectorized_elementwise_kernel"] * 4 + ["nvjet_gemm"] * 4,
        "correlation_id": list(range(1, 9)),
        "launch_start": k_launch,
    }
    memset = {
        "pid": [PID],
        "device": [0],
        "stream": [7],
        "start": [t0 + 80_000],
        "end": [t0 + 81_000],
        "bytes": [64],
        "correlation_id": [9],
        "launch_start": [t0 + 79_000],
    }
    api = {
        "pid": [PID] * 4,
        "tid": [0, PID + 1, 0, 0],
        "start": [t0 + 50_000, t0 + 55_000, t1 + 2_500, t0 - 200_000],
        "end": [t0 + 60_000, t0 + 65_000, t1 + 98_000, t0 - 150_000],
        "name": [
            "cudaDeviceSynchronize_v3020",
            "cudaStreamSynchronize_v3020",
            "cudaDeviceSynchronize_v3020",
            "cudaMalloc_v3020",
        ],
    }
    nvtx = {
        "pid": [PID] * 3,
        "tid": [PID] * 3,
        "start": [t0 - 500_000, t0, t1],
        "end": [-1, t0 + H, t1 + H],
        "text": [f"{nn.RANK_MARKER} {rank}/{world}", f"{nn.STEP} 0", f"{nn.STEP} 1"],
        "event_type": [34, 59, 59],
        "domain": [nn.DOMAIN] * 3,
        "payload": [rank, 0, 1],
    }
    return build_export(
        name,
        layout=layout,
        processes=[{"pid": PID, "device": 0}],
        kernels=kernels,
        memset=memset,
        nvtx=nvtx,
        api=api,
        **kw,
    )


# Expected rows, derived from the construction above.
STEP0 = {
    "step_ns": H,
    "gpu_busy_ns": 4 * 2_000 + 1_000,
    "gpu_idle_ns": H - 9_000,
    "idle_pct": 100 * 91_000 / H,
    "kernels": 4,
    "launches": 4,
    "api_ns": 4 * 500 + 500 + 10_000 + 10_000,
    "sync_ns": 15_000,
    "host_us_per_launch": (H - 15_000) / 4 / 1e3,
    "gpu_us_per_kernel": 2.0,
    "launch_bound": True,
}
STEP1 = {
    "step_ns": H,
    "gpu_busy_ns": 4 * 24_000,
    "gpu_idle_ns": H - 96_000,
    "idle_pct": 4.0,
    "kernels": 4,
    "launches": 4,
    "api_ns": 4 * 500 + 95_500,
    "sync_ns": 95_500,
    "host_us_per_launch": (H - 95_500) / 4 / 1e3,
    "gpu_us_per_kernel": 24.0,
    "launch_bound": False,
}


@pytest.mark.parametrize("layout", ["2023.4", "2024.x", "2025.3"])
def test_known_answer_per_step(launch_section, build_export, layout):
    trace = load_trace(_launch_bound_run(build_export, layout))
    res = launch_section(trace, load_api_calls(trace))
    assert list(res.steps.columns) == schema.LAUNCH_STEP_COLUMNS
    assert res.steps["step"].tolist() == [0, 1] and res.steps["start_ns"].tolist() == list(T0)
    for row, want in zip(res.steps.to_dict("records"), (STEP0, STEP1), strict=True):
        for col, value in want.items():
            assert row[col] == pytest.approx(value), (row["step"], col)
    assert IDLE_THRESHOLD_PCT == 25.0  # the verdicts above sit on either side of it: 91% and 4%


def test_known_answer_summaries(launch_section, build_export):
    trace = load_trace(_launch_bound_run(build_export))
    res = launch_section(trace, load_api_calls(trace))
    fn = res.api_functions.set_index("name")
    assert list(res.api_functions.columns) == schema.API_FUNCTION_COLUMNS
    assert "cudaMalloc" not in fn.index  # called before any step
    assert fn.loc["cudaLaunchKernel", "calls"] == 8 and fn.loc["cudaLaunchKernel", "calls_per_step"] == 4
    assert fn.loc["cudaDeviceSynchronize", "total_ns"] == 10_000 + 95_500
    assert fn.loc["cudaDeviceSynchronize", "ns_per_step"] == (10_000 + 95_500) / 2
    assert fn.loc["cudaStreamSynchronize", "mean_ns"] == 10_000
    assert fn.loc["cudaMemsetAsync", "calls"] == 1
    assert res.api_functions["name"].iloc[0] == "cudaDeviceSynchronize"  # largest total first
    groups = res.kernel_groups.set_index("group")
    assert groups.loc["GEMM", "kernels_per_step"] == 2 and groups.loc["GEMM", "mean_ns"] == 24_000
    assert groups.loc["elementwise (incl. copies, casts)", "gpu_ns_per_step"] == 4 * 2_000 / 2
    assert set(groups.index) == {"GEMM", "elementwise (incl. copies, casts)"}  # the memset is not a kernel
    assert res.verdicts() == [
        "rank 0: not launch-bound (1 of 2 steps launch-bound; median GPU idle 47.5 % > 25 %, host 11.2 µs per launch "
        "<= GPU 13.0 µs per kernel)"
    ]


def test_steps_selection_and_missing_steps(launch_section, build_export):
    path = _launch_bound_run(build_export)
    trace = load_trace(path)
    res = launch_section(trace, load_api_calls(trace), steps="1:")
    assert res.steps["step"].tolist() == [1] and not res.steps["launch_bound"].any()
    no_nvtx = build_export(
        "plain.sqlite",
        processes=[{"pid": PID, "device": 0}],
        kernels={
            "pid": [PID],
            "device": [0],
            "stream": [7],
            "start": [10],
            "end": [20],
            "name": ["k"],
            "correlation_id": [1],
            "launch_start": [5],
        },
    )
    bare = load_trace(no_nvtx)
    empty = launch_section(bare, load_api_calls(bare))
    assert empty.steps.empty and list(empty.steps.columns) == schema.LAUNCH_STEP_COLUMNS and empty.notes


def test_api_reader_names_ranks_and_clock(build_export):
    """Two exports of one run (one rank each), the second started 7 us later: its calls move by 7 us."""
    a = _launch_bound_run(build_export, name="r0.sqlite", world=2)
    b = _launch_bound_run(
        build_export, name="r1.sqlite", rank=1, world=2, session_start_utc_ns=1_700_000_000_000_007_000
    )
    api = load_api_calls([a, b])
    assert list(api.columns) == schema.API_CALL_COLUMNS
    assert sorted(api["rank"].unique().tolist()) == [0, 1]  # from the rank markers
    r0, r1 = (api[api["rank"] == r].reset_index(drop=True) for r in (0, 1))
    assert (r1["start_ns"] - r0["start_ns"]).unique().tolist() == [7_000]
    assert r0["name"].iloc[0] == "cudaMalloc" and set(r0["tid"]) == {PID, PID + 1}
    assert len(r0) == 8 + 1 + 4  # kernel launches, the memset call, the extra calls


def test_api_reader_needs_the_runtime_table(build_export):
    path = build_export(
        "nolaunch.sqlite",
        processes=[{"pid": PID, "device": 0}],
        kernels={"pid": [PID], "device": [0], "stream": [7], "start": [10], "end": [20], "name": ["k"]},
    )
    with pytest.raises(MissingDataError, match="CUPTI_ACTIVITY_KIND_RUNTIME"):
        load_api_calls(path)
    why, waits = load_calls_and_waits(load_trace(path, host_waits=False))  # the report's one read: the reason
    assert isinstance(why, str) and "CUPTI_ACTIVITY_KIND_RUNTIME" in why and waits.empty


def test_names_and_kinds():
    """The nsys layer's classes of call names: 6 launches, 2 calls that launch nothing, 3 synchronize calls,
    2 copies, the rest "other"."""
    assert (
        api_name("cudaLaunchKernel_v7000") == "cudaLaunchKernel"
        and api_name("cuLaunchKernelEx") == "cuLaunchKernelEx"
    )
    names = [
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cudaLaunchCooperativeKernel",
        "cudaGraphLaunch",
        "cuKernelGetName",
        "cuLaunchHostFunc",
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cuCtxSynchronize",
        "cudaEventQuery",
        "cudaMemcpyAsync",
        "cuMemcpyDtoH",
        "cudaMemsetAsync",
    ]
    want = ["launch"] * 6 + ["other"] * 2 + ["sync"] * 3 + ["other", "copy", "copy", "other"]
    got = call_kinds(names)
    assert got.tolist() == want and list(got.categories) == list(CALL_KINDS)
    assert call_kinds([]).tolist() == []


# ---- committed real traces -------------------------------------------------------------------------------


def _real(run: str) -> Path:
    path = TRACES / run
    if not path.exists():
        pytest.skip(f"{path} not present")
    return path


@pytest.mark.parametrize(
    "run, bound",
    [
        ("none_xl_bf16_1xh200", False),  # XL bf16 at batch 16: GPU-bound (idle ~10%)
        ("none_xl_fp32_1xh200", False),  # XL fp32: GPU-bound (idle ~4%)
        (
            "none_small_fp32_1xh200",
            True,
        ),  # model `small`: the GPU idles most of the step between short kernels
    ],
)
def test_real_single_gpu_runs(launch_section, run, bound):
    trace = load_trace(_real(run))
    api = load_api_calls(trace)
    res = launch_section(trace, api)
    s = res.steps
    assert len(s) >= 4 and s["launch_bound"].all() == bound and s["launch_bound"].any() == bound
    k = trace.kernels
    kstart, kend = k["start_ns"].to_numpy(np.int64), k["end_ns"].to_numpy(np.int64)
    launch = k["launch_ns"].to_numpy(np.int64, na_value=-1)
    is_kernel = k["kind"].isin(["compute", "nccl"]).to_numpy()
    for row in s.itertuples():
        lo, hi = row.start_ns, row.end_ns
        # GPU busy recomputed another way: all activity clipped to the host range, then its union's length.
        assert row.gpu_busy_ns == iv.total_length(*iv.clip(kstart, kend, lo, hi))
        # Eager PyTorch: one launch call per kernel, and the API rows inside the range sum to api_ns.
        inside = (launch >= lo) & (launch <= hi) & is_kernel
        assert row.kernels == inside.sum() == row.launches
        assert row.gpu_us_per_kernel == pytest.approx((kend - kstart)[inside].mean() / 1e3)
        calls = api[(api["start_ns"] >= lo) & (api["start_ns"] <= hi)]
        assert row.api_ns == (calls["end_ns"] - calls["start_ns"]).sum()
        sync = calls[calls["name"] == "cudaDeviceSynchronize"]
        assert len(sync) == 1 and row.sync_ns == (sync["end_ns"].clip(upper=hi) - sync["start_ns"]).sum()
    if bound:
        assert (s["idle_pct"] > IDLE_THRESHOLD_PCT).all() and (
            s["host_us_per_launch"] > s["gpu_us_per_kernel"]
        ).all()
    else:
        assert (s["idle_pct"] < IDLE_THRESHOLD_PCT).all()


def test_real_per_rank_files_line_up():
    """One export per rank, the second with a clock offset: every kernel's launch time is the start of an
    API call of its own rank (the API reader uses load_trace's ranks and offsets)."""
    trace = load_trace(_real("per-rank/bucketed-25mb_small_fp32_2xh200"))
    offsets = sorted(trace.meta["clock"]["offsets_ns"].values())
    assert offsets[0] == 0 and offsets[1] > 0
    api = load_api_calls(trace)
    for rank in (0, 1):
        launch = trace.kernels.loc[trace.kernels["rank"] == rank, "launch_ns"].dropna().to_numpy(np.int64)
        assert len(launch) and np.isin(launch, api.loc[api["rank"] == rank, "start_ns"].to_numpy()).all()


def test_real_sample_two_ranks_one_file(launch_section):
    if not SAMPLE.exists():
        pytest.skip("sample export not present")
    trace = load_trace(SAMPLE)
    api = load_api_calls(trace)
    assert api["rank"].isna().sum() == 1  # the launcher process ran no GPU work: no rank
    assert pd.isna(api["rank"].iloc[-1])  # unranked rows sort last
    res = launch_section(trace, api)
    assert sorted(res.steps["rank"].unique().tolist()) == [0, 1] and len(res.steps) == 12
    assert (res.steps["launches"] == res.steps["kernels"]).all()


# ---- CLI ---------------------------------------------------------------------------------------------------


def test_cli_table_csv_and_json(build_export, tmp_path, capsys):
    path = _launch_bound_run(build_export)
    assert main(["launches", str(path)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("rank 0: not launch-bound (1 of 2 steps") and "== steps (2 rows) ==" in text
    assert "cudaDeviceSynchronize" in text and "GEMM" in text
    out = tmp_path / "steps.csv"
    assert main(["launches", str(path), "-o", str(out)]) == 0 and capsys.readouterr().out == ""
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert list(rows[0]) == schema.LAUNCH_STEP_COLUMNS and [r["launch_bound"] for r in rows] == [
        "True",
        "False",
    ]
    out = tmp_path / "all.json"
    assert main(["launches", str(path), "--steps", "0", "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    assert {"version", "summary", "verdicts", "notes", "steps", "api_functions", "kernel_groups"} == set(data)
    assert data["steps"][0]["sync_ns"] == 15_000 and data["summary"]["launch_bound_steps"] == 1
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".sqlite")) == [
        "all.json",
        "steps.csv",
    ]


@pytest.mark.parametrize(
    "argv, code, text",
    [
        (["does/not/exist.sqlite"], 3, "no such file"),
        (["{run}", "-o", "out.txt"], 2, ".csv"),
        (["{plain}"], 4, "no steps to diagnose"),
        (["{nolaunch}"], 4, "CUPTI_ACTIVITY_KIND_RUNTIME"),
    ],
)
def test_cli_errors_are_one_line(build_export, argv, code, text, capsys):
    proc = [{"pid": PID, "device": 0}]
    k = {"pid": [PID], "device": [0], "stream": [7], "start": [10], "end": [20], "name": ["k"]}
    paths = {
        "run": _launch_bound_run(build_export),
        "plain": build_export(
            "plain.sqlite", processes=proc, kernels={**k, "correlation_id": [1], "launch_start": [5]}
        ),
        "nolaunch": build_export("nolaunch.sqlite", processes=proc, kernels=k),
    }
    assert main(["launches", *(a.format(**{n: str(p) for n, p in paths.items()}) for a in argv)]) == code
    err = capsys.readouterr().err
    assert text in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
