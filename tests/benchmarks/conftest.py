"""Benchmarks loaded in tests as when run as scripts."""

import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def bench(request):
    """The benchmark a test module names in ``BENCHMARK``, loaded as a script runs it:
    its neighbours importable as top-level modules and itself registered under its
    name (its dataclasses look their module up); all of them forgotten after."""
    name = request.module.BENCHMARK
    before = set(sys.modules)
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.path.remove(str(BENCHMARKS))
        for loaded in set(sys.modules) - before:
            if Path(getattr(sys.modules[loaded], "__file__", "") or "").parent == BENCHMARKS:
                del sys.modules[loaded]
