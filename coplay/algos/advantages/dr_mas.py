"""Agent-wise normalised group advantages (Dr. MAS; Feng et al., 2026, arXiv 2602.08847).

Dr. MAS ("Dr. MAS: Stable Reinforcement Learning for Multi-Agent LLM Systems") shows
that normalising GRPO advantages with statistics pooled over all agents lets one
agent's reward scale set another agent's gradient scale, which causes gradient-norm
spikes; its remedy is to normalise per agent with that agent's own statistics. What
this module implements keeps GRPO's group baseline and takes the scale per agent:

    D(e, s)  = R(e, s) - mean_{(game, group_id, s)} R           (GRPO group centring)
    A(e, s, t) = D(e, s) / (sigma(game, s) + eps)

mean_{(game, group_id, s)} is over the episodes of e's group (same game and
group_id), for seat s. sigma(game, s) is the sample std (ddof=1) of D(e', s) over
the episodes e' of the batch with that game: over all of agent s's centred returns,
not over one group's returns (GRPO) and not over all agents (a global std). The
agent is the (game, seat, policy) role (``role_key``). A (group, seat) of size one, or one whose returns
are all equal, carries no signal: its A is 0 and it is left out of sigma. Every turn
of a seat gets its seat's advantage.
"""

from __future__ import annotations

from collections.abc import Sequence

from coplay.algos.advantages.base import (
    EmptyState,
    Estimate,
    Estimator,
    RoleKey,
    check_eps,
    expand_to_turns,
    mean,
    register,
    role_key,
    role_names,
    seat_returns,
    std,
    summary_metrics,
)
from coplay.algos.advantages.grpo import group_returns
from coplay.types import Episode


def centred_returns(
    episodes: Sequence[Episode],
) -> tuple[list[list[float | None]], list[list[float]]]:
    """``D[e][s]`` (None for a group without signal) and the group means subtracted."""
    groups = group_returns(episodes)
    means = {key: mean(rs) for key, rs in groups.items()}
    # equal returns carry no signal; test equality, not std == 0, which rounding can miss
    informative = {key for key, rs in groups.items() if len(rs) >= 2 and min(rs) < max(rs)}
    centred, baselines = [], []
    for ep in episodes:
        keys = [(ep.game, ep.group_id, seat) for seat in range(len(ep.trajectories))]
        baselines.append([means[key] for key in keys])
        centred.append(
            [
                r - means[key] if key in informative else None
                for key, r in zip(keys, seat_returns(ep), strict=True)
            ]
        )
    return centred, baselines


@register("dr_mas")
def dr_mas(*, eps: float = 1e-6) -> Estimator[EmptyState]:
    """GRPO group centring scaled by each (game, seat, policy) agent's std over the batch."""
    check_eps(eps)

    def estimate(episodes: Sequence[Episode], state: EmptyState) -> Estimate[EmptyState]:
        centred, baselines = centred_returns(episodes)
        pooled: dict[RoleKey, list[float]] = {}
        for ep, ds in zip(episodes, centred, strict=True):
            for seat, d in enumerate(ds):
                pooled.setdefault(role_key(ep, seat), [])
                if d is not None:  # groups without signal do not shrink the agent's scale
                    pooled[role_key(ep, seat)].append(d)
        sigma = {key: std(ds, ddof=1) for key, ds in pooled.items()}
        per_seat = [
            [
                0.0 if d is None else d / (sigma[role_key(ep, seat)] + eps)
                for seat, d in enumerate(ds)
            ]
            for ep, ds in zip(episodes, centred, strict=True)
        ]
        advantages = expand_to_turns(episodes, per_seat)
        metrics = summary_metrics(advantages, baselines)
        names = role_names(sigma)
        for key, s in sorted(sigma.items()):
            metrics[f"adv/agent_std/{names[key]}"] = s
        return Estimate(advantages, state, metrics, baselines=baselines)

    return Estimator(EmptyState, estimate, needs_groups=True)
