"""RLOO: hand values, loop reference, the k/(k-1) identity, permutation and purity."""

import random
from functools import partial

import pytest
from builders import assert_close, assert_permutation_equivariant, make_episode
from builders import random_episodes as _random_episodes

from coplay.algos.advantages import make_estimator

random_episodes = partial(
    _random_episodes, groups=4, draw=lambda rng, _seat: rng.uniform(-2.0, 2.0)
)


def reference(episodes):
    out = []
    for i, ep in enumerate(episodes):
        ep_out = []
        for s, traj in enumerate(ep.trajectories):
            others = [
                o.trajectories[s].ret
                for j, o in enumerate(episodes)
                if j != i and o.game == ep.game and o.group_id == ep.group_id
            ]
            a = traj.ret - sum(others) / len(others) if others else 0.0
            ep_out.append([a] * len(traj.turns))
        out.append(ep_out)
    return out


def estimate(eps):
    est = make_estimator("rloo")
    return est.estimate(eps, est.init())


def test_hand_computed():
    eps = [
        make_episode([1.0, -1.0], group_id=0),
        make_episode([0.0, 0.0], group_id=0),
        make_episode([-1.0, 1.0], group_id=0, turns=[2, 1]),
        make_episode([1.0, -1.0], group_id=1),  # singleton group
        make_episode([3.0, 0.0], group_id=2),
        make_episode([1.0, 0.0], group_id=2),
    ]
    out = estimate(eps)
    # group 0, seat 0: returns (1, 0, -1); episode 0's baseline is mean(0, -1) = -0.5
    assert out.advantages[0][0] == pytest.approx((1.5,))
    assert out.advantages[1][0] == pytest.approx((0.0,))
    assert out.advantages[2][0] == pytest.approx((-1.5, -1.5))
    assert out.advantages[2][1] == pytest.approx((1.5,))
    assert out.advantages[3] == ((0.0,), (0.0,))
    # pairs: each is compared with the other one only
    assert_close(out.advantages[4], [[2.0], [0.0]])
    assert out.advantages[5][0] == pytest.approx((-2.0,))
    assert out.metrics["adv/baseline_seat0"] == pytest.approx((-0.5 + 0 + 0.5 + 1 + 1 + 3) / 6)
    # (group, seat) pairs: 3 groups x 2 seats, one group is a singleton
    assert out.metrics["adv/singleton_group_frac"] == pytest.approx(2 / 6)


@pytest.mark.parametrize("seed", range(4))
def test_matches_loop_reference(seed):
    eps = random_episodes(random.Random(seed), 16, num_seats=3)
    got = estimate(eps).advantages
    for g, w in zip(got, reference(eps), strict=True):
        assert_close(g, w)


def test_equals_scaled_group_mean_advantage():
    """A_i = k/(k-1) (R_i - mean): RLOO is Dr. GRPO rescaled per group size."""
    eps = [make_episode([r, -r], group_id=0) for r in (0.3, -1.2, 2.0, 0.7)]
    got = estimate(eps).advantages
    dr = make_estimator("grpo", scale_by_std=False)
    centred = dr.estimate(eps, dr.init()).advantages
    for g_ep, c_ep in zip(got, centred, strict=True):
        for g, c in zip(g_ep, c_ep, strict=True):
            assert g == pytest.approx(tuple(4 / 3 * x for x in c))


def test_permuting_episodes_permutes_advantages_and_leaves_inputs_alone():
    rng = random.Random(3)
    eps = random_episodes(rng, 12)
    assert_permutation_equivariant(estimate, eps, rng, metrics=False)


def test_takes_no_parameters():
    with pytest.raises(ValueError, match="'eps'"):
        make_estimator("rloo", eps=1e-6)


def test_equal_returns_get_exactly_zero():
    # Three drawn games with a format reward of 0.1: the sum 0.30000000000000004 left
    # each an advantage of -1e-17, which the zero-advantage filter kept.
    out = estimate([make_episode([0.1, 1.1], group_id=0) for _ in range(3)])
    assert out.advantages == (((0.0,), (0.0,)),) * 3
    assert out.metrics["adv/baseline_seat0"] == pytest.approx(0.1)
