#!/usr/bin/env bash
# The profiling campaign: every strategy, the bucket sweep, PyTorch DDP and the 1-GPU baseline, each run
# through scripts/profile.sh into traces/<run>/. A failed run does not stop the others; failures are
# listed at the end and the exit status is non-zero. Exports are made and scrubbed in the background while
# the next run uses the GPUs. Logs go to traces/.logs/ (not into the run folders, which get committed).
#
# Usage: scripts/profile_all.sh [SET ...]        (default: $SETS)
#   e.g. scripts/profile_all.sh small A B
# Sets:
#   smoke    one short run (bucketed 25 MB, model small) to check the tool chain       ~1 min
#   small    every strategy on model `small`, batch 4 x 128, fp32 (11 runs)             ~4 min
#   A        XL fp32, batch 4 x 256 per GPU: none (1 GPU), naive, flat, overlap,
#            bucketed 1/10/25/100/1000 MB, torch_ddp 25 MB (10 runs)                    ~7 min
#   B        XL bf16 autocast, batch $B_BATCH x 256 per GPU: none (1 GPU), naive, overlap, bucketed
#            25/100, torch_ddp 25 (6 runs). At A's batch 4 a bf16 XL step is launch-bound (GPU busy ~70 of
#            ~300 ms: ddp-profile launches on traces of that batch), so B uses 4x the tokens   ~5 min
#   scaling  MLP and XL with bucketed 25 MB and torch_ddp 25 MB at each of $SCALING_NPROCS GPUs
# Knobs (environment):
#   SETS="small A B"     sets to run when none are given                 e.g. SETS=A
#   NPROC=2              GPUs per multi-GPU run                            e.g. NPROC=4
#   SCALING_NPROCS="1 2 4"   GPU counts of the scaling set (runs needing more GPUs than present are skipped)
#   WARMUP=3 STEPS=4     warm-up and measured steps of XL runs             e.g. STEPS=5
#   B_BATCH=16           per-GPU batch of set B                            e.g. B_BATCH=8
#   SMALL_STEPS=5        measured steps of small runs
#   SMALL_MODEL=small SMALL_SEQ=128   model and sequence length of the smoke and small sets   e.g. SMALL_MODEL=tiny
#   DEADLINE_AT=         epoch seconds; a run is skipped if it would likely end after it   e.g. $(( $(date +%s) + 500 ))
#   XL_RUN_S=45 SMALL_RUN_S=20   expected seconds per run, used with DEADLINE_AT
#   SKIP_EXISTING=0      1: skip runs whose traces/<run>/ already holds an export (to finish a set later)
#   ONLY=                extended regex on "STRATEGY OPTIONS": only matching runs of the sets   e.g. ONLY=torch_ddp
#   INSPECT=1            run `ddp-profile inspect` on each finished run (warnings only)
#   CAMPAIGN_LIST=       file that receives the folder of every finished run
#   PYTHON, NSYS, TRACES, PER_RANK: passed to profile.sh
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# shellcheck source=scripts/_nsys.sh
source "$HERE/_nsys.sh"

SETS=${SETS:-"small A B"}
NPROC=${NPROC:-2}
SCALING_NPROCS=${SCALING_NPROCS:-"1 2 4"}
WARMUP=${WARMUP:-3}
STEPS=${STEPS:-4}
SMALL_STEPS=${SMALL_STEPS:-5}
B_BATCH=${B_BATCH:-16}
SMALL_MODEL=${SMALL_MODEL:-small}
SMALL_SEQ=${SMALL_SEQ:-128}
DEADLINE_AT=${DEADLINE_AT:-}
XL_RUN_S=${XL_RUN_S:-45}
SMALL_RUN_S=${SMALL_RUN_S:-20}
INSPECT=${INSPECT:-1}
SKIP_EXISTING=${SKIP_EXISTING:-0}
ONLY=${ONLY:-}
CAMPAIGN_LIST=${CAMPAIGN_LIST:-}
PYTHON=${PYTHON:-python3}
export PYTHON
cd "$ROOT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
find_nsys

if [ $# -gt 0 ]; then SETS="$*"; fi
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)

XL="--model xl --batch 4 --seq-len 256 --warmup $WARMUP --steps $STEPS"
SMALL="--model $SMALL_MODEL --batch 4 --seq-len $SMALL_SEQ --warmup 3 --steps $SMALL_STEPS"
MLP="--model mlp --mlp-depth 8 --batch 64 --warmup 3 --steps $SMALL_STEPS"

