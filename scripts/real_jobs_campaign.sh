#!/usr/bin/env bash
# Profile the real-job programs of scripts/foreign/ (gpt_loop.py, hf_trainer_job.py, lightning_job.py) on
# one 2-GPU host exactly as docs/profiling.md says, export, scrub (slim) and xz -9 each trace,
# and pack traces/foreign/<name>/{<name>.sqlite.xz,truth.json} plus machine.txt into $OUT. Post-processing
# of one job runs in the background while the next is profiled. Time-boxed: jobs that would end after the
# deadline are skipped and listed.
#
# Usage: OUT=/tmp/out scripts/real_jobs_campaign.sh [NAME...]     (default: every job below, in order)
# Knobs (environment):
#   OUT=                   folder for the results (set by the device tool)        e.g. OUT=/tmp/out
#   KIT=<repo>/.device-kit carried kit with nsys-prepare.sh                       e.g. KIT=/tmp/kit
#   DEADLINE=540           seconds this script may take in all                   e.g. DEADLINE=500
#   RESERVE=45             seconds kept for the last exports, scrubbing and packing
#   JOB_S=50               expected seconds of one profiled job (COMPILE_S=110 for gpt-compile)
#   NPROC=2                GPUs per job
#   PYTHON=python3         interpreter with torch, transformers, pytorch_lightning
#   WORK=/tmp/real-jobs    scratch folder for reports and unscrubbed exports (never packed)
#   JOB_ARGS=              options added to every program's   e.g. JOB_ARGS="--n-layer 1 --n-embd 64" (smoke)
set -euo pipefail

START=$(date +%s)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
KIT=${KIT:-$ROOT/.device-kit}
OUT=${OUT:?set OUT to the folder that receives the results}
DEADLINE=${DEADLINE:-540}
RESERVE=${RESERVE:-45}
JOB_S=${JOB_S:-50}
COMPILE_S=${COMPILE_S:-110}
NPROC=${NPROC:-2}
PYTHON=${PYTHON:-python3}
WORK=${WORK:-/tmp/real-jobs}
JOB_ARGS=${JOB_ARGS:-}
PART_BYTES=$((15 * 1024 * 1024))

# name | nsys options beyond docs/profiling.md's | program | program options
JOBS_TABLE="
gpt-accum||gpt_loop.py|--accum 4 --eval-first --steps 10
hf-ddp||hf_trainer_job.py|--steps 12
pl-ddp||lightning_job.py|--strategy ddp --steps 16
gpt-logevery||gpt_loop.py|--accum 1 --log-every 4 --steps 16
gpt-unused||gpt_loop.py|--find-unused --steps 12
hf-fsdp||hf_trainer_job.py|--fsdp --steps 12
pl-fsdp||lightning_job.py|--strategy fsdp --steps 16
gpt-compile||gpt_loop.py|--accum 4 --eval-first --compile --steps 10
gpt-accum-autograd|--pytorch=autograd-nvtx|gpt_loop.py|--accum 4 --eval-first --steps 6
"

cd "$ROOT"
mkdir -p "$OUT" "$WORK/logs"
exec > >(tee -a "$WORK/logs/campaign.log") 2>&1
echo "== setup ($(date -u +%FT%TZ))"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
set +eu  # nsys-prepare.sh is written to be sourced into an interactive shell
# shellcheck source=/dev/null
source "$KIT/nsys-prepare.sh"
set -eu
NSYS=${NSYS:-nsys}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
TRACES=$WORK/traces/foreign
mkdir -p "$TRACES"
{
    echo "# real-jobs campaign, $(date -u +%FT%TZ)"
    nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv || echo "no nvidia-smi"
    nvidia-smi topo -m || true
    "$NSYS" --version
    "$PYTHON" -c "import torch, transformers, accelerate, pytorch_lightning as pl; c = torch.cuda.is_available(); print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version() if c else None, 'gpus', torch.cuda.device_count(), torch.cuda.get_device_name(0) if c else 'cpu'); print('transformers', transformers.__version__, 'accelerate', accelerate.__version__, 'pytorch_lightning', pl.__version__)"
} | tee "$TRACES/machine.txt"

