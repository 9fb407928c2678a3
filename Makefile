# The two commands of the README: `make demo` and `make test`.  Both set
# themselves up: system packages (when root; otherwise they say what is
# missing), a virtualenv with the pinned Python packages, and the shim.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# every bench/*.py but the helpers they share
# helper modules are not benchmarks: pe_cluster.py runs pe_cluster_fibers.py's half
BENCHES := $(filter-out bench/wrkload.py bench/pe_wine.py bench/pe_cluster_fibers.py,$(wildcard bench/*.py))

.PHONY: all setup sysdeps shim layouts examples demo test test-fast check bench clean

all: shim

sysdeps:
	@sh tools/sysdeps.sh

$(STAMP): setup.cfg pyproject.toml | sysdeps
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $@

setup: sysdeps $(STAMP)

shim: sysdeps layouts
	$(MAKE) -s -C shim

# the Python side of the formats shared with the shim, from its C headers
layouts:
	@$(PYTHON) tools/gen_layouts.py base/_layouts.py

examples: sysdeps
	$(MAKE) -s -C examples

demo: setup shim examples
	$(PY) examples/demo.py

# Tests run side by side, one pytest-xdist worker per CPU up to 4 (each worker
# boots its own wine prefix and makes its own session fixtures: more would
# mostly repeat those).  TEST_JOBS=0 runs them one at a time.
TEST_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ $$n -gt 4 ] && n=4; echo $$n)

test: setup shim examples
	$(MAKE) -s -C tests/programs
	$(VENV)/bin/pytest -q -n $(TEST_JOBS)

# the tests that are neither slow nor need a display, the network or root: half
# of them, in about a third of the time (2.5 minutes on a 2-CPU VM)
test-fast: setup shim examples
	$(MAKE) -s -C tests/programs
	$(VENV)/bin/pytest -q -n auto -m "not slow and not gui and not net and not root"

# ruff and mypy (settings in pyproject.toml), and the shim built with gcc and
# with clang, warnings as errors, apart from the build `make shim` keeps.
check: setup layouts
	$(VENV)/bin/ruff check .
	$(PY) tools/package_tree.py build/typecheck
	cd build/typecheck && ../../$(VENV)/bin/mypy --config-file ../../pyproject.toml \
		--cache-dir ../mypy-cache -p ferry
	$(MAKE) -s -C shim CC=gcc BUILD=build/check-gcc
	$(MAKE) -s -C shim CC=clang BUILD=build/check-clang
	@echo "make check: all passed"

bench: setup shim
	$(MAKE) -s -C bench
	@for b in $(BENCHES); do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	$(MAKE) -s -C shim clean
	$(MAKE) -s -C examples clean
	rm -rf $(VENV) build base/_layouts.py
