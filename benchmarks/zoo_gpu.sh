#!/usr/bin/env bash
# The model zoo on one GPU, as one command, in at most 7 minutes (ZOO_BUDGET, 420 s on CUDA):
#
#     bash benchmarks/zoo_gpu.sh                                  # on the GPU machine (carry .gpu_wheels there)
#     ZOO_DEVICE=cpu ZOO_SMALL=1 bash benchmarks/zoo_gpu.sh       # dry run here, on the CPU, with a tiny family
#
# Phases, each under a timeout cut from the one overall budget, so that none can run past it:
#
#   1. install what python3 cannot import from .gpu_wheels/ (made by benchmarks/gpu_wheels.sh; the GPU machine
#      reaches no registry), each wheel with --no-deps into a folder put on PYTHONPATH after this checkout;
#   2. record the environment (nvidia-smi, Python, torch, CUDA, transformers, the commit);
#   3. train the family with `poslens zoo`: standard, large-base-trained and sliding, seeds 0 and 1, all in
#      lockstep, each run bounded by ZOO_RUN_SECONDS of training (the family by that times 6);
#   4. measure each run with the report's parts (benchmarks/zoo_measure.py: leakage and decomposition, sinks, BOS
#      replacement, relativization, on the held-out documents), rewriting its tables after every part;
#   5. pack the tables, logs and summaries into $OUT/zoo_gpu.tar.gz (no model weights: *.safetensors are left out).
#
# Everything lands in $OUT (default ./zoo_gpu_out): summary.md (the phases, the training summary and the
# measurement summary), and the archive. A run cut short (a phase's timeout, or a kill) still packs what finished.
# Exit status: 0 when every phase passed, else 1.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)

DEVICE=${ZOO_DEVICE:-cuda}
SMALL=${ZOO_SMALL:-0}
OUT=${OUT:-./zoo_gpu_out}
if [ "$DEVICE" = cpu ] && [ -x .venv/bin/python ]; then
    PY=${ZOO_PYTHON:-.venv/bin/python}  # the dry run: this checkout's environment
else
    PY=${ZOO_PYTHON:-python3}  # the GPU machine: its python3 holds torch
fi
if [ "$SMALL" = 1 ]; then
    # the dry run: a tiny family on 2 CPU cores; its numbers mean nothing and are never committed as zoo data
    BUDGET=${ZOO_BUDGET:-420}
    RUN_SECONDS=${ZOO_RUN_SECONDS:-10}
    TRAIN_FLAGS=(--steps 30 --seq-len 64 --width 32 --depth 3 --heads 2 --batch-size 8 --warmup 5 --eval-every 10
                 --eval-seqs 8 --max-documents 200)
    TRAIN_MAX=150
    MEASURE_FLAGS=(--n-seqs 8 --groups 2 --early 16 --batch-size 4 --relativize-seqs 8 --relativize-len 32
                   --replacements mean,zero)
else
    BUDGET=${ZOO_BUDGET:-420}
    RUN_SECONDS=${ZOO_RUN_SECONDS:-25}  # 6 runs: 150 s of training in all
    TRAIN_FLAGS=(--steps 3000 --seq-len 512 --width 256 --depth 4 --heads 4 --batch-size 32 --warmup 100 --eval-every 100
                 --eval-seqs 32)
    TRAIN_MAX=210  # the training's 150 s, the start (imports, data), the checkpoints and the saves
    MEASURE_FLAGS=(--n-seqs 16 --groups 8 --early 32 --batch-size 8 --relativize-seqs 16 --relativize-len 128)
fi

START=$(date +%s)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/zoo_gpu.XXXXXX")
RESULTS=$WORK/zoo_gpu  # the archive's one folder
mkdir -p "$RESULTS"
SITE=$WORK/site        # wheels installed here (never into the machine's own site-packages)
STEPS=$RESULTS/phases.tsv
printf 'phase\tstatus\tseconds\ttimeout_s\n' >"$STEPS"
FAILED=0

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export PYTHONPATH="$REPO:$SITE${PYTHONPATH:+:$PYTHONPATH}"
export REPO DEVICE SMALL PY BUDGET START RESULTS SITE RUN_SECONDS

LOG_NAME=zoo_gpu LOG_FILE=zoo_gpu.log STEP_ECHO=1
# shellcheck source=benchmarks/gpu_common.sh
source "$REPO/benchmarks/gpu_common.sh"  # log, step, install_wheels

