# Two commands do all the set-up on a fresh machine:  `make demo`  and  `make test`.
VENV    ?= .venv
PY      := $(VENV)/bin/python
PIP     := $(PY) -m pip install --quiet
# The CPU build of torch must be installed first: from PyPI, pip pulls a multi-GB CUDA build. It comes
# from /opt/wheels where that folder exists, else from PyTorch's CPU index (as in the README).
TORCH   := torch==2.13.0
WHEELS  := $(if $(wildcard /opt/wheels),--find-links /opt/wheels)
TORCH_FROM := $(or $(WHEELS),--index-url https://download.pytorch.org/whl/cpu)

export HF_HUB_OFFLINE       ?= 1
export OMP_NUM_THREADS      ?= 1
export TOKENIZERS_PARALLELISM ?= false
export ANONYMIZED_TELEMETRY ?= False

# Framework integrations: standalone packages, installed and tested beside the core.
INTEGRATIONS := integrations/llama-index-retrievers-car integrations/langchain-car

.PHONY: install chromium demo lint docs test test-fast dist-check bench clean

$(VENV)/.installed: pyproject.toml $(addsuffix /pyproject.toml,$(INTEGRATIONS))
	python3 -m venv $(VENV)
	$(PIP) --upgrade pip
	$(PIP) $(TORCH_FROM) $(TORCH)
	$(PIP) $(WHEELS) -e ".[store,test,docs]"
	for pkg in $(INTEGRATIONS); do $(PIP) $(WHEELS) -e "./$$pkg[test]" || exit 1; done
	touch $@

# Chromium, for the tests only: the run report's browser test (tests/integration/test_report.py).
# `make test` installs Debian's package with apt-get when it is missing and make runs as root (CI),
# and says so first; elsewhere the test names what to install. `make install` and `make demo` need
# no browser and install none.
chromium:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || { [ "$$(id -u)" = 0 ] && \
	  echo "make test: installing chromium (apt-get, as root) for the report's browser test" && \
	  apt-get update -qq && apt-get install -y -qq chromium >/dev/null; } || \
	  echo "chromium is not installed (the report's browser test needs it): sudo apt-get install chromium"
test: chromium

install: $(VENV)/.installed

demo: install
	$(VENV)/bin/car-rag demo

test-fast: install  ## the unit tier: no model, no Chroma; 50 property examples each (make test: 300)
	CAR_PROPERTY_EXAMPLES=50 $(PY) -m pytest -q tests/unit

# The whole tree: library, harness, both integrations with their tests, tests/, evals/, examples/ (settings:
# pyproject.toml). mypy runs twice: the LlamaIndex suite's tests are top-level modules of their folder, and
# their conftest would be the core's `conftest` (its folder on MYPYPATH; --explicit-package-bases names the
# llama_index.* namespace packages from mypy_path). tests/evaluators, whose conftest is also `conftest`, is a third
# run: its files named, which the main run's exclude does not skip.
lint: install
	$(PY) -m ruff format --check .
	$(PY) -m ruff check .
	$(PY) -m mypy
	MYPYPATH=integrations/llama-index-retrievers-car/tests $(PY) -m mypy --explicit-package-bases integrations/llama-index-retrievers-car
	$(PY) -m mypy tests/evaluators/*.py
	$(VENV)/bin/lint-imports --no-cache

# The documentation site from docs/ and the docstrings (mkdocs.yml), strict: a broken link or reference fails.
docs: install
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet --site-dir site

# Every tier runs, even after one fails; the last lines say which passed and which failed, and the exit
# is non-zero if any did. Before them, a line per tier: its wall time, its CPU seconds (user + sys, which
# hardly move with the machine's load: compare tiers by those) and the load average (.ci/timed).
# The evaluator tier's venv (EVAL_VENV) is built beside the first tiers, its output shown when that tier
# starts (a build that failed is tried again there, and fails the tier).
# A tier alone: make test-lint, test-docs, test-unit, test-integration, test-langchain, dist-check.
TEST_TIERS := lint docs unit integration langchain evaluators dist-check
.PHONY: $(addprefix test-,lint docs unit integration langchain evaluators) bench-check

test: install
	@failed=""; times=$$(mktemp); venv_log=$$(mktemp); \
	TIER_TIMES=$$times .ci/timed eval-venv $(MAKE) --no-print-directory $(EVAL_VENV)/.installed >$$venv_log 2>&1 & venv_build=$$!; \
	for tier in $(TEST_TIERS); do \
	  target=$$([ $$tier = dist-check ] && echo dist-check || echo test-$$tier); \
	  [ $$tier = evaluators ] && { wait $$venv_build; cat $$venv_log; rm -f $$venv_log; }; \
	  echo "==== make test: $$tier ($$target)"; \
	  TIER_TIMES=$$times .ci/timed $$tier $(MAKE) --no-print-directory $$target || failed="$$failed $$tier"; \
	done; \
	wait; rm -f $$venv_log; \
	echo "==== make test: tier, result, wall time, CPU seconds, load average before -> after"; \
	cat $$times; rm -f $$times; \
	echo "==== make test: every tier ran; failed:$${failed:- none}"; \
	echo "tiers: $$(( $(words $(TEST_TIERS)) - $$(echo $$failed | wc -w) )) passed, $$(echo $$failed | wc -w) failed"; \
	[ -z "$$failed" ]

test-lint: lint

test-docs: docs

test-unit: install
	$(PY) -m pytest -q tests/unit

# the LlamaIndex suite runs with the core's pytest settings; the quick suites' committed benchmark rows are
# recomputed here (tests/integration/test_bench_rows.py; all suites: make bench-check). On INTEGRATION_WORKERS
# pytest-xdist workers (0: in this process), a module's tests on one worker, modules in collection order
# (tests/conftest.py: pytest_xdist_make_scheduler).
INTEGRATION_WORKERS ?= 2
test-integration: install
	CAR_REQUIRE_BROWSER=1 $(PY) -m pytest -q -n $(INTEGRATION_WORKERS) --dist loadfile --no-loadscope-reorder tests/integration integrations/llama-index-retrievers-car/tests

# langchain-car keeps its own pytest settings (socket guard to loopback, a deadline per test, asyncio mode)
test-langchain: install
	$(PY) -m pytest -q integrations/langchain-car/tests

# Packaging as users meet it (.ci/dist_check.sh): sdist and wheel of the core and both integrations
# (python -m build), twine check --strict, every tracked package file in its wheel; then a fresh venv
# in a temporary directory, CPU torch first (TORCH, TORCH_FROM as above), the three built wheels (core
# with [store,llama-index,langchain]), and from outside the tree: the imports, car-rag --version,
# car-rag demo. ~2 min on 2 busy cores with the venv in /dev/shm, ~3.5-5.5 min on disk (see the script).
DIST_TOOLS := build==1.6.1 twine==7.0.0

dist-check: install
	$(PIP) $(WHEELS) $(DIST_TOOLS)
	PY=$(PY) TORCH="$(TORCH)" TORCH_FROM="$(TORCH_FROM)" WHEELS="$(WHEELS)" .ci/dist_check.sh

# RAGAS and DeepEval (car_rag.eval.ragas_metrics, car_rag.eval.deepeval_metrics) hold openai and click below
# what the main venv resolves: their tests run in a venv of their own with car-rag[ragas,deepeval] (no store,
# no torch) and pytest, outside `make test`'s venv; --confcutdir keeps the core's conftest (store fixtures)
# out. pytest-socket (pyproject's settings) fails any test that reaches past loopback; the tests' conftest
# opts out of both frameworks' telemetry.
EVAL_VENV ?= .venv-evaluators

$(EVAL_VENV)/.installed: pyproject.toml
	python3 -m venv $(EVAL_VENV)
	$(EVAL_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(EVAL_VENV)/bin/python -m pip install --quiet $(WHEELS) -e ".[ragas,deepeval]" pytest pytest-socket pytest-timeout
	touch $@

test-evaluators: $(EVAL_VENV)/.installed
	$(EVAL_VENV)/bin/python -m pytest -q -p no:cacheprovider --confcutdir tests/evaluators tests/evaluators

clean:
	rm -rf $(VENV) $(EVAL_VENV) .pytest_cache .hypothesis .mypy_cache .ruff_cache site

SUITES := ghsa-freeform ghsa-structured finsuperqa finsuperqa-contaminated cvepatchqa cvepatchqa-freeform legalprecedentqa legalprecedentqa-freeform

# Every suite's committed car-rag rows (evals/results/<suite>.json) recomputed from fresh store builds in a
# temporary folder (make test checks the quick ones): a change that moves a figure fails until `make bench`.
bench-check: install
	CAR_BENCH_CHECK=all $(PY) -m pytest -q tests/integration/test_bench_rows.py

bench: install  ## every suite, every system; results under evals/results/ (stores cached in .car-stores/)
	for suite in $(SUITES); do $(VENV)/bin/car-rag bench --suite $$suite --k 5 --out evals/results || exit 1; done
