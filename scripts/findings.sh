#!/usr/bin/env bash
# Regenerate the findings: the per-run report pages, then FINDINGS.md + findings.html beside them.
# `ddp-profile report` replaces its output folder, so it runs first and the findings are written after.
#
# Usage: scripts/findings.sh [extra ddp-profile findings args]
# Knobs (environment):
#   TRACES=traces        traces folder (run folders, plus scaling/)      e.g. TRACES=/data/traces
#   OUT=reports          output folder                                   e.g. OUT=/tmp/reports
#   JOBS=2               runs loaded in parallel by the report           e.g. JOBS=4
#   SKIP_REPORT=0        1 = only rewrite the findings (keep existing report pages)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TRACES=${TRACES:-traces}
OUT=${OUT:-reports}
JOBS=${JOBS:-2}
SKIP_REPORT=${SKIP_REPORT:-0}
PY=${PYTHON:-$ROOT/.venv/bin/python}
[ -x "$PY" ] || PY=python3
if [ "$SKIP_REPORT" != 1 ]; then
  scaling=()
  [ -d "$TRACES/scaling" ] && scaling=("$TRACES/scaling")
  "$PY" -m ddp_profile report "$TRACES" "${scaling[@]}" -o "$OUT" --jobs "$JOBS"
fi
"$PY" -m ddp_profile findings "$TRACES" -o "$OUT" "$@"
