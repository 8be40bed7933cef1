"""Turn-level return-to-go with agent-specific normalisation (after MARS, 2025).

MARS (Yuan, Xu et al., "MARS: Reinforcing Multi-Agent Reasoning of LLMs through
Self-Play in Strategic Games", 2025, arXiv 2510.15414) pairs a turn-level advantage
(credit each decision with what followed it, not with the whole episode) with an
advantage normalisation done separately for each agent, so that roles with different
reward scales do not share one mean and std. What this module implements:

    G(e, s, t) = sum_{k >= t} gamma^(k - t) r(e, s, k)        (player s's own turns)
    A(e, s, t) = (G(e, s, t) - mu(g, s)) / (sigma(g, s) + eps)    if scale_by_std
    A(e, s, t) =  G(e, s, t) - mu(g, s)                           otherwise

r(e, s, k) is ``Turn.reward`` of seat s's k-th turn (the engine credits dense rewards,
penalties and the terminal residual there, so they sum to ``Trajectory.ret``); the
sum runs to the end of that player's trajectory. mu(g, s) and sigma(g, s) are the
mean and sample std (ddof=1) of G over *all turns* of seat s in episodes of game g
in the batch held by the same policy: "agent" is the (game, seat, policy) role
(``role_key``; against a fixed opponent the learner's seat changes between groups,
and the opponent's returns there are no statistic of the learner's). A role whose turns all have the same
G (or that has a single turn) carries no signal and gets A = 0. This follows the
paper's description; details of its released code (e.g. group-level terms) are not
reproduced.
"""

from __future__ import annotations

from collections.abc import Sequence

from coplay.algos.advantages.base import (
    Advantages,
    EmptyState,
    Estimate,
    Estimator,
    RoleKey,
    check_eps,
    check_gamma,
    mean,
    register,
    role_key,
    role_names,
    std,
    summary_metrics,
    turn_returns,
)
from coplay.types import Episode


def role_values(episodes: Sequence[Episode], values: Advantages) -> dict[RoleKey, list[float]]:
    """All per-turn ``values[e][s][t]`` of each role (``role_key``), in batch order."""
    roles: dict[RoleKey, list[float]] = {}
    for ep, ep_values in zip(episodes, values, strict=True):
        for seat, seat_values in enumerate(ep_values):
            roles.setdefault(role_key(ep, seat), []).extend(seat_values)
    return roles


def role_baselines(episodes: Sequence[Episode], means: dict[RoleKey, float]) -> list[list[float]]:
    """``means`` laid out ``[episode][seat]`` for ``summary_metrics``."""
    return [
        [means.get(role_key(ep, seat), 0.0) for seat in range(len(ep.trajectories))]
        for ep in episodes
    ]


@register("mars")
def mars(
    *, gamma: float = 1.0, scale_by_std: bool = True, eps: float = 1e-6
) -> Estimator[EmptyState]:
    """Per-turn return-to-go, normalised per role (game, seat, policy) over the batch."""
    check_gamma(gamma)
    check_eps(eps)

    def estimate(episodes: Sequence[Episode], state: EmptyState) -> Estimate[EmptyState]:
        returns = turn_returns(episodes, gamma)
        roles = role_values(episodes, returns)
        stats = {key: (mean(gs), std(gs, ddof=1)) for key, gs in roles.items()}
        # equal returns carry no signal; test equality, not std == 0, which rounding can miss
        flat = {key for key, gs in roles.items() if not gs or min(gs) == max(gs)}

        def normalise(key: RoleKey, g: float) -> float:
            if key in flat:
                return 0.0
            m, s = stats[key]
            return (g - m) / (s + eps) if scale_by_std else g - m

        advantages = tuple(
            tuple(
                tuple(normalise(role_key(ep, seat), g) for g in seat_returns)
                for seat, seat_returns in enumerate(ep_returns)
            )
            for ep, ep_returns in zip(episodes, returns, strict=True)
        )
        means = {key: m for key, (m, _) in stats.items()}
        baselines = role_baselines(episodes, means)
        metrics = summary_metrics(advantages, baselines)
        names = role_names(stats)
        for key, (_, s) in sorted(stats.items()):
            metrics[f"adv/return_std/{names[key]}"] = s
        return Estimate(advantages, state, metrics, baselines=baselines)

    return Estimator(EmptyState, estimate)
