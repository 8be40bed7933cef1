"""GAE: hand values, lam limits, a plain-loop reference, targets, missing values."""

import math
import random
from dataclasses import replace

import numpy as np
import pytest
from builders import assert_close, assert_permutation_equivariant, random_reward_episodes
from builders import make_reward_episode as make_episode

from coplay.algos.advantages import make_estimator
from coplay.algos.advantages.gae import explained_variance, gae_advantages, value_targets


def with_values(episode, values):
    """Set ``Turn.value`` seat by seat from ``values[s][t]``."""
    for traj, vs in zip(episode.trajectories, values, strict=True):
        for turn, v in zip(traj.turns, vs, strict=True):
            turn.value = v
    return episode


def random_valued(rng, n):
    eps = random_reward_episodes(rng, n, values=[-1.0, 0.0, 0.5, 1.0])
    for ep in eps:
        for traj in ep.trajectories:
            for turn in traj.turns:
                turn.value = rng.uniform(-1, 1)
    return eps


def reference(rewards, values, gamma, lam):
    """A_t as the explicit sum of discounted TD errors (no recursion)."""
    v = [*values, 0.0]
    deltas = [rewards[t] + gamma * v[t + 1] - v[t] for t in range(len(rewards))]
    return [
        sum((gamma * lam) ** (k - t) * deltas[k] for k in range(t, len(rewards)))
        for t in range(len(rewards))
    ]


def test_hand_computed():
    # rewards (0, 1), values (0.5, 0.25), gamma 0.9, lam 0.5:
    # delta_1 = 1 - 0.25 = 0.75; delta_0 = 0 + 0.9 * 0.25 - 0.5 = -0.275
    # A_1 = 0.75; A_0 = -0.275 + 0.45 * 0.75 = 0.0625
    got = gae_advantages([0.0, 1.0], [0.5, 0.25], gamma=0.9, lam=0.5)
    assert got == pytest.approx((0.0625, 0.75))


@pytest.mark.parametrize("gamma,lam", [(1.0, 0.95), (0.9, 0.5), (0.99, 0.0), (1.0, 1.0)])
def test_matches_reference(gamma, lam):
    rng = random.Random(0)
    for _ in range(20):
        n = rng.randint(1, 6)
        rewards = [rng.uniform(-1, 1) for _ in range(n)]
        values = [rng.uniform(-1, 1) for _ in range(n)]
        got = gae_advantages(rewards, values, gamma=gamma, lam=lam)
        assert list(got) == pytest.approx(reference(rewards, values, gamma, lam))


def test_lam_one_is_return_minus_value_and_lam_zero_is_td_error():
    rewards, values = [1.0, -2.0, 0.5], [0.3, -0.1, 0.2]
    mc = gae_advantages(rewards, values, gamma=1.0, lam=1.0)
    assert list(mc) == pytest.approx([-0.5 - 0.3, -1.5 + 0.1, 0.5 - 0.2])
    td = gae_advantages(rewards, values, gamma=1.0, lam=0.0)
    assert list(td) == pytest.approx([1.0 - 0.1 - 0.3, -2.0 + 0.2 + 0.1, 0.5 - 0.2])


def test_targets_are_advantage_plus_value_and_raw_when_not_normalised():
    ep = with_values(make_episode([[0.0, 1.0], [-1.0]]), [[0.5, 0.25], [0.0]])
    est = make_estimator("gae", gamma=0.9, lam=0.5, normalize=False)
    out = est.estimate([ep], est.init())
    assert_close(out.advantages[0], [[0.0625, 0.75], [-1.0]])
    assert_close(out.value_targets[0], [[0.5625, 1.0], [-1.0]])
    assert_close(value_targets([ep], gamma=0.9, lam=0.5)[0], out.value_targets[0])
    assert out.metrics["adv/value_mean"] == pytest.approx((0.5 + 0.25 + 0.0) / 3)


def test_the_defaults_are_gamma_one_and_lam_095():
    # rewards (0, 1), values (0.5, 0.25): delta_1 = 0.75, delta_0 = 0.25 - 0.5 = -0.25;
    # A_0 = -0.25 + 1 * 0.95 * 0.75 = 0.4625
    ep = with_values(make_episode([[0.0, 1.0]]), [[0.5, 0.25]])
    est = make_estimator("gae", normalize=False)
    assert est.estimate([ep], est.init()).advantages[0][0] == pytest.approx((0.4625, 0.75))


