#!/usr/bin/env bash
# One call of the GPU campaign: run the lines of scripts/campaign_configs.txt whose PART is given, and pack
# everything that finished into $OUT (also on failure or time-out).
#
# Per harness configuration: one profiled run (scripts/profile.sh: nsys, export, scrub --slim --compress xz)
# into traces/campaign/<SET>/<run>/, then REPEATS un-profiled torchrun runs whose run JSONs go to
# traces/.logs/campaign-part<PART>/unprofiled/<SET>/<run>/rep<k>/; `python -m ddp_profile.harness.timings`
# folds their step times (unprofiled_step_ms_median, profiler_overhead_pct, host, ...) into the profiled
# run's JSON. Set `foreign` profiles the stand-alone programs of scripts/foreign/ into traces/foreign/<NAME>/;
# set `two-node` runs two torchrun agents as two nodes (NPROC GPUs each, one report per rank) into
# traces/two-node/<run>/. A line `PART SET NPROC @recommend STRATEGY OPTIONS` closes the loop on the machine:
# `ddp-profile analyze --section recommendation` reads the run of STRATEGY OPTIONS (with the set's options)
# profiled earlier in this call, and the harness runs the configuration it recommends like any other line
# (recommendations are listed in traces/.logs/campaign-part<PART>/recommendations.txt). Lines are taken in file order; a line that would end after the deadline is
# skipped and listed; a failed line is listed and the rest go on; every run is killed at the hard end.
#
# Usage: scripts/campaign.sh PART...             e.g. scripts/campaign.sh 1     (then, in a second call: 2)
#   On the lent machine (repository root, .device-kit carried):
#     source .device-kit/nsys-prepare.sh && OUT=$OUT scripts/campaign.sh 1
# $OUT receives (at most 8 files): <SET>.tar per set that produced something (split into <SET>.tar.partNN
# of 15 MiB when larger; join with `cat SET.tar.part* | tar -x`), machine-part<PART>.txt and
# logs-part<PART>.tar.xz. Unpack in the repository root: `tar -xf A.tar` puts traces/campaign/A/...
#
# Knobs (environment):
#   OUT=                    folder for the results (set by the device tool)            e.g. OUT=/tmp/out
#   CONFIGS=<here>/campaign_configs.txt   the configuration list                    e.g. CONFIGS=/tmp/mine.txt
#   KIT=<repo>/.device-kit  carried kit: nsys-prepare.sh, .deb files, wheels/nvtx-*.whl (used if present)
#   DEADLINE=560            seconds this call may take in all (keep under the tool's 600)  e.g. DEADLINE=540
#   RESERVE=45              seconds kept after the last line starts for exports, scrubbing and packing
#   PACK_S=25               seconds before DEADLINE at which any run still going is killed
#   RUN_CAP_S=240           longest any single run may take before it is killed (a hung NCCL job)
#   STACK_DUMP_S=           every rank prints its threads' Python stacks after this many seconds and each
#                           period after (DDP_PROFILE_STACK_DUMP_S, harness.launch.arm_stack_dump), into the
#                           run's log: where a run that never ends waits (set U's graphed 2-rank runs under
#                           nsys)                                                       e.g. STACK_DUMP_S=120
#   REPEATS=2               un-profiled runs per harness configuration (0: profiled runs only) e.g. REPEATS=3
#   XL_RUN_S=17 XL_PROF_S=28       expected seconds of one un-profiled / profiled run with --model xl (the
#                                  2026-11 campaign on 2 x H200: a profiled XL run every ~25 s, setup_s ~4)
#   SMALL_RUN_S=14 SMALL_PROF_S=20 the same for any other model
#   FOREIGN_PROF_S=35              expected seconds of one foreign program under nsys
#   TWO_NODE_RUN_S=18 TWO_NODE_PROF_S=30   the same for the two-node line (both agents together)
#   RDZV_PORT=29517         rendezvous port of the two-node line's agents (localhost)
#   HOST_LABEL=             machine label for JSONs and machine files (default campaign-<gpu>-<host pseudonym>,
#                           the pseudonym being the scrubber's host-<8 hex>, never the real host name)
#   TRACES=<repo>/traces    output root (campaign/, foreign/, two-node/, .logs/ go under it)
#   PYTHON=python3          interpreter with torch                                     e.g. PYTHON=.venv/bin/python
#   NSYS=                   nsys binary (else found as scripts/_nsys.sh does)
set -euo pipefail