# 1. the missing packages, from .gpu_wheels/ (the pattern of benchmarks/gpu_suite.sh)
install_missing() {
    install_wheels || return 1
    "$PY" - <<'EOF'
import importlib.metadata, importlib.util, sys
need = ["torch", "numpy", "transformers", "scipy", "pandas", "pyarrow", "safetensors", "tokenizers", "typer", "transformer_lens"]
absent = [name for name in need if importlib.util.find_spec(name) is None]
if absent:
    sys.exit(f"missing and not carried in .gpu_wheels: {', '.join(absent)}")
import poslens, poslens.zoo.train  # noqa: E401
from transformer_lens.model_bridge import TransformerBridge  # noqa: F401
print("poslens", poslens.__version__, "from", poslens.__file__)
print("transformers", importlib.metadata.version("transformers"), "transformer_lens", importlib.metadata.version("transformer-lens"))
EOF
}

# 2. the environment
record_environment() {
    echo "date: $(date -u +%FT%TZ)"
    echo "host: $(uname -a)"
    echo "zoo: device $DEVICE, small $SMALL, budget ${BUDGET}s, ${RUN_SECONDS}s of training per run, python $PY"
    echo "commit: $(git -C "$REPO" rev-parse HEAD 2>/dev/null || cat .gpu_wheels/source.txt 2>/dev/null || echo unknown)"
    git -C "$REPO" status --short 2>/dev/null | sed 's/^/    /'
    if command -v nvidia-smi >/dev/null; then
        timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
    else
        echo "nvidia-smi: not on this machine"
    fi
    "$PY" -c "import platform, torch; print('python', platform.python_version(), 'torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())"
}

# 3. the family (the phases run in a child bash, which sees no arrays: the flags travel as strings)
# shellcheck disable=SC2086
train() {
    "$PY" -m poslens.study.cli zoo --out "$RESULTS/zoo" --device "$DEVICE" --seeds 0,1 \
        --members standard,large-base-trained,sliding --time-budget "$RUN_SECONDS" $TRAIN_FLAGS_STR
}

# 4. the measurements, bounded by what is left (the driver skips parts that would start too late)
# shellcheck disable=SC2086
measure() {
    local left=$((BUDGET - 15 - ($(date +%s) - START) - 20))  # 20 s: the part that starts last may overrun
    "$PY" benchmarks/zoo_measure.py --zoo "$RESULTS/zoo" --out "$RESULTS/measure" --time-budget "$left" $MEASURE_FLAGS_STR
}

pack() {
    {
        echo "# Model zoo: device $DEVICE$([ "$SMALL" = 1 ] && echo ' (dry run, tiny family: not zoo data)'), $(date -u +%FT%TZ)"
        echo
        echo '```'
        column -t -s $'\t' "$STEPS" 2>/dev/null || cat "$STEPS"
        echo '```'
        echo
        echo "## Training (summary.csv of poslens zoo)"
        echo
        if [ -f "$RESULTS/zoo/summary.md" ]; then cat "$RESULTS/zoo/summary.md"; else echo "No training summary (see train.log)."; fi
        echo
        if [ -f "$RESULTS/measure/summary.md" ]; then sed 's/^# /## /' "$RESULTS/measure/summary.md"; else echo "No measurements (see measure.log)."; fi
    } >"$RESULTS/summary.md"
    cp "$RESULTS/summary.md" "$OUT/summary.md"
    tar -czf "$OUT/zoo_gpu.tar.gz" --exclude='*.safetensors' --exclude='*.sums.npz' -C "$WORK" zoo_gpu
    rm -rf "$WORK"
    echo
    cat "$OUT/summary.md"
    echo
    echo "archive: $OUT/zoo_gpu.tar.gz ($(du -h "$OUT/zoo_gpu.tar.gz" | cut -f1)); total $(($(date +%s) - START))s of the ${BUDGET}s budget"
}
trap pack EXIT
trap 'exit 1' TERM INT  # killed from outside: still pack what there is
export -f install_wheels install_missing record_environment train measure
export TRAIN_FLAGS_STR="${TRAIN_FLAGS[*]}" MEASURE_FLAGS_STR="${MEASURE_FLAGS[*]}"

log "device $DEVICE, small $SMALL, budget ${BUDGET}s, python $PY, output $OUT"
step install 45 install_missing
step environment 20 record_environment
if step train "$TRAIN_MAX" train; then
    step measure "$BUDGET" measure
else
    [ -f "$RESULTS/zoo/summary.csv" ] && step measure "$BUDGET" measure || {
        log "measure: skipped, no trained family"
        printf 'measure\tskipped (no family)\t0\t0\n' >>"$STEPS"
    }
fi
trap - EXIT
pack
exit "$FAILED"
