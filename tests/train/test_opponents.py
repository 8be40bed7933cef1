"""Opponents by name or checkpoint path."""

import numpy as np
import pytest

from coplay.policies.scripted import NashPolicy, PerfectPlayer, RandomPolicy
from coplay.train.opponents import OpponentPool, build_opponent


def test_scripted_opponents_by_name():
    assert isinstance(build_opponent("random", "kuhn_poker"), RandomPolicy)
    assert isinstance(build_opponent("nash", "kuhn_poker"), NashPolicy)
    assert isinstance(build_opponent("optimal", "tic_tac_toe"), PerfectPlayer)


def test_unknown_opponent_names_the_choices():
    with pytest.raises(ValueError, match="unknown opponent 'grandmaster'"):
        build_opponent("grandmaster", "kuhn_poker")


def test_nash_needs_a_solvable_game():
    with pytest.raises(ValueError, match="does not play"):
        build_opponent("nash", "tic_tac_toe")


def test_solved_opponents_refuse_changed_games():
    with pytest.raises(ValueError, match="solved for the standard 'kuhn_poker' only"):
        build_opponent("nash", "kuhn_poker", params={"players": 3})
    assert isinstance(build_opponent("random", "kuhn_poker", params={"players": 3}), RandomPolicy)


def test_pool_samples_members_by_probability_and_self_play():
    a, b = RandomPolicy(policy_id="a"), RandomPolicy(policy_id="b")
    pool = OpponentPool([a, b], probs=[3.0, 1.0], self_play=0.5)
    draws = pool.sample(np.random.default_rng(0), 20_000)
    share = {k: sum((d.policy_id if d else None) == k for d in draws) / 20_000 for k in "ab"}
    assert draws.count(None) / 20_000 == pytest.approx(0.5, abs=0.02)
    assert share["a"] == pytest.approx(0.375, abs=0.02)
    assert share["b"] == pytest.approx(0.125, abs=0.02)
    assert OpponentPool([a], self_play=1.0).sample(np.random.default_rng(0), 3) == [None] * 3


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"members": [], "probs": None}, "empty"),
        ({"probs": [1.0]}, "non-negative"),
        ({"probs": [-1.0, 2.0]}, "non-negative"),
        ({"probs": [0.0, 0.0]}, "all be zero"),
        ({"self_play": 1.5}, "self_play"),
    ],
)
def test_pool_rejects_bad_settings(kwargs, match):
    members = kwargs.pop("members", [RandomPolicy(), RandomPolicy(seed=1)])
    with pytest.raises(ValueError, match=match):
        OpponentPool(members, **kwargs).sample(np.random.default_rng(0), 4)
