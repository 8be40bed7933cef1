"""A meta-game as the solvers take it (bad input gives clear errors), and the solution
records built from marginals or from a joint."""

import numpy as np
import pytest

from coplay.eval.meta_solution import (
    MetaSolverError,
    as_meta_game,
    from_joint,
    from_marginals,
    normalised,
)


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


def test_a_one_strategy_player_is_a_meta_game():
    # A population of one member is where PSRO starts: nothing to refuse.
    payoffs = as_meta_game([[[1, 2, 3]], [[0, -1, 2]]])
    assert [t.shape for t in payoffs] == [(1, 3), (1, 3)]
    assert all(t.dtype == float for t in payoffs)


def test_marginals_make_a_product_joint_in_player_order():
    sol = from_marginals([np.array([1.0, 3.0]), np.array([0.5, 0.25, 0.25])])
    np.testing.assert_allclose(sol.marginals[0], [0.25, 0.75])
    np.testing.assert_allclose(sol.joint, [[0.125, 0.0625, 0.0625], [0.375, 0.1875, 0.1875]])
    assert not sol.correlated


def test_a_joint_gives_each_player_its_marginal():
    joint = np.arange(6.0).reshape(2, 3)  # total 15
    sol = from_joint(joint)
    np.testing.assert_allclose(sol.joint, joint / 15)
    np.testing.assert_allclose(sol.marginals[0], [3 / 15, 12 / 15])
    np.testing.assert_allclose(sol.marginals[1], [3 / 15, 5 / 15, 7 / 15])
    assert sol.correlated


def test_normalised_drops_round_off_below_zero_and_refuses_no_mass():
    np.testing.assert_allclose(normalised(np.array([-1e-12, 0.5, 1.5])), [0.0, 0.25, 0.75])
    for empty in (np.zeros(3), np.array([-1.0, 0.0]), np.array([np.nan, 1.0])):
        with pytest.raises(MetaSolverError, match="no distribution"):
            normalised(empty)
