"""Run the doctests embedded in the modules (small worked examples)."""

import doctest
import importlib

import pytest

MODULES = [
    "coplay.envs.actions",
    "coplay.envs.negotiation",
    "coplay.envs.signalling",
    "coplay.envs.talk",
    "coplay.eval.matches",
    "coplay.eval.sampled",
    "coplay.policies.scoring",
]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0
