#!/usr/bin/env bash
# Show that a refactoring changed no figure: the same small `poslens report` on a base commit (BEFORE) and on the
# working tree (AFTER), then every table compared value by value (benchmarks/compare_runs.py, tolerance 1e-10).
#
# Usage: benchmarks/same_tables.sh [BASE] [WORK]
#   BASE  the commit the tables must equal (default: main)
#   WORK  where the base's checkout and both folders go (default: a new temporary folder)
# Environment: PY (the Python that has poslens's dependencies; default .venv/bin/python). Runs offline
# (HF_HUB_OFFLINE=1) on the embedded smollm2-135m and gemma3-270m, a few minutes of CPU per side.
# `make same-tables BASE=<commit>` runs it; issue 51's proof was run with BASE=23814b7 (CHANGELOG.md).
set -euo pipefail
BASE=${1:-main}
WORK=${2:-$(mktemp -d)}
PY=${PY:-.venv/bin/python}
ROOT=$(git rev-parse --show-toplevel)
SMALL=(--quick --n-seqs 4 --seq-len 64 --groups 2 --fingerprint-seqs 2 --fingerprint-len 32
       --compare-seqs 2 --compare-len 32 --relativize-seqs 4 --relativize-len 32 --batch-size 2)
report() {  # report SOURCE_TREE OUT
  (cd "$1" && HF_HUB_OFFLINE=1 PYTHONPATH="$1" "$ROOT/$PY" -c \
    "import sys; sys.argv[0] = 'poslens'; from poslens.study.cli import run; run()" report "${SMALL[@]}" --out "$2")
}
git -C "$ROOT" worktree add --detach "$WORK/base" "$BASE" >/dev/null
trap 'git -C "$ROOT" worktree remove --force "$WORK/base"' EXIT
report "$WORK/base" "$WORK/before" >"$WORK/before.log" 2>&1
report "$ROOT" "$WORK/after" >"$WORK/after.log" 2>&1
"$ROOT/$PY" "$ROOT/benchmarks/compare_runs.py" "$WORK/before" "$WORK/after" --tolerance 1e-10
