# Entry points for users and CI. Everything runs inside the uv environment built from uv.lock.
SHELL := /bin/bash
PYTHON ?= python3
UV := $(shell command -v uv 2>/dev/null || echo $(HOME)/.local/bin/uv)
VENV := .venv
# The environment's own executables, not `uv run`: tools that start workers (Ray) must see this
# interpreter, not a `uv run` they would try to repeat from another folder.
RUN := $(VENV)/bin/
# Bytecode for an environment and the workspace, once: where PYTHONDONTWRITEBYTECODE is set every
# command would otherwise compile what it imports again (~60 ms on a no-op `marin run`). Not the
# packages' own test suites (pandas', scipy's, ...: 14% of the source), which nothing imports.
COMPILE_BYTECODE = -m compileall -q -j 0 -x '/tests/'
export UV_PYTHON_DOWNLOADS := never
# mkdocs-material's banner about its successor, printed on every build.
export NO_MKDOCS_2_WARNING := 1

.PHONY: help setup wheelhouse test test-fast lint lint-code lint-fast docs bench bench-peers train-nano experiments nix-check soak clean

help:
	@echo "make setup       create .venv from uv.lock (installs uv if missing)"
	@echo "make test        ruff, import layering, then pyright beside the whole test suite (the docs site with it)"
	@echo "make train-nano  the tutorial graph: corpus -> tokenizer -> shards -> nano Llama"
	@echo "make experiments every experiment in experiments/"
	@echo "make bench       side-by-side performance report"
	@echo "make bench-peers fresh local builds (and chains whose steps import fsspec) beside GNU make, Snakemake and"
	@echo "                 DVC; near-duplicates beside datatrove and datasketch, FineWeb rules, PII and"
	@echo "                 WARC -> text -> language beside datatrove (in .venv-bench)"
	@echo "make lint        ruff, import-linter, pyright (basic mode, via basedpyright), the docs site (--strict)"
	@echo "make docs        the documentation site (mkdocs.yml) into build/site"
	@echo "make wheelhouse PLATFORM=manylinux_2_28_x86_64 [PYTHON_VERSION=3.11] [EXCLUDE=...] [PRUNE=...]"
	@echo "                 every wheel the lock pins, for a host without an index (then, there:"
	@echo "                 make setup WHEELHOUSE=build/wheelhouse); see docs/scaling.md"

$(UV):
	$(PYTHON) -m pip install --user --quiet "uv>=0.5"

# A host without a package index (docs/scaling.md): `make wheelhouse` (here, with an index) writes
# every wheel the lock pins for PLATFORM and PYTHON_VERSION into WHEELHOUSE_OUT, leaving out EXCLUDE
# (packages the host has: its JAX) and PRUNE (packages it cannot use, with what only they need: Ray);
# SPLIT_MIB also writes parts of at most that size, WITH_UV=0 leaves uv's own wheel out. There,
# `make setup WHEELHOUSE=dir` installs from that folder alone (uv too, if missing), into an environment
# that sees the host's own packages with SYSTEM_SITE_PACKAGES=1; HOST_INDEX=url installs what was left
# out and the host lacks from its own index. Parts are installed in order, each with `make setup WHEELHOUSE=part`.
PYTHON_VERSION ?= 3.11
WHEELHOUSE_OUT ?= build/wheelhouse
WITH_UV ?= 1
WHEELHOUSE_FLAGS = $(if $(SYSTEM_SITE_PACKAGES),--system-site-packages) $(if $(HOST_INDEX),--host-index $(HOST_INDEX))

wheelhouse: | $(UV)
	@test -n "$(PLATFORM)" || { echo "make wheelhouse: give PLATFORM=<a wheel platform tag>, e.g. manylinux_2_28_x86_64" >&2; exit 2; }
	PATH="$(dir $(UV)):$$PATH" $(PYTHON) nix/wheelhouse.py build --out $(WHEELHOUSE_OUT) --platform $(PLATFORM) \
		--python-version $(PYTHON_VERSION) --exclude "$(EXCLUDE)" --prune "$(PRUNE)" \
		$(if $(SPLIT_MIB),--split-mib $(SPLIT_MIB)) $(if $(filter 0,$(WITH_UV)),--no-uv)