def test_explained_variance_metric_compares_the_values_with_the_targets():
    ep = with_values(make_episode([[0.0, 1.0], [-1.0]]), [[0.5, 0.25], [0.0]])
    est = make_estimator("gae", gamma=0.9, lam=0.5, normalize=False)
    out = est.estimate([ep], est.init())
    targets, values = np.array([0.5625, 1.0, -1.0]), np.array([0.5, 0.25, 0.0])
    want = 1 - np.var(targets - values) / np.var(targets)
    assert out.metrics["adv/explained_variance"] == pytest.approx(want)


def test_normalised_advantages_are_whitened():
    eps = random_valued(random.Random(1), 12)
    est = make_estimator("gae")
    out = est.estimate(eps, est.init())
    flat = [a for ep in out.advantages for seat in ep for a in seat]
    assert sum(flat) / len(flat) == pytest.approx(0.0, abs=1e-9)
    assert out.metrics["adv/std"] == pytest.approx(1.0, abs=1e-6)


def test_each_policy_is_whitened_over_its_own_turns():
    # Against a fixed opponent the bot's advantages (5, 5) shifted and scaled the
    # learner's: its winning move read -0.58, its losing one -1.35.
    def game(mine, theirs, seats):
        ep = with_values(make_episode([[mine], [theirs]]), [[0.0], [0.0]])
        trajs = tuple(replace(t, policy_id=s) for t, s in zip(ep.trajectories, seats, strict=True))
        return replace(ep, seats=seats, trajectories=trajs)

    est = make_estimator("gae")
    eps = [game(1.0, 5.0, ("me", "bot")), game(5.0, -1.0, ("bot", "me"))]
    out = est.estimate(eps, est.init())
    assert out.advantages[0][0][0] == pytest.approx(1.0)
    assert out.advantages[1][1][0] == pytest.approx(-1.0)
    alone = est.estimate([game(1.0, -1.0, ("me", "me"))], est.init())  # self-play: one policy
    assert alone.advantages == ((pytest.approx((1.0,)), pytest.approx((-1.0,))),)


def test_equal_advantages_whiten_to_zero_even_without_eps():
    # One turn (or all alike): nothing to scale; eps = 0 must not divide by zero.
    ep = with_values(make_episode([[1.0], []]), [[0.25], []])
    est = make_estimator("gae", eps=0.0)
    out = est.estimate([ep], est.init())
    assert out.advantages == (((0.0,), ()),)


def test_permutation_equivariant_and_pure():
    rng = random.Random(2)
    est = make_estimator("gae", normalize=False)
    assert_permutation_equivariant(
        lambda e: est.estimate(e, est.init()), random_valued(rng, 8), rng
    )


def test_needs_values_and_says_so():
    est = make_estimator("gae")
    assert est.needs_values
    assert not make_estimator("grpo").needs_values
    with pytest.raises(ValueError, match="needs critic values"):
        est.estimate([make_episode([[1.0], [-1.0]])], est.init())


@pytest.mark.parametrize("params", [{"gamma": 1.5}, {"lam": -0.1}, {"eps": -1.0}])
def test_bad_parameters(params):
    with pytest.raises(ValueError):
        make_estimator("gae", **params)


def test_explained_variance():
    assert explained_variance([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]) == pytest.approx(1.0)
    assert explained_variance([0.0, 0.0, 0.0], [1.0, 2.0, 3.0]) == pytest.approx(0.0)
    assert explained_variance([0.0, 0.0], [1.0, 1.0]) == 0.0
    # residuals (0, 0, 1): 1 - Var (2/9) / Var R (2/3), a ratio of variances, not of stds
    assert explained_variance([1.0, 2.0, 2.0], [1.0, 2.0, 3.0]) == pytest.approx(2 / 3)


@pytest.mark.parametrize("eps", [0.0, 1e-8])
def test_equal_advantages_whiten_to_exactly_zero(eps):
    # Three one-turn games, each A = 0.1: their mean rounds, and the rounding divided
    # by its own size (eps 0) made each -1; with eps 1e-8 each was -1e-9.
    games = [with_values(make_episode([[0.1]]), [[0.0]]) for _ in range(3)]
    est = make_estimator("gae", eps=eps)
    assert est.estimate(games, est.init()).advantages == (((0.0,),),) * 3


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_critic_value_that_is_not_a_number_is_refused(bad):
    # Whitened, one NaN value made every advantage of the policy NaN, and the update
    # its weights.
    games = [
        with_values(make_episode([[1.0, 0.0]]), [[0.5, bad]]),
        with_values(make_episode([[0.0, -1.0]]), [[0.5, 0.5]]),
    ]
    est = make_estimator("gae")
    with pytest.raises(ValueError, match=f"value {bad}: it has diverged"):
        est.estimate(games, est.init())
