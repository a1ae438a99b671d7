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
#   NNODES=1           nodes; >1 needs TORCHRUN_ARGS with the rendezvous, and PER_RANK=1
#   TORCHRUN_ARGS=     replaces the default "--standalone --nproc_per_node=$NPROC"
#                      e.g. TORCHRUN_ARGS="--nnodes=2 --node_rank=0 --nproc_per_node=2 --rdzv_endpoint=host0:29500"
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
TORCHRUN_ARGS=${TORCHRUN_ARGS:-"--standalone --nproc_per_node=$NPROC"}
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

rm -rf "$DIR"
mv "$TMP" "$DIR"
if [ -n "${RUN_DIR_OUT:-}" ]; then echo "$DIR" >"$RUN_DIR_OUT"; fi
if [ "$POST" = 1 ]; then
    post_process "$DIR"
    echo "== $RUN: scrubbed export(s): $(cd "$DIR" && ls ./*.sqlite* | tr '\n' ' ')"
fi
echo "== $RUN: report in $DIR (open the .nsys-rep with: nsys-ui $DIR/<file>.nsys-rep)"