START=$(date +%s)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)

if [ $# -lt 1 ]; then
    echo "usage: scripts/campaign.sh PART...   (the PART column of scripts/campaign_configs.txt, e.g. 1)" >&2
    exit 2
fi
PARTS=("$@")
PART_TAG=$(IFS=-; echo "${PARTS[*]}")
OUT=${OUT:?set OUT to the folder that receives the results}
CONFIGS=${CONFIGS:-$HERE/campaign_configs.txt}
KIT=${KIT:-$ROOT/.device-kit}
DEADLINE=${DEADLINE:-560}
RESERVE=${RESERVE:-45}
PACK_S=${PACK_S:-25}
RUN_CAP_S=${RUN_CAP_S:-240}
if [ -n "${STACK_DUMP_S:-}" ]; then export DDP_PROFILE_STACK_DUMP_S=$STACK_DUMP_S; fi
REPEATS=${REPEATS:-2}
XL_RUN_S=${XL_RUN_S:-17}
XL_PROF_S=${XL_PROF_S:-28}
SMALL_RUN_S=${SMALL_RUN_S:-14}
SMALL_PROF_S=${SMALL_PROF_S:-20}
FOREIGN_PROF_S=${FOREIGN_PROF_S:-35}
TWO_NODE_RUN_S=${TWO_NODE_RUN_S:-18}
TWO_NODE_PROF_S=${TWO_NODE_PROF_S:-30}
RDZV_PORT=${RDZV_PORT:-29517}
TRACES=${TRACES:-$ROOT/traces}
PYTHON=${PYTHON:-python3}
PART_BYTES=$((15 * 1024 * 1024))
START_BY=$((START + DEADLINE - RESERVE))  # a line must be expected to end by then
HARD_END=$((START + DEADLINE - PACK_S))   # any run still going is killed then
export PYTHON TRACES

[ -f "$CONFIGS" ] || { echo "error: no configuration list at $CONFIGS" >&2; exit 2; }
cd "$ROOT"
mkdir -p "$OUT"
LOGDIR=$TRACES/.logs/campaign-part$PART_TAG
UNPROF=$LOGDIR/unprofiled
rm -rf "$LOGDIR"
mkdir -p "$LOGDIR" "$UNPROF"
exec > >(tee -a "$LOGDIR/campaign.log") 2>&1

DONE=()
SKIPPED=()
FAILED=()
POST_PIDS=()
POST_WHAT=()
USED_SETS=()   # output folders (relative to $TRACES) that received something, in order
MACHINE=$LOGDIR/machine.txt

note_set() {  # note_set FOLDER: remember a folder under $TRACES to pack
    local s
    for s in "${USED_SETS[@]}"; do [ "$s" = "$1" ] && return 0; done
    USED_SETS+=("$1")
}

pack() {  # pack everything that finished; runs once, from the EXIT trap
    local i folder name files tarball
    trap - EXIT INT TERM
    set +e
    for i in "${!POST_PIDS[@]}"; do
        if wait "${POST_PIDS[$i]}"; then DONE+=("${POST_WHAT[$i]}")
        else FAILED+=("export/scrub of ${POST_WHAT[$i]} (log: $LOGDIR/post-$(basename "${POST_WHAT[$i]}").log)"); fi
    done
    {
        echo "== campaign part $PART_TAG: ${#DONE[@]} done, ${#SKIPPED[@]} skipped, ${#FAILED[@]} failed, $(( $(date +%s) - START )) s"
        for i in "${DONE[@]}"; do echo "   ok      $i"; done
        for i in "${SKIPPED[@]}"; do echo "   skipped $i"; done
        for i in "${FAILED[@]}"; do echo "   FAILED  $i"; done
    } | tee "$LOGDIR/summary.txt"
    local base
    base=$(basename "$TRACES")
    for folder in "${USED_SETS[@]}"; do
        [ -d "$TRACES/$folder" ] || continue
        cp "$MACHINE" "$TRACES/$folder/machine.txt" 2>/dev/null
        name=$(basename "$folder")
        files=$(cd "$TRACES/.." && find "$base/$folder" -type f \( -name '*.sqlite.xz' -o -name '*.json' -o -name machine.txt \) \
                    ! -path '*/.*' | sort)
        [ -n "$files" ] || { echo "== $folder: nothing to pack"; continue; }
        tarball=$OUT/$name.tar
        # shellcheck disable=SC2086
        (cd "$TRACES/.." && tar -cf "$tarball" $files)
        if [ "$(stat -c %s "$tarball")" -gt "$PART_BYTES" ]; then
            split -b "$PART_BYTES" -d "$tarball" "$tarball.part"
            rm -f "$tarball"
            echo "== $folder: packed into $(cd "$OUT" && ls "$name".tar.part* | tr '\n' ' ')(join: cat $name.tar.part* | tar -x)"
        else
            echo "== $folder: packed $(echo "$files" | wc -l) files into $name.tar"
        fi
    done
    cp "$MACHINE" "$OUT/machine-part$PART_TAG.txt" 2>/dev/null
    (cd "$TRACES/.." && tar -cJf "$OUT/logs-part$PART_TAG.tar.xz" "$base/.logs/campaign-part$PART_TAG")
    local count
    count=$(find "$OUT" -maxdepth 1 -type f | wc -l)
    [ "$count" -le 8 ] || echo "warning: $OUT holds $count files; the device tool returns at most 8"
    ls -la "$OUT"
    [ "${#FAILED[@]}" -eq 0 ] && exit 0
    exit 1
}
trap pack EXIT
trap 'echo "!! interrupted"; exit 130' INT TERM

echo "== setup ($(date -u +%FT%TZ)); parts: ${PARTS[*]}; deadline ${DEADLINE} s"
if ! "$PYTHON" -c "import nvtx" 2>/dev/null && ls "$KIT"/wheels/nvtx-*.whl >/dev/null 2>&1; then
    "$PYTHON" -m pip install -q --no-index --no-deps --target /tmp/site "$KIT"/wheels/nvtx-*.whl
fi
export PYTHONPATH="/tmp/site:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
if [ -z "${NSYS:-}" ] && ! command -v nsys >/dev/null 2>&1 && [ -f "$KIT/nsys-prepare.sh" ]; then
    set +eu  # nsys-prepare.sh is written to be sourced into an interactive shell
    # shellcheck source=/dev/null
    source "$KIT/nsys-prepare.sh"
    set -eu
fi
# shellcheck source=scripts/_nsys.sh
source "$HERE/_nsys.sh"
nvlink_multicast_off
find_nsys
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
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
print(f"campaign-{gpu}-{pseudonym(socket.gethostname())}")
EOF
)
fi
{
    echo "# campaign part $PART_TAG, $(date -u +%FT%TZ); host label $HOST_LABEL (the scrubber's pseudonym; no real host name)"
    nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv 2>/dev/null || echo "no nvidia-smi"
    nvidia-smi topo -m 2>/dev/null || true
    "$NSYS" --version 2>/dev/null || echo "nsys --version failed"
    "$PYTHON" -c "import torch; c = torch.cuda.is_available(); print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version() if c else None, 'gpus', torch.cuda.device_count(), torch.cuda.get_device_name(0) if c else 'cpu')"
    "$PYTHON" -c "import nvtx; print('nvtx', getattr(nvtx, '__version__', 'present'))" 2>/dev/null || echo "nvtx missing"
    echo "knobs: REPEATS=$REPEATS DEADLINE=$DEADLINE RESERVE=$RESERVE XL_RUN_S=$XL_RUN_S XL_PROF_S=$XL_PROF_S SMALL_RUN_S=$SMALL_RUN_S SMALL_PROF_S=$SMALL_PROF_S FOREIGN_PROF_S=$FOREIGN_PROF_S TWO_NODE_RUN_S=$TWO_NODE_RUN_S TWO_NODE_PROF_S=$TWO_NODE_PROF_S"
} | tee "$MACHINE"