# Each plan line: NPROC EXPECTED_S STRATEGY [bench options]
plan() {
    local set=$1 mb n
    case "$set" in
        smoke) echo "$NPROC $SMALL_RUN_S bucketed $SMALL --bucket-mb 25 --steps 3" ;;
        small|A|B)
            local base=$XL est=$XL_RUN_S
            if [ "$set" = small ]; then base=$SMALL; est=$SMALL_RUN_S; fi
            if [ "$set" = B ]; then base="${XL/--batch 4 /--batch $B_BATCH } --dtype bf16"; fi
            echo "1 $est none $base"
            echo "$NPROC $est naive $base"
            [ "$set" = B ] || echo "$NPROC $est flat $base"
            echo "$NPROC $est overlap $base"
            local sweep="1 10 25 100 1000"
            [ "$set" = B ] && sweep="25 100"
            for mb in $sweep; do echo "$NPROC $est bucketed $base --bucket-mb $mb"; done
            echo "$NPROC $est torch_ddp $base --bucket-mb 25"
            ;;
        scaling)
            for n in $SCALING_NPROCS; do
                for s in bucketed torch_ddp; do
                    echo "$n $SMALL_RUN_S $s $MLP --bucket-mb 25"
                    echo "$n $XL_RUN_S $s $XL --bucket-mb 25"
                done
            done
            ;;
        *) echo "error: unknown set '$set' (choose from smoke small A B scaling)" >&2; return 1 ;;
    esac
}

FAILED=()
SKIPPED=()
DONE=()
POST_PIDS=()
POST_DIRS=()
POST_LOGS=()
LOGDIR=$ROOT/traces/.logs
mkdir -p "$LOGDIR"

for set in $SETS; do
    lines=$(plan "$set") || exit 2
    while read -r n est strategy args; do
        [ -n "$n" ] || continue
        label="$set: NPROC=$n $strategy $args"
        if [ -n "$ONLY" ] && ! [[ "$strategy $args" =~ $ONLY ]]; then continue; fi
        if [ "$GPUS" -gt 0 ] && [ "$n" -gt "$GPUS" ]; then
            SKIPPED+=("$label (needs $n GPUs, $GPUS present)"); echo "-- skip $label: needs $n GPUs"; continue
        fi
        if [ -n "$DEADLINE_AT" ] && [ $(( $(date +%s) + est )) -gt "$DEADLINE_AT" ]; then
            SKIPPED+=("$label (deadline)"); echo "-- skip $label: too close to the deadline"; continue
        fi
        if [ "$SKIP_EXISTING" = 1 ]; then
            # shellcheck disable=SC2086
            name=$("$PYTHON" -m ddp_profile.harness --strategy "$strategy" $args --nproc "$n" --print-run-name)
            if ls "${TRACES:-$ROOT/traces}/$name"/*.sqlite* >/dev/null 2>&1; then
                echo "-- skip $label: traces/$name already has an export"; continue
            fi
        fi
        start=$(date +%s)
        dirfile=$(mktemp "$LOGDIR/.dir.XXXXXX")
        log="$LOGDIR/$set-$strategy-$n-$(date +%s%N).log"
        # shellcheck disable=SC2086
        if NPROC=$n POST=0 RUN_DIR_OUT=$dirfile "$HERE/profile.sh" "$strategy" $args </dev/null 2>&1 | tee "$log"; then
            dir=$(cat "$dirfile")
            post_log="$LOGDIR/post-$(basename "$dir").log"
            ( post_process "$dir" && { [ "$INSPECT" != 1 ] || "$PYTHON" -m ddp_profile inspect "$dir"/*.sqlite* \
                  || echo "warning: ddp-profile inspect failed on $dir"; } ) >"$post_log" 2>&1 &
            POST_PIDS+=($!); POST_DIRS+=("$dir"); POST_LOGS+=("$post_log")
            echo "== done in $(( $(date +%s) - start )) s: $label"
        else
            FAILED+=("$label (log: $log)")
            echo "!! FAILED after $(( $(date +%s) - start )) s: $label"
        fi
        rm -f "$dirfile"
    done <<<"$lines"
done

for i in "${!POST_PIDS[@]}"; do
    dir=${POST_DIRS[$i]}
    post_log=${POST_LOGS[$i]}
    if wait "${POST_PIDS[$i]}"; then
        DONE+=("$dir")
        [ -z "$CAMPAIGN_LIST" ] || echo "$dir" >>"$CAMPAIGN_LIST"
        grep -h "warning" "$post_log" || true
    else
        FAILED+=("export/scrub of $dir (log: $post_log)")
        tail -n 5 "$post_log" >&2 || true
    fi
done

echo "== campaign: ${#DONE[@]} runs done, ${#SKIPPED[@]} skipped, ${#FAILED[@]} failed"
for d in "${DONE[@]}"; do echo "   ok      ${d#"$ROOT"/}"; done
for s in "${SKIPPED[@]}"; do echo "   skipped $s"; done
for f in "${FAILED[@]}"; do echo "   FAILED  $f"; done
[ "${#FAILED[@]}" -eq 0 ]
