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


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {"sampler": "uniform", "pfsp_power": 5.0},
            r"sampler=uniform reads no pfsp_power: pfsp_power=5.0 would have no effect; "
            "drop it or use sampler=pfsp",
        ),
        ({"sampler": "meta", "pfsp_weighting": "variance"}, "sampler=meta reads no pfsp_weighting"),
        ({"sampler": "pfsp", "meta_solver": "ce"}, "sampler=pfsp reads no meta_solver"),
        ({"sampler": "uniform", "meta_episodes": 7}, "use sampler=meta"),
        (
            {"sampler": "pfsp", "pfsp_weighting": "variance", "pfsp_power": 5.0},
            "pfsp_weighting=variance reads no pfsp_power",
        ),
        ({"win_threshold": None, "min_games": 5}, "win_threshold=None reads no min_games"),
    ],
)
def test_a_setting_the_league_would_never_read_is_refused(kwargs, match):
    # Each was accepted and silently had no effect.
    with pytest.raises(ValueError, match=match):
        league_cfg(**kwargs)


def test_an_infinite_pfsp_power_is_refused():
    # (1 - x) ** inf is 0 for every member the learner ever scored against: the
    # weighting fell back to uniform without a word.
    with pytest.raises(ValueError, match="pfsp_power"):
        league_cfg(pfsp_power=float("inf"))


def test_the_settings_of_the_sampler_in_use_are_accepted():
    assert league_cfg(sampler="pfsp", pfsp_weighting="variance").pfsp_power == 2.0
    assert league_cfg(sampler="meta", meta_solver="ce", meta_episodes=7).meta_episodes == 7
    assert league_cfg(win_threshold=0.6, min_games=5).min_games == 5
