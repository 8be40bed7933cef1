"""Advantage alignment: opponent shaping written as an advantage (after Duque et al., 2025).

Duque, Aghajohari, Cooijmans, Ciuca, Zhang, Berseth and Courville, "Advantage
Alignment Algorithms", ICLR 2025 (arXiv 2406.14662), show that the opponent-shaping
gradient of LOLA-style methods reduces, under simple assumptions, to reweighting each
action's advantage by how well the agent has been doing and how good the action is for
the other player. Naive learners in a social dilemma learn to defect; with this term
they learn reciprocity: cooperate while the interaction has paid, retaliate when it
has not. What this module implements, for player i's turn t:

    A*(i, t) = A(i, t) + beta * P(i, t) * O(i, t)
    P(i, t)  = sum_{k < t} gamma^(t - k) A(i, k)        (i's own earlier turns)

A is any registered estimator's advantage (``base``, default GAE with a critic as in
the paper; the baseline must depend on the state for P to mean "better than
expected so far"). O(i, t) is the other players' advantage at the step of i's turn t:
for each other player j, the advantage of j's first turn at or after that step (the
same step in a simultaneous-move game, where A(j) is the value of the joint action;
j's reply in a sequential one), averaged over the players that have one, 0 when none
has. With two players this is the paper's equation; the average over others is how
coplay extends it to n players. The paper's PPO variant also normalises the shaping
term; that is not reproduced, ``beta`` sets its scale. ``beta = 0`` gives ``base``.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

from coplay.algos.advantages.base import (
    Advantages,
    Estimate,
    Estimator,
    check_gamma,
    make_estimator,
    mean,
    register,
    summary_metrics,
)
from coplay.types import Episode


def past_credit(advantages: Sequence[float], gamma: float) -> tuple[float, ...]:
    """``P(t) = sum_{k < t} gamma^(t - k) A(k)`` for every ``t``, computed forwards.

    >>> past_credit([1.0, 2.0, 3.0], 0.5)
    (0.0, 0.5, 1.25)
    """
    out, acc = [], 0.0
    for a in advantages:
        out.append(acc)
        acc = gamma * (acc + a)
    return tuple(out)


def others_advantage(
    steps: Sequence[Sequence[int]], advantages: Sequence[Sequence[float]], seat: int, step: int
) -> float:
    """Mean over the other seats of the advantage of their first turn at or after ``step``.

    ``steps[j]`` are seat j's turns' environment steps (ascending), ``advantages[j]``
    their advantages; 0 when no other seat acts at or after ``step``.
    """
    found = []
    for j, (js, ja) in enumerate(zip(steps, advantages, strict=True)):
        k = bisect.bisect_left(js, step)
        if j != seat and k < len(js):
            found.append(ja[k])
    return mean(found)


def align_episode(
    episode: Episode, advantages: Sequence[Sequence[float]], beta: float, gamma: float
) -> tuple[tuple[float, ...], ...]:
    """One episode's aligned advantages ``[seat][turn]``."""
    steps = [[turn.step for turn in traj.turns] for traj in episode.trajectories]
    return tuple(
        tuple(
            a + beta * p * others_advantage(steps, advantages, seat, step)
            for a, p, step in zip(seat_adv, past_credit(seat_adv, gamma), steps[seat], strict=True)
        )
        for seat, seat_adv in enumerate(advantages)
    )


@register("alignment")
def alignment(
    *,
    base: str = "gae",
    base_params: dict[str, Any] | None = None,
    beta: float = 1.0,
    gamma: float = 1.0,
) -> Estimator[Any]:
    """``base``'s advantages plus the advantage-alignment term ``beta * P * O``.

    The state, the critic (``needs_values``) and the need for groups are ``base``'s.
    """
    if base == "alignment":
        raise ValueError("alignment cannot be its own base estimator")
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    check_gamma(gamma)
    inner = make_estimator(base, **(base_params or {}))

    def estimate(episodes: Sequence[Episode], state: Any) -> Estimate[Any]:
        out = inner.estimate(episodes, state)
        aligned: Advantages = tuple(
            align_episode(ep, ep_adv, beta, gamma)
            for ep, ep_adv in zip(episodes, out.advantages, strict=True)
        )
        shaping = [
            abs(x - a)
            for ep_al, ep_adv in zip(aligned, out.advantages, strict=True)
            for seat_al, seat_adv in zip(ep_al, ep_adv, strict=True)
            for x, a in zip(seat_al, seat_adv, strict=True)
        ]
        # The summary describes the advantages trained on, the aligned ones; the
        # base's other metrics (its baselines, its groups) stand.
        summary = summary_metrics(aligned)
        metrics = {**out.metrics, **summary, "adv/alignment_abs": mean(shaping)}
        return Estimate(aligned, out.state, metrics, out.value_targets, out.baselines)

    return Estimator(inner.init, estimate, inner.needs_values, inner.needs_groups)
