"""Group-relative advantages (GRPO; Shao et al., 2024, DeepSeekMath, arXiv 2402.03300).

A group is the set of episodes sharing ``(game, group_id)`` (the same seed played
repeatedly). Within each group, separately for every seat s:

    A(e, s, t) = (R(e, s) - mean_g) / (std_g + eps)     if scale_by_std
    A(e, s, t) =  R(e, s) - mean_g                       otherwise (Dr. GRPO; Liu et al.,
                                                         2025, arXiv 2503.20783)

mean_g and std_g are the mean and sample standard deviation (ddof=1, as in TRL and
verl) of the seat's returns over the group. Normalising per seat keeps the seats of
an asymmetric game from acting as each other's baseline. A group of size one has no
comparison, so its advantage is 0. ``adv/zero_std_group_frac`` is the share of
(group, seat) pairs of size >= 2 whose returns are all equal: they carry no signal.
"""

from __future__ import annotations

from collections.abc import Sequence

from coplay.algos.advantages.base import (
    EmptyState,
    Estimate,
    Estimator,
    check_eps,
    expand_to_turns,
    mean,
    register,
    seat_returns,
    std,
    summary_metrics,
)
from coplay.types import Episode

GroupKey = tuple[str, int, int]
"""(game, group_id, seat)."""


def group_returns(episodes: Sequence[Episode]) -> dict[GroupKey, list[float]]:
    """Returns of every (game, group_id, seat) group, in batch order."""
    groups: dict[GroupKey, list[float]] = {}
    for ep in episodes:
        for seat, r in enumerate(seat_returns(ep)):
            groups.setdefault((ep.game, ep.group_id, seat), []).append(r)
    return groups


@register("grpo")
def grpo(*, scale_by_std: bool = True, eps: float = 1e-6) -> Estimator[EmptyState]:
    """GRPO advantages; ``scale_by_std=False`` gives Dr. GRPO's unscaled version."""
    check_eps(eps)

    def estimate(episodes: Sequence[Episode], state: EmptyState) -> Estimate[EmptyState]:
        groups = group_returns(episodes)
        stats = {key: (mean(rs), std(rs, ddof=1), len(rs)) for key, rs in groups.items()}
        # equal returns carry no signal; test equality, not std == 0, which rounding can miss
        flat = {key for key, rs in groups.items() if len(rs) >= 2 and min(rs) == max(rs)}

        def advantage(ep: Episode, seat: int, r: float) -> float:
            key = (ep.game, ep.group_id, seat)
            m, s, n = stats[key]
            if n < 2 or key in flat:
                return 0.0
            return (r - m) / (s + eps) if scale_by_std else r - m

        per_seat = [
            [advantage(ep, seat, r) for seat, r in enumerate(seat_returns(ep))] for ep in episodes
        ]
        baselines = [
            [stats[(ep.game, ep.group_id, seat)][0] for seat in range(len(ep.trajectories))]
            for ep in episodes
        ]
        advantages = expand_to_turns(episodes, per_seat)
        metrics = summary_metrics(advantages, baselines)
        sized = [key for key, rs in groups.items() if len(rs) >= 2]
        metrics["adv/zero_std_group_frac"] = mean(1.0 if key in flat else 0.0 for key in sized)
        metrics["adv/singleton_group_frac"] = mean(
            1.0 if n < 2 else 0.0 for _, _, n in stats.values()
        )
        return Estimate(advantages, state, metrics, baselines=baselines)

    return Estimator(EmptyState, estimate, needs_groups=True)
