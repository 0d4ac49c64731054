# Two commands: `make demo` sets everything up and runs the main job; `make test` runs the tests.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup demo test test-fast attack lint nsys bench clean

setup: $(STAMP) nsys

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# Without an NVIDIA GPU, take the CPU build of torch first (an unpinned torch pulls GBs of CUDA wheels).
	if ! command -v nvidia-smi >/dev/null 2>&1; then $(BIN)/python -m pip install -q torch==2.13.0; fi
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

nsys:
	bash scripts/install-nsys.sh || echo "warning: nsys not installed; --nsys runs and nsys tests will be skipped"

demo: setup
	$(BIN)/harness run tiny --device auto

test: setup
	$(BIN)/python -m pytest

test-fast: setup
	$(BIN)/python -m pytest -m "not slow"

attack: setup
	PYTHON=$(BIN)/python scripts/attack.sh

lint: setup
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

bench: setup
	$(BIN)/python benchmarks/run_overhead.py
	$(BIN)/python benchmarks/trace_speed.py

clean:
	rm -rf $(VENV) .tools build *.egg-info
