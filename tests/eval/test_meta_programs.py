"""The convex-program meta-solvers: known equilibria of textbook games, equilibrium
constraints, agreement with OpenSpiel's LP and JPSRO solvers, a second solver on failure."""

import itertools

import numpy as np
import pyspiel
import pytest
from open_spiel.python.algorithms import lp_solver

from coplay.eval import meta_programs
from coplay.eval.meta_openspiel import _openspiel_alpharank
from coplay.eval.meta_programs import (
    deviation_gains,
    max_deviation_gain,
    max_gini_cce,
    max_gini_ce,
    max_welfare_ce,
    nash,
)
from coplay.eval.meta_solution import MetaSolverError
from coplay.eval.metasolvers import solve_meta_game
from tests.eval.meta_games import CHICKEN, PD, PENNIES, symmetric, zero_sum


def test_nash_of_matching_pennies_and_a_biased_zero_sum_game():
    for m in nash(zero_sum(PENNIES)).marginals:
        np.testing.assert_allclose(m, [0.5, 0.5], atol=1e-9)
    # [[3, -1], [-1, 1]]: the row mixes (1/3, 2/3) to equalise columns, value 1/3.
    biased = np.array([[3, -1], [-1, 1]], dtype=float)
    row, col = nash(zero_sum(biased)).marginals
    np.testing.assert_allclose(row, [1 / 3, 2 / 3], atol=1e-9)
    np.testing.assert_allclose(col, [1 / 3, 2 / 3], atol=1e-9)
    assert row @ biased @ col == pytest.approx(1 / 3)


def test_nash_of_a_game_whose_players_differ_solves_each_from_its_own_side():
    # [[2, 0], [-1, 1]]: the row mixes (1/2, 1/2) to make the columns pay alike (1/2),
    # the column (1/4, 3/4) to make the rows cost alike. No symmetry of the game tells
    # the column's program from the row's.
    game = np.array([[2, 0], [-1, 1]], dtype=float)
    row, col = nash(zero_sum(game)).marginals
    np.testing.assert_allclose(row, [0.5, 0.5], atol=1e-9)
    np.testing.assert_allclose(col, [0.25, 0.75], atol=1e-9)
    assert row @ game @ col == pytest.approx(0.5)


def test_nash_accepts_constant_sum_and_refuses_general_sum():
    row, _ = nash([PENNIES + 1, 1 - PENNIES]).marginals  # constant sum 2
    np.testing.assert_allclose(row, [0.5, 0.5], atol=1e-9)
    with pytest.raises(ValueError, match="zero-sum"):
        nash(symmetric(PD))
    with pytest.raises(ValueError, match="2-player"):
        nash([np.zeros((2, 2, 2))] * 3)


def satisfies_ce(joint, payoffs, *, coarse, tol=1e-7):
    """Reference check by enumeration: no player gains by deviating."""
    n = len(payoffs)
    for p in range(n):
        own = range(joint.shape[p])
        for dev in own:
            for rec in [None] if coarse else own:
                gain = 0.0
                for profile in itertools.product(*map(range, joint.shape)):
                    if rec is not None and profile[p] != rec:
                        continue
                    moved = profile[:p] + (dev,) + profile[p + 1 :]
                    gain += joint[profile] * (payoffs[p][moved] - payoffs[p][profile])
                if gain > tol:
                    return False
    return True


def test_chicken_max_welfare_ce_is_the_textbook_one():
    # Dare/chicken recommended with 1/4 each and chicken/chicken with 1/2: welfare 10.5.
    sol = max_welfare_ce(symmetric(CHICKEN))
    np.testing.assert_allclose(sol.joint, [[0, 0.25], [0.25, 0.5]], atol=1e-7)
    assert satisfies_ce(sol.joint, symmetric(CHICKEN), coarse=False)


@pytest.mark.parametrize("solver", [max_gini_ce, max_gini_cce])
def test_max_gini_equilibria_satisfy_their_constraints(solver):
    coarse = solver is max_gini_cce
    rng = np.random.default_rng(0)
    games = [symmetric(CHICKEN), [rng.normal(size=(2, 3, 2)) for _ in range(3)]]
    for payoffs in games:
        sol = solver(payoffs)
        assert sol.correlated and sol.joint.sum() == pytest.approx(1.0)
        assert np.all(sol.joint >= 0)
        assert satisfies_ce(sol.joint, payoffs, coarse=coarse)
        for p, m in enumerate(sol.marginals):
            others = tuple(a for a in range(sol.joint.ndim) if a != p)
            np.testing.assert_allclose(m, sol.joint.sum(axis=others))


