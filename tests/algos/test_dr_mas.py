"""Dr. MAS: hand values, loop reference, per-agent scale, permutation and purity."""

import math
import random
from dataclasses import replace
from functools import partial

import pytest
from builders import assert_close, assert_permutation_equivariant, make_episode
from builders import random_episodes as _random_episodes

from coplay.algos.advantages import make_estimator

random_episodes = partial(
    _random_episodes, groups=4, draw=lambda rng, seat: rng.choice([-1.0, 0.0, 1.0]) * (10.0**seat)
)


def reference(episodes, eps=1e-6):
    """Plain loops: group-centred returns, then each (game, seat)'s std of them."""
    centred = []
    for ep in episodes:
        ep_d = []
        for s, traj in enumerate(ep.trajectories):
            group = [
                o.trajectories[s].ret
                for o in episodes
                if o.game == ep.game and o.group_id == ep.group_id
            ]
            signal = len(group) >= 2 and max(group) > min(group)
            ep_d.append(traj.ret - sum(group) / len(group) if signal else None)
        centred.append(ep_d)
    out = []
    for ep, ep_d in zip(episodes, centred, strict=True):
        ep_out = []
        for s, d in enumerate(ep_d):
            pool = [
                od[s]
                for o, od in zip(episodes, centred, strict=True)
                if o.game == ep.game and od[s] is not None
            ]
            if d is None:
                a = 0.0
            else:
                m = sum(pool) / len(pool)
                sd = math.sqrt(sum((x - m) ** 2 for x in pool) / (len(pool) - 1))
                a = d / (sd + eps)
            ep_out.append([a] * len(ep.trajectories[s].turns))
        out.append(ep_out)
    return out


def estimate(episodes, **params):
    est = make_estimator("dr_mas", **params)
    return est.estimate(episodes, est.init())


def test_hand_computed():
    eps = [
        make_episode([1.0, 10.0], group_id=0),
        make_episode([-1.0, -10.0], group_id=0, turns=[2, 1]),
        make_episode([2.0, 0.0], group_id=1),
        make_episode([0.0, 0.0], group_id=1),
        make_episode([5.0, 5.0], group_id=2),  # singleton group
    ]
    out = estimate(eps, eps=0.0)
    # seat 0: D = (1, -1, 1, -1); mean 0, sample std sqrt(4 / 3)
    sd0 = math.sqrt(4 / 3)
    assert out.advantages[0][0] == pytest.approx((1 / sd0,))
    assert out.advantages[1][0] == pytest.approx((-1 / sd0, -1 / sd0))
    assert out.advantages[2][0] == pytest.approx((1 / sd0,))
    # seat 1: group 1 has equal returns, so only (10, -10) enter: std sqrt(200)
    assert out.advantages[0][1] == pytest.approx((10 / math.sqrt(200),))
    assert out.advantages[3][1] == (0.0,)
    assert out.advantages[4] == ((0.0,), (0.0,))
    assert out.metrics["adv/agent_std/g/seat0"] == pytest.approx(sd0)
    assert out.metrics["adv/agent_std/g/seat1"] == pytest.approx(math.sqrt(200))


def test_scale_differs_from_grpo_per_group_std():
    """GRPO scales each group to unit std; Dr. MAS keeps group sizes relative."""
    eps = [
        make_episode([1.0], group_id=0),
        make_episode([-1.0], group_id=0),
        make_episode([0.1], group_id=1),
        make_episode([-0.1], group_id=1),
    ]
    grpo = make_estimator("grpo")
    g = grpo.estimate(eps, grpo.init()).advantages
    d = estimate(eps).advantages
    assert g[0][0] == pytest.approx(g[2][0], rel=1e-4)  # both scaled to unit std
    assert d[0][0][0] == pytest.approx(10 * d[2][0][0])


@pytest.mark.parametrize("seed", range(4))
def test_matches_loop_reference(seed):
    eps = random_episodes(random.Random(seed), 16, num_seats=3)
    got = estimate(eps).advantages
    for g, w in zip(got, reference(eps), strict=True):
        assert_close(g, w)


def test_one_agents_scale_does_not_leak_into_anothers():
    """Multiplying seat 1's returns by 1000 leaves seat 0's advantages unchanged."""
    eps = random_episodes(random.Random(7), 16)
    scaled = [
        make_episode(
            [ep.returns[0], 1000 * ep.returns[1]],
            turns=[len(t.turns) for t in ep.trajectories],
            game=ep.game,
            group_id=ep.group_id,
        )
        for ep in eps
    ]
    base, big = estimate(eps).advantages, estimate(scaled).advantages
    for b, s in zip(base, big, strict=True):
        assert s[0] == pytest.approx(b[0])
        assert s[1] == pytest.approx(b[1], rel=1e-4)


def test_each_policys_scale_is_its_own_where_seats_change_hands():
    # The learner "me" (returns +-1) and a bot (+-10) swap seats between groups, as a
    # fixed opponent's seating has them. Keyed by seat, seat 0's std mixed the bot's
    # centred returns with the learner's and shrank the learner's advantages tenfold.
    def game(returns, seats, group_id):
        ep = make_episode(returns, group_id=group_id)
        trajs = tuple(
            replace(t, policy_id=pid) for t, pid in zip(ep.trajectories, seats, strict=True)
        )
        return replace(ep, seats=seats, trajectories=trajs)

    eps = [
        game([1.0, -10.0], ("me", "bot"), 0),
        game([-1.0, 10.0], ("me", "bot"), 0),
        game([-10.0, 1.0], ("bot", "me"), 1),
        game([10.0, -1.0], ("bot", "me"), 1),
    ]
    out = estimate(eps, eps=0.0)
    # each of the learner's roles has D = (1, -1): sample std sqrt(2); the bot's ten
    # times it
    unit = 1 / math.sqrt(2)
    assert [out.advantages[e][s][0] for e, s in ((0, 0), (1, 0), (2, 1), (3, 1))] == (
        pytest.approx([unit, -unit, unit, -unit])
    )
    assert out.advantages[0][1] == pytest.approx((-unit,))
    assert out.metrics["adv/agent_std/g/seat0/me"] == pytest.approx(math.sqrt(2))


def test_permuting_episodes_permutes_advantages_and_leaves_inputs_alone():
    rng = random.Random(3)
    eps = random_episodes(rng, 12)
    assert_permutation_equivariant(estimate, eps, rng)


def test_negative_eps_is_named():
    with pytest.raises(ValueError, match="eps"):
        make_estimator("dr_mas", eps=-1.0)
