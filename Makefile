# Two commands: `make demo` sets everything up and runs the main job; `make test` runs the tests.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

# Tests: on every core (pytest-xdist; TEST_WORKERS=1 runs them one at a time). `make test` runs every test
# not marked `slow` or `fuzz`; `make test-slow` the slow set (end to end: real runs, real nsys, Chromium);
# `make fuzz` the long fuzzer; `make test-elsewhere` the tests as another machine (scripts/elsewhere.sh).
# CI (.ci/run) runs all four: every test.
TEST_WORKERS ?= auto
PYTEST := $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup

.PHONY: setup demo test test-slow test-elsewhere fuzz attack lint nsys bench clean

setup: $(STAMP) nsys

$(STAMP): pyproject.toml setup.py $(wildcard analysis/readers/_kineto_*.[ch])
	@echo "setup 1/4: virtual environment in $(VENV)"
	$(PYTHON) -m venv $(VENV)
	@echo "setup 2/4: upgrading pip"
	$(BIN)/python -m pip install -q --upgrade pip
	@# Without an NVIDIA GPU, take the CPU build of torch first (an unpinned torch pulls GBs of CUDA wheels).
	@# The long installs keep pip's own progress (no -q): `make demo` is never silent for a minute.
	@echo "setup 3/4: torch (the CPU build when there is no NVIDIA GPU)"
	if ! command -v nvidia-smi >/dev/null 2>&1; then $(BIN)/python -m pip install torch==2.13.0; fi
	@echo "setup 4/4: the harness and its dependencies (pip install -e '.[test]')"
	$(BIN)/python -m pip install -e '.[test]'
	touch $(STAMP)

nsys:
	HARNESS_PIP_PYTHON=$(BIN)/python bash scripts/install-nsys.sh || echo "warning: nsys not installed; --nsys runs and nsys tests will be skipped"

demo: setup
	@echo "demo: harness run tiny --device auto"
	$(BIN)/harness run tiny --device auto

test: setup
	$(PYTEST) -m "not slow and not fuzz"

test-slow: setup
	$(PYTEST) -m "slow and not fuzz"

test-elsewhere: setup
	PYTEST="$(PYTEST)" scripts/elsewhere.sh

fuzz: setup
	$(PYTEST) -m fuzz

attack: setup
	PYTHON=$(BIN)/python scripts/attack.sh

lint: setup
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

bench: setup
	$(BIN)/python benchmarks/run_overhead.py
	$(BIN)/python benchmarks/trace_speed.py

clean:
	rm -rf $(VENV) .tools build *.egg-info
