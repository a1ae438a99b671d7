"""analysis.channel_model: the step with another NCCL channel count, predicted from one trace. Known answers on
a two-rank step whose every number is written here; the committed campaign sets are checked against their
measured runs in tests/report/test_findings_confirm.py."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from ddp_profile.analysis.channel_model import bus_factor, channel_prediction, channel_rate


def _case(overlap_ns: float = 50.0):
    """Two ranks, one step, 24 channels; two 1 kB all-reduces per rank (seq 0 and 1), 40 ns transfer each
    after 10 ns wait. Gradients ready: rank 0 at 100 and 150, rank 1 at 120 and 140, so the operations are
    ready at 120 and 150 (the later rank). Backward ends at 300 on both; the optimizer starts at 320 on rank 0,
    310 on rank 1; steps take 1000 ns. Stock replay: 120 + 40 = 160, max(150, 160) + 40 = 200."""
    coll = pd.DataFrame(
        {
            "rank": [0, 0, 1, 1],
            "pid": [1, 1, 2, 2],
            "device": 0,
            "stream": 7,
            "seq": [0, 1, 0, 1],
            "step": 0,
            "collective": "AllReduce",
            "start_ns": [100.0, 160.0, 120.0, 160.0],
            "duration_ns": 50.0,
            "transfer_ns": 40.0,
            "wait_ns": 10.0,
            "bytes": 1e3,
        }
    )
    steps = pd.DataFrame(
        {
            "rank": [0, 1],
            "step": [0, 0],
            "backward_end_ns": [300.0, 300.0],
            "step_ns": [1000.0, 1000.0],
            "overlap_ns": [overlap_ns, overlap_ns],
        }
    )
    phases = pd.DataFrame(
        {"rank": [0, 1], "step": [0, 0], "phase": ["optimizer", "optimizer"], "start_ns": [320.0, 310.0]}
    )
    analysis = SimpleNamespace(steps=steps, collectives=coll, contention=None, phases=phases)
    return analysis, np.array([100.0, 150.0, 120.0, 140.0])


RUN = {"world_size": 2, "config": {"nccl_channels": 0}}


def test_bus_factor_is_nccls():
    assert bus_factor("AllReduce", 2) == 1.0 and bus_factor("AllReduce", 4) == 1.5
    assert bus_factor("ReduceScatter", 4) == 0.75 and bus_factor("AllReduce", 1) == 1.0


def test_worst_case_replays_the_slower_collectives_through_the_queue():
    analysis, ready = _case()
    # 24 -> 4 channels, worst case: 40 x 6 = 240 ns each: 120 + 240 = 360, max(150, 360) + 240 = 600. The step
    # grows by what ends after the optimizer's start: rank 0 600 - 320 = 280, rank 1 600 - 310 = 290; median 285
    got = channel_prediction(analysis, None, RUN, 4, nccl_channels=24, ready_ns=ready)
    assert got["extra_ns"] == 285.0 and got["predicted_step_ns"] == 1285.0 and got["channels_now"] == 24
    assert got["recovered_ns"] == 0.0 and got["low_ns"] == 1285.0  # no SM count, no contention table


def test_per_channel_rate_and_the_queue():
    analysis, ready = _case()
    # 10 GB/s per channel: 1 kB over 4 channels = 25 ns, below the stock's 40 ns: the same replay, no change
    same = channel_prediction(
        analysis, None, RUN, 4, nccl_channels=24, ready_ns=ready, channel_bytes_per_s=10e9
    )
    assert same["extra_ns"] == 0.0 and same["predicted_step_ns"] == 1000.0
    # 1 GB/s: 250 ns each: 120 + 250 = 370, max(150, 370) + 250 = 620 -> 300 and 310 after the optimizer's start
    slow = channel_prediction(
        analysis, None, RUN, 4, nccl_channels=24, ready_ns=ready, channel_bytes_per_s=1e9
    )
    assert slow["extra_ns"] == 305.0
    assert np.isnan(
        channel_prediction(analysis, None, RUN, 4, ready_ns=ready)["predicted_step_ns"]
    )  # c unknown


def test_fewer_channels_give_sms_back_to_compute_when_the_collectives_still_fit():
    analysis, ready = _case(overlap_ns=50.0)
    # 100 SMs; the collectives keep their 40 ns (10 GB/s per channel), so they span 80 ns of the 180 ns window as
    # before and overlap the same 50 ns of compute: recovered = (50 x 24 - 50 x 4) / 100 = 10 ns. Backward ends
    # 10 ns earlier and nothing waits on the collectives (they end at 200): rank 0 max(320 - 10, 200) - 320 = -10
    got = channel_prediction(
        analysis, None, RUN, 4, nccl_channels=24, ready_ns=ready, channel_bytes_per_s=10e9, sm_count=100
    )
    assert got["recovered_ns"] == pytest.approx(10.0) and got["predicted_step_ns"] == pytest.approx(990.0)
    # worst case: they span 480 ns, overlapping compute for the whole 180 ns window: 50 x 180 / 80 = 112.5 ns at
    # 4 channels -> recovered (1200 - 450) / 100 = 7.5 ns, but the step waits for the collectives (600) anyway
    worst = channel_prediction(analysis, None, RUN, 4, nccl_channels=24, ready_ns=ready, sm_count=100)
    assert worst["recovered_ns"] == pytest.approx(7.5) and worst["extra_ns"] == 285.0


def test_channel_rate_is_bus_bytes_per_channel():
    analysis, _ = _case()
    # per rank 2 kB in 80 ns of transfer over 2 channels = 12.5 GB/s; bus factor 1 on 2 ranks, 1.5 on 4
    assert channel_rate(analysis, {"world_size": 2, "config": {"nccl_channels": 2}}) == pytest.approx(12.5e9)
    assert channel_rate(analysis, {"world_size": 4, "config": {"nccl_channels": 2}}) == pytest.approx(18.75e9)
    assert np.isnan(channel_rate(analysis, {"config": {}}))


def test_a_step_with_an_unknown_ready_time_is_left_out():
    analysis, ready = _case()
    ready[3] = np.nan  # rank 1's second gradient: that operation's ready time, and so its step, is unknown
    got = channel_prediction(analysis, None, RUN, 4, nccl_channels=24, ready_ns=ready)
    assert np.isnan(got["predicted_step_ns"]) and got["channels_now"] == 24
