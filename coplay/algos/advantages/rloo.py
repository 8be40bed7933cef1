"""REINFORCE leave-one-out (RLOO; Kool et al., 2019; Ahmadian et al., 2024).

A group is the set of episodes sharing ``(game, group_id)``; statistics are kept
separately for every seat s, as in GRPO. For a (group, seat) of size k >= 2 with
returns R_1..R_k, episode i's baseline is the mean of the *other* k - 1 returns:

    A(i, s, t) = R_i - (1 / (k - 1)) * sum_{j != i} R_j  =  k / (k - 1) * (R_i - mean_g)

The baseline does not depend on R_i, so the gradient estimate is unbiased (the
batch-mean baseline of REINFORCE is biased by a factor 1 - 1/k). A (group, seat) of
size one has no other sample and gets A = 0, as does one whose returns are all equal
(exactly, whatever the rounding of their sum). Every turn of a seat gets its seat's
advantage.

References: Kool, van Hoof and Welling, "Buy 4 REINFORCE samples, get a baseline
for free!", ICLR 2019 DeepRLStructPred workshop; Ahmadian et al., "Back to Basics:
Revisiting REINFORCE-style optimization for learning from human feedback in LLMs",
ACL 2024, arXiv 2402.14740.
"""

from __future__ import annotations

from collections.abc import Sequence

from coplay.algos.advantages.base import (
    EmptyState,
    Estimate,
    Estimator,
    expand_to_turns,
    mean,
    register,
    seat_returns,
    summary_metrics,
)
from coplay.algos.advantages.grpo import group_returns
from coplay.types import Episode


@register("rloo")
def rloo() -> Estimator[EmptyState]:
    """RLOO advantages: each return minus the mean of its group's other returns."""

    def estimate(episodes: Sequence[Episode], state: EmptyState) -> Estimate[EmptyState]:
        groups = group_returns(episodes)
        # equal returns carry no signal; test equality, as (total - r) / (k - 1) rounds:
        # three returns of 0.1 left each -1e-17, which the zero-advantage filter keeps
        totals = {key: (sum(rs), len(rs), min(rs) == max(rs)) for key, rs in groups.items()}

        def baseline(ep: Episode, seat: int, r: float) -> float:
            total, k, equal = totals[(ep.game, ep.group_id, seat)]
            # a lone sample is its own baseline, and so is any in a group of equal returns
            return r if equal else (total - r) / (k - 1)

        baselines = [
            [baseline(ep, seat, r) for seat, r in enumerate(seat_returns(ep))] for ep in episodes
        ]
        per_seat = [
            [r - b for r, b in zip(seat_returns(ep), bs, strict=True)]
            for ep, bs in zip(episodes, baselines, strict=True)
        ]
        advantages = expand_to_turns(episodes, per_seat)
        metrics = summary_metrics(advantages, baselines)
        metrics["adv/singleton_group_frac"] = mean(
            1.0 if k < 2 else 0.0 for _, k, _ in totals.values()
        )
        return Estimate(advantages, state, metrics, baselines=baselines)

    return Estimator(EmptyState, estimate, needs_groups=True)
