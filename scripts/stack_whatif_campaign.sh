#!/usr/bin/env bash
# Two campaigns on one 4-GPU host, each profiled exactly as docs/profiling.md "Profile your own job" says
# (nsys profile -t cuda,nvtx --sample=none --cpuctxsw=none, plus --capture-range=cudaProfilerApi around a few
# steady steps; --cuda-graph-trace=node for the CUDA-graph job), exported, scrubbed (slim) with the
# project's own scrubber and xz -9'd:
#   foreign   user-like jobs of every popular stack (scripts/foreign/): DeepSpeed ZeRO-2 under torchrun and
#             ZeRO-3 under the deepspeed launcher (gradient accumulation 2), Accelerate (accelerate launch
#             --multi_gpu, accumulation 2), torch.compile reduce-overhead, FSDP2 with a communication tail;
#             -> traces/foreign/<name>/{<name>.sqlite.xz,truth.json}
#   profiled  the what-if ledger's baseline jobs (scripts/whatif/gpt2_whatif.py, GPT-2 124M), one export each
#             -> traces/whatif-runs/<job>/{profiled.sqlite.xz,truth.json}
#   repeats   the ledger's un-profiled A/B repeats, every rule in one process (see gpt2_whatif.py)
#             -> traces/whatif-runs/repeats/<rule>/repeats.json
# Post-processing of one trace runs in the background while the next job runs. Time-boxed: a job that would
# end after the deadline is skipped and listed; the repeats process skips the rules that would overrun.
# Everything is packed into $OUT/stack-jobs.tar (split into 15 MiB parts when larger) and $OUT/logs.tar.xz;
# scripts/whatif/make_ledger.py then lays out traces/whatif/<rule>--<job>/ from an unpacked copy.
#
# Usage: OUT=/tmp/out scripts/stack_whatif_campaign.sh [GROUP...]  (run in the order given; default:
#        foreign profiled repeats)
# Second jobs of the rebuilt rules (launch-bound at batch 2 x 512, host-sync with torch.cuda.synchronize()
# after each backward), one 4-GPU call of about 5 minutes:
#        NAMES="gpt2-ddp-b2 gpt2-ddp-bwdsync" RULES=host-sync@bwdsync,launch-bound@b2 DEADLINE=480 \
#        OUT=$OUT scripts/stack_whatif_campaign.sh profiled repeats
# Knobs (environment):
#   NAMES=                 only these jobs of the foreign and profiled groups         e.g. NAMES="ds-zero2 gpt2-ddp"
#   OUT=                   folder for the results (set by the device tool)            e.g. OUT=/tmp/out
#   KIT=<root>/.device-kit carried kit with nsys-prepare.sh                           e.g. KIT=/tmp/kit
#   REPO=<root>            checkout whose ddp_profile scrubs the exports              e.g. REPO=$PWD
#   WHEELS=                folder of wheels installed into $SITE first (deepspeed and the pure-Python
#                          requirements the GPU machine lacks); empty: install nothing  e.g. WHEELS=.campaign/wheels
#   SITE=/tmp/site         where those wheels go (prepended to PYTHONPATH; its bin/ holds `deepspeed`)
#   DEADLINE=560           seconds this script may take in all                       e.g. DEADLINE=230
#   RESERVE=40             seconds kept for the last exports, scrubbing and packing
#   NPROC=4                GPUs (ranks) per job
#   PYTHON=python3         interpreter with torch, accelerate
#   WORK=/tmp/stack-jobs   scratch folder for reports and unscrubbed exports (never packed)
#   WARMUP=4               optimizer steps before the capture opens (compiled job: +2)
#   CAPTURE=4              optimizer steps inside each capture (the table may set fewer: traces/ has a size budget)
#   REPEATS=5              A/B repeats per ledger rule                                e.g. REPEATS=1 (smoke)
#   REP_STEPS=6            recorded steps per repeat segment
#   REP_WARMUP=2           warm-up steps per segment; REP_FIRST_WARMUP=5 in a variant's first segment
#   RULES=                 ledger rules for the repeats (default: every rule, launch-bound last)
#   JOB_ARGS=              options added to every program                             e.g. JOB_ARGS="--shape tiny"
set -euo pipefail

