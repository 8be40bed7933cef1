"""Meta-solvers: known equilibria of textbook games, equilibrium constraints, bad input."""

import itertools
from functools import partial

import numpy as np
import pytest

from coplay.eval.metasolvers import (
    META_SOLVERS,
    alpharank,
    as_meta_game,
    deviation_gains,
    max_gini_cce,
    max_gini_ce,
    max_welfare_ce,
    nash,
    prd,
    solve_meta_game,
)

RPS = np.array([[0, -1, 1], [1, 0, -1], [-1, 1, 0]], dtype=float)
PENNIES = np.array([[1, -1], [-1, 1]], dtype=float)
PD = np.array([[-1, -3], [0, -2]], dtype=float)  # row payoff; strategies (cooperate, defect)
CHICKEN = np.array([[0, 7], [2, 6]], dtype=float)  # row payoff; strategies (dare, chicken)
FAST_PRD = {"iterations": 2_000, "dt": 1e-2, "average_last": 200}


def zero_sum(m):
    return [m, -m]


def symmetric(m):
    return [m, m.T]


@pytest.mark.parametrize("name", ["nash", "prd", "alpharank", "ce", "cce", "uniform"])
def test_rock_paper_scissors_gives_uniform(name):
    solver = partial(prd, **FAST_PRD) if name == "prd" else META_SOLVERS[name]
    sol = solver(zero_sum(RPS))
    for m in sol.marginals:
        np.testing.assert_allclose(m, np.full(3, 1 / 3), atol=1e-6)
    np.testing.assert_allclose(sol.joint, np.full((3, 3), 1 / 9), atol=1e-6)


def test_nash_of_matching_pennies_and_a_biased_zero_sum_game():
    for m in nash(zero_sum(PENNIES)).marginals:
        np.testing.assert_allclose(m, [0.5, 0.5], atol=1e-9)
    # [[3, -1], [-1, 1]]: the row mixes (1/3, 2/3) to equalise columns, value 1/3.
    biased = np.array([[3, -1], [-1, 1]], dtype=float)
    row, col = nash(zero_sum(biased)).marginals
    np.testing.assert_allclose(row, [1 / 3, 2 / 3], atol=1e-9)
    np.testing.assert_allclose(col, [1 / 3, 2 / 3], atol=1e-9)
    assert row @ biased @ col == pytest.approx(1 / 3)


def test_nash_accepts_constant_sum_and_refuses_general_sum():
    row, _ = nash([PENNIES + 1, 1 - PENNIES]).marginals  # constant sum 2
    np.testing.assert_allclose(row, [0.5, 0.5], atol=1e-9)
    with pytest.raises(ValueError, match="zero-sum"):
        nash(symmetric(PD))
    with pytest.raises(ValueError, match="2-player"):
        nash([np.zeros((2, 2, 2))] * 3)


@pytest.mark.parametrize("name", ["alpharank", "ce", "cce", "mwce", "mwcce"])
def test_prisoners_dilemma_is_solved_by_dominance(name):
    sol = solve_meta_game(name, symmetric(PD))
    np.testing.assert_allclose(sol.joint, [[0, 0], [0, 1]], atol=1e-6)


def test_prd_follows_dominance_and_keeps_its_exploration_floor():
    sol = prd(symmetric(PD), **FAST_PRD)
    for m in sol.marginals:
        assert m[1] > 0.99 and m[0] > 0  # gamma keeps a sliver on cooperate


def test_prd_finds_the_mixed_equilibrium_of_chicken():
    # Indifference: 7(1 - p) = 2p + 6(1 - p)  =>  dare with p = 1/3.
    for m in prd(symmetric(CHICKEN), **FAST_PRD).marginals:
        np.testing.assert_allclose(m, [1 / 3, 2 / 3], atol=1e-3)


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


def test_every_solver_returns_distributions_for_a_three_player_game():
    rng = np.random.default_rng(1)
    payoffs = [rng.normal(size=(2, 2, 3)) for _ in range(3)]
    for name in set(META_SOLVERS) - {"nash"}:
        sol = prd(payoffs, **FAST_PRD) if name == "prd" else solve_meta_game(name, payoffs)
        assert sol.joint.shape == (2, 2, 3) and sol.joint.sum() == pytest.approx(1.0), name
        assert [m.shape for m in sol.marginals] == [(2,), (2,), (3,)], name
        for m in sol.marginals:
            assert m.sum() == pytest.approx(1.0) and np.all(m >= 0), name


def test_alpharank_of_an_asymmetric_game_ranks_profiles():
    # Row prefers strategy 1 whatever the column does; column prefers matching the row.
    row = np.array([[0, 0], [1, 1]], dtype=float)
    col = np.array([[1, 0], [0, 1]], dtype=float)
    sol = alpharank([row, col])
    np.testing.assert_allclose(sol.joint, [[0, 0], [0, 1]], atol=1e-6)


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


def test_unknown_solver_and_bad_prd_options():
    with pytest.raises(ValueError, match="unknown meta-solver 'nope'; available: uniform"):
        solve_meta_game("nope", zero_sum(RPS))
    with pytest.raises(ValueError, match="iterations >= 1"):
        prd(zero_sum(RPS), iterations=0)


@pytest.mark.parametrize("name", ["ce", "cce", "mwce", "mwcce", "nash", "prd", "uniform"])
def test_a_one_by_one_meta_game_puts_all_weight_on_its_only_profile(name):
    sol = solve_meta_game(name, [np.array([[0.5]]), np.array([[-0.5]])])
    assert sol.joint.shape == (1, 1)
    assert sol.joint[0, 0] == pytest.approx(1.0)
