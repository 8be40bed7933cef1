"""Staleness per seat and the bound: exact shares from hand-made episodes."""

from __future__ import annotations

import pytest

from coplay.distributed.staleness import keep_fresh, seat_staleness
from coplay.types import Decision, Episode, Observation, Trajectory, Turn


def turn(player: int, pid: str, version: int) -> Turn:
    obs = Observation(game="g", player=player, text="", legal_actions=("a",))
    dec = Decision(text="a", action="a", policy_id=pid, policy_version=version)
    return Turn(player=player, observation=obs, decision=dec, step=0, played_action="a")


def episode(group: int, seat_versions: list[list[tuple[str, int]]]) -> Episode:
    trajs = tuple(
        Trajectory(player=p, policy_id=turns[0][0], turns=[turn(p, pid, v) for pid, v in turns])
        for p, turns in enumerate(seat_versions)
    )
    return Episode(
        game="g",
        seed=group,
        group_id=group,
        seats=tuple(t.policy_id for t in trajs),
        trajectories=trajs,
        returns=(0.0,) * len(trajs),
    )


def test_staleness_is_read_per_seat_for_learning_policies_only():
    # Seat 0 played at versions 5 and 4 (the episode mixed versions), seat 1 is a bot.
    ep = episode(0, [[("me", 5), ("me", 4)], [("bot", 0)]])
    assert seat_staleness(ep, {"me": 6, "bot": 0}, {"me"}) == [[1, 2], []]


def test_groups_staler_than_the_bound_are_dropped_whole():
    fresh = episode(0, [[("me", 6)], [("me", 5)]])
    mixed = episode(1, [[("me", 6)], [("me", 3)]])  # seat 1 three updates behind
    same_group = episode(1, [[("me", 6)], [("me", 6)]])
    kept, metrics = keep_fresh([fresh, mixed, same_group], {"me": 6}, {"me"}, bound=2)
    assert kept == [fresh]  # group 1 goes whole, its fresh game too
    assert metrics["rollout/stale_dropped_frac"] == pytest.approx(2 / 3)
    assert metrics["rollout/staleness/seat0/0"] == 1.0
    assert metrics["rollout/staleness/seat1/0"] == 1 / 3
    assert metrics["rollout/staleness/seat1/1"] == 1 / 3
    assert metrics["rollout/staleness/seat1/3"] == 1 / 3
    assert metrics["rollout/staleness_max"] == 3.0
    kept, metrics = keep_fresh([fresh, mixed, same_group], {"me": 6}, {"me"}, bound=3)
    assert len(kept) == 3 and metrics["rollout/stale_dropped_frac"] == 0.0
