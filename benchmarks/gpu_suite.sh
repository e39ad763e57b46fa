#!/usr/bin/env bash
# The GPU check of poslens, as one command, in under 4 minutes on one GPU:
#
#     bash benchmarks/gpu_suite.sh                                  # on the GPU machine (carry .gpu_wheels there)
#     GPU_SUITE_DEVICE=cpu GPU_SUITE_SMALL=1 bash benchmarks/gpu_suite.sh   # dry run here, on the CPU
#
# Everything it writes ends up in $OUT/gpu_suite.tar.gz ($OUT defaults to ./gpu_suite_out), beside a short
# $OUT/summary.md; both are printed or listed at the end. Steps, each under a timeout cut from one overall
# budget (GPU_SUITE_BUDGET seconds, 225 by default on CUDA), so that no step can hang past it:
#
#   1. install what python3 cannot import from .gpu_wheels/ (made here by benchmarks/gpu_wheels.sh; the GPU
#      machine reaches no registry), and transformers where its version is not this project's, each wheel
#      with --no-deps into a folder put first on PYTHONPATH, after the repository itself, so that poslens
#      imports from this checkout;
#   2. record the environment: nvidia-smi, Python, torch and CUDA versions, pip list, the commit;
#   3. the CUDA correctness tests, tests/unit/runtime/test_cuda.py (on the CPU dry run: POSLENS_TEST_DEVICE=cpu, a subset);
#   4. build a random-weight model with Llama-3.2-1B's architecture in bfloat16 on the device itself
#      (benchmarks/gpu_model.py; the dry run's is two layers of hidden 256);
#   5. time and measure peak memory of the plain forward, the capture (collect_sums), poslens.measure (probe
#      off) and the naive route at T = 4096, 2048 and 1024 (the longest first, since the targets are read
#      there), batch 4, 8 sequences in 2 groups (benchmarks/bench_measure.py; dry run: T = 128, 64); a
#      Markdown table and a JSON file, rewritten after every route;
#   6. pack it all into $OUT/gpu_suite.tar.gz.
#
# Exit status: 0 when every step passed, else 1 (the archive is written either way).
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)

DEVICE=${GPU_SUITE_DEVICE:-cuda}
SMALL=${GPU_SUITE_SMALL:-0}
OUT=${OUT:-./gpu_suite_out}
if [ "$DEVICE" = cpu ] && [ -x .venv/bin/python ]; then
    PY=${GPU_SUITE_PYTHON:-.venv/bin/python}  # the dry run: this checkout's environment
else
    PY=${GPU_SUITE_PYTHON:-python3}  # the GPU machine: its python3 holds torch
fi
if [ "$SMALL" = 1 ]; then
    BUDGET=${GPU_SUITE_BUDGET:-420}  # a shared 2-core machine is slow, and its speed drifts
    LENGTHS="128 64"  # the longest first: the targets are read there, and a spent budget skips the shorter
    WARMUP_LEN=48
    TEST_FILTER="equals or constant_logit or capture_pass or clear_residual"  # pytest -k: the dry run's subset
    MODEL_FLAGS=(--small)
else
    BUDGET=${GPU_SUITE_BUDGET:-225}
    LENGTHS="4096 2048 1024"
    WARMUP_LEN=256
    TEST_FILTER=""
    MODEL_FLAGS=()
fi

START=$(date +%s)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu_suite.XXXXXX")
RESULTS=$WORK/gpu_suite  # the archive's one folder
mkdir -p "$RESULTS"
SITE=$WORK/site          # wheels installed here (never into the machine's own site-packages)
MODEL_DIR=$WORK/model    # the random-weight model (2.5 GB on CUDA): not archived
STEPS=$RESULTS/steps.tsv
printf 'step\tstatus\tseconds\ttimeout_s\n' >"$STEPS"
FAILED=0

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1
export PYTHONPATH="$REPO:$SITE${PYTHONPATH:+:$PYTHONPATH}"
export TOKENIZERS_PARALLELISM=false
# the step functions run in a child bash under timeout (timeout runs programs, not functions): what they read
export REPO DEVICE SMALL PY BUDGET LENGTHS WARMUP_LEN TEST_FILTER START RESULTS SITE MODEL_DIR

LOG_NAME=gpu_suite LOG_FILE=suite.log STEP_ECHO=0
# shellcheck source=benchmarks/gpu_common.sh
source "$REPO/benchmarks/gpu_common.sh"  # log, step, install_wheels

# 1. install the missing packages from .gpu_wheels/ (one python process finds them: importing each would be slow)
install_missing() {
    # GPU_SUITE_FORCE_INSTALL="mod1 mod2": install those even if importable (to check this step on a full machine)
    install_wheels "${GPU_SUITE_FORCE_INSTALL:-}" || return 1
    # what is not in the wheels must be on the machine; then poslens, TransformerLens and the bridge must import
    "$PY" - <<'EOF'
import importlib.metadata, importlib.util, sys
need = ["torch", "numpy", "transformers", "scipy", "pandas", "pyarrow", "safetensors", "tokenizers", "pytest"]
absent = [name for name in need if importlib.util.find_spec(name) is None]
if absent:
    sys.exit(f"missing and not carried in .gpu_wheels: {', '.join(absent)} (install them on the machine, or add their wheels)")
import poslens, transformer_lens  # noqa: E401  TransformerLens imports datasets and the rest at import time
from transformer_lens.model_bridge import TransformerBridge  # noqa: F401
print("poslens", poslens.__version__, "from", poslens.__file__)
print("transformer_lens", importlib.metadata.version("transformer-lens"), "from", transformer_lens.__file__)
EOF
}

