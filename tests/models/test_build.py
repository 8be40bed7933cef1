"""Building a policy from the model config: the tiny model, its shape and its device."""

import pytest
import torch

from coplay.models.build import ModelConfig, build_policy
from coplay.models.tiny import TinyModelConfig
from tests.models.tiny_policies import CORPUS, tiny_policy


def test_same_seed_builds_the_same_model():
    a, b = tiny_policy(), tiny_policy()
    for p, q in zip(a.model.parameters(), b.model.parameters(), strict=True):
        assert (p == q).all()


def test_heads_must_divide_width():
    with pytest.raises(ValueError, match="divisible"):
        build_policy(
            ModelConfig(tiny=TinyModelConfig(hidden_size=30, num_heads=4)), corpus=CORPUS, seed=0
        )


@pytest.mark.parametrize(
    ("device", "seen"),
    [("mps", "no mps device"), ("xpu:1", "no xpu device"), ("cuda:7", "cuda device")],
)
def test_a_device_torch_does_not_see_is_one_error_line(device, seen):
    if device.startswith("cuda") and torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")
    cfg = ModelConfig(device=device)
    with pytest.raises(ValueError, match=f"model.device is {device}, but torch sees .*{seen}"):
        build_policy(cfg, corpus=["a b"], seed=0)
