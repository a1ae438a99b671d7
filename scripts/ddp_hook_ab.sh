#!/usr/bin/env bash
# A/B of the torch_ddp reference with and without the project's NVTX comm hook, on one machine, no nsys:
# each configuration runs stock and hooked alternately, REPEATS times, and the script prints the median
# step time (CUDA events, slowest rank) of every run and the median of each arm. The hook changes DDP's GPU
# path (unscaled gradient copies, then an in-place scale of each bucket), which is why torch_ddp runs
# stock by default (ddp_profile/harness/strategies/torch_ddp.py); this measures what the hook costs.
#
# Usage: scripts/ddp_hook_ab.sh [OUT_DIR]        e.g. scripts/ddp_hook_ab.sh /tmp/ab
# Knobs (environment):
#   NPROC=2              GPUs per run                                   e.g. NPROC=4
#   REPEATS=2            runs per arm and configuration                 e.g. REPEATS=3
#   CONFIGS="xl-fp32 xl-bf16"   xl-fp32: batch 4 x 256; xl-bf16: bf16 autocast, batch 16 x 256 (set B's)
#   STEPS=6 WARMUP=3     measured and warm-up steps per run
#   PYTHON=python3
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# shellcheck source=scripts/_nsys.sh
source "$HERE/_nsys.sh"
OUT_DIR=${1:-$ROOT/traces/.ab}
NPROC=${NPROC:-2}
REPEATS=${REPEATS:-2}
CONFIGS=${CONFIGS:-"xl-fp32 xl-bf16"}
STEPS=${STEPS:-6}
WARMUP=${WARMUP:-3}
PYTHON=${PYTHON:-python3}
cd "$ROOT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
nvlink_multicast_off
mkdir -p "$OUT_DIR"

config_args() {
    case "$1" in
        xl-fp32) echo "--model xl --batch 4 --seq-len 256" ;;
        xl-bf16) echo "--model xl --batch 16 --seq-len 256 --dtype bf16" ;;
        *) echo "error: unknown config '$1' (choose xl-fp32 or xl-bf16)" >&2; return 1 ;;
    esac
}

for cfg in $CONFIGS; do
    args=$(config_args "$cfg") || exit 2
    for r in $(seq 1 "$REPEATS"); do
        for arm in stock hook; do
            extra=""
            [ "$arm" = hook ] && extra="--ddp-nvtx-hook"
            dest="$OUT_DIR/$cfg/$arm-$r"
            mkdir -p "$dest"
            echo "== $cfg $arm repeat $r"
            # shellcheck disable=SC2086
            "$PYTHON" -m torch.distributed.run --standalone --nproc_per_node="$NPROC" -m ddp_profile.harness \
                --strategy torch_ddp --bucket-mb 25 $args --warmup "$WARMUP" --steps "$STEPS" $extra --out "$dest"
        done
    done
done

"$PYTHON" - "$OUT_DIR" <<'PY'
import json, statistics, sys
from pathlib import Path
root = Path(sys.argv[1])
print("config   arm    run  median step ms (slowest rank, CUDA events)  steps (slowest rank)")
for cfg in sorted(p for p in root.iterdir() if p.is_dir()):
    arms = {}
    for run in sorted(cfg.iterdir()):
        for js in run.glob("*.json"):
            rec = json.loads(js.read_text())
            arm = run.name.split("-")[0]
            arms.setdefault(arm, []).append(rec["step_ms_median"])
            worst = max(rec["step_ms_per_rank"], key=statistics.median)
            print(f"{cfg.name:8} {arm:5} {run.name:5} {rec['step_ms_median']:9.2f}   "
                  + " ".join(f"{x:.1f}" for x in worst))
    if {"stock", "hook"} <= arms.keys():
        s, h = statistics.median(arms["stock"]), statistics.median(arms["hook"])
        print(f"{cfg.name:8} median of runs: stock {s:.2f} ms, hook {h:.2f} ms, hook - stock {h - s:+.2f} ms ({100 * (h / s - 1):+.1f}%)")
PY
