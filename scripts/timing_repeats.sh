#!/usr/bin/env bash
# One machine call of interleaved, un-profiled timing repeats (python -m ddp_profile.harness.repeats):
# every configuration of CONFIGS, round after round (A B C ... A B C ...), in one torchrun job of NPROC ranks,
# with a bootstrap confidence interval per configuration and nvidia-smi (clocks, temperature, power,
# throttle reasons) before and after every repeat. No nsys. Time-boxed: a repeat expected to end after the
# deadline is skipped and listed (skipped.txt), not killed; if the job dies anyway (a crash, a hung NCCL
# job killed at the hard end), it is resumed once more where time allows, without the configuration whose
# repeat never finished, and whatever finished is summarized and packed.
#
# Usage: scripts/timing_repeats.sh   (on the lent machine, repository root), e.g.
#   OUT=$OUT DEADLINE=540 bash scripts/timing_repeats.sh
# $OUT receives (at most 4 files): <SET>.tar (traces/campaign/<SET>/: <run>/<run>.json per configuration,
# repeats.jsonl.xz (every repeat as measured; plain repeats.jsonl where xz is missing), skipped.txt, machine.txt), machine-<SET>.txt and timing-<SET>.log.
# Unpack in the repository root: `tar -xf <SET>.tar` puts traces/campaign/<SET>/...
#
# Knobs (environment):
#   OUT=                  folder for the results (set by the device tool)          e.g. OUT=/tmp/out
#   SET=F                 campaign set name (folder under traces/campaign/)          e.g. SET=G
#   CONFIGS=<here>/timing_configs.txt   configuration list (harness options per line)
#   REPEATS=7             rounds asked; the deadline trims the last ones (>= 5 needed) e.g. REPEATS=5
#   DEADLINE=540          seconds this script may take in all (keep under the tool's 600)
#   RESERVE=25            seconds kept after the last repeat for the summary and packing
#   FIRST_ESTIMATE_S=25   expected seconds of a configuration's first repeat (later: its slowest so far, +20 %)
#   NPROC=2               ranks (GPUs) of the job
#   HOST_LABEL=           machine label for the JSONs (default timing-<gpu>-<scrubber's host pseudonym>)
#   KIT=<repo>/.device-kit   carried kit: wheels/nvtx-*.whl installed if nvtx is missing
#   TRACES=<repo>/traces  output root                                                e.g. TRACES=/tmp/t
#   PYTHON=python3        interpreter with torch
#   STALL_S=75            seconds without a new journal line after which the job is taken for hung and killed
set -euo pipefail

START=$(date +%s)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
OUT=${OUT:?set OUT to the folder that receives the results}
SET=${SET:-F}
CONFIGS=${CONFIGS:-$HERE/timing_configs.txt}
REPEATS=${REPEATS:-7}
DEADLINE=${DEADLINE:-540}
RESERVE=${RESERVE:-25}
FIRST_ESTIMATE_S=${FIRST_ESTIMATE_S:-25}
NPROC=${NPROC:-2}
KIT=${KIT:-$ROOT/.device-kit}
TRACES=${TRACES:-$ROOT/traces}
PYTHON=${PYTHON:-python3}
DEADLINE_AT=$((START + DEADLINE - RESERVE))   # every repeat must be expected to end by then
HARD_END=$((START + DEADLINE - RESERVE + 5))  # the job is killed then (only if a repeat overruns its estimate)
STALL_S=${STALL_S:-75}                        # watchdog: seconds without a journal line before a job is killed
JOURNAL=repeats.jsonl                         # python -m ddp_profile.harness.repeats appends a line per event

[ -f "$CONFIGS" ] || { echo "error: no configuration list at $CONFIGS" >&2; exit 2; }
cd "$ROOT"
mkdir -p "$OUT"
DIR=$TRACES/campaign/$SET
LOG=$OUT/timing-$SET.log
rm -rf "$DIR"
mkdir -p "$DIR"
exec > >(tee -a "$LOG") 2>&1

# nsys-free by construction; NVLink multicast off as on every lent machine (KINDS.md)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# XL fp32 stock DDP ran out of memory on an 80 GB H100 in its second repeat of one job (fragmentation
# after the bf16 configurations); expandable segments let the caching allocator reuse that memory.
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}
if ! "$PYTHON" -c "import nvtx" 2>/dev/null && ls "$KIT"/wheels/nvtx-*.whl >/dev/null 2>&1; then
    "$PYTHON" -m pip install -q --no-index --no-deps --target /tmp/site "$KIT"/wheels/nvtx-*.whl
fi
export PYTHONPATH="/tmp/site:$ROOT${PYTHONPATH:+:$PYTHONPATH}"

