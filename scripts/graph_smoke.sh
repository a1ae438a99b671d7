#!/usr/bin/env bash
# A short 2-GPU smoke test before a timing set: each configuration given runs once on a small model, bf16,
# every step one CUDA graph, under torchrun; prints every run's step time and final loss per rank, and exits 1
# when a run fails, hangs past RUN_S, or (EQUAL=1) when the runs' final losses differ. Pass configurations
# that must train alike (e.g. overlap with and without --sharded-update: same numerics by construction), so a
# graphed capture that drops or reorders work shows as a different loss, not only as a crash.
#
# Usage: OUT=$OUT bash scripts/graph_smoke.sh "OPTIONS" ["OPTIONS" ...]   (on the lent machine, repo root), e.g.
#   OUT=$OUT bash scripts/graph_smoke.sh "--strategy overlap --reduce-avg" "--strategy overlap --reduce-avg --sharded-update"
#
# Knobs (environment):
#   OUT=              folder for the run JSONs (OUT/smoke/) and the log     e.g. OUT=/tmp/out
#   COMMON="--model small --batch 4 --seq-len 128 --steps 5 --warmup 2 --dtype bf16 --cuda-graph"
#                     options every run gets
#   NPROC=2           ranks (GPUs)
#   RUN_S=150         seconds one run may take before it is killed and counted as failed
#   EQUAL=1           1: the final losses must agree bit for bit across the runs; 0: print them only
#   LOSS_RTOL=        with EQUAL=1: agree within this relative tolerance instead (runs whose sums take their
#                     addends in another order, e.g. 4-rank peer copies against NCCL's ring)  e.g. LOSS_RTOL=1e-4
#   PYTHON=python3    interpreter with torch
set -euo pipefail

OUT=${OUT:?set OUT to the folder that receives the results}
COMMON=${COMMON:-"--model small --batch 4 --seq-len 128 --steps 5 --warmup 2 --dtype bf16 --cuda-graph"}
NPROC=${NPROC:-2}
RUN_S=${RUN_S:-150}
EQUAL=${EQUAL:-1}
LOSS_RTOL=${LOSS_RTOL:-}
PYTHON=${PYTHON:-python3}
[ $# -ge 1 ] || { echo "usage: OUT=DIR bash scripts/graph_smoke.sh \"OPTIONS\" [\"OPTIONS\" ...]" >&2; exit 2; }
cd "$(dirname "${BASH_SOURCE[0]}")/.."
DIR=$OUT/smoke
mkdir -p "$DIR"
failed=0
for options in "$@"; do
    echo "== smoke: $options"
    # shellcheck disable=SC2086  # the option strings are word-split on purpose
    if ! timeout -k 10 "$RUN_S" "$PYTHON" -m torch.distributed.run --standalone --nproc_per_node="$NPROC" \
            -m ddp_profile.harness $COMMON $options --out "$DIR" >>"$DIR/smoke.log" 2>&1; then
        echo "FAILED (exit status or timeout): $options; the log's tail:"
        tail -n 30 "$DIR/smoke.log"
        failed=1
    fi
done
"$PYTHON" - "$DIR" "$EQUAL" "$LOSS_RTOL" <<'PY' || failed=1
import json, math, pathlib, sys
runs = sorted(pathlib.Path(sys.argv[1]).glob("*.json"))
losses = {}
for path in runs:
    record = json.loads(path.read_text())
    losses[record["run"]] = record["final_loss_per_rank"]
    print(f"{record['run']}: median step {record['step_ms_median']:.2f} ms, final loss per rank "
          + " / ".join(f"{v:.8f}" for v in record["final_loss_per_rank"]))
if sys.argv[2] == "1" and sys.argv[3]:
    rtol, first = float(sys.argv[3]), next(iter(losses.values()), [])
    worst = max((abs(a - b) / max(abs(b), 1e-30) for v in losses.values() for a, b in zip(v, first)), default=0.0)
    print(f"largest relative difference of a final loss from {next(iter(losses), '-')}'s: {worst:.3g} (tolerance {rtol:g})")
    if not all(math.isfinite(x) for v in losses.values() for x in v) or worst > rtol:
        print("FAILED: the final losses differ beyond the tolerance (or one is not finite)")
        sys.exit(1)
elif sys.argv[2] == "1" and len({tuple(v) for v in losses.values()}) > 1:
    print("FAILED: the final losses differ")
    sys.exit(1)
PY
exit "$failed"
