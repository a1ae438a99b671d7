# shellcheck shell=bash
# Sourced by the profiling scripts (not run directly). Defines:
#   find_nsys           sets NSYS to a working nsys binary, or prints one line on how to get one and fails
#   check_report BASE   fails with a plain explanation if `nsys profile` left only BASE*.qdstrm
#   post_process DIR    exports every DIR/*.nsys-rep to SQLite, scrubs it (slim, xz), deletes the unscrubbed copy
#   nvlink_multicast_off  exports the variables that keep NVLink multicast (NVLS) off
# Knobs (environment):
#   NSYS=/path/to/nsys     use this binary first            e.g. NSYS=/opt/nvidia/nsight-systems/2025.3.2/bin/nsys
#   PYTHON=python3         interpreter for the scrubber     e.g. PYTHON=.venv/bin/python
#   SCRUB_ARGS="--slim --compress xz"   scrubber options     e.g. SCRUB_ARGS="--slim"

NSYS_INSTALL_HINT="install Nsight Systems (https://developer.nvidia.com/nsight-systems, or apt install nsight-systems-cli) and put nsys on PATH or set NSYS=/path/to/nsys"
NSYS_PREPARE_HINT="on the project's lent GPU machines run: source .device-kit/nsys-prepare.sh (copied from shared/device/)"

find_nsys() {
    local candidate
    if [ -n "${NSYS:-}" ]; then
        if [ -x "$NSYS" ]; then return 0; fi
        echo "error: NSYS=$NSYS is not an executable file; $NSYS_INSTALL_HINT" >&2
        return 1
    fi
    if candidate=$(command -v nsys 2>/dev/null); then NSYS=$candidate; export NSYS; return 0; fi
    # Usual install folders, newest version last in sort order; the Nsight Compute copy comes last because
    # it needs nsys-prepare.sh (host folder layout + libdw) before `nsys profile` can import its data.
    for candidate in $(ls -d /opt/nvidia/nsight-systems*/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys \
                           /usr/local/cuda/bin/nsys /usr/local/cuda-*/bin/nsys /usr/lib/nsight-systems/bin/nsys \
                           /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | sort -V); do
        if [ -x "$candidate" ]; then NSYS=$candidate; fi
    done
    if [ -n "${NSYS:-}" ]; then
        case "$NSYS" in
            */nsight-compute/*) echo "note: using $NSYS from Nsight Compute's folder; if profiling stops at a .qdstrm, $NSYS_PREPARE_HINT" >&2 ;;
        esac
        export NSYS
        return 0
    fi
    echo "error: nsys (Nsight Systems) not found in \$NSYS, PATH or the usual install folders; $NSYS_INSTALL_HINT" >&2
    return 1
}

check_report() {
    local base=$1 qdstrm
    if ls "$base"*.nsys-rep >/dev/null 2>&1; then return 0; fi
    qdstrm=$(ls "$base"*.qdstrm 2>/dev/null | head -n 1 || true)
    if [ -n "$qdstrm" ]; then
        echo "error: nsys profile left only $qdstrm and no .nsys-rep: its importer (QdstrmImporter) failed, usually because the host-linux-x64 folder or libdw is missing; $NSYS_PREPARE_HINT, or import it by hand with the QdstrmImporter of a full Nsight Systems install" >&2
    else
        echo "error: nsys profile wrote no report at $base*.nsys-rep (did the program call torch.cuda.profiler.start()? see the log above)" >&2
    fi
    return 1
}

post_process() {
    local dir=$1 rep base raw
    local python=${PYTHON:-python3}
    # shellcheck disable=SC2206
    local scrub_args=(${SCRUB_ARGS:---slim --compress xz})
    for rep in "$dir"/*.nsys-rep; do
        [ -e "$rep" ] || { echo "error: no .nsys-rep in $dir" >&2; return 1; }
        base=${rep%.nsys-rep}
        raw=$base.unscrubbed.sqlite
        # The raw export never outlives this loop, also when export or scrub fails (callers may run this
        # under `&&`, where set -e is off, so failures are returned explicitly).
        if ! "$NSYS" export --type sqlite --force-overwrite=true -o "$raw" "$rep" >/dev/null; then
            rm -f "$raw"; echo "error: nsys export failed for $rep" >&2; return 1
        fi
        if ! "$python" -m ddp_profile.nsys.scrub "$raw" -o "$base.sqlite" "${scrub_args[@]}"; then
            rm -f "$raw"; echo "error: scrubbing $raw failed; the unscrubbed export was deleted" >&2; return 1
        fi
        rm -f "$raw"
    done
}

nvlink_multicast_off() {
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
}
