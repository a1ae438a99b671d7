#!/usr/bin/env bash
# One-command campaign for a lent GPU machine: set up nvtx and nsys from the carried kit, record the
# machine, run scripts/profile_all.sh for each SET, and pack the new scrubbed runs into $OUT (one tar per
# set, split into 15 MiB parts if needed, plus logs.tar.xz). Time-boxed: runs that would end after the
# deadline are skipped and listed.
#
# Usage: scripts/device_campaign.sh SET...        e.g. DEADLINE=540 scripts/device_campaign.sh smoke small
# Knobs (environment):
#   OUT=                 folder for the results (set by the device tool)     e.g. OUT=/tmp/out
#   KIT=<repo>/.device-kit   carried kit: nsys-prepare.sh, the two .deb files, wheels/nvtx-*.whl
#   DEADLINE=540         seconds this script may take in all                 e.g. DEADLINE=560
#   RESERVE=60           seconds kept for exports, scrubbing and packing after the last run starts
#   KEEP_REP_SETS="smoke small"   sets whose .nsys-rep files are packed too (XL reports are large)
#   PYTHON=python3       interpreter with torch (nvtx is installed from the kit only if missing)
#   NPROC, STEPS, WARMUP, SCALING_NPROCS, XL_RUN_S, SMALL_RUN_S: passed to profile_all.sh
set -euo pipefail

START=$(date +%s)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
KIT=${KIT:-$ROOT/.device-kit}
OUT=${OUT:?set OUT to the folder that receives the results}
DEADLINE=${DEADLINE:-540}
RESERVE=${RESERVE:-60}
KEEP_REP_SETS=${KEEP_REP_SETS:-"smoke small"}
PART_BYTES=$((15 * 1024 * 1024))

if [ $# -lt 1 ]; then echo "usage: scripts/device_campaign.sh SET...  (smoke small A B scaling)" >&2; exit 2; fi
cd "$ROOT"
mkdir -p "$OUT" traces/.logs
CAMPAIGN_LOG=traces/.logs/campaign.log
exec > >(tee -a "$CAMPAIGN_LOG") 2>&1

echo "== setup ($(date -u +%FT%TZ))"
PYTHON=${PYTHON:-python3}
export PYTHON
if ! "$PYTHON" -c "import nvtx" 2>/dev/null; then
    "$PYTHON" -m pip install -q --no-index --no-deps --target /tmp/site "$KIT"/wheels/nvtx-*.whl
fi
export PYTHONPATH="/tmp/site:$ROOT"
set +eu  # nsys-prepare.sh is written to be sourced into an interactive shell
# shellcheck source=/dev/null
source "$KIT/nsys-prepare.sh"
set -eu
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
{
    nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv || echo "no nvidia-smi"
    nvidia-smi topo -m || true
    "${NSYS:-nsys}" --version
    "$PYTHON" -c "import torch, nvtx; c = torch.cuda.is_available(); print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version() if c else None, 'gpus', torch.cuda.device_count(), torch.cuda.get_device_name(0) if c else 'cpu')"
} | tee traces/.logs/machine.txt

export DEADLINE_AT=$((START + DEADLINE - RESERVE))
export INSPECT=${INSPECT:-0}
STATUS=0
for set in "$@"; do
    list=$(mktemp)
    echo "== set $set ($(( $(date +%s) - START )) s elapsed)"
    CAMPAIGN_LIST=$list "$HERE/profile_all.sh" "$set" || STATUS=1
    files=()
    while read -r dir; do
        [ -n "$dir" ] || continue
        rel=${dir#"$ROOT"/}
        for f in "$rel"/*.sqlite* "$rel"/*.json; do [ -e "$f" ] && files+=("$f"); done
        if [[ " $KEEP_REP_SETS " == *" $set "* ]]; then
            for f in "$rel"/*.nsys-rep; do [ -e "$f" ] && files+=("$f"); done
        fi
    done <"$list"
    rm -f "$list"
    if [ "${#files[@]}" -eq 0 ]; then echo "== set $set: nothing to pack"; continue; fi
    tar -cf "$OUT/$set.tar" "${files[@]}"
    if [ "$(stat -c %s "$OUT/$set.tar")" -gt "$PART_BYTES" ]; then
        split -b "$PART_BYTES" -d "$OUT/$set.tar" "$OUT/$set.tar.part"
        rm "$OUT/$set.tar"
        echo "== set $set: packed ${#files[@]} files into $(ls "$OUT" | grep -c "^$set.tar.part") parts (join with: cat $set.tar.part* | tar -x)"
    else
        echo "== set $set: packed ${#files[@]} files into $set.tar"
    fi
done
echo "== campaign finished in $(( $(date +%s) - START )) s (status $STATUS)"
tar -cJf "$OUT/logs.tar.xz" traces/.logs
ls -la "$OUT"
exit "$STATUS"
