"""Rollout metrics: the learner's returns per seat, group spread, per-member names."""

import pytest

from coplay.envs.registry import make_env
from coplay.policies.scripted import RandomPolicy
from coplay.rollout.engine import play_episodes
from coplay.train.metrics import group_metrics, rollout_metrics, scoped


def kuhn(seatings, seeds):
    return play_episodes(lambda: make_env("kuhn_poker"), seatings, seeds)


def test_rollout_metrics_report_only_the_learners_seats():
    learner, other = RandomPolicy(seed=0, policy_id="learner"), RandomPolicy(seed=1)
    eps = kuhn([[learner, other], [other, learner]], [0, 1])
    m = rollout_metrics(eps, "learner", seconds=2.0)
    assert m["rollout/return_seat0"] == eps[0].returns[0]
    assert m["rollout/return_seat1"] == eps[1].returns[1]
    assert m["rollout/invalid_rate"] == 0.0
    assert m["rollout/decisions"] == len(eps[0].trajectories[0].turns) + len(
        eps[1].trajectories[1].turns
    )
    assert m["perf/decisions_per_s"] == m["rollout/decisions"] / 2.0
    assert m["rollout/episode_len"] == (eps[0].num_steps + eps[1].num_steps) / 2
    only_seat0 = rollout_metrics(eps[:1], "learner", seconds=1.0)
    assert "rollout/return_seat1" not in only_seat0


def test_restarted_games_do_not_count_in_the_returns():
    learner = RandomPolicy(seed=0, policy_id="learner")
    eps = kuhn([[learner, learner]] * 2, [0, 1])
    eps[0].returns, eps[1].returns = (1.0, -1.0), (-2.0, 2.0)
    eps[1].prefix = (((0, "x"),),)  # as if restarted: its return is part of a game
    m = rollout_metrics(eps, "learner", seconds=1.0)
    assert m["rollout/return_seat0"] == 1.0 and m["rollout/return_seat1"] == -1.0


@pytest.mark.parametrize("how", ["opening", "group"])
def test_restarts_from_the_initial_state_do_not_count_either(how):
    # A restart from a first turn at step 0 replays no prefix: with exploring starts it
    # has an assigned move; without, only its group id (not its own seed) tells it.
    from coplay.types import Opening

    learner = RandomPolicy(seed=0, policy_id="learner")
    eps = kuhn([[learner, learner]] * 2, [0, 1])
    eps[0].returns, eps[1].returns = (1.0, -1.0), (-2.0, 2.0)
    if how == "opening":
        eps[1].opening = Opening(player=0, index=1)
    else:
        eps[1].group_id = 99  # a restarted group's id, the lost game's seed
    m = rollout_metrics(eps, "learner", seconds=1.0)
    assert m["rollout/return_seat0"] == 1.0 and m["rollout/return_seat1"] == -1.0


def test_group_metrics_spread_and_flat_share():
    learner = RandomPolicy(seed=0, policy_id="learner")
    eps = kuhn([[learner, learner]] * 4, [0, 0, 1, 1])
    # Force known returns: group 0 flat (1, 1), group 1 spread (2, -2) on seat 0.
    for e, r in zip(eps, [1.0, 1.0, 2.0, -2.0], strict=True):
        e.returns = (r, -r)
    m = group_metrics(eps, "learner")
    assert m["rollout/flat_group_frac"] == pytest.approx(0.5)
    assert m["rollout/group_return_std"] == pytest.approx((0 + 0 + 2 + 2) / 4)
    assert group_metrics(eps[:1], "learner") == {}
    assert group_metrics(eps, "somebody_else") == {}


def test_scoped_names_a_members_metrics_inside_their_namespace():
    m = {"loss/kl": 1.0, "rollout/return_seat0": 2.0, "steps": 3.0}
    assert scoped(m, "red") == {
        "loss/red/kl": 1.0,
        "rollout/red/return_seat0": 2.0,
        "red/steps": 3.0,
    }