limited() {  # limited LOG CMD...: CMD with its output in LOG, killed at min(RUN_CAP_S, HARD_END)
    local log=$1 limit
    shift
    limit=$((HARD_END - $(date +%s)))
    [ "$limit" -le "$RUN_CAP_S" ] || limit=$RUN_CAP_S
    if [ "$limit" -lt 5 ]; then echo "!! no time left to start: $*" >>"$log"; return 124; fi
    timeout -k 10 "$limit" "$@" </dev/null >>"$log" 2>&1
}

post_in_background() {  # post_in_background DIR: export + scrub DIR's reports while the next line runs
    local dir=$1
    ( post_process "$dir" ) </dev/null >"$LOGDIR/post-$(basename "$dir").log" 2>&1 &
    POST_PIDS+=($!)
    POST_WHAT+=("${dir#"$TRACES"/}")
}

run_name() {  # run_name WORLD STRATEGY OPTIONS...: the harness's run name (fails if it rejects the options)
    local world=$1 strategy=$2
    shift 2
    "$PYTHON" -m ddp_profile.harness --strategy "$strategy" "$@" --nproc "$world" --print-run-name </dev/null
}

fold_timings() {  # fold_timings PROFILED_JSON UNPROFILED_FOLDER LABEL
    local jsons=()
    [ "$REPEATS" -gt 0 ] || return 0  # REPEATS=0: profiled runs only, nothing to fold (set Q)
    mapfile -t jsons < <(find "$2" -name '*.json' -path '*/rep*' 2>/dev/null | sort)
    if [ "${#jsons[@]}" -eq 0 ]; then FAILED+=("$3: no un-profiled run finished"); return 0; fi
    [ "${#jsons[@]}" -ge "$REPEATS" ] || FAILED+=("$3: only ${#jsons[@]} of $REPEATS un-profiled runs finished")
    if ! "$PYTHON" -m ddp_profile.harness.timings "$1" "${jsons[@]}" --host "$HOST_LABEL" </dev/null >>"$LOGDIR/timings.log" 2>&1; then
        FAILED+=("$3: folding the un-profiled times failed (log: $LOGDIR/timings.log)")
    fi
    tail -n 1 "$LOGDIR/timings.log"
}

