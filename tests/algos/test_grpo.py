"""GRPO: hand values, loop reference, episode and seat permutation invariance."""

import math
import random
from functools import partial

import pytest
from builders import as_lists, assert_close, make_episode, permute_seats
from builders import random_episodes as _random_episodes

from coplay.algos.advantages import make_estimator

random_episodes = partial(_random_episodes, groups=4)


def reference(episodes, scale_by_std=True, eps=1e-6):
    out = []
    for ep in episodes:
        ep_out = []
        for s, traj in enumerate(ep.trajectories):
            group = [
                o.trajectories[s].ret
                for o in episodes
                if o.game == ep.game and o.group_id == ep.group_id
            ]
            if len(group) < 2:
                a = 0.0
            else:
                m = sum(group) / len(group)
                sd = math.sqrt(sum((r - m) ** 2 for r in group) / (len(group) - 1))
                a = (traj.ret - m) / (sd + eps) if scale_by_std else traj.ret - m
            ep_out.append([a] * len(traj.turns))
        out.append(ep_out)
    return out


def test_hand_computed():
    eps = [
        make_episode([1.0, -1.0], group_id=0),
        make_episode([0.0, 0.0], group_id=0),
        make_episode([-1.0, 1.0], group_id=0, turns=[2, 1]),
        make_episode([1.0, -1.0], group_id=1),  # singleton group
        make_episode([1.0, 0.5], group_id=2),
        make_episode([1.0, -0.5], group_id=2),  # seat 0 has zero std here
    ]
    est = make_estimator("grpo", eps=0.0)
    out = est.estimate(eps, est.init())
    # group 0, seat 0: returns (1, 0, -1), mean 0, sample std 1
    assert out.advantages[0][0] == pytest.approx((1.0,))
    assert out.advantages[1][0] == pytest.approx((0.0,))
    assert out.advantages[2][0] == pytest.approx((-1.0, -1.0))
    assert out.advantages[0][1] == pytest.approx((-1.0,))
    assert out.advantages[3] == ((0.0,), (0.0,))
    # group 2: seat 0 constant -> 0; seat 1 (0.5, -0.5): sample std sqrt(0.5)
    assert out.advantages[4][0] == (0.0,)
    assert out.advantages[4][1] == pytest.approx((0.5 / math.sqrt(0.5),))
    # (group, seat) pairs of size >= 2: (0,0), (0,1), (2,0), (2,1); one has zero std
    assert out.metrics["adv/zero_std_group_frac"] == pytest.approx(0.25)
    assert out.metrics["adv/singleton_group_frac"] == pytest.approx(2 / 6)


def test_dr_grpo_does_not_scale():
    eps = [make_episode([3.0, 0.0]), make_episode([1.0, 0.0])]
    est = make_estimator("grpo", scale_by_std=False)
    out = est.estimate(eps, est.init())
    assert as_lists(out.advantages) == [[[1.0], [0.0]], [[-1.0], [0.0]]]


@pytest.mark.parametrize("scale_by_std", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_matches_loop_reference(seed, scale_by_std):
    eps = random_episodes(random.Random(seed), 16, num_seats=3)
    est = make_estimator("grpo", scale_by_std=scale_by_std)
    got = as_lists(est.estimate(eps, est.init()).advantages)
    want = reference(eps, scale_by_std=scale_by_std)
    for g, w in zip(got, want, strict=True):
        for gs, ws in zip(g, w, strict=True):
            assert gs == pytest.approx(ws)


def test_permuting_episodes_permutes_advantages():
    rng = random.Random(3)
    eps = random_episodes(rng, 12)
    perm = list(range(12))
    rng.shuffle(perm)
    est = make_estimator("grpo")
    base = est.estimate(eps, est.init()).advantages
    permuted = est.estimate([eps[i] for i in perm], est.init()).advantages
    for j, i in enumerate(perm):
        assert_close(permuted[j], base[i])


def test_per_seat_statistics_follow_seat_permutation():
    eps = random_episodes(random.Random(11), 16, num_seats=3)
    order = [2, 0, 1]
    est = make_estimator("grpo")
    base = est.estimate(eps, est.init())
    moved = est.estimate([permute_seats(ep, order) for ep in eps], est.init())
    for b_ep, m_ep in zip(base.advantages, moved.advantages, strict=True):
        for new_seat, old_seat in enumerate(order):
            assert list(m_ep[new_seat]) == pytest.approx(list(b_ep[old_seat]))
    for new_seat, old_seat in enumerate(order):
        assert moved.metrics[f"adv/baseline_seat{new_seat}"] == pytest.approx(
            base.metrics[f"adv/baseline_seat{old_seat}"]
        )
    assert moved.metrics["adv/zero_std_group_frac"] == base.metrics["adv/zero_std_group_frac"]


def test_negative_eps_is_named():
    with pytest.raises(ValueError, match="eps"):
        make_estimator("grpo", eps=-1.0)