START=$(date +%s)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
REPO=${REPO:-$ROOT}
KIT=${KIT:-$REPO/.device-kit}
OUT=${OUT:?set OUT to the folder that receives the results}
WHEELS=${WHEELS:-}
SITE=${SITE:-/tmp/site}
DEADLINE=${DEADLINE:-560}
RESERVE=${RESERVE:-40}
NPROC=${NPROC:-4}
PYTHON=${PYTHON:-python3}
WORK=${WORK:-/tmp/stack-jobs}
WARMUP=${WARMUP:-4}
CAPTURE=${CAPTURE:-4}
REPEATS=${REPEATS:-5}
REP_STEPS=${REP_STEPS:-6}
REP_WARMUP=${REP_WARMUP:-2}
REP_FIRST_WARMUP=${REP_FIRST_WARMUP:-5}
RULES=${RULES:-balanced,straggler-host,straggler-gpu,host-sync,comm-tail,contention,optimizer-shard,grad-copy-back,fsdp-prefetch,launch-bound,balanced@b32,straggler-gpu@b32,host-sync@bwdsync,launch-bound@b2}
JOB_ARGS=${JOB_ARGS:-}
NAMES=${NAMES:-}
PART_BYTES=$((15 * 1024 * 1024))

# group | name | seconds expected | captured steps (empty: $CAPTURE) | nsys options beyond the docs' | launcher | program | options
JOBS_TABLE="
foreign|ds-zero2|50|||torchrun|foreign/ds_zero_loop.py|--stage 2 --accum 2 --n-layer 4
foreign|ds-zero3|55|3||deepspeed|foreign/ds_zero_loop.py|--stage 3 --accum 2 --n-layer 2
foreign|accelerate|45|||accelerate|foreign/accelerate_loop.py|--accum 2 --n-layer 4
foreign|fsdp2-tail|40|||torchrun|foreign/fsdp2_tail_loop.py|--n-layer 4
foreign|compiled-ro|150||--cuda-graph-trace=node|torchrun|foreign/compiled_loop.py|--mode reduce-overhead --n-layer 4
profiled|gpt2-ddp|40|||torchrun|whatif/gpt2_whatif.py|--rule balanced --variant baseline
profiled|gpt2-ddp-slowhost|40|||torchrun|whatif/gpt2_whatif.py|--rule straggler-host --variant baseline
profiled|gpt2-ddp-slowgpu|40|||torchrun|whatif/gpt2_whatif.py|--rule straggler-gpu --variant baseline
profiled|gpt2-ddp-item|40|||torchrun|whatif/gpt2_whatif.py|--rule host-sync --variant baseline
profiled|gpt2-fsdp2|40|||torchrun|whatif/gpt2_whatif.py|--rule fsdp-prefetch --variant baseline
profiled|gpt2-ddp-b1|40|||torchrun|whatif/gpt2_whatif.py|--rule launch-bound --variant baseline
profiled|gpt2-ddp-b32|40|||torchrun|whatif/gpt2_whatif.py|--rule balanced@b32 --variant baseline
profiled|gpt2-ddp-b32-slowgpu|40|||torchrun|whatif/gpt2_whatif.py|--rule straggler-gpu@b32 --variant baseline
profiled|gpt2-ddp-b2|40|||torchrun|whatif/gpt2_whatif.py|--rule launch-bound@b2 --variant baseline
profiled|gpt2-ddp-bwdsync|40|||torchrun|whatif/gpt2_whatif.py|--rule host-sync@bwdsync --variant baseline
"

