"""Uniform and OpenSpiel's meta-solvers: PRD and α-rank on textbook games, agreement
with OpenSpiel's own α-rank, its failures raised as meta-solver errors."""

import numpy as np
import pyspiel
import pytest

from coplay.eval.meta_openspiel import _openspiel_alpharank, alpharank, prd
from coplay.eval.meta_solution import MetaSolverError
from coplay.eval.metasolvers import solve_with_fallback
from tests.eval.meta_games import CHICKEN, FAST_PRD, PD, RPS, symmetric, zero_sum


def test_prd_follows_dominance_and_keeps_its_exploration_floor():
    sol = prd(symmetric(PD), **FAST_PRD)
    for m in sol.marginals:
        assert m[1] > 0.99 and m[0] > 0  # gamma keeps a sliver on cooperate


def test_prd_finds_the_mixed_equilibrium_of_chicken():
    # Indifference: 7(1 - p) = 2p + 6(1 - p)  =>  dare with p = 1/3.
    for m in prd(symmetric(CHICKEN), **FAST_PRD).marginals:
        np.testing.assert_allclose(m, [1 / 3, 2 / 3], atol=1e-3)


def test_alpharank_of_an_asymmetric_game_ranks_profiles():
    # Row prefers strategy 1 whatever the column does; column prefers matching the row.
    row = np.array([[0, 0], [1, 1]], dtype=float)
    col = np.array([[1, 0], [0, 1]], dtype=float)
    sol = alpharank([row, col])
    np.testing.assert_allclose(sol.joint, [[0, 0], [0, 1]], atol=1e-6)


@pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")
@pytest.mark.parametrize(
    "name",
    [
        "matrix_cd",
        "matrix_coordination",
        "matrix_mp",
        "matrix_pd",
        "matrix_rps",
        "matrix_rpsw",
        "matrix_sh",
        "matrix_shapleys_game",
    ],
)
def test_alpharank_matches_openspiels_finite_alpha_ranking(name):
    # Infinite α (the ε sweep) against OpenSpiel's plain α-rank at α = 10, m = 50, on
    # the standard games where the latter has a unique stationary distribution.
    game = pyspiel.load_game(name)
    row, col = game.row_utilities(), game.col_utilities()
    single = np.array_equal(col, row.T)
    _, _, pi, _, _ = _openspiel_alpharank().compute([row] if single else [row, col], alpha=10)
    sol = alpharank([row, col])
    np.testing.assert_allclose(sol.marginals[0] if single else sol.joint.ravel(), pi, atol=1e-3)


# --- failure and fallback ----------------------------------------------------------


def test_openspiel_failures_become_meta_solver_errors(monkeypatch):
    def no_distribution(*args, **kwargs):
        raise RuntimeError("AlphaRank stationary distribution not found")

    monkeypatch.setattr(_openspiel_alpharank(), "sweep_pi_vs_epsilon", no_distribution)
    with pytest.raises(MetaSolverError, match="alpharank failed: AlphaRank stationary"):
        alpharank(zero_sum(RPS))
    assert solve_with_fallback("alpharank", zero_sum(RPS)).solver == "mwce"