def test_a_product_that_is_not_an_equilibrium_violates_the_gains():
    # Uniform play in the prisoner's dilemma: defecting always pays.
    gains = deviation_gains(symmetric(PD), coarse=True)
    assert np.max(gains @ np.full(4, 0.25)) > 0
    assert not satisfies_ce(np.full((2, 2), 0.25), symmetric(PD), coarse=True)


def test_ce_of_chicken_is_more_spread_than_the_max_welfare_one():
    gini = lambda s: 1 - np.sum(s.joint**2)  # noqa: E731
    assert gini(max_gini_ce(symmetric(CHICKEN))) > gini(max_welfare_ce(symmetric(CHICKEN)))


# --- random games, the max-Gini optimum, agreement with OpenSpiel -------------------


def random_game(seed, shape, *, zero_sum):
    rng = np.random.default_rng(seed)
    if zero_sum:
        a = rng.normal(size=shape)
        return [a, -a]
    return [rng.normal(size=shape) for _ in shape]


# The seeds of the first three games of each kind that the former SLSQP solver of the
# max-Gini CE failed on (the 8x8 ones also for the CCE), then a few more of each shape.
RANDOM_GAMES = [
    *[((6, 6), False, s) for s in (0, 2, 14, 3, 4)],
    *[((8, 8), True, s) for s in (7, 18, 22, 51, 1)],
    *[((2, 2, 2, 2), False, s) for s in range(4)],
    *[((3, 3, 3), False, s) for s in range(2)],
    ((10, 10), False, 0),
    ((2, 7), False, 0),
]


@pytest.mark.parametrize("name", ["ce", "cce", "mwce", "mwcce"])
def test_correlated_solvers_leave_no_deviation_gain_on_random_games(name):
    coarse = name in ("cce", "mwcce")
    for shape, is_zero_sum, seed in RANDOM_GAMES:
        payoffs = random_game(seed, shape, zero_sum=is_zero_sum)
        sol = solve_meta_game(name, payoffs)
        assert sol.joint.shape == shape and sol.joint.sum() == pytest.approx(1.0)
        assert np.all(sol.joint >= 0)
        assert max_deviation_gain(payoffs, sol.joint, coarse=coarse) <= 1e-6, (shape, seed)


def test_max_deviation_gain_measures_the_best_deviation():
    # Uniform play of the prisoner's dilemma: always defecting gains 1 in the half of
    # the games where the recommendation was to cooperate.
    uniform = np.full((2, 2), 0.25)
    assert max_deviation_gain(symmetric(PD), uniform, coarse=True) == pytest.approx(0.5)
    assert max_deviation_gain(symmetric(PD), np.array([[0, 0], [0, 1.0]]), coarse=True) == 0
    # Told apart on a strict CCE (one goes, one stops), every deviation loses: 0, not the
    # least loss.
    light = [np.array([[0, 0], [1, -10]], dtype=float), np.array([[0, 1], [0, -10]], dtype=float)]
    assert max_deviation_gain(light, np.array([[0, 0.5], [0.5, 0]]), coarse=True) == 0.0


@pytest.mark.parametrize("solver", [max_gini_ce, max_gini_cce])
def test_max_gini_equilibrium_of_chicken_is_the_one_found_by_hand(solver):
    # Joint [[a, b], [c, d]] over (dare, chicken)^2. The (coarse) CE constraints are
    # 2a <= b, 2a <= c, d <= 2b, d <= 2c; min a^2 + b^2 + c^2 + d^2 binds b = c = 2a,
    # so 34a^2 - 10a + 1 is least at a = 5/34 (KKT multipliers 2/34 > 0).
    sol = solver(symmetric(CHICKEN))
    np.testing.assert_allclose(sol.joint, np.array([[5, 10], [10, 9]]) / 34, atol=1e-7)


