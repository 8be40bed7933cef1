"""Shared estimator helpers: the summary of an estimate's advantages."""

from dataclasses import replace

import pytest

from coplay.algos.advantages.base import baseline_mean, mean, policy_turn_metrics, summary_metrics
from tests.algos.builders import make_episode


def test_summary_metrics_describe_every_turn_and_each_seats_baseline():
    advantages = (((1.0,), (-1.0, 3.0)), ((0.0,), (2.0,)))
    m = summary_metrics(advantages, [[0.5, 1.0], [1.5, 2.0]])
    assert m["adv/num_turns"] == 5 and m["adv/mean"] == pytest.approx(1.0)
    assert m["adv/std"] == pytest.approx(2**0.5)
    assert m["adv/baseline_seat0"] == 1.0 and m["adv/baseline_seat1"] == 1.5


def test_a_policys_turn_metrics_leave_the_other_seats_out():
    # pol0 holds seat 0, pol1 seat 1: an estimator's summary mixes the two, a learner's
    # own must not (against a bot it once counted 18 turns to the learner's 9).
    episodes = [make_episode((1.0, -1.0), [1, 2]), make_episode((0.0, 0.0), [1, 1])]
    advantages = (((1.0,), (-1.0, 3.0)), ((0.0,), (2.0,)))
    assert policy_turn_metrics(episodes, advantages, "pol0") == {
        "adv/mean": 0.5,
        "adv/std": 0.5,
        "adv/num_turns": 2.0,
    }
    theirs = policy_turn_metrics(episodes, advantages, "pol1")
    assert theirs["adv/num_turns"] == 3 and theirs["adv/mean"] == pytest.approx(4 / 3)
    assert policy_turn_metrics(episodes, advantages, "nobody")["adv/num_turns"] == 0.0


def test_in_self_play_a_learners_metrics_are_the_estimates_own():
    # Every seat is the learner's: the same turns in the same order, the same floats.
    episodes = [make_episode((1.0, -1.0), [2, 1]), make_episode((0.3, 0.1), [1, 3])]
    episodes = [replace(ep, seats=("me", "me")) for ep in episodes]
    for ep in episodes:
        for traj in ep.trajectories:
            traj.policy_id = "me"
    advantages = (((0.1, 0.7), (-0.3,)), ((0.2,), (1.1, -0.9, 0.4)))
    whole = summary_metrics(advantages)
    assert policy_turn_metrics(episodes, advantages, "me") == whole


def test_a_policys_baselines_are_those_of_the_seats_it_sat_in():
    # Seats alternate: pol0 holds seat 0 in the first game and seat 1 in the second.
    # The estimate's per-seat means mix its baselines with the opponent's.
    episodes = [make_episode((1.0, -1.0), [1, 1]), make_episode((0.0, 0.0), [1, 1])]
    for traj, pid in zip(episodes[1].trajectories, ("pol1", "pol0"), strict=True):
        traj.policy_id = pid
    advantages = (((1.0,), (-1.0,)), ((0.5,), (2.0,)))
    baselines = [[0.25, -0.5], [4.0, 8.0]]
    mixed = summary_metrics(advantages, baselines)
    assert mixed["adv/baseline_seat0"] == pytest.approx(2.125)
    mine = policy_turn_metrics(episodes, advantages, "pol0", baselines)
    assert mine["adv/baseline_seat0"] == 0.25 and mine["adv/baseline_seat1"] == 8.0
    theirs = policy_turn_metrics(episodes, advantages, "pol1", baselines)
    assert theirs["adv/baseline_seat0"] == 4.0 and theirs["adv/baseline_seat1"] == -0.5
    assert "adv/baseline_seat0" not in policy_turn_metrics(episodes, advantages, "pol0")


def test_baseline_mean_is_the_common_value_of_equal_returns():
    assert mean([0.1, 0.1, 0.1]) != 0.1  # the sum rounds
    assert baseline_mean([0.1, 0.1, 0.1]) == 0.1
    assert baseline_mean([0.5, -1.0, 1.0]) == mean([0.5, -1.0, 1.0]) == pytest.approx(1 / 6)
    assert baseline_mean([]) == 0.0
