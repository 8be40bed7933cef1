"""The league's opponent samplers: their formulas, draw frequencies and fallbacks."""

import numpy as np
import pytest

from coplay.eval.meta_solution import MetaSolverError
from coplay.eval.metasolvers import META_SOLVERS
from coplay.population.league_samplers import SAMPLERS, PoolView
from coplay.population.opponents import OpponentPool
from tests.population.league_runs import league_cfg


def draw_shares(probs, n=40_000, seed=0) -> np.ndarray:
    """Empirical member shares of ``n`` draws through the trainer's OpponentPool."""
    members = [type("M", (), {"policy_id": str(i)})() for i in range(len(probs))]
    draws = OpponentPool(members, probs=probs).sample(np.random.default_rng(seed), [0] * n)
    return np.bincount([int(d.policy_id) for d in draws], minlength=len(probs)) / n


WIN = np.array([0.1, 0.5, 0.8, 1.0])


@pytest.mark.parametrize(
    "kwargs,want",
    [
        ({"sampler": "uniform"}, np.full(4, 0.25)),
        # hard, p=2: (0.81, 0.25, 0.04, 0) / 1.10
        ({"sampler": "pfsp"}, np.array([0.81, 0.25, 0.04, 0.0]) / 1.10),
        # hard, p=1: (0.9, 0.5, 0.2, 0) / 1.6
        ({"sampler": "pfsp", "pfsp_power": 1.0}, np.array([0.9, 0.5, 0.2, 0.0]) / 1.6),
        # variance: (0.09, 0.25, 0.16, 0) / 0.5
        ({"sampler": "pfsp", "pfsp_weighting": "variance"}, np.array([0.09, 0.25, 0.16, 0]) / 0.5),
    ],
)
def test_sampler_formulas_and_draw_frequencies(kwargs, want):
    cfg = league_cfg(**kwargs)
    probs = SAMPLERS[cfg.sampler].weights(PoolView(WIN), cfg)
    np.testing.assert_allclose(probs, want)
    # 40k draws: each share within 4 standard errors of its probability.
    se = np.sqrt(want * (1 - want) / 40_000)
    assert np.all(np.abs(draw_shares(probs) - want) <= 4 * se + 1e-12)


def test_pfsp_is_uniform_when_the_learner_beats_everyone():
    cfg = league_cfg(sampler="pfsp")
    np.testing.assert_allclose(
        SAMPLERS["pfsp"].weights(PoolView(np.ones(3)), cfg), np.full(3, 1 / 3)
    )


def test_meta_sampler_plays_the_nash_of_rock_paper_scissors():
    rps = np.array([[0.0, -1.0, 1.0], [1.0, 0.0, -1.0], [-1.0, 1.0, 0.0]])
    cfg = league_cfg(sampler="meta")
    np.testing.assert_allclose(
        SAMPLERS["meta"].weights(PoolView(np.zeros(3), rps), cfg), 1 / 3, atol=1e-6
    )
    # A dominated member (loses to all) gets no weight.
    dom = np.array([[0.0, 1.0], [-1.0, 0.0]])
    np.testing.assert_allclose(
        SAMPLERS["meta"].weights(PoolView(np.zeros(2), dom), cfg), [1, 0], atol=1e-6
    )


def test_meta_sampler_falls_back_when_its_solver_fails_and_reports_it(monkeypatch):
    def failing(payoffs):
        raise MetaSolverError("no answer")

    monkeypatch.setitem(META_SOLVERS, "nash", failing)
    rps = np.array([[0.0, -1.0, 1.0], [1.0, 0.0, -1.0], [-1.0, 1.0, 0.0]])
    view = PoolView(np.zeros(3), rps)
    with pytest.warns(RuntimeWarning, match="meta-solver 'nash' failed, playing 'mwce'"):
        probs = SAMPLERS["meta"].weights(view, league_cfg(sampler="meta"))
    np.testing.assert_allclose(probs, 1 / 3, atol=1e-6)  # RPS's only CE is uniform
    assert view.metrics == {"league/meta_fallback": 1}


def test_meta_samplers_nash_falls_back_when_forfeits_break_the_constant_sum():
    # Self-play where both seats forfeited (both paid the minimum) leaves a negative
    # diagonal: payoff + payoff.T is not constant, which nash's LP refuses.
    payoff = np.array([[-0.3, -0.2], [0.2, 0.0]])
    view = PoolView(np.zeros(2), payoff)
    with pytest.warns(RuntimeWarning, match="meta-solver 'nash' failed, playing 'mwce'"):
        probs = SAMPLERS["meta"].weights(view, league_cfg(sampler="meta"))
    assert probs.sum() == pytest.approx(1.0)
    assert view.metrics == {"league/meta_fallback": 1}