if [ -z "${HOST_LABEL:-}" ]; then
    HOST_LABEL=$("$PYTHON" - <<'EOF'
import socket
from ddp_profile.nsys.scrub import pseudonym
try:
    import torch
    from ddp_profile.harness.train import gpu_short_name
    gpu = gpu_short_name(torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu"))
except Exception:
    gpu = "unknown"
print(f"timing-{gpu}-{pseudonym(socket.gethostname())}")
EOF
) || HOST_LABEL=timing-unlabelled
fi
{
    echo "# timing set $SET, $(date -u +%FT%TZ); host label $HOST_LABEL (the scrubber's pseudonym; no real host name)"
    nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv 2>/dev/null || echo "no nvidia-smi"
    nvidia-smi topo -m 2>/dev/null || true
    "$PYTHON" -c "import torch; c = torch.cuda.is_available(); print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version() if c else None, 'gpus', torch.cuda.device_count(), torch.cuda.get_device_name(0) if c else 'cpu')"
    echo "knobs: REPEATS=$REPEATS DEADLINE=$DEADLINE RESERVE=$RESERVE FIRST_ESTIMATE_S=$FIRST_ESTIMATE_S NPROC=$NPROC CONFIGS=$(basename "$CONFIGS")"
    echo "env: PYTORCH_CUDA_ALLOC_CONF=$PYTORCH_CUDA_ALLOC_CONF NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE TORCH_SYMM_MEM_DISABLE_MULTICAST=$TORCH_SYMM_MEM_DISABLE_MULTICAST NVSHMEM_DISABLE_NVLS=$NVSHMEM_DISABLE_NVLS"
} | tee "$DIR/machine.txt"
cp "$CONFIGS" "$DIR/configs.txt"

STATUS=0
descendants() {  # descendants PID: every process below PID (children, then theirs), one PID a line
    local kid
    for kid in $(pgrep -P "$1" 2>/dev/null || true); do echo "$kid"; descendants "$kid"; done
}

attempt=0
resume=()
while :; do
    attempt=$((attempt + 1))
    left=$((HARD_END - $(date +%s)))
    if [ "$left" -lt 30 ]; then echo "== no time left for attempt $attempt"; break; fi
    echo "== attempt $attempt ($(( $(date +%s) - START )) s elapsed, deadline in $((DEADLINE_AT - $(date +%s))) s)"
    setsid timeout -k 10 "$left" "$PYTHON" -m torch.distributed.run --standalone --nproc_per_node="$NPROC" \
            -m ddp_profile.harness.repeats run --configs "$CONFIGS" --out "$DIR" --repeats "$REPEATS" \
            --deadline-at "$DEADLINE_AT" --first-estimate-s "$FIRST_ESTIMATE_S" --host "$HOST_LABEL" "${resume[@]}" \
            </dev/null &
    job=$!
    # Watchdog: a job whose journal has not moved for STALL_S seconds is hung (a repeat takes ~5-12 s; seen
    # once on 2 x H100: 6 minutes without output after a repeat finished); its process group is killed and
    # the next attempt resumes without the configuration whose repeat never finished.
    last=$(date +%s)
    while kill -0 "$job" 2>/dev/null; do
        sleep 2
        m=$(stat -c %Y "$DIR/$JOURNAL" 2>/dev/null || echo 0)
        [ "$m" -gt "$last" ] && last=$m
        if [ $(( $(date +%s) - last )) -gt "$STALL_S" ]; then
            echo "!! no progress for $STALL_S s: the job is taken for hung and killed"
            # The ranks may live outside the job's process group; killed with it, torchrun's agent cannot stop
            # them, and ranks hung in NCCL outlived set AA's call, holding its output open until the tool's limit.
            tree=$(descendants "$job")
            kill -TERM -- -"$job" 2>/dev/null || true; sleep 5; kill -KILL -- -"$job" 2>/dev/null || true
            # shellcheck disable=SC2086  # one PID per word
            [ -z "$tree" ] || kill -KILL $tree 2>/dev/null || true
            break
        fi
    done
    if wait "$job"; then
        STATUS=0
        break
    fi
    STATUS=1
    echo "!! the job ended with an error (attempt $attempt); resuming without the configuration it died in"
    [ "$attempt" -lt 3 ] || break
    resume=(--resume)
done

echo "== summary ($(( $(date +%s) - START )) s elapsed)"
"$PYTHON" -m ddp_profile.harness.repeats summarize --out "$DIR" --host "$HOST_LABEL" || STATUS=1
cat "$DIR/skipped.txt" 2>/dev/null || true
cp "$DIR/machine.txt" "$OUT/machine-$SET.txt"
# the journal (every step of every repeat, nvidia-smi before and after each) is ~1.4 MB of text: committed xz'd
xz -9 -f "$DIR/$JOURNAL" 2>/dev/null || true
(cd "$TRACES/.." && tar -cf "$OUT/$SET.tar" "$(basename "$TRACES")/campaign/$SET")
echo "== packed $OUT/$SET.tar in $(( $(date +%s) - START )) s (status $STATUS)"
ls -la "$OUT"
exit "$STATUS"
