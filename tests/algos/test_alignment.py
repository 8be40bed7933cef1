"""Advantage alignment: hand values, a plain-loop reference, wiring to the base estimator."""

import random

import pytest
from builders import assert_close, make_episode, random_reward_episodes

from coplay.algos.advantages import make_estimator
from coplay.algos.advantages.alignment import past_credit
from coplay.train.config import AlgoConfig
from coplay.types import Episode, Trajectory


def simultaneous(returns, turns):
    """Every seat acts at steps 0..turns-1 (a simultaneous-move game)."""
    ep = make_episode(returns, turns=[turns] * len(returns))
    for traj in ep.trajectories:
        for k, turn in enumerate(traj.turns):
            turn.step = k
    return ep


def reference(episodes, base, beta, gamma):
    """The formula as a double loop over turns, on ``base``'s advantages."""
    out = []
    for ep, ep_adv in zip(episodes, base, strict=True):
        ep_out = []
        for i, traj in enumerate(ep.trajectories):
            seat_out = []
            for t, turn in enumerate(traj.turns):
                past = sum(gamma ** (t - k) * ep_adv[i][k] for k in range(t))
                others = []
                for j, other in enumerate(ep.trajectories):
                    later = [k for k, u in enumerate(other.turns) if u.step >= turn.step]
                    if j != i and later:
                        others.append(ep_adv[j][later[0]])
                o = sum(others) / len(others) if others else 0.0
                seat_out.append(ep_adv[i][t] + beta * past * o)
            ep_out.append(seat_out)
        out.append(ep_out)
    return out


def estimate(episodes, **params):
    est = make_estimator("alignment", **params)
    return est.estimate(episodes, est.init())


def test_past_credit_discounts_earlier_turns():
    assert past_credit([1.0, 2.0, 3.0], 0.5) == pytest.approx((0.0, 0.5, 1.25))
    assert past_credit([], 0.9) == ()


def test_hand_computed_simultaneous_moves():
    # REINFORCE without a baseline: every turn of a seat has A = its return.
    out = estimate(
        [simultaneous([2.0, -1.0], turns=3)],
        base="reinforce",
        base_params={"baseline": "none"},
        beta=0.5,
        gamma=0.5,
    )
    # seat 0: P = (0, 1, 1.5), O = -1 -> 2 - 0.5 * P; seat 1: P = (0, -0.5, -0.75), O = 2
    assert out.advantages[0][0] == pytest.approx((2.0, 1.5, 1.25))
    assert out.advantages[0][1] == pytest.approx((-1.0, -1.5, -1.75))
    assert out.metrics["adv/alignment_abs"] == pytest.approx((0.5 + 0.75 + 0.5 + 0.75) / 6)


def test_sequential_moves_use_the_reply():
    # seat 0 acts at steps 0, 2; seat 1 at 1, 3 (make_episode's layout)
    ep = make_episode([1.0, -1.0], turns=[2, 2])
    out = estimate([ep], base="reinforce", base_params={"baseline": "none"}, beta=1.0)
    # seat 0's second turn (step 2) meets seat 1's reply at step 3: 1 + 1 * 1 * (-1)
    assert out.advantages[0][0] == pytest.approx((1.0, 0.0))
    # seat 1's second turn (step 3) has no later turn of seat 0: O = 0
    assert out.advantages[0][1] == pytest.approx((-1.0, -1.0))


def test_others_are_averaged_in_three_player_games():
    out = estimate(
        [simultaneous([1.0, 2.0, -4.0], turns=2)],
        base="reinforce",
        base_params={"baseline": "none"},
        beta=1.0,
    )
    # seat 0, turn 1: P = 1, O = (2 - 4) / 2 = -1
    assert out.advantages[0][0] == pytest.approx((1.0, 0.0))
    # seat 2, turn 1: P = -4, O = 1.5
    assert out.advantages[0][2] == pytest.approx((-4.0, -10.0))


