#!/usr/bin/env bash
# Set AE (issue 44) on 4 GPUs of one host, two machine calls (kind nvidia-h200-x4, carry .device-kit):
#
#   PHASE=timing   (one call, <= 540 s): first a smoke test of the 4-rank peer copies, then timing set AE.
#     1. scripts/graph_smoke.sh, NPROC=4, small model, fp32, every step a CUDA graph: the NCCL sharded update
#        and the peer-copy one train 5 + 2 steps; their final losses must agree within SMOKE_RTOL (4-rank sums
#        take their addends in another order than NCCL's ring: rounding, not bit equality). A crash, a hang
#        or a difference stops the call here (exit 3), before any timing, and costs about a minute.
#     2. scripts/timing_repeats.sh, SET=AE, NPROC=4, scripts/timing_configs_AE.txt (XL bf16 and fp32: 1 GPU,
#        stock DDP, the NCCL sharded update, the peer-copy one), REPEATS rounds interleaved, in the time left
#        (the deadline trims the last round; >= 5 rounds are needed).
#     $OUT: smoke-AE.tar (the smoke runs' JSONs and log), AE.tar (traces/campaign/AE/...), machine-AE.txt,
#     timing-AE.log.
#   PHASE=profile  (one call, <= 300 s): the profiled twins, scripts/campaign.sh with
#     scripts/campaign_configs_AEP.txt (nsys, graph nodes traced, 2 measured steps).
#     $OUT: AEP.tar (traces/campaign/AEP/...), machine-part1.txt, logs-part1.tar.xz.
# Usage: PHASE=timing OUT=$OUT bash scripts/four_gpu_AE.sh   (on the lent machine, repository root), then
#        PHASE=profile OUT=$OUT bash scripts/four_gpu_AE.sh  (a second call)
# Unpack in the repository root: `tar -xf AE.tar` (and `tar -xf AEP.tar`) put traces/campaign/AE[P]/...
# Nothing under traces/ is needed on the machine.
#
# Knobs (environment):
#   OUT=            folder for the results (set by the device tool)
#   PHASE=timing    timing | profile
#   DEADLINE=540    seconds the whole call may take (timing; profile: 280 unless set)
#   REPEATS=6       rounds asked of the timing set (the deadline trims)
#   SMOKE_RTOL=1e-4 relative tolerance of the smoke's final losses (fp32)
#   SMOKE_COMMON="--model small --batch 4 --seq-len 128 --steps 5 --warmup 2 --cuda-graph"  the smoke runs' options
#   SMOKE_ONLY=0    1: stop after the smoke (a CPU check of this script: SMOKE_COMMON without --cuda-graph)
#   SMOKE=1         0: no smoke (a later call of the same code, e.g. the second half of a split set)
#   SET=AE CONFIGS=scripts/timing_configs_AE.txt   the timing set and its list (to split the set over two calls,
#                   give each call a list of its own and a set name of its own)
#   PYTHON=python3  interpreter with torch
set -euo pipefail

START=$(date +%s)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
OUT=${OUT:?set OUT to the folder that receives the results}
PHASE=${PHASE:-timing}
PYTHON=${PYTHON:-python3}
KIT=${KIT:-$ROOT/.device-kit}
export PYTHON
cd "$ROOT"
mkdir -p "$OUT"

case "$PHASE" in
timing)
    DEADLINE=${DEADLINE:-540}
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    if ! "$PYTHON" -c "import nvtx" 2>/dev/null && ls "$KIT"/wheels/nvtx-*.whl >/dev/null 2>&1; then
        "$PYTHON" -m pip install -q --no-index --no-deps --target /tmp/site "$KIT"/wheels/nvtx-*.whl
    fi
    export PYTHONPATH="/tmp/site:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
    SET=${SET:-AE}
    CONFIGS=${CONFIGS:-$HERE/timing_configs_AE.txt}
    if [ "${SMOKE:-1}" = 1 ]; then
        SMOKE_DIR=$(mktemp -d)
        mkdir -p "$SMOKE_DIR/smoke"
        echo "== smoke: 4-rank peer copies against the NCCL sharded update"
        smoke=0
        OUT=$SMOKE_DIR NPROC=4 RUN_S=120 EQUAL=1 LOSS_RTOL=${SMOKE_RTOL:-1e-4} \
            COMMON=${SMOKE_COMMON:-"--model small --batch 4 --seq-len 128 --steps 5 --warmup 2 --cuda-graph"} \
            bash "$HERE/graph_smoke.sh" "--strategy overlap --reduce-avg --sharded-update" \
            "--strategy overlap --reduce-avg --sharded-update --peer-copy-allreduce" 2>&1 \
            | tee "$SMOKE_DIR/smoke/summary.txt" || smoke=1
        (cd "$SMOKE_DIR" && tar -cf "$OUT/smoke-$SET.tar" smoke)
        if [ "$smoke" -ne 0 ]; then echo "!! smoke failed: no timing set run"; exit 3; fi
    fi
    [ "${SMOKE_ONLY:-0}" = 1 ] && { echo "== smoke only: done"; exit 0; }
    left=$((DEADLINE - ($(date +%s) - START)))
    echo "== timing set $SET: $left s left"
    OUT=$OUT SET=$SET NPROC=4 CONFIGS=$CONFIGS REPEATS=${REPEATS:-6} DEADLINE=$left bash "$HERE/timing_repeats.sh"
    ;;
profile)
    if [ -f "$KIT/nsys-prepare.sh" ]; then
        set +eu  # nsys-prepare.sh is written to be sourced into an interactive shell
        source "$KIT/nsys-prepare.sh"
        set -eu
    fi
    NSYS_EXTRA=--cuda-graph-trace=node STACK_DUMP_S=75 RUN_CAP_S=120 XL_PROF_S=45 OUT=$OUT \
        CONFIGS=$HERE/campaign_configs_AEP.txt REPEATS=0 DEADLINE=${DEADLINE:-280} bash "$HERE/campaign.sh" 1
    ;;
*)
    echo "error: PHASE must be timing or profile, not '$PHASE'" >&2
    exit 2
    ;;
esac
