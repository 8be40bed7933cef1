"""REINFORCE with a batch-mean baseline (Williams, 1992).

    A(e, s, t) = R(e, s) - b(game_e, s, pi_es)
    b(g, s, pi) = mean of R(e', s) over episodes e' of game g with policy pi in seat s

R(e, s) is seat s's return in episode e, pi_es the policy in that seat. Subtracting a
baseline that does not depend on the action leaves the policy gradient unbiased and
lowers its variance (Williams, "Simple statistical gradient-following algorithms for
connectionist reinforcement learning", Machine Learning 8, 1992). The baseline is kept
per role (game, seat, policy: ``role_key``) because in asymmetric games seats have
different expected returns, and against a fixed opponent a seat's returns are the
learner's in some groups and the opponent's in others; with ``baseline="none"``
A = R (vanilla REINFORCE). A role whose returns are all equal gets A = 0 exactly
(``baseline_mean``). Every turn of a seat gets the seat's advantage.

Strictly, a baseline that includes the episode's own return biases the gradient by a
factor (1 - 1/N); RLOO removes it. The bias is negligible for the batch sizes used.
"""

from __future__ import annotations

from collections.abc import Sequence

from coplay.algos.advantages.base import (
    EmptyState,
    Estimate,
    Estimator,
    RoleKey,
    baseline_mean,
    expand_to_turns,
    register,
    role_key,
    seat_returns,
    summary_metrics,
)
from coplay.types import Episode

BASELINES = ("batch_mean", "none")


def seat_means(episodes: Sequence[Episode]) -> dict[RoleKey, float]:
    """Mean return per role (game, seat, policy: ``role_key``) over the batch; a role
    whose returns are all equal gets that return, so its advantages are exactly 0."""
    returns: dict[RoleKey, list[float]] = {}
    for ep in episodes:
        for seat, r in enumerate(seat_returns(ep)):
            returns.setdefault(role_key(ep, seat), []).append(r)
    return {key: baseline_mean(rs) for key, rs in returns.items()}


@register("reinforce")
def reinforce(*, baseline: str = "batch_mean") -> Estimator[EmptyState]:
    """REINFORCE advantages; ``baseline`` is ``"batch_mean"`` or ``"none"``."""
    if baseline not in BASELINES:
        raise ValueError(f"baseline must be one of {BASELINES}, got {baseline!r}")

    def estimate(episodes: Sequence[Episode], state: EmptyState) -> Estimate[EmptyState]:
        means = seat_means(episodes) if baseline == "batch_mean" else {}
        baselines = [
            [means.get(role_key(ep, seat), 0.0) for seat in range(len(ep.trajectories))]
            for ep in episodes
        ]
        per_seat = [
            [r - b for r, b in zip(seat_returns(ep), bs, strict=True)]
            for ep, bs in zip(episodes, baselines, strict=True)
        ]
        advantages = expand_to_turns(episodes, per_seat)
        metrics = summary_metrics(advantages, baselines)
        return Estimate(advantages, state, metrics, baselines=baselines)

    return Estimator(EmptyState, estimate)
