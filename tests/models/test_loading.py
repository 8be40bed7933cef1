"""Saving and loading policies: plain HF folders plus decision settings."""

import pytest
from transformers import AutoModelForCausalLM

from coplay.models.loading import (
    ModelConfig,
    build_policy,
    load_policy,
    resolve_checkpoint,
    save_policy,
)
from coplay.models.tiny import TinyModelConfig

CORPUS = ["Your card: K.\nYour legal actions: [Pass] [Bet]\n"] * 30


def _policy(**kw):
    cfg = ModelConfig(tiny=TinyModelConfig(hidden_size=32, intermediate_size=64), **kw)
    return build_policy(cfg, corpus=CORPUS, actions=["[Pass]", "[Bet]"], seed=0)


def test_save_then_load_keeps_weights_and_settings(tmp_path):
    policy = _policy(mode="text", temperature=0.7)
    policy.version = 5
    save_policy(policy, tmp_path / "ckpt")
    loaded = load_policy(tmp_path / "ckpt")
    assert (loaded.mode, loaded.temperature, loaded.version) == ("text", 0.7, 5)
    for a, b in zip(policy.model.parameters(), loaded.model.parameters(), strict=True):
        assert (a == b).all()
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt").config.hidden_size == 32


def test_run_directory_resolves_to_its_final_checkpoint(tmp_path):
    save_policy(_policy(), tmp_path / "run" / "checkpoints" / "iter_000010")
    assert resolve_checkpoint(tmp_path / "run").name == "iter_000010"
    save_policy(_policy(), tmp_path / "run" / "checkpoints" / "final")
    assert resolve_checkpoint(tmp_path / "run").name == "final"


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither a checkpoint"):
        load_policy(tmp_path)
    with pytest.raises(FileNotFoundError, match="config.json missing"):
        build_policy(ModelConfig(path=str(tmp_path)), corpus=CORPUS, seed=0)


def test_same_seed_builds_the_same_model():
    a, b = _policy(), _policy()
    for p, q in zip(a.model.parameters(), b.model.parameters(), strict=True):
        assert (p == q).all()


def test_heads_must_divide_width():
    with pytest.raises(ValueError, match="divisible"):
        build_policy(
            ModelConfig(tiny=TinyModelConfig(hidden_size=30, num_heads=4)), corpus=CORPUS, seed=0
        )
