"""Value model: zero start, clipped loss, regression fits targets, values on turns."""

import numpy as np
import pytest
import torch

from coplay.envs.registry import make_env
from coplay.policies.scripted import RandomPolicy
from coplay.rollout.engine import play_episodes
from coplay.train.critic import CriticConfig, critic_update, fill_values, make_critic, value_loss


@pytest.fixture
def episodes():
    bot = RandomPolicy(seed=0)
    return play_episodes(lambda: make_env("kuhn_poker"), [[bot, bot]] * 16, range(16))


def test_starts_at_zero_and_fills_every_turn(tiny_policy, episodes):
    critic = make_critic(tiny_policy, CriticConfig())
    fill_values(critic, episodes)
    values = [t.value for e in episodes for t in e.turns]
    assert values and all(v == 0.0 for v in values)


def test_value_loss_unclipped_and_clipped():
    v, old, r = torch.tensor([2.0, 0.0]), torch.tensor([0.0, 0.0]), torch.tensor([1.0, 1.0])
    assert float(value_loss(v, old, r, None)) == pytest.approx(0.5 * (1 + 1) / 2)
    # clip 0.5: first clipped value 0.5 -> (0.5-1)^2 = 0.25 < 1, keeps 1; second 0 -> 1
    assert float(value_loss(v, old, r, 0.5)) == pytest.approx(0.5)
    v2 = torch.tensor([0.1, 0.0])  # moves toward target: clipped form never smaller
    assert float(value_loss(v2, old, r, 0.05)) >= float(value_loss(v2, old, r, None))


def test_regression_learns_the_targets(tiny_policy, episodes):
    critic = make_critic(tiny_policy, CriticConfig(lr=1e-2, batch_size=64))
    turns = [t for e in episodes for t in e.turns]
    # Target: +1 for the first player's turns, -1 for the second's (the text says who).
    targets = [1.0 if t.player == 0 else -1.0 for t in turns]
    rng = np.random.default_rng(0)
    fill_values(critic, episodes)
    first = critic_update(critic, turns, targets, rng)["critic/loss"]
    for _ in range(30):
        fill_values(critic, episodes)
        last = critic_update(critic, turns, targets, rng)["critic/loss"]
    assert last < 0.2 * first


def test_policy_weights_are_not_shared(tiny_policy, episodes):
    critic = make_critic(tiny_policy, CriticConfig(lr=1e-1))
    before = [p.clone() for p in tiny_policy.model.parameters()]
    fill_values(critic, episodes)
    turns = [t for e in episodes for t in e.turns]
    critic_update(critic, turns, [1.0] * len(turns), np.random.default_rng(0))
    assert all(
        torch.equal(a, b) for a, b in zip(before, tiny_policy.model.parameters(), strict=True)
    )


def test_mismatched_targets_are_an_error(tiny_policy, episodes):
    critic = make_critic(tiny_policy, CriticConfig())
    fill_values(critic, episodes)
    turns = [t for e in episodes for t in e.turns]
    with pytest.raises(ValueError, match="value targets"):
        critic_update(critic, turns, [0.0], np.random.default_rng(0))