@pytest.mark.parametrize("shape", [(3, 3), (4, 4), (2, 3, 2)])
def test_max_gini_equilibria_match_openspiels_jpsro(shape):
    _openspiel_alpharank()  # jpsro imports α-rank, whose plotting module may be missing
    from open_spiel.python.algorithms import jpsro

    payoffs = random_game(0, shape, zero_sum=False)
    repeats = [np.ones(k) for k in shape]
    mgce, _ = jpsro._mgce(np.stack(payoffs), repeats)
    mgcce, _ = jpsro._mgcce(np.stack(payoffs), repeats)
    np.testing.assert_allclose(max_gini_ce(payoffs).joint, mgce, atol=1e-6)
    np.testing.assert_allclose(max_gini_cce(payoffs).joint, mgcce, atol=1e-6)


def openspiel_zero_sum_value(game, monkeypatch):
    """OpenSpiel's ``lp_solver`` value of a zero-sum matrix game. Its default LP solver
    (ECOS) no longer comes with cvxpy, so the same LP runs with Clarabel."""
    monkeypatch.setattr(lp_solver.LinearProgram.solve, "__defaults__", ("CLARABEL", {}))
    return lp_solver.solve_zero_sum_matrix_game(game)


@pytest.mark.parametrize("name", ["matrix_mp", "matrix_rps", "matrix_brps"])
def test_nash_matches_openspiels_lp_solver_on_standard_games(name, monkeypatch):
    game = pyspiel.load_game(name)
    row, col = game.row_utilities(), game.col_utilities()
    p0, p1, v0, v1 = openspiel_zero_sum_value(game, monkeypatch)
    sol = nash([row, col])
    assert sol.marginals[0] @ row @ sol.marginals[1] == pytest.approx(v0, abs=1e-6)
    assert sol.marginals[0] @ col @ sol.marginals[1] == pytest.approx(v1, abs=1e-6)
    # Each of these games has a unique equilibrium.
    np.testing.assert_allclose(sol.marginals[0], p0, atol=1e-6)
    np.testing.assert_allclose(sol.marginals[1], p1, atol=1e-6)


def test_nash_of_biased_rock_paper_scissors_is_the_textbook_one():
    # matrix_brps [[0, -25, 50], [25, 0, -5], [-50, 5, 0]]: (1, 10, 5) / 16 makes every
    # answer of the other player earn 0 (-25*10 + 50*5 = 25*1 - 5*5 = -50*1 + 5*10 = 0).
    game = pyspiel.load_game("matrix_brps")
    row, _ = nash([game.row_utilities(), game.col_utilities()]).marginals
    np.testing.assert_allclose(row, np.array([1, 10, 5]) / 16, atol=1e-7)


@pytest.mark.parametrize("solver", [max_gini_ce, max_gini_cce])
def test_scaling_the_payoffs_leaves_the_max_gini_equilibrium(solver):
    # The (C)CE constraints are homogeneous in the payoffs and the objective ignores
    # them: a game in millions has the same equilibrium, and the solver's round-off,
    # which grows with the payoffs, must not count as a deviation gain.
    payoffs = random_game(0, (6, 6), zero_sum=False)
    big = solver([1e6 * p for p in payoffs]).joint
    np.testing.assert_allclose(big, solver(payoffs).joint, atol=1e-6)


def test_a_solver_that_stops_short_is_a_failure_not_an_answer(monkeypatch):
    # After one iteration Clarabel reports user_limit with a point that is no optimum.
    monkeypatch.setattr(meta_programs, "LP_SOLVERS", (("CLARABEL", {"max_iter": 1}),))
    with pytest.raises(
        MetaSolverError, match="zero-sum Nash LP failed: CLARABEL: status user_limit"
    ):
        nash(zero_sum(np.array([[2, 0], [-1, 1]], dtype=float)))


def test_a_failing_qp_solver_hands_over_to_the_next_and_all_failing_is_an_error(monkeypatch):
    starved = ("SCS", {"max_iters": 1})  # stops before any accurate answer
    monkeypatch.setattr(meta_programs, "QP_SOLVERS", (starved, ("CLARABEL", {})))
    payoffs = random_game(0, (6, 6), zero_sum=False)
    assert max_deviation_gain(payoffs, max_gini_ce(payoffs).joint, coarse=False) <= 1e-6
    monkeypatch.setattr(meta_programs, "QP_SOLVERS", (starved,))
    with pytest.raises(MetaSolverError, match="max-Gini CE failed: SCS: "):
        max_gini_ce(payoffs)
