"""REINFORCE with batch-mean baseline: hand values, loop reference, invariants."""

import random
from functools import partial

import pytest
from builders import as_lists, assert_close, make_episode
from builders import random_episodes as _random_episodes

from coplay.algos.advantages import make_estimator

random_episodes = partial(
    _random_episodes, draw=lambda rng, _seat: rng.choice([-1.0, 0.0, 1.0, 0.5])
)


def reference(episodes, baseline=True):
    sums, counts = {}, {}
    for ep in episodes:
        for s, traj in enumerate(ep.trajectories):
            sums[(ep.game, s)] = sums.get((ep.game, s), 0.0) + traj.ret
            counts[(ep.game, s)] = counts.get((ep.game, s), 0) + 1
    out = []
    for ep in episodes:
        ep_out = []
        for s, traj in enumerate(ep.trajectories):
            b = sums[(ep.game, s)] / counts[(ep.game, s)] if baseline else 0.0
            ep_out.append([traj.ret - b for _ in traj.turns])
        out.append(ep_out)
    return out


def test_hand_computed():
    eps = [
        make_episode([1.0, -1.0], turns=[2, 1]),
        make_episode([-1.0, 1.0], turns=[1, 1]),
        make_episode([1.0, -1.0], turns=[1, 2]),
    ]
    est = make_estimator("reinforce")
    out = est.estimate(eps, est.init())
    # seat 0: mean 1/3, seat 1: mean -1/3
    assert out.advantages[0][0] == pytest.approx((2 / 3, 2 / 3))
    assert out.advantages[0][1] == pytest.approx((-2 / 3,))
    assert out.advantages[1][0] == pytest.approx((-4 / 3,))
    assert out.advantages[2][1] == pytest.approx((-2 / 3, -2 / 3))
    assert out.metrics["adv/baseline_seat0"] == pytest.approx(1 / 3)
    assert out.metrics["adv/baseline_seat1"] == pytest.approx(-1 / 3)
    assert out.metrics["adv/mean"] == pytest.approx(0.0, abs=1e-12)


def test_no_baseline_gives_returns():
    eps = [make_episode([1.0, -1.0], turns=[2, 1]), make_episode([0.5, 0.0])]
    est = make_estimator("reinforce", baseline="none")
    out = est.estimate(eps, est.init())
    assert as_lists(out.advantages) == [[[1.0, 1.0], [-1.0]], [[0.5], [0.0]]]


@pytest.mark.parametrize("seed", range(5))
def test_matches_loop_reference(seed):
    eps = random_episodes(random.Random(seed), 12)
    est = make_estimator("reinforce")
    got = as_lists(est.estimate(eps, est.init()).advantages)
    want = reference(eps)
    for g, w in zip(got, want, strict=True):
        for gs, ws in zip(g, w, strict=True):
            assert gs == pytest.approx(ws)


def test_permuting_episodes_permutes_advantages():
    rng = random.Random(7)
    eps = random_episodes(rng, 10)
    perm = list(range(10))
    rng.shuffle(perm)
    est = make_estimator("reinforce")
    base = est.estimate(eps, est.init()).advantages
    permuted = est.estimate([eps[i] for i in perm], est.init()).advantages
    for j, i in enumerate(perm):
        assert_close(permuted[j], base[i])


def test_bad_baseline_is_named():
    with pytest.raises(ValueError, match="baseline"):
        make_estimator("reinforce", baseline="ema")


def test_a_role_with_equal_returns_gets_exactly_zero():
    # Their mean rounds (three returns of 0.1 average 0.10000000000000002): the
    # advantages were -1e-17, which the zero-advantage filter kept.
    eps = [make_episode([0.1, -0.3]) for _ in range(3)]
    est = make_estimator("reinforce")
    out = est.estimate(eps, est.init())
    assert as_lists(out.advantages) == [[[0.0], [0.0]]] * 3
    assert out.metrics["adv/baseline_seat0"] == pytest.approx(0.1)
