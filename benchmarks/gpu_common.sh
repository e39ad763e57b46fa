# Shared by the prepared GPU scripts (benchmarks/gpu_suite.sh, benchmarks/zoo_gpu.sh); sourced, never run.
#
# Before sourcing, the script sets: PY (the python), BUDGET (seconds for the whole script), START (its start, epoch
# seconds), RESULTS (the folder that is packed), STEPS (the steps table, a TSV with a header), SITE (where wheels are
# installed), LOG_NAME (the tag of log lines) and LOG_FILE (the log under RESULTS), and FAILED=0.

log() { echo "[$LOG_NAME $(($(date +%s) - START))s] $*" | tee -a "$RESULTS/$LOG_FILE"; }

# step NAME MAX_SECONDS COMMAND...: run COMMAND (a program, or a function exported to the child bash by name) under
# a timeout of MAX_SECONDS, or of what is left of the budget (less 15 s for packing) if that is less. Its output
# goes to NAME.log (STEP_ECHO=1: echoed as it comes as well); the steps table gets its status and time. Returns 1
# when it failed, timed out or was skipped because the budget was spent (and sets FAILED=1).
step() {
    local name=$1 max=$2
    shift 2
    local left=$((BUDGET - 15 - ($(date +%s) - START)))
    local limit=$((max < left ? max : left))
    if [ "$limit" -lt 5 ]; then
        log "$name: skipped, the budget of ${BUDGET}s is spent"
        printf '%s\tskipped (budget)\t0\t0\n' "$name" >>"$STEPS"
        FAILED=1
        return 1
    fi
    log "$name: start (timeout ${limit}s)"
    local t0 rc
    t0=$(date +%s)
    local run=("$@")
    if [ "$(type -t "$1")" = function ]; then
        run=(bash -c "$1")  # timeout runs programs, not functions: the function runs in a child bash
    fi
    if [ "${STEP_ECHO:-0}" = 1 ]; then
        timeout -k 10 "$limit" "${run[@]}" 2>&1 | tee "$RESULTS/$name.log"
        rc=${PIPESTATUS[0]}
    else
        timeout -k 10 "$limit" "${run[@]}" >"$RESULTS/$name.log" 2>&1
        rc=$?
    fi
    local took=$(($(date +%s) - t0)) status=ok
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then status="timed out"; elif [ "$rc" -ne 0 ]; then status="failed (rc $rc)"; fi
    printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$took" "$limit" >>"$STEPS"
    log "$name: $status after ${took}s"
    if [ "$status" != ok ]; then
        FAILED=1
        [ "${STEP_ECHO:-0}" = 1 ] || tail -n 15 "$RESULTS/$name.log" | sed 's/^/    /'
        return 1
    fi
}

# install_wheels [FORCE_MODULES]: pip-install (--no-deps, into SITE) every package of .gpu_wheels/manifest.txt whose
# module does not import here (or not at its pinned version), and those named in FORCE_MODULES (to check this on a
# full machine). The manifest's lines are "module spec [pin]" (benchmarks/gpu_wheels.sh writes it).
install_wheels() {
    local missing=""
    if [ ! -f .gpu_wheels/manifest.txt ]; then
        echo "no .gpu_wheels/manifest.txt: nothing can be installed (run bash benchmarks/gpu_wheels.sh where pip reaches PyPI)"
        return 0
    fi
    missing=$("$PY" - .gpu_wheels/manifest.txt "${1:-}" <<'PYEOF'
import importlib.metadata, importlib.util, sys
force = set(sys.argv[2].split())
for line in open(sys.argv[1]):
    module, spec, *pin = line.split()
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if found and pin:  # a pinned package counts as found at its manifest version only
        dist, version = spec.split("==")
        try:
            found = importlib.metadata.version(dist) == version
        except importlib.metadata.PackageNotFoundError:
            found = False
    if module in force or not found:
        print(spec)
PYEOF
)
    if [ -n "$missing" ]; then
        echo "installing from .gpu_wheels (--no-deps): $missing"
        # shellcheck disable=SC2086
        "$PY" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
            --find-links .gpu_wheels --target "$SITE" $missing || return 1
    else
        echo "nothing to install: every module of .gpu_wheels/manifest.txt imports"
    fi
}
