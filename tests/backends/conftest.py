"""The policies' tiny Kuhn model and tokenizer, and a few Kuhn observations."""

import pytest

from coplay.envs.registry import make_env
from tests.policies.conftest import tiny  # noqa: F401  (a fixture, found by name)


@pytest.fixture
def observations():
    env = make_env("kuhn_poker")
    out = []
    for seed in range(6):
        env.reset(seed)
        out.append(env.observe(env.players_to_act()[0]))
    return out
