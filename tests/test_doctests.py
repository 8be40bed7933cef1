"""Run the doctests embedded in the modules (small worked examples): every module of
the package whose source has one, found by walking it, so a new example is run
without being listed here."""

import doctest
import importlib
import pkgutil
from pathlib import Path

import pytest

import coplay

OPTIONAL = {"vllm", "ray"}
"""Extras a module may import at its top; without them its doctests are skipped."""


def _modules_with_examples() -> list[str]:
    root = Path(coplay.__file__).parent
    names = []
    for info in pkgutil.walk_packages([str(root)], prefix="coplay."):
        if info.ispkg:
            path = root.joinpath(*info.name.split(".")[1:], "__init__.py")
        else:
            path = root.joinpath(*info.name.split(".")[1:]).with_suffix(".py")
        if path.is_file() and ">>> " in path.read_text():
            names.append(info.name)
    return sorted(names)


MODULES = _modules_with_examples()


def test_the_walk_finds_the_known_examples():
    known = {"coplay.envs.chance", "coplay.policies.prefixes", "coplay.play.web"}
    # coplay.train had no __init__.py, and the walk, which enters packages only, ran
    # none of its examples.
    assert known | {"coplay.train.micro", "coplay.train.schedules"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name and err.name.split(".")[0] in OPTIONAL:
            pytest.skip(f"{name} needs the {err.name.split('.')[0]} extra")
        raise
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
