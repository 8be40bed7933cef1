"""Shared fixtures: a tiny model and tokenizer trained on Kuhn text."""

import pytest

from coplay.envs.registry import make_env
from coplay.models.tiny import TinyModelConfig, build_tiny_model
from coplay.models.tokenizer import train_tokenizer


@pytest.fixture(scope="session")
def tiny():
    env = make_env("kuhn_poker")
    corpus = [env.observe(env.players_to_act()[0]).text, "Action: [Pass] [Bet] [Call] [Fold]"] * 20
    tok = train_tokenizer(corpus, vocab_size=320)
    model = build_tiny_model(TinyModelConfig(vocab_size=320), vocab_size=len(tok), seed=0)
    return model.eval(), tok


from tests.train.conftest import tiny_policy  # noqa: E402, F401  (a fixture, found by name)
