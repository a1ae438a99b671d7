"""Steps and phases inferred from the kernel sequence (ddp_profile.analysis.infer), when NVTX has none.

Known answers on a training loop built in code (derivations beside each assertion), then the committed
2xH200 traces with their NVTX rows removed, compared with the NVTX steps and phases of the same traces.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ddp_profile import nvtx_names as nn
from ddp_profile import schema
from ddp_profile.analysis import analyze
from ddp_profile.analysis.infer import find_period, infer_steps
from ddp_profile.analysis.kernel_arrays import KernelArrays
from ddp_profile.analysis.windows import find_steps
from ddp_profile.trace import Trace

US = 1000
PID, AUTOGRAD = 100, 101
# One step of a DDP loop: forward on the main thread (two identical "layers": a sub-period the period
# finder must not take), backward on the autograd thread with two all-reduces, optimizer on the main thread.
FORWARD = ["emb", "f1", "f2", "f1", "f2", "loss"]
BACKWARD = ["b2", "b1", "ar", "b2", "b1", "ar"]
OPTIMIZER = ["adam", "adam"]
STEP = FORWARD + BACKWARD + OPTIMIZER  # P = 14 kernels


LOG = ["log_norm", "log_sum", "log_copy"]  # what a logging step adds after the optimizer (main thread)
NO_SYNC_BACKWARD = ["b2", "b1", "b2", "b1"]  # a micro-step's backward under no_sync: no all-reduce


def loop_trace(
    n_steps=6,
    *,
    spacing=10 * US,
    boundary=100 * US,
    dur=8 * US,
    stray_step=None,
    back_to_back=False,
    warmup=("init_a", "init_b"),
    log_every=None,
    micro_steps=1,
    nan_check=False,
    optimizer=tuple(OPTIMIZER),
    reduce_every_micro=False,
    micro_work=(),
    post_reduce=(),
    autotune_first=False,
    first_update_extra=0,
) -> Trace:
    """Kernels of one rank: ``warmup`` kernels, then ``n_steps`` steps of STEP. Host launches every
    ``spacing`` ns, ``boundary`` ns between steps; each kernel runs ``dur`` ns, starting 5 µs after its launch
    (or, ``back_to_back``, as soon as the previous one ends: a GPU-bound loop with no idle gap anywhere).
    ``stray_step``: that step's forward has one extra kernel (the period's anchors must absorb it);
    ``log_every`` = N: every N-th step (N-1, 2N-1...) launches LOG after its optimizer; ``micro_steps`` = m:
    gradient accumulation, m - 1 micro-steps of FORWARD + NO_SYNC_BACKWARD before FORWARD + BACKWARD;
    ``nan_check``: after backward the main thread launches "isnan", waits for all queued GPU work (a
    ``.item()``) and launches "isinf" 20 µs after it ended (the Hugging Face Trainer's loss check).
    ``optimizer``: the update's kernel names; ``reduce_every_micro``: every micro-step's backward all-reduces
    (BACKWARD, as DeepSpeed does), not only the last; ``micro_work``: main-thread kernels after every
    micro-step's backward (DeepSpeed's per-micro-step epilogue), before the update where there is one;
    ``post_reduce``: compute kernels the autograd thread launches after the last all-reduce (FSDP's copies of
    the reduced gradient into its shard, its division), each starting 5 µs after its launch;
    ``autotune_first``: step 0's forward opens with two 50 ms host pauses (compilation) around one
    "rng_init" kernel, then launches every kernel twice more just before it (torch.compile's first
    iteration benchmarking its candidates under the kernel's own name); ``first_update_extra`` = k:
    step 0's optimizer launches k "zeros" kernels before its update (an optimizer creating its state), and
    step 1's forward lacks its last kernel ("loss"), so the stretch between them matches neither end."""
    names, tids, launch, start = [], [], [], []
    t = free = 0
    for w in warmup:
        names.append(w), tids.append(PID), launch.append(t), start.append(t + 5 * US)
        free = t + 5 * US + dur
        t += 50 * spacing
    for s in range(n_steps):
        t += boundary - spacing
        fwd = list(FORWARD)
        if s == stray_step:
            fwd.insert(3, "stray")
        if first_update_extra and s == 1:
            fwd = fwd[:-1]
        if autotune_first and s == 0:
            fwd = ["pause", "rng_init", "pause"] + [nm for k in fwd for nm in (k, k, k)]
        early = BACKWARD if reduce_every_micro else NO_SYNC_BACKWARD
        seq = [(nm, PID) for nm in fwd] + [(nm, AUTOGRAD) for nm in early] + [(nm, PID) for nm in micro_work]
        seq = seq * (micro_steps - 1) + [(nm, PID) for nm in fwd] + [(nm, AUTOGRAD) for nm in BACKWARD]
        seq += [(nm, AUTOGRAD) for nm in post_reduce] + [(nm, PID) for nm in micro_work]
        seq += [("isnan", PID), ("sync", PID), ("isinf", PID)] if nan_check else []
        seq += [("zeros", PID)] * (first_update_extra if s == 0 else 0) + [(nm, PID) for nm in optimizer]
        if log_every and s % log_every == log_every - 1:
            seq += [(nm, PID) for nm in LOG]
        for nm, tid in seq:
            if nm == "sync":
                t = max(t, free) + 20 * US
                continue
            if nm == "pause":  # the host compiling: 50 ms without a launch
                t += 50_000 * US
                continue
            st = max(t + 5 * US, free) if back_to_back else t + 5 * US
            names.append(nm), tids.append(tid), launch.append(t), start.append(st)
            free = st + dur
            t += spacing
    launch, start = np.asarray(launch, dtype=np.int64), np.asarray(start, dtype=np.int64)
    n = len(names)
    kind = ["nccl" if x == "ar" else "compute" for x in names]
    k = pd.DataFrame(
        {
            "rank": 0,
            "pid": PID,
            "device": 0,
            "stream": [8 if x == "nccl" else 7 for x in kind],
            "start_ns": start,
            "end_ns": start + dur,
            "name": names,
            "kind": kind,
            "collective": [("AllReduce" if x == "nccl" else None) for x in kind],
            "algorithm": None,
            "protocol": None,
            "dtype": None,
            "correlation_id": np.arange(n),
            "launch_ns": pd.array(launch, dtype="Int64"),
            "launch_tid": pd.array(tids, dtype="Int32"),
            "bytes": pd.array([pd.NA] * n, dtype="Int64"),
        }
    )
    ranks = pd.DataFrame(
        {
            "rank": [0],
            "pid": [PID],
            "device": [0],
            "gpu_name": ["synthetic"],
            "file": ["x"],
            "host": ["h"],
            "rank_source": ["device-order"],
        }
    )
    return Trace(
        kernels=schema.select(k, schema.KERNEL_COLUMNS),
        nvtx=schema.empty_frame(schema.NVTX_COLUMNS),
        gpus=schema.empty_frame(schema.GPU_COLUMNS),
        ranks=ranks,
        meta={"files": [], "warnings": []},
    )


def test_period_is_the_step_not_the_repeated_layer():
    # The name sequence repeats every 14 kernels; lag 2 (f1 f2 f1 f2) matches inside forward only.
    tr = loop_trace(warmup=())
    karr = KernelArrays(tr.kernels)
    codes = karr.name_code[np.argsort(karr.launch, kind="stable")].astype(np.int64)
    period, match = find_period(codes)
    assert period == len(STEP) == 14
    assert match == 1.0


def test_known_answer_steps_and_phases():
    # 6 steps, 2 warm-up kernels before them (no step). Launch spacing 10 µs, kernel 8 µs from launch + 5 µs:
    # a step's GPU window = first start .. last end = 13 launches·10 µs + 8 µs = 138 µs.
    # forward: 6 kernels -> 5·10 + 8 = 58 µs; backward = first to last backward *compute* kernel (b2 b1 ar
    # b2 b1: 4 launches apart) -> 4·10 + 8 = 48 µs; optimizer 2 -> 10 + 8 = 18 µs.
    res = analyze(loop_trace())
    s = res.steps
    assert s["step"].tolist() == [0, 1, 2, 3, 4, 5]
    assert (s["step_ns"] == 138 * US).all()
    assert (s["forward_ns"] == 58 * US).all() and (s["backward_ns"] == 48 * US).all()
    assert (s["optimizer_ns"] == 18 * US).all()
    assert (
        (s["micro_steps"] == 1).all() and (s["extra_kernels"] == 0).all() and (s["extra_host_ns"] == 0).all()
    )
    # backward launches b2 b1 ar b2 b1 ar (kernels 6..11 of the step): the last compute kernel b1 (10) ends
    # at launch₁₀ + 13 µs, the last all-reduce (11) at launch₁₁ + 13 µs = 10 µs later: comm_tail = 10 µs.
    assert (s["comm_tail_ns"] == 10 * US).all()
    assert any("steps inferred from the GPU trace" in n for n in res.notes)
    assert any("inferred from the launching thread" in n for n in res.notes)
    assert any("1 micro-step(s)" in n for n in res.notes)
    # --steps applies to inferred steps (indices from 0)
    assert analyze(loop_trace(), steps="2:").steps["step"].tolist() == [2, 3, 4, 5]


def test_an_inserted_kernel_shifts_no_boundary():
    # Step 2 has one extra forward kernel: 15 launches -> 14·10 + 8 = 148 µs; its forward 6·10 + 8 = 68 µs.
    # Every other step keeps 138 µs: the boundaries come from anchors, not from counting 14 kernels.
    s = analyze(loop_trace(stray_step=2)).steps
    assert s["step_ns"].tolist() == [138 * US, 138 * US, 148 * US, 138 * US, 138 * US, 138 * US]
    assert s.loc[s["step"] == 2, "forward_ns"].item() == 68 * US


def test_a_logging_cycle_is_no_step_and_its_extra_work_is_reported():
    # After every 4th step (3, 7, 11) the loop launches 3 logging kernels: the name sequence then
    # repeats every 4 steps + 3 kernels, a super-period the old period finder took. Rank 0 also evaluates
    # before step 0 (two forwards' kernels), which must not shift its steps.
    tr = loop_trace(13, log_every=4, warmup=tuple(FORWARD * 2))
    res = analyze(tr)
    s = res.steps.set_index("step")
    assert s.index.tolist() == list(range(13))  # one step per optimizer step, the evaluation no step
    logged = [3, 7, 11]
    plain = [i for i in range(13) if i not in logged]
    # Every step's window is 138 µs (above): the logging kernels after a step's optimizer, before the next
    # forward, are in no step (not folded into the period), and reported as that step's extra work.
    assert (s["step_ns"] == 138 * US).all()
    assert (s["forward_ns"] == 58 * US).all() and (s["optimizer_ns"] == 18 * US).all()
    # Extra work: 3 kernels of 8 µs on the GPU; host period (first launch to the next step's) 230 + 30 µs vs
    # a median of 230 µs: 30 µs on the host.
    assert s.loc[logged, "extra_kernels"].tolist() == [3, 3, 3]
    assert (s.loc[logged, "extra_gpu_ns"] == 24 * US).all() and (
        s.loc[logged, "extra_host_ns"] == 30 * US
    ).all()
    assert (s.loc[plain, ["extra_kernels", "extra_gpu_ns", "extra_host_ns"]] == 0).all().all()
    note = next(n for n in res.notes if "extra work" in n)
    assert "rank 0" in note and "step 3: 3 extra kernels, 0.024 ms on the GPU" in note and "step 7" in note


def test_gradient_accumulation_counts_micro_steps_and_sums_phases():
    # 2 micro-steps per optimizer step, the all-reduces only in the second one's backward (no_sync first):
    # a step = FORWARD (6) + NO_SYNC_BACKWARD (4) + FORWARD (6) + BACKWARD (6) + OPTIMIZER (2) = 24 kernels,
    # 10 µs apart: window 23·10 + 8 = 238 µs. forward = two windows of 6 kernels (58 µs each) = 116 µs;
    # backward = 4 compute kernels (38 µs) + b2 b1 ar b2 b1 (48 µs) = 86 µs; optimizer 18 µs; tail 10 µs.
    s = analyze(loop_trace(6, micro_steps=2)).steps
    assert len(s) == 6
    assert (s["micro_steps"] == 2).all()
    assert (s["step_ns"] == 238 * US).all()
    assert (s["forward_ns"] == 116 * US).all() and (s["backward_ns"] == 86 * US).all()
    assert (s["optimizer_ns"] == 18 * US).all() and (s["comm_tail_ns"] == 10 * US).all()


UPDATE = ["multi_tensor_apply_kernel", "multi_tensor_apply_kernel"]  # a foreach AdamW's update, by name


@pytest.mark.parametrize("micro_work", [(), ("ds_epilogue",)])
def test_gradients_reduced_every_micro_step_cut_at_the_update(micro_work):
    # DeepSpeed with 2 micro-steps per update: both micro-steps' backwards all-reduce (two gradient cycles),
    # the update (2 multi_tensor_apply kernels) follows the second only. With the epilogue kernel after every
    # micro-step, a step = 2 × (FORWARD 6 + BACKWARD 6 + epilogue) + update 2 = 26 + 2·len(micro_work)
    # kernels, 10 µs apart: window (25 + 2·e)·10 + 8 µs. Forward: two windows of 58 µs, the second opening
    # after the first backward's last all-reduce launch, so holding the epilogue (main-thread work between
    # micro-steps is the next forward's): + 10·e µs; backward: two runs of b2 b1 ar b2 b1 = 48 µs each; the
    # optimizer: the last epilogue and the update, (e + 1)·10 + 8 µs.
    e = len(micro_work)
    res = analyze(
        loop_trace(6, micro_steps=2, reduce_every_micro=True, optimizer=UPDATE, micro_work=micro_work)
    )
    s = res.steps
    assert s["step"].tolist() == list(range(6))
    assert (s["micro_steps"] == 2).all()
    assert (s["step_ns"] == ((25 + 2 * e) * 10 + 8) * US).all()
    assert (s["forward_ns"] == (116 + 10 * e) * US).all() and (s["backward_ns"] == 96 * US).all()
    assert (s["optimizer_ns"] == (18 + 10 * e) * US).all()
    assert any("the optimizer's update, seen after one gradient cycle in 2" in n for n in res.notes)


def test_every_cycle_updating_keeps_one_step_per_cycle():
    # The same loop without accumulation: every gradient cycle is followed by the update, 6 steps of 14.
    res = analyze(loop_trace(6, optimizer=UPDATE))
    assert len(res.steps) == 6 and (res.steps["micro_steps"] == 1).all()
    assert any("each followed by the optimizer's update" in n for n in res.notes)


def test_post_reduce_work_does_not_end_the_backward():
    # FSDP: after the last reduce-scatter ("ar", launched at t, on the GPU t+5..t+13 µs) the autograd thread
    # launches two kernels that wait for the reduced gradient (copy into the shard, division) at t+10 and
    # t+20; they end at t+23 and t+33, after the collective. The backward still ends with b1 (launched at
    # t−10, ends t+3): tail = 13 − 3 = 10 µs, on the rank and for the job (one rank: the same), as without them.
    s = analyze(loop_trace(6, post_reduce=("chunk_cat", "div_"))).steps
    assert len(s) == 6
    assert (s["comm_tail_ns"] == 10 * US).all() and (s["job_comm_tail_ns"] == 10 * US).all()


def test_a_first_optimizer_call_that_makes_its_state_ends_its_step():
    # Step 0's optimizer launches 5 "zeros" kernels before its 2 update kernels: 7 kernels where the others
    # have 2, and step 1's forward is one kernel short: the stretch between them matches neither the modal
    # optimizer nor the modal forward (6 kernels before the next run would start inside the update). Step 0
    # still ends with its last update kernel, and step 1 starts with its forward's first kernel.
    tr = loop_trace(6, optimizer=UPDATE, first_update_extra=5)
    res = analyze(tr)
    k = tr.kernels.sort_values("launch_ns")
    update_ends = k.loc[k["name"] == UPDATE[0], "end_ns"].to_numpy()
    s = res.steps.sort_values("step")
    assert len(s) == 6
    assert s["end_ns"].iloc[0] == update_ends[1]  # the second update kernel of step 0
    st = res.phases[res.phases["phase"] == "step"].sort_values("step")
    lt = k["launch_ns"].to_numpy(dtype=np.int64)
    first = k["name"].to_numpy()[np.searchsorted(lt, st["host_start_ns"].to_numpy(dtype=np.int64), "left")]
    assert set(first[1:]) == {"emb"}


def test_a_compiled_first_iteration_is_its_own_step():
    # torch.compile's first iteration: two 50 ms compilation pauses (over 10 steps of 230 µs each) around
    # "rng_init", then every forward kernel launched three times (two benchmark runs under its own name, then
    # the real one). Its forward is not the modal one, yet it is a step (6 steps for 6 optimizer steps),
    # starting at "rng_init" (after the earliest pause), with a note; its forward is most of the step.
    tr = loop_trace(6, autotune_first=True, optimizer=UPDATE)
    res = analyze(tr)
    s = res.steps.sort_values("step")
    assert len(s) == 6
    assert (s["forward_ns"] / s["step_ns"] > 0.05).all() and s["forward_ns"].iloc[0] > 50_000 * US
    k = tr.kernels.sort_values("launch_ns")
    st = res.phases[res.phases["phase"] == "step"].sort_values("step")
    lt = k["launch_ns"].to_numpy(dtype=np.int64)
    assert k["name"].to_numpy()[np.searchsorted(lt, st["host_start_ns"].iloc[0], "left")] == "rng_init"
    assert any("step 0's forward is not the others'" in n for n in res.notes)


def test_an_update_that_cannot_be_told_apart_is_said():
    # Gradients reduced every micro-step and an optimizer whose kernels no pattern names ("adam"): the two
    # gradient cycles of a step cannot be told from two steps by the update. The note says so, not a guess.
    res = analyze(loop_trace(6, micro_steps=2, reduce_every_micro=True))
    assert any(
        "no optimizer kernel recognised after them: a step may be a micro-step" in n for n in res.notes
    )


def test_a_wait_for_the_gradients_is_no_boundary():
    # A GPU-bound loop (kernels of 20 µs launched every 10 µs) whose host checks the loss for NaN after
    # backward: it waits for the GPU's backlog (about 10 kernels' worth, > the 100 µs boundary gap), then
    # launches isinf 20 µs after the GPU drained. That gap is a wait for the gradients, not the loop's
    # boundary: every step still starts with its forward's first kernel.
    tr = loop_trace(8, dur=20 * US, back_to_back=True, nan_check=True)
    res = analyze(tr)
    k = tr.kernels.sort_values("launch_ns")
    lt = k["launch_ns"].to_numpy(dtype=np.int64)
    gap = np.diff(lt)
    names = k["name"].astype(str).to_numpy()
    assert (
        gap[names[1:] == "isinf"].min() > gap[names[1:] == "emb"][1:].max()
    )  # the trap: the largest gap in a step
    starts = res.phases.loc[res.phases["phase"] == "step", "host_start_ns"].to_numpy(dtype=np.int64)
    first = names[np.searchsorted(lt, starts, "left")]
    assert len(starts) == 8 and set(first) == {"emb"}


def test_gpu_bound_loop_without_idle_gaps():
    # Kernels of 20 µs launched every 10 µs: the GPU never idles, the queue only grows, so a step's window is
    # its 14 kernels back to back: 14·20 = 280 µs. Host gaps still mark the boundary (100 µs vs 10 µs).
    s = analyze(loop_trace(dur=20 * US, back_to_back=True)).steps
    assert len(s) == 6
    assert (s["step_ns"] == 280 * US).all()
    assert (s["idle_ns"] == 0).all()


def test_nothing_repeats_no_steps_and_a_reason():
    tr = loop_trace(n_steps=1)  # one step: no period seen twice
    steps, notes = infer_steps(KernelArrays(tr.kernels))
    assert steps.empty
    assert "no repeating kernel sequence" in notes[0]


@pytest.mark.parametrize(
    "name",
    [
        "step 3",
        "step3",
        "step_3",
        "Step #3",
        "STEP 3",
        "iteration 7",
        "iter 7",
        "it 3",
        "train_step_3",
        "train step 3",
        "trainstep3",
        "ProfilerStep#12",
        "step",
    ],
)
def test_default_step_pattern_accepts(name):
    assert re.search(nn.STEP_PATTERN, name)
    nvtx = pd.DataFrame(
        {
            "rank": [0],
            "pid": [1],
            "tid": [1],
            "domain": ["user"],
            "name": [name],
            "start_ns": [0],
            "end_ns": [10],
            "depth": [0],
            "payload": [pd.NA],
            "category": [pd.NA],
        }
    )
    steps, _ = find_steps(nvtx)
    assert len(steps) == 1


@pytest.mark.parametrize(
    "name",
    ["forward", "item 3", "stepper", "backward step", "optimizer_step", "allreduce b3 10B", "ncclAllReduce"],
)
def test_default_step_pattern_rejects(name):
    assert not re.search(nn.STEP_PATTERN, name)


# ---- committed traces, NVTX removed ----------------------------------------------------------------------
TRACES = Path(__file__).resolve().parents[2] / "traces"
RUNS = ["bucketed-25mb_small_fp32_2xh200", "torch_ddp-25mb_small_fp32_2xh200", "bucketed-25mb_xl_fp32_2xh200"]
# Phases: forward and backward meet where the first autograd-thread launch is, while the harness's
# backward range opens on the main thread a few kernels earlier (the loss gradient's seed): measured <= 5.3 %
# over all committed runs; "after backward" (grad_wait ∪ optimizer) matches exactly.
PHASE_TOL_PCT = 6.0


@pytest.fixture(scope="module", params=RUNS)
def pair(request):
    from ddp_profile import load_trace

    path = TRACES / request.param
    if not path.exists():
        pytest.skip(f"{path} not present")
    tr = load_trace(path)
    return analyze(tr), analyze(replace(tr, nvtx=schema.empty_frame(schema.NVTX_COLUMNS)))


def test_inferred_steps_match_nvtx_steps(pair):
    ref, inf = pair
    a, b = ref.steps.reset_index(drop=True), inf.steps.reset_index(drop=True)
    assert len(a) == len(b) > 0
    err = (
        100
        * np.abs(b["step_ns"].to_numpy(float) - a["step_ns"].to_numpy(float))
        / a["step_ns"].to_numpy(float)
    )
    assert err.max() < 2.0  # the target; measured: 0.00 % (the same kernels, so the same windows)
    assert (b["start_ns"].to_numpy() == a["start_ns"].to_numpy()).all()
    assert (b["comm_tail_ns"].to_numpy() == a["comm_tail_ns"].to_numpy()).all()


def test_inferred_phases_match_nvtx_phases(pair):
    ref, inf = pair
    a, b = ref.steps.reset_index(drop=True), inf.steps.reset_index(drop=True)
    for col in ("forward_ns", "backward_ns"):
        x, y = a[col].to_numpy(float), b[col].to_numpy(float)
        assert (100 * np.abs(y - x) / x).max() < PHASE_TOL_PCT, col
    p = ref.phases
    launched = p["phase"].isin(["grad_wait", "optimizer"]) & (p["start_ns"] != p["host_start_ns"])
    after = p.loc[launched].groupby(["rank", "step"]).agg(s=("start_ns", "min"), e=("end_ns", "max"))
    assert np.allclose(
        (after["e"] - after["s"]).to_numpy(float), b["optimizer_ns"].to_numpy(float), rtol=1e-3
    )


# ---- NCCL kernel variant and unknown message sizes ------------------------------
def test_kernel_variant_is_what_the_name_says():
    from ddp_profile.analysis.collectives import kernel_variant

    alg = pd.Series(["RING", "TREE", None, None], dtype="object")
    proto = pd.Series(["LL", "SIMPLE", "LL128", None], dtype="object")
    assert kernel_variant(alg, proto).tolist() == ["RING_LL", "TREE_SIMPLE", "LL128", None]


def test_bytes_unknown_says_why():
    from ddp_profile.analysis.collectives import unknown_bytes_note

    nccl = pd.DataFrame({"domain": ["NCCL"], "name": ["ncclAllReduce"]})
    assert "binary payloads and payload schemas were not exported" in unknown_bytes_note(nccl)
    assert "no NCCL NVTX ranges" in unknown_bytes_note(schema.empty_frame(schema.NVTX_COLUMNS))


def test_stripped_trace_collectives_have_variant_and_no_bytes(pair):
    ref, inf = pair
    assert set(inf.collectives["kernel_variant"].dropna()) == set(ref.collectives["kernel_variant"].dropna())
    assert inf.collectives["kernel_variant"].notna().all()
    if ref.collectives["bytes"].notna().any() and inf.collectives["bytes"].isna().all():
        assert any("message sizes unknown" in n for n in inf.notes)
        assert inf.cost_model.empty