ifdef WHEELHOUSE
# The stamp is touched once the environment is complete (after the last part).
$(VENV)/.synced: $(WHEELHOUSE)/wheelhouse.json
	$(PYTHON) nix/wheelhouse.py install $(WHEELHOUSE) --venv $(VENV) --stamp $@ $(WHEELHOUSE_FLAGS)
	@if [ -e $@ ]; then $(RUN)python $(COMPILE_BYTECODE) pkgs/*/src >/dev/null; fi
else
$(VENV)/.synced: uv.lock pyproject.toml $(wildcard pkgs/*/pyproject.toml) | $(UV)
	$(UV) sync --frozen --all-packages
	@$(RUN)python $(COMPILE_BYTECODE) $(VENV)/lib pkgs/*/src >/dev/null
	@touch $@
endif

setup: $(VENV)/.synced

lint: lint-code
	@# Not --quiet: it drops the warnings that --strict counts, and the build would always pass.
	$(RUN)mkdocs build --strict

# The checks of the code; `make test` runs these, and its suite builds the docs site with --strict
# itself (tests/infra/test_docs_site.py), so it does not build the site twice.
lint-code: lint-fast
	$(RUN)basedpyright

lint-fast: setup
	$(RUN)ruff check .
	$(RUN)lint-imports

docs: setup
	$(RUN)mkdocs build --strict
	@echo "open build/site/index.html (or run .venv/bin/mkdocs serve for a live preview)"

# The suite runs in parallel (pytest-xdist), one worker more than the cores (the cores pytest-xdist's
# `-n auto` counts): about a sixth of a worker's time is spent waiting (servers starting, child
# processes, leases running out), which the extra worker fills; on 2 cores (2026-12-07) pytest took
# 747 s with 3 workers, 792 s with 4 and 900-976 s with 2. Tests that share one built store carry an
# xdist_group mark and run in one worker (--dist loadgroup). PYTEST_WORKERS=0 runs it serially.
PYTEST_WORKERS ?= $(shell $(PYTHON) -c "import os; n = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count(); print((n or 1) + 1)")
PYTEST_ARGS ?=

# The type check (27 s of one and a half cores) runs beside the suite, which leaves a tenth of the
# cores idle while its workers wait; its report comes after the tests' and either failing fails the target.
test: lint-fast
	@mkdir -p build
	@$(RUN)basedpyright > build/basedpyright.log 2>&1 & typecheck=$$!; \
	$(RUN)pytest -q -n $(PYTEST_WORKERS) --dist loadgroup --durations=15 $(PYTEST_ARGS); tests=$$?; \
	wait $$typecheck; typed=$$?; echo "basedpyright (beside the tests):"; cat build/basedpyright.log; \
	exit $$(( tests ? tests : typed ))

test-fast: setup
	$(RUN)pytest -q -n $(PYTEST_WORKERS) --dist loadgroup -m "not slow"

bench: setup
	$(RUN)python -m benchmarks

# Snakemake, DVC, datatrove and datasketch (the `bench` extra) in an environment of their own, so
# .venv (and CI) never has them: uv.lock resolves the extra apart from the dev group (see pyproject.toml).
BENCH_VENV := .venv-bench
$(BENCH_VENV)/.synced: uv.lock pyproject.toml $(wildcard pkgs/*/pyproject.toml) | $(UV)
	UV_PROJECT_ENVIRONMENT=$(BENCH_VENV) $(UV) sync --frozen --all-packages --extra bench --no-dev
	@$(BENCH_VENV)/bin/python $(COMPILE_BYTECODE) $(BENCH_VENV)/lib pkgs/*/src >/dev/null
	@touch $@

bench-peers: $(BENCH_VENV)/.synced
	$(BENCH_VENV)/bin/python -m benchmarks.bench_scale local
	$(BENCH_VENV)/bin/python -m benchmarks.bench_datakit_peers
	$(BENCH_VENV)/bin/python -m benchmarks.bench_rules_peers
	$(BENCH_VENV)/bin/python -m benchmarks.bench_rules_peers --tutorial
	$(BENCH_VENV)/bin/python -m benchmarks.bench_warc_peers
	$(BENCH_VENV)/bin/python -m benchmarks.bench_warm

clean:
	rm -rf .marin/store .pytest_cache

nix-check: setup
	bash nix/check.sh

train-nano: setup
	$(RUN)python -m experiments.train_nano

experiments: setup
	$(RUN)marin run experiments/

soak: setup
	$(RUN)python -m testsupport.soak $(SOAK_ARGS)
