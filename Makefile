# The two README commands: `make demo` and `make test`. Both build .venv from scratch.
PYTHON ?= python3.11
VENV ?= .venv
# CPU build by default; override for GPUs, e.g. `make demo TORCH_SPEC="torch==2.13.0 --index-url ..."`.
TORCH_SPEC ?= torch==2.13.0
PRESET ?= kuhn-selfplay
OUT ?= runs/demo
BIN := $(VENV)/bin

.PHONY: venv install install-test lock demo test lint format bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install -q pip==26.3

venv: $(BIN)/python

# torch first (CPU or CUDA build, from TORCH_SPEC), then every other package at the exact
# version and hash in requirements/*.txt (the lock), then coplay itself without resolving
# anything more: a fresh clone installs exactly what CI tested.
install: venv
	$(BIN)/pip install -q $(TORCH_SPEC)
	$(BIN)/pip install -q --require-hashes -r requirements/base.txt
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .

install-test: venv
	$(BIN)/pip install -q $(TORCH_SPEC)
	$(BIN)/pip install -q --require-hashes -r requirements/test.txt
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .

# Regenerate the lock from pyproject.toml's ranges (newest versions that fit them), with
# pip-tools in a venv of its own so that the project's venv holds only locked packages.
lock:
	$(PYTHON) -m venv $(VENV)-lock || python3 -m venv $(VENV)-lock
	$(VENV)-lock/bin/pip install -q pip==26.3 pip-tools==7.6.2
	PYTHON=$(abspath $(VENV)-lock)/bin/python requirements/lock.sh

# --force: a second `make demo` moves the earlier run to $(OUT).old-<time> instead of refusing.
demo: install
	$(BIN)/coplay train --preset $(PRESET) --out $(OUT) --force
	$(BIN)/coplay eval $(OUT) --opponent nash
	$(BIN)/coplay eval $(OUT) --opponent random

# pytest runs one worker per core (at most 4: each one imports torch); tests/conftest.py
# gives each worker one thread. A plain `pytest` runs in one process.
test: install-test
	$(BIN)/ruff check coplay tests benchmarks examples
	$(BIN)/ruff format --check coplay tests benchmarks examples
	$(BIN)/pytest -q -n auto --maxprocesses 4 --dist worksteal

lint: install-test
	$(BIN)/ruff check coplay tests benchmarks examples
	$(BIN)/ruff format --check coplay tests benchmarks examples

format:
	$(BIN)/ruff format coplay tests benchmarks
	$(BIN)/ruff check --fix coplay tests benchmarks

bench: install
	$(BIN)/python benchmarks/rollout_throughput.py

clean:
	rm -rf $(VENV) $(VENV)-lock runs .pytest_cache .ruff_cache *.egg-info
