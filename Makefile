# Two commands: `make demo` sets everything up and shows the main job; `make test` runs the tests.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

# Tests: on every core (pytest-xdist; TEST_WORKERS=1 runs them one at a time). `make test` runs every test
# not marked `slow` or `fuzz`; `make test-slow` the slow set (end to end: real runs, real nsys, Chromium);
# `make fuzz` the long fuzzer; `make test-elsewhere` the tests as another machine (scripts/elsewhere.sh);
# `make asan` the C reader's tests under AddressSanitizer and UBSan. CI (.ci/run) runs all five.
TEST_WORKERS ?= auto
PYTEST := $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup

.PHONY: setup demo test test-slow test-elsewhere fuzz asan attack lint docs nsys bench clean

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

# The main job in a few minutes (scripts/demo.py): a run under nsys, the tables of a GPU export, the
# dashboard; its files go to demo/.
demo: setup
	@$(BIN)/python scripts/demo.py

test: setup
	$(PYTEST) -m "not slow and not fuzz"

test-slow: setup
	$(PYTEST) -m "slow and not fuzz"

test-elsewhere: setup
	PYTEST="$(PYTEST)" scripts/elsewhere.sh

# FUZZ_ARGS: more pytest arguments (CI: --hypothesis-seed=N, the same examples every run)
fuzz: setup
	$(PYTEST) -m fuzz $(FUZZ_ARGS)

# The Kineto reader in C built apart (build/asan/, never over the module built in place) with
# AddressSanitizer and UBSan (any error aborts), and its tests run with it (tests/kineto_asan.py loads it):
# the fuzzer's corpus (tests/kineto_corpus.py: ASAN_PIECES pieces in each of 4 parts), the fixtures' pieces,
# made-up events, hostile traces. Python allocates with malloc, so that ASan sees the buffers it reads.
# An error's report is printed from build/asan/report.*. Needs gcc's libasan (Debian: apt-get install gcc).
# Tests that fork worker processes (marked `forks`: they read without the C reader) are left out: a child
# forked while another thread (xdist's) is inside ASan's allocator waits on its lock for ever.
ASAN_CC ?= gcc
ASAN_PIECES ?= 5000
ASAN_SO := build/asan/_kineto_fast.so
ASAN_TESTS := tests/test_kineto_corpus.py tests/test_kineto_fast.py tests/test_kineto_hostile.py tests/test_kineto_stream.py
ASAN_LOG := log_path=build/asan/report:print_stacktrace=1

asan: setup
	@test -f "$$($(ASAN_CC) -print-file-name=libasan.so)" || \
		{ echo "asan: $(ASAN_CC) has no libasan.so here (Debian: apt-get install gcc)"; exit 1; }
	mkdir -p build/asan && rm -f build/asan/report.*
	$(ASAN_CC) -shared -fPIC -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined \
		-fno-sanitize-recover=all -I"$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')" \
		analysis/readers/_kineto_fast.c -o $(ASAN_SO)
	LD_PRELOAD="$$($(ASAN_CC) -print-file-name=libasan.so)" PYTHONMALLOC=malloc \
		ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:$(ASAN_LOG) UBSAN_OPTIONS=halt_on_error=1:$(ASAN_LOG) \
		KINETO_ASAN_MODULE=$(ASAN_SO) CORPUS_PIECES=$(ASAN_PIECES) PYTHONPATH=tests \
		$(PYTEST) -p kineto_asan -m "not forks" $(ASAN_TESTS) || { cat build/asan/report.* 2>/dev/null; exit 1; }

attack: setup
	PYTHON=$(BIN)/python scripts/attack.sh

lint: setup
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

# The user guide as a site (mkdocs.yml; build/site): strict, so a broken link, a missing anchor or a page
# left out of the nav fails; first the command reference checked against the app's --help, and the notebook
# page against what its cells print (scripts/notebook_page.py runs them on the H100 capture). Its packages
# (the `docs` extra, pinned) go into the venv here, not into the runtime dependencies.
DOCS_STAMP := $(VENV)/.docs-installed

$(DOCS_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e '.[docs]'
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	$(BIN)/python scripts/command_reference.py --check
	$(BIN)/python scripts/notebook_page.py --check
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir build/site

bench: setup
	$(BIN)/python benchmarks/run_overhead.py
	$(BIN)/python benchmarks/trace_speed.py

clean:
	rm -rf $(VENV) .tools build *.egg-info
