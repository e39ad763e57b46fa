#!/usr/bin/env bash
# Prepare .gpu_wheels/ for benchmarks/gpu_suite.sh: the wheels of what poslens imports at run time that a CUDA
# machine with torch, numpy and transformers may lack, at the versions installed in this checkout's .venv.
#
# Usage, from anywhere, on a machine that reaches PyPI:
#     bash benchmarks/gpu_wheels.sh            # wheels for Python 3.12 (the GPU machine's python3)
#     GPU_PYTHON=3.11 bash benchmarks/gpu_wheels.sh
#
# The GPU machine cannot reach any registry, so its missing packages travel as wheels (carried with the
# working tree: 64 MiB at most, this folder included). gpu_suite.sh installs from here only the ones whose
# module it cannot import, each with --no-deps: the list below is the closure that matters, read off
# poslens's imports and those TransformerLens 4.3 makes when it is imported (transformer_lens.utilities
# imports datasets, which imports dill, multiprocess, xxhash and pyarrow). Left out on purpose:
#   - wandb and transformers-stream-generator: TransformerLens declares them but never imports them when
#     poslens runs (wandb alone is tens of MiB);
#   - scipy, pandas and pyarrow: compiled, about 90 MiB together for one Python version, over the budget;
#     the GPU machine's image has them (docs of the device tool list them), and gpu_suite.sh says so and
#     stops if one is missing;
#   - torch, numpy, huggingface_hub, tokenizers, safetensors: the machine's own, never replaced (transformers
#     5.24 accepts the image's huggingface_hub 1.33 and tokenizers 0.23).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV_PY=${VENV_PY:-.venv/bin/python}
GPU_PYTHON=${GPU_PYTHON:-3.12}
OUT=.gpu_wheels

# import name, distribution name[, pin]: the manifest gpu_suite.sh reads. It installs a package whose module is
# missing; one marked "pin" also where the machine has another version (transformers: the version this
# project's CPU tests run, so that CUDA and the CPU are compared under the same library; regex: its need).
PACKAGES="
transformers transformers pin
regex regex pin
transformer_lens transformer-lens
gguf gguf
plotly plotly
narwhals narwhals
datasets datasets
dill dill
multiprocess multiprocess
xxhash xxhash
beartype beartype
typeguard typeguard
fancy_einsum fancy-einsum
jaxtyping jaxtyping
wadler_lindig wadler-lindig
einops einops
accelerate accelerate
sentencepiece sentencepiece
google.protobuf protobuf
psutil psutil
filelock filelock
tqdm tqdm
rich rich
markdown_it markdown-it-py
mdurl mdurl
pygments pygments
typer typer
click click
shellingham shellingham
jinja2 jinja2
markupsafe markupsafe
"

rm -rf "$OUT"
mkdir -p "$OUT"
specs=()
: >"$OUT/manifest.txt"
while read -r module dist pin; do
    [ -n "$module" ] || continue
    version=$("$VENV_PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$dist")
    specs+=("$dist==$version")
    echo "$module $dist==$version $pin" >>"$OUT/manifest.txt"
done <<<"$PACKAGES"

# --only-binary with a target Python: pure-Python wheels match any, compiled ones must exist for GPU_PYTHON
"$VENV_PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$GPU_PYTHON" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any -d "$OUT" "${specs[@]}"

echo "$GPU_PYTHON" >"$OUT/python_version.txt"
# the GPU machine's copy of the working tree may have no .git: record here what it was cut from
{ git rev-parse HEAD 2>/dev/null || echo "unknown commit"; git status --short 2>/dev/null; } >"$OUT/source.txt"
ls -1 "$OUT"/*.whl | wc -l | xargs echo "wheels:"
du -sh "$OUT" | cut -f1 | xargs echo "total size of $OUT:"
size=$(du -sm "$OUT" | cut -f1)
if [ "$size" -ge 60 ]; then
    echo "error: $OUT is $size MiB, over the 60 MiB budget of what travels to the GPU machine" >&2
    exit 1
fi
