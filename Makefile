# The two README commands: `make demo` and `make test`. Both build .venv from scratch.
PYTHON ?= python3.11
VENV ?= .venv
# CPU build by default; override for GPUs, e.g. `make demo TORCH_SPEC="torch==2.13.0 --index-url ..."`.
TORCH_SPEC ?= torch==2.13.0
PRESET ?= kuhn-selfplay
OUT ?= runs/demo
BIN := $(VENV)/bin

.PHONY: venv install install-test demo test lint format bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

venv: $(BIN)/python

install: venv
	$(BIN)/pip install -q $(TORCH_SPEC)
	$(BIN)/pip install -q -e .

install-test: venv
	$(BIN)/pip install -q $(TORCH_SPEC)
	$(BIN)/pip install -q -e ".[test]"

demo: install
	$(BIN)/coplay train --preset $(PRESET) --out $(OUT)
	$(BIN)/coplay eval $(OUT) --opponent nash
	$(BIN)/coplay eval $(OUT) --opponent random

test: install-test
	$(BIN)/ruff check coplay tests benchmarks examples
	$(BIN)/ruff format --check coplay tests benchmarks examples
	$(BIN)/pytest -q

lint: install-test
	$(BIN)/ruff check coplay tests benchmarks examples
	$(BIN)/ruff format --check coplay tests benchmarks examples

format:
	$(BIN)/ruff format coplay tests benchmarks
	$(BIN)/ruff check --fix coplay tests benchmarks

bench: install
	$(BIN)/python benchmarks/rollout_throughput.py

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache *.egg-info
