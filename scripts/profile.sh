#!/usr/bin/env bash
# Profile one harness configuration under Nsight Systems and leave, in traces/<run>/:
#   <run>.nsys-rep (or <run>_rank<N>.nsys-rep)   the report, for the nsys GUI (git-ignored)
#   <run>.sqlite.xz                              the scrubbed, slim SQLite export (what gets committed)
#   <run>.json                                   the run record: config, versions, GPU, per-step times
# <run> is <strategy>[-<N>mb][+zero1|+zero1torch]_<model>_<dtype>_<world>x<gpu>, e.g. bucketed-25mb_xl_fp32_2xh100.
#
# Usage: scripts/profile.sh STRATEGY [bench options]
#   e.g. scripts/profile.sh bucketed --model xl --batch 4 --seq-len 256 --bucket-mb 25 --warmup 3 --steps 4
#        NPROC=1 scripts/profile.sh none --model xl
# Knobs (environment):
#   NPROC=2            processes (GPUs) per node                   e.g. NPROC=4
#   NNODES=1           nodes; >1 needs PER_RANK=1 and one profile.sh per node (same arguments, own NODE_RANK)
#   NODE_RANK=0        this node's rank when NNODES>1                                   e.g. NODE_RANK=1
#   RDZV_ENDPOINT=localhost:29500   c10d rendezvous when NNODES>1 (node 0's address)    e.g. RDZV_ENDPOINT=host0:29500
#   TORCHRUN_ARGS=     replaces the default "--standalone --nproc_per_node=$NPROC" (NNODES=1) or
#                      "--nnodes=$NNODES --node_rank=$NODE_RANK --nproc_per_node=$NPROC --rdzv-backend=c10d
#                      --rdzv-endpoint=$RDZV_ENDPOINT" (NNODES>1)
#                      With NNODES>1 each node works in its own traces/.<run>.partial.node<N>/ and moves its
#                      files into traces/<run>/ (merged, not replaced: clear the folder before a new run),
#                      and exports/scrubs only its own reports; rank 0's node writes <run>.json.
#   PER_RANK=0         1: one report per rank (nsys inside torchrun, named ..._rank%q{RANK}); 0: one report for all ranks
#   POST=1             0: skip export + scrub (profile_all.sh does them in the background)
#   TRACES=<repo>/traces   output root                             e.g. TRACES=/tmp/traces
#   PYTHON=python3     interpreter with torch                      e.g. PYTHON=.venv/bin/python
#   NSYS=              nsys binary (else PATH, then usual folders)  e.g. NSYS=/usr/local/cuda/bin/nsys
#   NSYS_EXTRA=        more `nsys profile` options                  e.g. NSYS_EXTRA="--cuda-memory-usage=true"
#   RUN_DIR_OUT=       file to receive the run folder's path (used by profile_all.sh)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
# shellcheck source=scripts/_nsys.sh
source "$HERE/_nsys.sh"

NPROC=${NPROC:-2}
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
RDZV_ENDPOINT=${RDZV_ENDPOINT:-localhost:29500}
if [ "$NNODES" -gt 1 ]; then
    TORCHRUN_ARGS=${TORCHRUN_ARGS:-"--nnodes=$NNODES --node_rank=$NODE_RANK --nproc_per_node=$NPROC --rdzv-backend=c10d --rdzv-endpoint=$RDZV_ENDPOINT"}
else
    TORCHRUN_ARGS=${TORCHRUN_ARGS:-"--standalone --nproc_per_node=$NPROC"}
fi
PER_RANK=${PER_RANK:-0}
POST=${POST:-1}
TRACES=${TRACES:-$ROOT/traces}
PYTHON=${PYTHON:-python3}
NSYS_EXTRA=${NSYS_EXTRA:-}

if [ $# -lt 1 ]; then
    echo "usage: scripts/profile.sh STRATEGY [bench options]   (see the header of $0)" >&2
    exit 2
fi
STRATEGY=$1
shift
if [ "$NNODES" -gt 1 ] && [ "$PER_RANK" != 1 ]; then
    echo "error: NNODES=$NNODES needs PER_RANK=1 (one report per rank; nsys runs inside each node's torchrun)" >&2
    exit 2
fi

cd "$ROOT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
nvlink_multicast_off
find_nsys
DDP_PROFILE_NSYS_VERSION=$("$NSYS" --version 2>/dev/null | head -n 1 || true)
export DDP_PROFILE_NSYS_VERSION

WORLD=$((NPROC * NNODES))
RUN=$("$PYTHON" -m ddp_profile.harness --strategy "$STRATEGY" "$@" --nproc "$WORLD" --print-run-name)
DIR=$TRACES/$RUN
TMP=$TRACES/.$RUN.partial
if [ "$NNODES" -gt 1 ]; then TMP=$TMP.node$NODE_RANK; fi
rm -rf "$TMP"
mkdir -p "$TMP"

# shellcheck disable=SC2206
NSYS_OPTS=(profile -t cuda,nvtx --sample=none --cpuctxsw=none
           --capture-range=cudaProfilerApi --capture-range-end=stop --force-overwrite=true $NSYS_EXTRA)
# shellcheck disable=SC2206
TORCHRUN=("$PYTHON" -m torch.distributed.run $TORCHRUN_ARGS)
BENCH=(-m ddp_profile.harness --strategy "$STRATEGY" "$@" --out "$TMP")

echo "== $RUN: nsys profile ($WORLD ranks, $([ "$PER_RANK" = 1 ] && echo 'one report per rank' || echo 'one report'))"
if [ "$PER_RANK" = 1 ]; then
    "${TORCHRUN[@]}" --no-python "$NSYS" "${NSYS_OPTS[@]}" -o "$TMP/${RUN}_rank%q{RANK}" "$PYTHON" "${BENCH[@]}"
    check_report "$TMP/${RUN}_rank"
else
    "$NSYS" "${NSYS_OPTS[@]}" -o "$TMP/$RUN" "${TORCHRUN[@]}" "${BENCH[@]}"
    check_report "$TMP/$RUN"
fi

if [ "$NNODES" -gt 1 ]; then
    # Several nodes share traces/<run>/ (same machine, or a shared file system): each exports and scrubs
    # only its own reports, then moves its files in.
    if [ "$POST" = 1 ]; then post_process "$TMP"; fi
    mkdir -p "$DIR"
    find "$TMP" -mindepth 1 -maxdepth 1 -exec mv -f {} "$DIR"/ \;
    rmdir "$TMP"
else
    rm -rf "$DIR"
    mv "$TMP" "$DIR"
    if [ "$POST" = 1 ]; then post_process "$DIR"; fi
fi
if [ -n "${RUN_DIR_OUT:-}" ]; then echo "$DIR" >"$RUN_DIR_OUT"; fi
if [ "$POST" = 1 ]; then
    echo "== $RUN: scrubbed export(s): $(cd "$DIR" && ls ./*.sqlite* | tr '\n' ' ')"
fi
echo "== $RUN: report in $DIR (open the .nsys-rep with: nsys-ui $DIR/<file>.nsys-rep)"
