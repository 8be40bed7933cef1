"""A tiny Kuhn policy for trainer-side tests (critic, learner)."""

import pytest

from coplay.envs.registry import make_env
from coplay.models.build import ModelConfig, build_policy
from coplay.train.trainer import game_text


@pytest.fixture
def tiny_policy():
    text = game_text(lambda: make_env("kuhn_poker"), episodes=50)
    cfg = ModelConfig.model_validate({"tiny": {"hidden_size": 32, "intermediate_size": 64}})
    return build_policy(cfg, corpus=text.texts, actions=text.actions, seed=0)