# 2. the environment
record_environment() {
    echo "date: $(date -u +%FT%TZ)"
    echo "host: $(uname -a)"
    echo "suite: device $DEVICE, small $SMALL, budget ${BUDGET}s, lengths $LENGTHS, python $PY"
    echo "commit here: $(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo 'no git repository in this copy')"
    git -C "$REPO" status --short 2>/dev/null | sed 's/^/    /'
    if [ -f .gpu_wheels/source.txt ]; then
        echo "commit when .gpu_wheels was prepared (benchmarks/gpu_wheels.sh), and the files changed then:"
        sed 's/^/    /' .gpu_wheels/source.txt
    fi
    echo
    if command -v nvidia-smi >/dev/null; then
        timeout 20 nvidia-smi || echo "nvidia-smi failed"
        timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv || true
    else
        echo "nvidia-smi: not on this machine"
    fi
    echo
    "$PY" - <<'EOF'
import platform, torch
print("python", platform.python_version(), platform.python_implementation())
print("torch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version())
print("cuda available", torch.cuda.is_available())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("device", p.name, f"{p.total_memory / 2**30:.1f} GiB", f"{p.multi_processor_count} SMs", f"capability {p.major}.{p.minor}")
import importlib.metadata as m
for name in ("transformers", "transformer-lens", "numpy", "scipy", "pandas", "pyarrow", "datasets", "jaxtyping", "beartype"):
    try:
        print(name, m.version(name))
    except m.PackageNotFoundError:
        print(name, "not installed")
EOF
    echo
    timeout 30 "$PY" -m pip list --disable-pip-version-check 2>/dev/null || echo "pip list failed"
}

# 3. the correctness tests (POSLENS_TEST_DEVICE=cpu on the dry run: the same checks on the CPU)
run_tests() {
    [ "$DEVICE" = cpu ] && export POSLENS_TEST_DEVICE=cpu
    if [ -n "$TEST_FILTER" ]; then
        "$PY" -m pytest tests/unit/runtime/test_cuda.py -v -rs -p no:cacheprovider --junitxml="$RESULTS/tests.xml" -k "$TEST_FILTER"
    else
        "$PY" -m pytest tests/unit/runtime/test_cuda.py -v -rs -p no:cacheprovider --junitxml="$RESULTS/tests.xml"
    fi
}

# 5. the benchmark; its own budget leaves room for loading the model, the warm-up and a length that overruns
run_bench() {
    local left=$((BUDGET - 15 - ($(date +%s) - START)))
    local timed=$((left - 30))  # loading the model and the warm-up come first
    [ "$timed" -lt 20 ] && timed=20
    # shellcheck disable=SC2086
    "$PY" benchmarks/bench_measure.py --one-process --device "$DEVICE" --model "$MODEL_DIR" --dtype bfloat16 \
        --batch-size 4 --groups 2 --n-seqs 8 --lengths $LENGTHS --routes plain capture poslens naive \
        --repeats 1 --warmup-len "$WARMUP_LEN" --time-budget "$timed" \
        --json "$RESULTS/bench.json" --markdown "$RESULTS/bench.md"
}

pack() {
    {
        echo "# GPU suite: device $DEVICE$([ "$SMALL" = 1 ] && echo ' (dry run, small model)'), $(date -u +%FT%TZ)"
        echo
        echo '```'
        column -t -s $'\t' "$STEPS" 2>/dev/null || cat "$STEPS"
        echo '```'
        echo
        echo "Tests: $(grep -E '^(=+ )?[0-9]+ (passed|failed|skipped|error)' "$RESULTS/tests.log" 2>/dev/null | tail -n 1 | tr -d '=')"
        echo
        if [ -f "$RESULTS/bench.md" ]; then cat "$RESULTS/bench.md"; else echo "No benchmark table (see bench.log)."; fi
    } >"$RESULTS/summary.md"
    cp "$RESULTS/summary.md" "$OUT/summary.md"
    tar -czf "$OUT/gpu_suite.tar.gz" -C "$WORK" gpu_suite
    rm -rf "$WORK"  # the model folder and the installed wheels included
    echo
    cat "$OUT/summary.md"
    echo
    echo "archive: $OUT/gpu_suite.tar.gz ($(du -h "$OUT/gpu_suite.tar.gz" | cut -f1)); total $(($(date +%s) - START))s of the ${BUDGET}s budget"
}
trap pack EXIT
trap 'exit 1' TERM INT  # killed from outside: still pack what there is
export -f install_wheels install_missing record_environment run_tests run_bench

log "device $DEVICE, small $SMALL, budget ${BUDGET}s, python $PY, output $OUT"
step install 60 install_missing
step environment 40 record_environment
step tests 90 run_tests
if step model 60 "$PY" benchmarks/gpu_model.py "$MODEL_DIR" --device "$DEVICE" --dtype bfloat16 "${MODEL_FLAGS[@]}"; then
    step bench "$BUDGET" run_bench
else
    log "bench: skipped, no model"
    printf 'bench\tskipped (no model)\t0\t0\n' >>"$STEPS"
fi
trap - EXIT
pack
exit "$FAILED"
