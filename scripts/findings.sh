#!/usr/bin/env bash
# Regenerate the report pages, FINDINGS.md and findings.html: all of it is the main job, `ddp-profile report`.
#
# Usage: scripts/findings.sh [extra ddp-profile report args, e.g. --jobs 2]
# Knobs (environment):
#   TRACES=traces        campaign folder (run folders, plus scaling/)    e.g. TRACES=/data/traces
#   OUT=reports          output folder (replaced atomically)             e.g. OUT=/tmp/reports
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY=${PYTHON:-$ROOT/.venv/bin/python}
[ -x "$PY" ] || PY=python3
exec "$PY" -m ddp_profile report "${TRACES:-traces}" -o "${OUT:-reports}" "$@"
