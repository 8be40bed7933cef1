"""GiGPO: hand values, anchor keys, loop reference, permutation and purity."""

import math
import random

import pytest
from builders import assert_close, assert_permutation_equivariant
from builders import make_reward_episode as make_episode

from coplay.algos.advantages import make_estimator
from coplay.types import Episode, Observation


def random_episodes(rng: random.Random, n: int, num_seats: int = 2) -> list[Episode]:
    return [
        make_episode(
            [
                [
                    (rng.choice(["x", "y", "z"]), rng.choice([-1.0, 0.0, 1.0]))
                    for _ in range(rng.randint(0, 4))
                ]
                for _ in range(num_seats)
            ],
            game=rng.choice(["g", "h"]),
            group_id=rng.randrange(3),
            info=rng.random() < 0.5,
        )
        for _ in range(n)
    ]


def normalised(x, pool, scale_by_std, eps):
    if len(pool) < 2 or max(pool) == min(pool):
        return 0.0
    m = sum(pool) / len(pool)
    sd = math.sqrt(sum((v - m) ** 2 for v in pool) / (len(pool) - 1))
    return (x - m) / (sd + eps) if scale_by_std else x - m


def reference(episodes, *, gamma=0.95, omega=1.0, scale_by_std=True, eps=1e-6, anchor="info"):
    def rtg(traj, t):
        return sum(gamma ** (k - t) * traj.turns[k].reward for k in range(t, len(traj.turns)))

    def key(turn):
        o = turn.observation
        if anchor == "info" and o.info_key is not None:
            return ("info", o.info_key)
        return ("text", o.text)

    out = []
    for ep in episodes:
        group = [o for o in episodes if o.game == ep.game and o.group_id == ep.group_id]
        ep_out = []
        for s, traj in enumerate(ep.trajectories):
            rets = [o.trajectories[s].ret for o in group]
            a_ep = normalised(traj.ret, rets, scale_by_std, eps)
            seat_out = []
            for t, turn in enumerate(traj.turns):
                pool = [
                    rtg(o.trajectories[s], u)
                    for o in group
                    for u, other in enumerate(o.trajectories[s].turns)
                    if key(other) == key(turn)
                ]
                a_step = normalised(rtg(traj, t), pool, scale_by_std, eps)
                seat_out.append(a_ep + omega * a_step)
            ep_out.append(seat_out)
        out.append(ep_out)
    return out


def estimate(episodes, **params):
    est = make_estimator("gigpo", **params)
    return est.estimate(episodes, est.init())


def test_hand_computed():
    eps = [
        make_episode([[("s0", 0.0), ("a", 1.0)], [("t0", 0.0)]]),
        make_episode([[("s0", 0.0), ("b", -1.0)], [("t0", 2.0)]]),
        make_episode([[("s0", 5.0)], [("t0", 0.0)]], group_id=1),  # alone in its group
    ]
    out = estimate(eps, gamma=1.0, omega=0.5, scale_by_std=False)
    # episode level (seat 0): R = (1, -1) -> +-1; step group "s0": G = (1, -1) -> +-1;
    # "a" and "b" are single visits -> 0
    assert_close(out.advantages[0], [[1.5, 1.0], [-1.5]])
    assert_close(out.advantages[1], [[-1.5, -1.0], [1.5]])
    assert_close(out.advantages[2], [[0.0], [0.0]])
    # 8 turns; those in "s0" and "t0" of group 0 share a state with another turn
    assert out.metrics["adv/step_group_frac"] == pytest.approx(4 / 8)
    # step groups (group, seat, state): group 0 has "s0", "a", "b" in seat 0 and "t0" in
    # seat 1; group 1 has its own "s0" and "t0"
    assert out.metrics["adv/num_step_groups"] == 6.0
    # with std scaling and discounting: group "s0" returns (0.95, -0.95)
    out = estimate(eps, eps=0.0)
    assert out.advantages[0][0] == pytest.approx((1 / math.sqrt(2) * 2, 1 / math.sqrt(2)))


def test_info_key_decides_the_anchor_state_over_text():
    ep0 = make_episode([[("same text", 1.0)]])
    ep1 = make_episode([[("same text", -1.0)]])
    ep0.trajectories[0].turns[0].observation = Observation("g", 0, "one", info_key="k")
    ep1.trajectories[0].turns[0].observation = Observation("g", 0, "two", info_key="k")
    assert estimate([ep0, ep1], omega=1.0).metrics["adv/step_group_frac"] == 1.0
    ep1.trajectories[0].turns[0].observation = Observation("g", 0, "one", info_key="other")
    out = estimate([ep0, ep1])
    assert out.metrics["adv/step_group_frac"] == 0.0
    # without a step group only the episode-level GRPO advantage is left
    grpo = make_estimator("grpo")
    assert out.advantages == grpo.estimate([ep0, ep1], grpo.init()).advantages


@pytest.mark.parametrize(
    "params",
    [{}, {"gamma": 1.0, "omega": 0.3, "scale_by_std": False}, {"anchor": "text"}],
)
@pytest.mark.parametrize("seed", range(4))
def test_matches_loop_reference(seed, params):
    eps = random_episodes(random.Random(seed), 14, num_seats=3)
    got = estimate(eps, **params).advantages
    for g, w in zip(got, reference(eps, **params), strict=True):
        assert_close(g, w)


def test_permuting_episodes_permutes_advantages_and_leaves_inputs_alone():
    rng = random.Random(3)
    eps = random_episodes(rng, 12)
    assert_permutation_equivariant(estimate, eps, rng)


def test_text_anchor_groups_what_the_player_sees():
    # the same board reached by two move orders: two info keys, one text
    ep0 = make_episode([[("board", 1.0)]])
    ep1 = make_episode([[("board", -1.0)]])
    ep0.trajectories[0].turns[0].observation = Observation("g", 0, "board", info_key="0, 4, 8")
    ep1.trajectories[0].turns[0].observation = Observation("g", 0, "board", info_key="8, 4, 0")
    assert estimate([ep0, ep1]).metrics["adv/step_group_frac"] == 0.0
    assert estimate([ep0, ep1], anchor="text").metrics["adv/step_group_frac"] == 1.0


@pytest.mark.parametrize("scale_by_std", [True, False])
def test_a_step_group_with_equal_returns_gets_exactly_zero(scale_by_std):
    # Three visits of one state, each returning 0.1: their mean rounds to
    # 0.10000000000000002, and the step advantage was -1e-17 (-1e-11 scaled), which the
    # zero-advantage filter keeps. The episode level is flat too.
    out = estimate([make_episode([[("s", 0.1)]]) for _ in range(3)], scale_by_std=scale_by_std)
    assert out.advantages == (((0.0,),),) * 3


@pytest.mark.parametrize("params", [{"gamma": 1.5}, {"eps": -1.0}, {"anchor": "board"}])
def test_bad_values_are_named(params):
    with pytest.raises(ValueError, match=next(iter(params))):
        make_estimator("gigpo", **params)