@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_matches_the_loop_reference_on_a_turn_level_base(gamma):
    rng = random.Random(3)
    episodes = random_reward_episodes(rng, 30, num_seats=3, values=[-1.0, 0.0, 0.5, 2.0])
    base = make_estimator("mars", scale_by_std=False)
    base_adv = base.estimate(episodes, base.init()).advantages
    out = estimate(episodes, base="mars", base_params={"scale_by_std": False}, beta=0.7,
                   gamma=gamma)  # fmt: skip
    for got, want in zip(out.advantages, reference(episodes, base_adv, 0.7, gamma), strict=True):
        assert_close(got, want)


def test_beta_zero_is_the_base_estimator():
    episodes = random_reward_episodes(random.Random(0), 20, values=[-1.0, 1.0, 3.0])
    base = make_estimator("mars")
    want = base.estimate(episodes, base.init())
    got = estimate(episodes, base="mars", beta=0.0)
    for g, w in zip(got.advantages, want.advantages, strict=True):
        assert_close(g, w)
    assert got.metrics["adv/alignment_abs"] == 0.0


def test_its_summary_metrics_describe_the_aligned_advantages():
    episodes = random_reward_episodes(random.Random(3), 20, values=[-1.0, 1.0, 3.0])
    out = estimate(episodes, base="mars", beta=1.0)
    flat = [a for ep in out.advantages for seat in ep for a in seat]
    assert out.metrics["adv/mean"] == pytest.approx(sum(flat) / len(flat))
    assert out.metrics["adv/num_turns"] == len(flat)
    base = make_estimator("mars")
    assert out.metrics["adv/mean"] != pytest.approx(
        base.estimate(episodes, base.init()).metrics["adv/mean"]
    )  # the shaping moved them


def test_inherits_state_critic_and_groups_from_the_base():
    assert make_estimator("alignment").needs_values  # GAE by default
    assert make_estimator("alignment", base="grpo").needs_groups
    rae = make_estimator("alignment", base="rae")
    assert not rae.needs_values
    episodes = [simultaneous([1.0, 0.0], turns=2)]
    out = rae.estimate(episodes, rae.init())
    plain = make_estimator("rae")
    assert out.state == plain.estimate(episodes, plain.init()).state


def test_gae_base_passes_value_targets_through():
    ep = simultaneous([1.0, 0.0], turns=2)
    for traj in ep.trajectories:
        for turn in traj.turns:
            turn.value = 0.25
    out = estimate([ep], beta=2.0)
    gae = make_estimator("gae")
    want = gae.estimate([ep], gae.init())
    assert out.value_targets is not None
    assert out.value_targets == want.value_targets


def test_empty_trajectories_and_batches():
    ep = Episode("g", 0, 0, ("a", "b"), (Trajectory(0, "a"), Trajectory(1, "b")), (0.0, 0.0))
    assert estimate([ep], base="reinforce").advantages == (((), ()),)
    assert estimate([], base="reinforce").advantages == ()


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"base": "alignment"}, "its own base"),
        ({"beta": -1.0}, "beta must be >= 0"),
        ({"gamma": 1.5}, "gamma"),
        ({"base": "nope"}, "unknown estimator 'nope'"),
        ({"base": "mars", "base_params": {"lam": 1}}, "has no parameter 'lam'"),
    ],
)
def test_bad_parameters_are_refused(params, match):
    with pytest.raises(ValueError, match=match):
        make_estimator("alignment", **params)


def test_config_builds_it_with_nested_base_params():
    cfg = AlgoConfig(
        estimator="alignment", params={"base": "mars", "base_params": {"gamma": 0.9}, "beta": 2}
    )
    assert cfg.params["base_params"] == {"gamma": 0.9}
    with pytest.raises(ValueError, match="beta"):
        AlgoConfig(estimator="alignment", params={"beta": -2})