run_harness() {  # run_harness SET NPROC STRATEGY OPTIONS...
    local set=$1 n=$2 strategy=$3 name dir log k label dirfile
    shift 3
    label="$set: NPROC=$n $strategy $*"
    log=$LOGDIR/$set-$(date +%s%N).log
    dirfile=$log.dir
    echo "-- $label (log: ${log#"$TRACES"/})"
    # profile.sh names the run (the harness's --print-run-name, which also rejects unknown options)
    if ! NPROC=$n POST=0 TRACES=$TRACES/campaign/$set RUN_DIR_OUT=$dirfile limited "$log" "$HERE/profile.sh" "$strategy" "$@" \
            || [ ! -s "$dirfile" ]; then
        if grep -q "unrecognized arguments\|invalid choice\|error: argument" "$log"; then
            FAILED+=("$label: the harness rejected the options (log: $log)")
        else
            FAILED+=("$label: profiled run (log: $log)")
        fi
        tail -n 3 "$log"; return 0
    fi
    dir=$(cat "$dirfile")
    name=$(basename "$dir")
    echo "   -> campaign/$set/$name"
    note_set "campaign/$set"
    post_in_background "$dir"
    rm -rf "$UNPROF/$set/$name"
    for k in $(seq 1 "$REPEATS"); do
        if ! limited "$log" "$PYTHON" -m torch.distributed.run --standalone --nproc_per_node="$n" \
                -m ddp_profile.harness --strategy "$strategy" "$@" --out "$UNPROF/$set/$name/rep$k"; then
            echo "!! un-profiled run $k of $label failed (log: $log)"
        fi
    done
    fold_timings "$dir/$name.json" "$UNPROF/$set/$name" "$label"
}

wait_post() {  # wait_post DIR: wait for DIR's background export + scrub (started by post_in_background)
    local i
    for i in "${!POST_WHAT[@]}"; do
        [ "${POST_WHAT[$i]}" = "${1#"$TRACES"/}" ] || continue
        wait "${POST_PIDS[$i]}"
        return $?
    done
    return 1
}

