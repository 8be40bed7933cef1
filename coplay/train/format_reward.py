"""The format reward of free-text answers, kept apart from the game's return.

Each answer a learner wrote in text mode records whether it was written exactly in
its answer format (``Decision.well_formed``; a message the game refused is not).
``model.text.format_reward`` is added for every well-formed answer and
``model.text.format_penalty`` for every other one (rejected retries included), to the
turn that holds the answer and so to the trajectory's return, which the advantage
estimators read. The rollout metrics are taken before (``rollout/return_seat*`` stay
the game's returns); the shaping is logged on its own as ``rollout/format_reward``
(mean per trajectory) next to ``rollout/well_formed`` (the share of well-formed
answers).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from coplay.types import Decision, Episode, Turn


def _answers(turn: Turn) -> tuple[Decision, ...]:
    return (*turn.invalid_attempts, turn.decision)


def format_shaping(decision: Decision, reward: float, penalty: float) -> float:
    """What one answer adds: ``reward`` if well formed, ``penalty`` if not, 0 where no
    format applies (choices, scripted players).

    >>> format_shaping(Decision("x", "[Bet]", "p", well_formed=True), 0.1, -0.5)
    0.1
    """
    if decision.well_formed is None:
        return 0.0
    return reward if decision.well_formed else penalty


def add_format_rewards(
    episodes: Sequence[Episode], policy_id: str, *, reward: float, penalty: float
) -> dict[str, float]:
    """Add the format reward of ``policy_id``'s answers to its turns, trajectory
    returns and episode returns, in place; returns ``rollout/format_reward`` (mean
    shaping per trajectory of that policy); nothing when both are 0."""
    if reward == 0.0 and penalty == 0.0:
        return {}
    totals = []
    for ep in episodes:
        returns = list(ep.returns)
        for seat, traj in enumerate(ep.trajectories):
            if traj.policy_id != policy_id:
                continue
            total = 0.0
            for turn in traj.turns:
                shaping = sum(format_shaping(d, reward, penalty) for d in _answers(turn))
                turn.reward += shaping
                total += shaping
            traj.ret += total
            traj.shaping += total
            returns[seat] += total
            totals.append(total)
        ep.returns = tuple(returns)
    if not totals:
        return {}
    return {"rollout/format_reward": float(np.mean(totals))}


def well_formed_rate(episodes: Sequence[Episode], policy_id: str) -> dict[str, float]:
    """``rollout/well_formed``: the share of ``policy_id``'s answers with a format that
    were written exactly in it (absent when none had a format)."""
    marks = [
        d.well_formed
        for ep in episodes
        for traj in ep.trajectories
        if traj.policy_id == policy_id
        for turn in traj.turns
        for d in _answers(turn)
        if d.well_formed is not None
    ]
    return {"rollout/well_formed": float(np.mean(marks))} if marks else {}