post() {  # post NAME: export, scrub (slim), xz -9; the unscrubbed export never outlives this function
    local name=$1 dir=$TRACES/$1 raw
    raw=$WORK/$name.unscrubbed.sqlite
    if ! "$NSYS" export --type sqlite --force-overwrite=true -o "$raw" "$WORK/$name.nsys-rep" >/dev/null; then
        rm -f "$raw"; echo "error: nsys export failed for $name"; return 1
    fi
    if ! "$PYTHON" -m ddp_profile.nsys.scrub --slim "$raw" -o "$dir/$name.sqlite"; then
        rm -f "$raw"; echo "error: scrubbing $name failed; the unscrubbed export was deleted"; return 1
    fi
    rm -f "$raw"
    xz -9 -T4 -f "$dir/$name.sqlite"
    echo "== $name: $(stat -c %s "$dir/$name.sqlite.xz") bytes scrubbed + xz ($(( $(date +%s) - START )) s elapsed)"
}

SKIPPED=() FAILED=() DONE=() PIDS=()
wanted=" ${*:-} "
while IFS='|' read -r name nsys_extra program options; do
    [ -n "$name" ] || continue
    if [ "$wanted" != "  " ] && [[ "$wanted" != *" $name "* ]]; then continue; fi
    budget=$JOB_S
    [[ "$options" == *--compile* ]] && budget=$COMPILE_S
    now=$(date +%s)
    if [ $((now + budget)) -gt $((START + DEADLINE - RESERVE)) ]; then
        SKIPPED+=("$name (needs ~${budget} s, $((START + DEADLINE - RESERVE - now)) s left)"); continue
    fi
    dir=$TRACES/$name
    rm -rf "$dir"; mkdir -p "$dir"
    echo "== $name: nsys profile -t cuda,nvtx --sample=none --cpuctxsw=none $nsys_extra -> torchrun $program $options ($((now - START)) s elapsed)"
    # shellcheck disable=SC2086
    if timeout -k 10 $((budget * 2)) "$NSYS" profile -t cuda,nvtx --sample=none --cpuctxsw=none $nsys_extra \
            --force-overwrite=true -o "$WORK/$name" \
            torchrun --nproc_per_node="$NPROC" "$HERE/foreign/$program" $options $JOB_ARGS --out "$dir" \
            </dev/null >"$WORK/logs/$name.log" 2>&1 && [ -e "$WORK/$name.nsys-rep" ] && [ -e "$dir/truth.json" ]; then
        echo "   ran in $(( $(date +%s) - now )) s; $(grep -h 'median iteration' "$WORK/logs/$name.log" | tail -n 1)"
        post "$name" </dev/null >>"$WORK/logs/post.log" 2>&1 &
        PIDS+=($!); DONE+=("$name")
    else
        FAILED+=("$name (log: logs/$name.log)"); tail -n 15 "$WORK/logs/$name.log"; rm -rf "$dir"
    fi
done <<<"$JOBS_TABLE"

for pid in "${PIDS[@]}"; do wait "$pid" || true; done
cat "$WORK/logs/post.log" 2>/dev/null || true
echo "== done: ${DONE[*]:-none}"
echo "== failed: ${FAILED[*]:-none}"
echo "== skipped: ${SKIPPED[*]:-none}"
cd "$WORK"
files=(traces/foreign/machine.txt)
for f in traces/foreign/*/*.sqlite.xz traces/foreign/*/truth.json; do [ -e "$f" ] && files+=("$f"); done
tar -cf "$OUT/real-jobs.tar" "${files[@]}"
if [ "$(stat -c %s "$OUT/real-jobs.tar")" -gt "$PART_BYTES" ]; then
    split -b "$PART_BYTES" -d "$OUT/real-jobs.tar" "$OUT/real-jobs.tar.part" && rm "$OUT/real-jobs.tar"
fi
tar -cJf "$OUT/logs.tar.xz" logs
echo "== campaign finished in $(( $(date +%s) - START )) s"
ls -la "$OUT"
