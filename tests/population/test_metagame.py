"""Meta-games of a population (coplay.population.metagame)."""

import pyspiel
import pytest
from open_spiel.python import policy as os_policy

from coplay.population.metagame import exact_payoffs


def test_exact_payoffs_refuse_a_game_that_is_not_two_player():
    # A 3-player game raised an IndexError deep in OpenSpiel (two policies, three seats).
    game = pyspiel.load_game("kuhn_poker", {"players": 3})
    tables = [os_policy.UniformRandomPolicy(game)] * 2
    with pytest.raises(ValueError, match="2-player meta-games; 'kuhn_poker' has 3 players"):
        exact_payoffs(game, tables)
