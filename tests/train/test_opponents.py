"""Opponents by name or checkpoint path."""

import pytest

from coplay.policies.scripted import NashPolicy, PerfectPlayer, RandomPolicy
from coplay.train.opponents import build_opponent


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
