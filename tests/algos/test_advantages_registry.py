"""Registry, factory validation and the shared per-turn helpers."""

import pytest
from builders import make_episode

from coplay.algos.advantages import (
    ESTIMATORS,
    Estimator,
    assign_advantages,
    expand_to_turns,
    make_estimator,
)


def test_builtin_estimators_are_registered():
    assert {"reinforce", "grpo", "rae"} <= set(ESTIMATORS)
    for name in ESTIMATORS:
        est = make_estimator(name)
        assert isinstance(est, Estimator)
        out = est.estimate([], est.init())
        assert out.advantages == ()
        assert out.metrics["adv/mean"] == 0.0


def test_unknown_name_lists_known_estimators():
    with pytest.raises(ValueError, match="known estimators.*grpo.*rae.*reinforce"):
        make_estimator("ppo-ish")


def test_unknown_parameter_is_named():
    with pytest.raises(ValueError, match="'alpha'.*scale_by_std"):
        make_estimator("grpo", alpha=0.5)


def test_expand_to_turns_uses_the_credit_function():
    ep = make_episode([1.0, -1.0], [3, 2])
    assert expand_to_turns([ep], [[2.0, 5.0]]) == ((((2.0,) * 3), (5.0, 5.0)),)

    def decaying(traj, value):  # a stand-in for a future reward-to-go scheme
        return tuple(value * 0.5**k for k in range(len(traj.turns)))

    assert expand_to_turns([ep], [[2.0, 5.0]], credit=decaying) == (((2.0, 1.0, 0.5), (5.0, 2.5)),)


def test_assign_advantages_writes_turns():
    eps = [make_episode([1.0, -1.0], [2, 1]), make_episode([-1.0, 1.0], [1, 1])]
    est = make_estimator("reinforce")
    out = est.estimate(eps, est.init())
    assert all(t.advantage == 0.0 for ep in eps for t in ep.turns)
    assign_advantages(eps, out.advantages)
    assert [t.advantage for t in eps[0].trajectories[0].turns] == [1.0, 1.0]
    assert eps[1].trajectories[1].turns[0].advantage == 1.0


def against_a_bot(n=8):
    """The learner "me" against "bot", the seats alternating by group (as a fixed
    opponent's seating gives them), and the learner always winning 1 (zero-sum)."""
    from dataclasses import replace

    episodes = []
    for g in range(n):
        me = (g // 2) % 2  # one seat per group of two
        ep = make_episode([1.0 if s == me else -1.0 for s in range(2)], group_id=g // 2)
        for s, traj in enumerate(ep.trajectories):  # credited on the turn, as the engine does
            traj.turns[0].reward = ep.returns[s]
        trajs = tuple(
            replace(t, policy_id="me" if s == me else "bot") for s, t in enumerate(ep.trajectories)
        )
        episodes.append(replace(ep, trajectories=trajs, seats=tuple(t.policy_id for t in trajs)))
    return episodes


@pytest.mark.parametrize(
    "name, params",
    [("reinforce", {}), ("rae", {"alpha": 0.0}), ("mars", {}), ("gra", {}), ("dr_mas", {})],
)
def test_a_per_seat_baseline_is_the_learners_not_the_opponents_in_that_seat(name, params):
    # Keyed by (game, seat), a seat's baseline averaged the learner's +1 there with the
    # bot's -1: every learner move got advantage 1 for a result it always gets.
    episodes = against_a_bot()
    est = make_estimator(name, **params)
    out = est.estimate(episodes, est.init())
    mine = [
        a
        for ep, ep_adv in zip(episodes, out.advantages, strict=True)
        for seat, seat_adv in enumerate(ep_adv)
        if ep.seats[seat] == "me"
        for a in seat_adv
    ]
    assert mine == pytest.approx([0.0] * len(mine))
