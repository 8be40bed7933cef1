"""MARS turn-level estimator: hand values, loop reference, permutation and purity."""

import math
import random
from functools import partial

import pytest
from builders import assert_close, assert_permutation_equivariant, random_reward_episodes
from builders import make_reward_episode as make_episode

from coplay.algos.advantages import make_estimator

random_episodes = partial(random_reward_episodes, values=[-1.0, 0.0, 0.5, 1.0])


def reference(episodes, *, gamma=1.0, scale_by_std=True, eps=1e-6):
    """Plain loops: return-to-go per turn, then per-(game, seat) normalisation."""
    returns = []
    for ep in episodes:
        ep_returns = []
        for traj in ep.trajectories:
            rewards = [t.reward for t in traj.turns]
            ep_returns.append(
                [
                    sum(gamma ** (k - t) * rewards[k] for k in range(t, len(rewards)))
                    for t in range(len(rewards))
                ]
            )
        returns.append(ep_returns)
    out = []
    for ep, ep_returns in zip(episodes, returns, strict=True):
        ep_out = []
        for s, seat_returns in enumerate(ep_returns):
            pool = [
                g
                for o, o_returns in zip(episodes, returns, strict=True)
                if o.game == ep.game
                for g in o_returns[s]
            ]
            m = sum(pool) / len(pool)
            sd = math.sqrt(sum((g - m) ** 2 for g in pool) / (len(pool) - 1)) if pool[1:] else 0
            if max(pool) - min(pool) < 1e-12:
                ep_out.append([0.0] * len(seat_returns))
            else:
                ep_out.append(
                    [(g - m) / (sd + eps) if scale_by_std else g - m for g in seat_returns]
                )
        out.append(ep_out)
    return out


def test_hand_computed():
    eps = [
        make_episode([[0.0, 1.0], [2.0]]),  # seat 0: G = (1, 1)
        make_episode([[1.0, -1.0], [0.0]]),  # seat 0: G = (0, -1)
    ]
    est = make_estimator("mars", scale_by_std=False)
    out = est.estimate(eps, est.init())
    # seat 0 pool (1, 1, 0, -1): mean 0.25
    assert out.advantages[0][0] == pytest.approx((0.75, 0.75))
    assert out.advantages[1][0] == pytest.approx((-0.25, -1.25))
    # seat 1 pool (2, 0): mean 1
    assert out.advantages[0][1] == pytest.approx((1.0,))
    assert out.advantages[1][1] == pytest.approx((-1.0,))
    assert out.metrics["adv/baseline_seat0"] == pytest.approx(0.25)
    # gamma = 0.5: seat 0's G become (0 + 0.5 * 1, 1) and (1 - 0.5 * 1, -1);
    # pool (0.5, 1, 0.5, -1): mean 0.25, sample variance (0.0625 * 2 + 0.5625 + 1.5625) / 3 = 0.75
    half = make_estimator("mars", gamma=0.5, eps=0.0)
    out = half.estimate(eps, half.init())
    sd = math.sqrt(0.75)
    assert out.advantages[0][0] == pytest.approx((0.25 / sd, 0.75 / sd))
    assert out.advantages[1][0] == pytest.approx((0.25 / sd, -1.25 / sd))
    assert out.metrics["adv/return_std/g/seat0"] == pytest.approx(sd)


def test_roles_are_normalised_separately():
    """A seat with 100x larger rewards does not shrink the other seat's advantages."""
    eps = [make_episode([[1.0], [100.0]]), make_episode([[-1.0], [-100.0]])]
    est = make_estimator("mars", eps=0.0)
    out = est.estimate(eps, est.init())
    assert out.advantages[0][0] == pytest.approx(out.advantages[0][1])
    assert out.advantages[1][0] == pytest.approx((-1 / math.sqrt(2),))


def test_constant_role_gets_zero():
    eps = [make_episode([[0.0, 1.0], [0.5]]), make_episode([[0.0, 1.0], [-0.5]])]
    est = make_estimator("mars")
    out = est.estimate(eps, est.init())
    assert out.advantages[0][0] == (0.0, 0.0)  # seat 0: G = 1 on every turn
    assert out.advantages[1][0] == (0.0, 0.0)
    assert out.advantages[0][1][0] > 0.0 > out.advantages[1][1][0]


@pytest.mark.parametrize("scale_by_std", [True, False])
def test_a_role_with_equal_returns_gets_exactly_zero(scale_by_std):
    # Three returns of 0.1 average 0.10000000000000002: centred, each was -1e-17 (or,
    # scaled by the std of that rounding plus eps, -1e-11), which the zero-advantage
    # filter keeps.
    est = make_estimator("mars", scale_by_std=scale_by_std)
    out = est.estimate([make_episode([[0.1]]) for _ in range(3)], est.init())
    assert out.advantages == (((0.0,),),) * 3


@pytest.mark.parametrize("gamma", [1.0, 0.9])
@pytest.mark.parametrize("scale_by_std", [True, False])
@pytest.mark.parametrize("seed", range(3))
def test_matches_loop_reference(seed, scale_by_std, gamma):
    eps = random_episodes(random.Random(seed), 14, num_seats=3)
    est = make_estimator("mars", gamma=gamma, scale_by_std=scale_by_std)
    got = est.estimate(eps, est.init()).advantages
    want = reference(eps, gamma=gamma, scale_by_std=scale_by_std)
    for g, w in zip(got, want, strict=True):
        assert_close(g, w)


def test_permuting_episodes_permutes_advantages_and_leaves_inputs_alone():
    rng = random.Random(4)
    eps = random_episodes(rng, 12)
    est = make_estimator("mars", gamma=0.9)
    assert_permutation_equivariant(lambda e: est.estimate(e, est.init()), eps, rng)


@pytest.mark.parametrize("params", [{"gamma": 1.5}, {"gamma": -0.1}, {"eps": -1.0}])
def test_bad_values_are_named(params):
    with pytest.raises(ValueError, match=next(iter(params))):
        make_estimator("mars", **params)
