"""Format reward: added to the learner's returns, logged apart from the game return."""

import pytest

from coplay.train.format_reward import add_format_rewards, well_formed_rate
from coplay.types import Decision, Episode, Observation, Trajectory, Turn

OBS = Observation(game="g", player=0, text="t", legal_actions=("[A]",))


def _turn(player, *marks):
    decisions = [Decision("x", None, "p" if player == 0 else "q", well_formed=m) for m in marks]
    return Turn(player, OBS, decisions[-1], 0, invalid_attempts=tuple(decisions[:-1]), reward=1.0)


def _episode():
    mine = Trajectory(0, "p", [_turn(0, False, True), _turn(0, True)], ret=2.0)
    theirs = Trajectory(1, "q", [_turn(1, False)], ret=-2.0)
    return Episode("g", 0, 0, ("p", "q"), (mine, theirs), returns=(2.0, -2.0))


def test_rewards_and_penalties_go_to_the_turns_and_returns_of_the_policy_only():
    ep = _episode()
    metrics = add_format_rewards([ep], "p", reward=0.1, penalty=-0.5)
    mine, theirs = ep.trajectories
    assert [t.reward for t in mine.turns] == pytest.approx([1.0 - 0.5 + 0.1, 1.1])
    assert mine.ret == pytest.approx(2.0 - 0.3) and ep.returns[0] == pytest.approx(1.7)
    assert theirs.ret == -2.0 and ep.returns[1] == -2.0 and theirs.turns[0].reward == 1.0
    assert metrics == {"rollout/format_reward": pytest.approx(-0.3)}
    assert ep.game_returns == pytest.approx((2.0, -2.0))  # what evaluation reads


def test_no_shaping_and_no_metric_when_both_are_zero():
    ep = _episode()
    assert add_format_rewards([ep], "p", reward=0.0, penalty=0.0) == {}
    assert ep.returns == (2.0, -2.0)


def test_well_formed_rate_counts_every_answer_with_a_format():
    assert well_formed_rate([_episode()], "p") == {"rollout/well_formed": pytest.approx(2 / 3)}
    assert well_formed_rate([_episode()], "nobody") == {}
