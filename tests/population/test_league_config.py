"""A league's settings: what the config refuses."""

import pytest

from coplay.population.league_config import LeagueConfig
from coplay.train.settings import build_config
from tests.population.league_runs import TINY, league_cfg


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"sampler": "elo"}, "unknown sampler 'elo'"),
        ({"meta_solver": "best"}, "unknown meta_solver"),
        ({"bots": ["random", "random"]}, "distinct"),
        ({"win_threshold": 1.5}, "less than or equal to 1"),
        ({"self_play": -0.1}, "greater than or equal to 0"),
        ({"seat_weights": [0, 0]}, r"seat_weights must be >= 0 and not all 0, got \[0.0, 0.0\]"),
        ({"seat_weights": [1, 2, 3]}, "seat_weights has 3 weights; kuhn_poker has 2 seats"),
    ],
)
def test_bad_league_settings_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        league_cfg(**kwargs)


def test_the_meta_samplers_nash_is_refused_for_a_general_sum_game():
    run = build_config(preset="kuhn-selfplay", overrides=[*TINY, "game.name=dilemma"])
    with pytest.raises(ValueError, match="meta_solver=nash needs a zero-sum game"):
        LeagueConfig(run=run, sampler="meta")
    assert LeagueConfig(run=run, sampler="pfsp").sampler == "pfsp"  # nash is not read


def test_the_meta_sampler_is_refused_for_a_game_that_is_not_two_player():
    # Its meta-game pairs two members: three-player Kuhn failed with an IndexError
    # traceback at the first snapshot, its run folder already written.
    run = build_config(preset="kuhn-selfplay", overrides=[*TINY, "game.params={players: 3}"])
    with pytest.raises(
        ValueError, match="sampler=meta needs a two-player game; 'kuhn_poker' has 3"
    ):
        LeagueConfig(run=run, sampler="meta")
    assert LeagueConfig(run=run, sampler="pfsp").sampler == "pfsp"
