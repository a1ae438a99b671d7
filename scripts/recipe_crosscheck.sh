#!/usr/bin/env bash
# Cross-check of ddp-profile's per-kernel overlap against NVIDIA's own `nsys recipe nccl_gpu_overlap_trace`:
# runs the recipe on each given .nsys-rep and leaves its tables (converted to CSV when they are parquet) in
# traces/<run>/recipe/, next to the scrubbed export of the same run. `ddp-profile` then compares the two
# (tests/analysis/test_recipe_crosscheck.py reads the committed CSVs).
#
# Usage: scripts/recipe_crosscheck.sh REPORT.nsys-rep...     e.g. scripts/recipe_crosscheck.sh traces/overlap_*/*.nsys-rep
# Knobs (environment):
#   NSYS=            nsys binary (else found like scripts/_nsys.sh does)      e.g. NSYS=/opt/nvidia/nsight-systems/bin/nsys
#   PYTHON=python3   interpreter used to turn parquet into CSV (needs pandas + pyarrow; skipped if absent)
#   RECIPE_TIMEOUT=120   seconds allowed per report
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/_nsys.sh
source "$HERE/_nsys.sh"
find_nsys
PYTHON=${PYTHON:-python3}
RECIPE_TIMEOUT=${RECIPE_TIMEOUT:-120}
[ $# -ge 1 ] || { echo "usage: scripts/recipe_crosscheck.sh REPORT.nsys-rep..." >&2; exit 2; }
status=0
for rep in "$@"; do
    [ -f "$rep" ] || { echo "recipe: no such report: $rep" >&2; status=1; continue; }
    dest="$(dirname "$rep")/recipe"
    tmp="$dest.tmp"
    rm -rf "$tmp"
    echo "== nccl_gpu_overlap_trace on $rep"
    if timeout "$RECIPE_TIMEOUT" "$NSYS" recipe nccl_gpu_overlap_trace --input "$rep" --output "$tmp" >"$tmp.log" 2>&1; then
        # Keep only the data tables: the notebook and logs hold absolute paths of this machine.
        find "$tmp" -type f ! \( -name '*.parquet' -o -name '*.csv' \) -delete
        find "$tmp" -name '*.parquet' -print0 | while IFS= read -r -d '' pq; do
            "$PYTHON" -c 'import sys, pandas as pd; pd.read_parquet(sys.argv[1]).to_csv(sys.argv[1][:-8] + ".csv")' "$pq" \
                && rm -f "$pq" || echo "recipe: could not convert $pq to CSV (pandas/pyarrow missing?)"
        done
        # xz-compressed: traces/ has a size budget (pandas reads .csv.xz as it is)
        find "$tmp" -name '*.csv' -exec xz -9 {} \;
        rm -rf "$dest"; mv "$tmp" "$dest"; rm -f "$tmp.log"
        echo "   -> $dest: $(find "$dest" -type f | wc -l) tables"
    else
        echo "recipe: nccl_gpu_overlap_trace failed on $rep; its log:" >&2
        tail -n 20 "$tmp.log" >&2 || true
        status=1
    fi
done
exit "$status"
