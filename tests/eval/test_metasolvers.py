"""Meta-solvers by name: every registered solver on textbook games, fallback on
failure, bad input."""

from functools import partial

import numpy as np
import pytest

from coplay.eval.meta_openspiel import prd
from coplay.eval.meta_solution import MetaSolverError
from coplay.eval.metasolvers import META_SOLVERS, solve_meta_game, solve_with_fallback
from tests.eval.meta_games import CHICKEN, FAST_PRD, PD, RPS, symmetric, zero_sum


@pytest.mark.parametrize("name", ["nash", "prd", "alpharank", "ce", "cce", "uniform"])
def test_rock_paper_scissors_gives_uniform(name):
    solver = partial(prd, **FAST_PRD) if name == "prd" else META_SOLVERS[name]
    sol = solver(zero_sum(RPS))
    for m in sol.marginals:
        np.testing.assert_allclose(m, np.full(3, 1 / 3), atol=1e-6)
    np.testing.assert_allclose(sol.joint, np.full((3, 3), 1 / 9), atol=1e-6)


@pytest.mark.parametrize("name", ["alpharank", "ce", "cce", "mwce", "mwcce"])
def test_prisoners_dilemma_is_solved_by_dominance(name):
    sol = solve_meta_game(name, symmetric(PD))
    np.testing.assert_allclose(sol.joint, [[0, 0], [0, 1]], atol=1e-6)


def test_every_solver_returns_distributions_for_a_three_player_game():
    rng = np.random.default_rng(1)
    payoffs = [rng.normal(size=(2, 2, 3)) for _ in range(3)]
    for name in set(META_SOLVERS) - {"nash"}:
        sol = prd(payoffs, **FAST_PRD) if name == "prd" else solve_meta_game(name, payoffs)
        assert sol.joint.shape == (2, 2, 3) and sol.joint.sum() == pytest.approx(1.0), name
        assert [m.shape for m in sol.marginals] == [(2,), (2,), (3,)], name
        for m in sol.marginals:
            assert m.sum() == pytest.approx(1.0) and np.all(m >= 0), name


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


def failing(payoffs):
    raise MetaSolverError("no answer")


def test_fallback_plays_max_welfare_ce_then_uniform_and_says_so(monkeypatch):
    payoffs = symmetric(CHICKEN)
    ok = solve_with_fallback("ce", payoffs)
    assert (ok.solver, ok.level, ok.failures) == ("ce", 0, ())
    monkeypatch.setitem(META_SOLVERS, "ce", failing)
    first = solve_with_fallback("ce", payoffs)
    assert (first.solver, first.level, first.failures) == ("mwce", 1, ("ce: no answer",))
    np.testing.assert_allclose(first.solution.joint, [[0, 0.25], [0.25, 0.5]], atol=1e-7)
    assert first.warning() == "meta-solver 'ce' failed, playing 'mwce' instead: ce: no answer"
    monkeypatch.setitem(META_SOLVERS, "mwce", failing)
    second = solve_with_fallback("ce", payoffs)
    assert (second.solver, second.level) == ("uniform", 2)
    assert second.failures == ("ce: no answer", "mwce: no answer")
    np.testing.assert_allclose(second.solution.joint, np.full((2, 2), 0.25))
    assert solve_with_fallback("mwce", payoffs).level == 2  # mwce is not tried twice


def test_fallback_does_not_hide_bad_input():
    with pytest.raises(ValueError, match="zero-sum") as err:
        solve_with_fallback("nash", symmetric(PD))
    assert not isinstance(err.value, MetaSolverError)
    with pytest.raises(ValueError, match="unknown meta-solver"):
        solve_with_fallback("best", symmetric(PD))