cd "$REPO"
mkdir -p "$OUT" "$WORK/logs"
exec > >(tee -a "$WORK/logs/campaign.log") 2>&1
echo "== setup ($(date -u +%FT%TZ))"
if [ -n "$WHEELS" ]; then
    "$PYTHON" -m pip install -q --no-index --no-deps --target "$SITE" "$WHEELS"/*.whl
    export PATH="$SITE/bin:$PATH"
fi
export PYTHONPATH="$SITE:$REPO${PYTHONPATH:+:$PYTHONPATH}"
set +eu  # nsys-prepare.sh is written to be sourced into an interactive shell
# shellcheck source=/dev/null
source "$KIT/nsys-prepare.sh"
set -eu
NSYS=${NSYS:-nsys}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
TRACES=$WORK/traces
mkdir -p "$TRACES/foreign" "$TRACES/whatif-runs/repeats"
{
    echo "# stack and what-if campaign, $(date -u +%FT%TZ)"
    nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv || echo "no nvidia-smi"
    nvidia-smi topo -m || true
    "$NSYS" --version
    "$PYTHON" -c "import torch, accelerate; c = torch.cuda.is_available(); print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version() if c else None, 'gpus', torch.cuda.device_count(), torch.cuda.get_device_name(0) if c else 'cpu'); print('accelerate', accelerate.__version__)"
    { "$PYTHON" -c "import deepspeed; print('deepspeed', deepspeed.__version__)" 2>&1 || echo "deepspeed: not installed"; } | tail -n 1
    nproc
} | tee "$TRACES/machine.txt"
cp "$TRACES/machine.txt" "$TRACES/foreign/machine-stacks.txt"
cp "$TRACES/machine.txt" "$TRACES/whatif-runs/machine.txt"

post() {  # post NAME REPORT DEST: export, scrub (slim), xz -9; the unscrubbed export never outlives this function
    local name=$1 report=$2 dest=$3 raw
    raw=$WORK/$name.unscrubbed.sqlite
    if ! "$NSYS" export --type sqlite --force-overwrite=true -o "$raw" "$report" >/dev/null; then
        rm -f "$raw"; echo "error: nsys export failed for $name"; return 1
    fi
    if ! "$PYTHON" -m ddp_profile.nsys.scrub --slim "$raw" -o "$dest"; then
        rm -f "$raw"; echo "error: scrubbing $name failed; the unscrubbed export was deleted"; return 1
    fi
    rm -f "$raw"
    xz -9 -T4 -f "$dest"
    echo "== $name: $(stat -c %s "$dest.xz") bytes scrubbed + xz ($(( $(date +%s) - START )) s elapsed)"
}

launcher_cmd() {  # launcher_cmd LAUNCHER PROGRAM: the words that start PROGRAM on $NPROC GPUs
    case $1 in
        torchrun) echo "$PYTHON -m torch.distributed.run --standalone --nproc_per_node=$NPROC $HERE/$2" ;;
        deepspeed) echo "$PYTHON $SITE/bin/deepspeed --num_gpus $NPROC --master_port 29621 $HERE/$2" ;;
        accelerate) echo "$PYTHON -m accelerate.commands.launch --multi_gpu --num_processes $NPROC --num_machines 1 \
--mixed_precision no --dynamo_backend no --main_process_port 29622 $HERE/$2" ;;
    esac
}

SKIPPED=() FAILED=() DONE=() PIDS=()
GROUPS_WANTED=${*:-foreign profiled repeats}
for group in $GROUPS_WANTED; do
    case $group in foreign|profiled|repeats) ;; *) echo "error: unknown group $group (foreign, profiled, repeats)" >&2; exit 2 ;; esac
done
left() { echo $((START + DEADLINE - RESERVE - $(date +%s))); }

run_repeats() {
    local log=$WORK/logs/repeats.log budget
    budget=$(left)
    if [ "$budget" -lt 30 ]; then SKIPPED+=("repeats ($budget s left)"); return; fi
    echo "== repeats: $RULES ($REPEATS x A/B, $((DEADLINE - RESERVE - $(date +%s) + START)) s left)"
    # shellcheck disable=SC2046,SC2086
    if timeout -k 10 "$budget" $(launcher_cmd torchrun whatif/gpt2_whatif.py) --repeats "$REPEATS" --rules "$RULES" \
            --steps "$REP_STEPS" --warmup "$REP_WARMUP" --first-warmup "$REP_FIRST_WARMUP" \
            --until $(( $(date +%s) + budget - 5 )) $JOB_ARGS --out "$TRACES/whatif-runs/repeats" \
            </dev/null >"$log" 2>&1; then
        DONE+=("repeats")
    else
        FAILED+=("repeats (log: logs/repeats.log)"); tail -n 15 "$log"
    fi
    grep -E "^[a-z-]+: (baseline|skipped)" "$log" || true
}

for group in ${GROUPS_WANTED}; do
    if [ "$group" = repeats ]; then
        for pid in "${PIDS[@]}"; do wait "$pid" || true; done  # no exports beside the timed repeats
        run_repeats; continue
    fi
    while IFS='|' read -r g name budget capture nsys_extra launcher program options; do
        [ "$g" = "$group" ] || continue
        [ -z "$NAMES" ] || [[ " $NAMES " == *" $name "* ]] || continue
        now=$(date +%s)
        if [ "$budget" -gt "$(left)" ]; then SKIPPED+=("$name (needs ~$budget s, $(left) s left)"); continue; fi
        if [ "$group" = foreign ]; then
            dir=$TRACES/foreign/$name; dest=$dir/$name.sqlite
        else
            dir=$TRACES/whatif-runs/$name; dest=$dir/profiled.sqlite
        fi
        warm=$WARMUP
        [[ "$options" == *--mode* ]] && warm=$((WARMUP + 2))
        rm -rf "$dir"; mkdir -p "$dir"
        capture=${capture:-$CAPTURE}
        cmd="$(launcher_cmd "$launcher" "$program") $options --steps $((warm + capture)) --profile-from $warm"
        [ "$group" = profiled ] && cmd="$(launcher_cmd "$launcher" "$program") $options --steps $capture --profile-from $warm"
        echo "== $name: nsys profile -t cuda,nvtx --sample=none --cpuctxsw=none --capture-range=cudaProfilerApi $nsys_extra -> ${cmd#"$PYTHON "} ($((now - START)) s elapsed)"
        rc=0
        # shellcheck disable=SC2086
        timeout -k 10 $((budget * 2)) "$NSYS" profile -t cuda,nvtx --sample=none --cpuctxsw=none \
            --capture-range=cudaProfilerApi --capture-range-end=stop $nsys_extra --force-overwrite=true \
            -o "$WORK/$name" $cmd $JOB_ARGS --out "$dir" </dev/null >"$WORK/logs/$name.log" 2>&1 || rc=$?
        # The report and the truth are what count: a job that wrote both and then hung on the way out is kept.
        if [ -e "$WORK/$name.nsys-rep" ] && [ -e "$dir/truth.json" ]; then
            [ "$rc" = 0 ] || echo "   note: exit status $rc after the report and truth.json were written"
            echo "   ran in $(( $(date +%s) - now )) s; $(grep -h 'recorded steps' "$WORK/logs/$name.log" | tail -n 1)"
            post "$name" "$WORK/$name.nsys-rep" "$dest" </dev/null >>"$WORK/logs/post.log" 2>&1 &
            PIDS+=($!); DONE+=("$name")
        else
            FAILED+=("$name (log: logs/$name.log)"); tail -n 15 "$WORK/logs/$name.log"; rm -rf "$dir"
        fi
    done <<<"$JOBS_TABLE"
done

for pid in "${PIDS[@]}"; do wait "$pid" || true; done
cat "$WORK/logs/post.log" 2>/dev/null || true
echo "== done: ${DONE[*]:-none}"
echo "== failed: ${FAILED[*]:-none}"
echo "== skipped: ${SKIPPED[*]:-none}"
cd "$WORK"
files=()
while IFS= read -r f; do files+=("$f"); done < <(find traces -type f \( -name '*.xz' -o -name '*.json' -o -name '*.txt' \) | sort)
tar -cf "$OUT/stack-jobs.tar" "${files[@]}"
if [ "$(stat -c %s "$OUT/stack-jobs.tar")" -gt "$PART_BYTES" ]; then
    split -b "$PART_BYTES" -d "$OUT/stack-jobs.tar" "$OUT/stack-jobs.tar.part" && rm "$OUT/stack-jobs.tar"
fi
tar -cJf "$OUT/logs.tar.xz" logs
echo "== campaign finished in $(( $(date +%s) - START )) s"
ls -la "$OUT"
