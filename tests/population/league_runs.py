"""Tiny league configs and tallies shared by the league test files."""

import numpy as np

from coplay.population.league_config import LeagueConfig
from coplay.population.league_tally import Tally
from coplay.train.settings import build_config

TINY = [
    "model.tiny.hidden_size=32",
    "model.tiny.intermediate_size=64",
    "model.tiny.num_layers=1",
    "rollout.games_per_iter=16",
    "optim.minibatch_size=64",
    "train.iterations=4",
    "train.eval_every=4",
    "train.eval_opponents=[]",
]


def league_cfg(**kwargs) -> LeagueConfig:
    return LeagueConfig(run=build_config(preset="kuhn-selfplay", overrides=TINY), **kwargs)


def two_player(wins, draws, games) -> Tally:
    """A two-player tally: one result per game, the rest of the games lost."""
    wins, draws, games = np.array(wins), np.array(draws), np.array(games)
    return Tally(wins, draws, games, games - wins - draws)
