"""A tiny policy, shared by the tests of building, checking, saving and loading policies."""

from coplay.models.build import ModelConfig, build_policy
from coplay.models.tiny import TinyModelConfig

CORPUS = ["Your card: K.\nYour legal actions: [Pass] [Bet]\n"] * 30


def tiny_policy(**kw):
    cfg = ModelConfig(tiny=TinyModelConfig(hidden_size=32, intermediate_size=64), **kw)
    return build_policy(cfg, corpus=CORPUS, actions=["[Pass]", "[Bet]"], seed=0)
