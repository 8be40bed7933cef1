"""A tiny model and tokenizer trained on Kuhn text, and Kuhn observations."""

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


@pytest.fixture
def observations():
    env = make_env("kuhn_poker")
    out = []
    for seed in range(6):
        env.reset(seed)
        out.append(env.observe(env.players_to_act()[0]))
    return out
