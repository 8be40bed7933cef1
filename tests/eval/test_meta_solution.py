"""A meta-game as the solvers take it: bad input gives clear errors."""

import numpy as np
import pytest

from coplay.eval.meta_solution import as_meta_game


@pytest.mark.parametrize(
    ("payoffs", "message"),
    [
        (np.zeros((2, 2, 2)), "one payoff tensor per player"),
        ([np.zeros((2, 2))], "at least 2 players"),
        ([[[0, 1], [2]], np.zeros((2, 2))], "ragged"),
        ([np.zeros((2, 2)), np.zeros((2, 3))], "shape"),
        ([np.zeros((2, 2, 2)), np.zeros((2, 2, 2))], "dimensions"),
        ([np.array([[np.nan, 0], [0, 0]]), np.zeros((2, 2))], "NaN"),
        ([np.zeros((2, 0)), np.zeros((2, 0))], "at least one strategy"),
    ],
)
def test_malformed_meta_games_give_clear_errors(payoffs, message):
    with pytest.raises(ValueError, match=message):
        as_meta_game(payoffs)