run_recommended() {  # run_recommended SET NPROC STRATEGY OPTIONS...: the tool's recommendation, then the harness
    # STRATEGY OPTIONS name a run this call profiled earlier in SET; `ddp-profile analyze --section
    # recommendation` reads its scrubbed export and the line runs the configuration it recommends (the
    # recommendation row's flags, with the set's options), so the tool proposes and the harness confirms on
    # one machine in one call. A recommendation equal to the run's own configuration is reported, not run.
    local set=$1 n=$2 name dir log flags
    shift 2
    log=$LOGDIR/$set-recommend-$(date +%s%N).log
    if ! name=$(run_name "$n" "$@" 2>>"$log"); then
        FAILED+=("$set: @recommend $*: the harness rejected the options (log: $log)"); return 0
    fi
    dir=$TRACES/campaign/$set/$name
    if ! wait_post "$dir" || ! ls "$dir"/*.sqlite.xz >/dev/null 2>&1; then
        FAILED+=("$set: @recommend $*: no scrubbed export of $name from this call (run its line first)"); return 0
    fi
    if ! flags=$("$PYTHON" -m ddp_profile.cli analyze "$dir" --section recommendation --format json 2>>"$log" \
            | "$PYTHON" -c 'import json, sys
rows = [r for r in json.load(sys.stdin).get("recommendation") or [] if r.get("lever") == "recommended"]
print(rows[0]["flags"] if rows else "")' 2>>"$log") || [ -z "$flags" ]; then
        FAILED+=("$set: @recommend $*: ddp-profile gave no recommendation for $name (log: $log)"); return 0
    fi
    echo "-- $set: ddp-profile recommends for $name: $flags"
    echo "$name: $flags" >>"$LOGDIR/recommendations.txt"
    # shellcheck disable=SC2206
    local words=($flags) strategy="" rest=() i
    for ((i = 0; i < ${#words[@]}; i++)); do
        if [ "${words[$i]}" = --strategy ]; then strategy=${words[$((i + 1))]}; i=$((i + 1))
        else rest+=("${words[$i]}"); fi
    done
    if [ -z "$strategy" ]; then FAILED+=("$set: @recommend $*: no --strategy in '$flags'"); return 0; fi
    local recommended
    # shellcheck disable=SC2206
    recommended=("$strategy" ${SET_OPTS[$set]:-} "${rest[@]}")
    if [ "$(run_name "$n" "${recommended[@]}" 2>>"$log")" = "$name" ]; then
        echo "   the recommendation is $name's own configuration: nothing to confirm"; return 0
    fi
    run_harness "$set" "$n" "${recommended[@]}"
}

run_foreign() {  # run_foreign NPROC NAME NSYS-OPTIONS... -- PROGRAM [OPTIONS]
    local n=$1 name=$2 dir log
    shift 2
    local nsys_opts=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do nsys_opts+=("$1"); shift; done
    if [ $# -lt 2 ]; then FAILED+=("foreign $name: line lacks '-- PROGRAM'"); return 0; fi
    shift
    local program=$HERE/foreign/$1
    shift
    dir=$TRACES/foreign/$name
    log=$LOGDIR/foreign-$name.log
    echo "-- foreign $name: nsys ${nsys_opts[*]} -> $(basename "$program") $* (log: ${log#"$TRACES"/})"
    rm -rf "$dir"
    mkdir -p "$dir"
    if ! limited "$log" "$NSYS" profile --sample=none --cpuctxsw=none --force-overwrite=true "${nsys_opts[@]}" \
            -o "$dir/$name" "$PYTHON" -m torch.distributed.run --standalone --nproc_per_node="$n" \
            "$program" "$@" --out "$dir" || ! check_report "$dir/$name" 2>>"$log"; then
        FAILED+=("foreign $name (log: $log)"); tail -n 3 "$log"; return 0
    fi
    note_set foreign
    post_in_background "$dir"
}

run_two_node() {  # run_two_node NPROC_PER_NODE STRATEGY OPTIONS...: two agents, NPROC_PER_NODE GPUs each
    local n=$1 strategy=$2 name dir log r k ok pids=() gpus=()
    shift 2
    log=$LOGDIR/two-node.log
    if ! name=$(run_name $((2 * n)) "$strategy" "$@" 2>>"$log"); then
        FAILED+=("two-node $strategy $*: the harness rejected the options (log: $log)"); return 0
    fi
    dir=$TRACES/two-node/$name
    echo "-- two-node: 2 nodes x $n rank(s), $strategy $* -> two-node/$name (log: ${log#"$TRACES"/})"
    rm -rf "$dir"
    gpus=("$(seq -s, 0 $((n - 1)))" "$(seq -s, "$n" $((2 * n - 1)))")  # node r sees GPUs r*n .. r*n+n-1
    for r in 0 1; do
        CUDA_VISIBLE_DEVICES=${gpus[$r]} NNODES=2 NODE_RANK=$r NPROC=$n PER_RANK=1 POST=0 RDZV_ENDPOINT=localhost:$RDZV_PORT \
            TRACES=$TRACES/two-node limited "$log.node$r" "$HERE/profile.sh" "$strategy" "$@" &
        pids+=($!)
    done
    ok=1
    for r in 0 1; do wait "${pids[$r]}" || ok=0; done
    if [ "$ok" = 0 ]; then FAILED+=("two-node $name (logs: $log.node0, $log.node1)"); tail -n 3 "$log.node0" "$log.node1"; return 0; fi
    note_set two-node
    post_in_background "$dir"
    rm -rf "$UNPROF/two-node/$name"
    for k in $(seq 1 "$REPEATS"); do
        pids=()
        for r in 0 1; do
            CUDA_VISIBLE_DEVICES=${gpus[$r]} limited "$log.node$r" "$PYTHON" -m torch.distributed.run --nnodes=2 --node_rank=$r \
                --nproc_per_node="$n" --rdzv-backend=c10d --rdzv-endpoint="localhost:$RDZV_PORT" \
                -m ddp_profile.harness --strategy "$strategy" "$@" --out "$UNPROF/two-node/$name/rep$k" &
            pids+=($!)
        done
        for r in 0 1; do wait "${pids[$r]}" || echo "!! un-profiled two-node run $k, node $r failed"; done
    done
    fold_timings "$dir/$name.json" "$UNPROF/two-node/$name" "two-node $name"
}

estimate() {  # estimate SET WHAT...: expected seconds of the whole line
    local set=$1
    shift
    case "$set" in
        foreign) echo "$FOREIGN_PROF_S" ;;
        two-node) echo $((TWO_NODE_PROF_S + REPEATS * TWO_NODE_RUN_S)) ;;
        *) if [[ " $* " == *" --model xl "* ]]; then echo $((XL_PROF_S + REPEATS * XL_RUN_S))
           else echo $((SMALL_PROF_S + REPEATS * SMALL_RUN_S)); fi ;;
    esac
}

declare -A SET_OPTS=()
lineno=0
while IFS= read -r line <&3 || [ -n "$line" ]; do
    lineno=$((lineno + 1))
    line=${line%%#*}
    read -r -a words <<<"$line" || true
    [ "${#words[@]}" -gt 0 ] || continue
    if [ "${words[0]}" = set ]; then SET_OPTS[${words[1]}]="${words[*]:2}"; continue; fi
    if [ "${#words[@]}" -lt 4 ]; then FAILED+=("$CONFIGS:$lineno: needs PART SET NPROC WHAT"); continue; fi
    part=${words[0]} set=${words[1]} n=${words[2]}
    what=("${words[@]:3}")
    match=0
    for p in "${PARTS[@]}"; do [ "$p" = "$part" ] && match=1; done
    [ "$match" = 1 ] || continue
    if [ "${what[0]}" = @recommend ]; then  # @recommend STRATEGY OPTIONS: set options after STRATEGY
        # shellcheck disable=SC2206
        what=(@recommend "${what[1]}" ${SET_OPTS[$set]:-} "${what[@]:2}")
    elif [ "$set" != foreign ] && [ "$set" != two-node ]; then
        # shellcheck disable=SC2206
        what=("${what[0]}" ${SET_OPTS[$set]:-} "${what[@]:1}")
    fi
    label="$set: NPROC=$n ${what[*]}"
    need=$n
    [ "$set" != two-node ] || need=$((2 * n))
    if [ "$GPUS" -gt 0 ] && [ "$need" -gt "$GPUS" ]; then SKIPPED+=("$label (needs $need GPUs, $GPUS present)"); continue; fi
    est=$(estimate "$set" "${what[@]}")
    if [ $(( $(date +%s) + est )) -gt "$START_BY" ]; then
        SKIPPED+=("$label (deadline: ~$est s needed, $(( START_BY - $(date +%s) )) s left)")
        echo "-- skip $label: too close to the deadline"
        continue
    fi
    t0=$(date +%s)
    case "$set" in
        foreign) run_foreign "$n" "${what[@]}" ;;
        two-node) run_two_node "$n" "${what[@]}" ;;
        *) if [ "${what[0]}" = @recommend ]; then run_recommended "$set" "$n" "${what[@]:1}"
           else run_harness "$set" "$n" "${what[@]}"; fi ;;
    esac
    echo "== $(( $(date +%s) - t0 )) s (estimated $est s): $label; $(( $(date +%s) - START )) s elapsed"
done 3<"$CONFIGS"
