"""Generalised advantage estimation with a learned critic (GAE; Schulman et al., 2016,
arXiv 1506.02438), the estimator of PPO with a value function (Schulman et al., 2017).

Each player's trajectory is a sequence of its own turns t = 0..T-1 with immediate
rewards r_t (``Turn.reward``, which the engine credits so that they sum to the
player's return) and critic values V_t = ``Turn.value`` (the expected return-to-go
of that player from the observation it acted on). With V_T = 0 after the last turn:

    delta_t = r_t + gamma * V_{t+1} - V_t
    A_t     = sum_{k >= t} (gamma * lam)^(k - t) * delta_k      (computed backwards)
    R_t     = A_t + V_t                                          (the critic's target)

``lam = 1`` gives the Monte-Carlo advantage G_t - V_t; ``lam = 0`` the one-step TD
error. A truncated episode is treated like a finished one (V_T = 0): the engine
credits the truncation outcome as the trajectory's last reward, so there is no
further return to bootstrap.

With ``normalize`` the advantages are whitened over every turn in the batch,
``(A - mean A) / (std A + eps)``, as PPO implementations do; the targets R_t always
use the raw advantages. The estimator reads ``Turn.value`` and refuses episodes
whose turns have none: the trainer fills them from a value model (``critic``
settings) whenever the estimator's ``needs_values`` is True.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from coplay.algos.advantages.base import (
    Advantages,
    EmptyState,
    Estimate,
    Estimator,
    check_eps,
    check_gamma,
    mean,
    register,
    std,
    summary_metrics,
)
from coplay.types import Episode, Trajectory


def gae_advantages(
    rewards: Sequence[float], values: Sequence[float], *, gamma: float, lam: float
) -> tuple[float, ...]:
    """Per-turn GAE of one trajectory (``V`` after the last turn is 0)."""
    if len(rewards) != len(values):
        raise ValueError(f"{len(rewards)} rewards but {len(values)} values")
    out = [0.0] * len(rewards)
    acc = 0.0
    next_value = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        delta = rewards[t] + gamma * next_value - values[t]
        acc = delta + gamma * lam * acc
        out[t] = acc
        next_value = values[t]
    return tuple(out)


def turn_values(traj: Trajectory) -> tuple[float, ...]:
    """``Turn.value`` of every turn, with an error that says how values get there, or
    that the critic gave one that is not a number (whitening would spread it to every
    advantage of the policy, and the update to its weights)."""
    values = tuple(t.value for t in traj.turns)
    if any(v is None for v in values):
        raise ValueError(
            "the gae estimator needs critic values on every turn (Turn.value); "
            "the trainer fills them when the estimator's needs_values is set"
        )
    bad = next((v for v in values if not math.isfinite(v)), None)  # type: ignore[arg-type]
    if bad is not None:
        raise ValueError(
            f"the critic gave a turn the value {bad}: it has diverged (lower critic.lr)"
        )
    return values  # type: ignore[return-value]


def raw_advantages(episodes: Sequence[Episode], *, gamma: float, lam: float) -> Advantages:
    """Un-normalised GAE, indexed ``[episode][seat][turn]``."""
    return tuple(
        tuple(
            gae_advantages([t.reward for t in traj.turns], turn_values(traj), gamma=gamma, lam=lam)
            for traj in ep.trajectories
        )
        for ep in episodes
    )


def value_targets(episodes: Sequence[Episode], *, gamma: float, lam: float) -> Advantages:
    """The critic's regression targets ``R_t = A_t + V_t`` (lambda-returns)."""
    raw = raw_advantages(episodes, gamma=gamma, lam=lam)
    return tuple(
        tuple(
            tuple(a + v for a, v in zip(advs, turn_values(traj), strict=True))
            for traj, advs in zip(ep.trajectories, ep_adv, strict=True)
        )
        for ep, ep_adv in zip(episodes, raw, strict=True)
    )


def explained_variance(values: Sequence[float], targets: Sequence[float]) -> float:
    """1 - Var(R - V) / Var(R): 1 for a perfect critic, 0 for a constant one."""
    var = std(targets) ** 2
    if var == 0:
        return 0.0
    residual = [r - v for r, v in zip(targets, values, strict=True)]
    return 1.0 - std(residual) ** 2 / var


def whiten(advantages: Advantages, eps: float, episodes: Sequence[Episode]) -> Advantages:
    """``(A - mean A) / (std A + eps)`` over every turn of each policy in the batch (PPO
    whitens the trained policy's own advantages: a fixed opponent's, or another
    learner's, whose critic values mean nothing for it, would shift and scale them);
    all 0 where a policy's advantages are all the same (nothing to scale, whatever
    ``eps``, and no division by 0). Shared-weight self-play is one policy: every seat."""
    by_policy: dict[str, list[float]] = {}
    for ep, ep_adv in zip(episodes, advantages, strict=True):
        for policy, seat in zip(ep.seats, ep_adv, strict=True):
            by_policy.setdefault(policy, []).extend(seat)
    # Equal advantages whiten to 0, tested as equality: their mean rounds, and with eps
    # 0 that rounding, divided by its own size, made three advantages of 0.1 each -1.
    stats = {
        p: (mean(a), 0.0 if not a or min(a) == max(a) else std(a) + eps)
        for p, a in by_policy.items()
    }
    return tuple(
        tuple(
            tuple((a - stats[p][0]) / stats[p][1] if stats[p][1] else 0.0 for a in seat)
            for p, seat in zip(ep.seats, ep_adv, strict=True)
        )
        for ep, ep_adv in zip(episodes, advantages, strict=True)
    )


@register("gae")
def gae(
    *, gamma: float = 1.0, lam: float = 0.95, normalize: bool = True, eps: float = 1e-8
) -> Estimator[EmptyState]:
    """GAE(gamma, lam) over each player's own turns, from critic values on the turns."""
    check_gamma(gamma)
    check_gamma(lam)
    check_eps(eps)

    def estimate(episodes: Sequence[Episode], state: EmptyState) -> Estimate[EmptyState]:
        raw = raw_advantages(episodes, gamma=gamma, lam=lam)
        advantages = whiten(raw, eps, episodes) if normalize else raw
        values = [v for ep in episodes for traj in ep.trajectories for v in turn_values(traj)]
        targets = value_targets(episodes, gamma=gamma, lam=lam)
        flat_targets = [r for ep in targets for seat in ep for r in seat]
        metrics = summary_metrics(advantages)
        metrics["adv/value_mean"] = mean(values)
        metrics["adv/explained_variance"] = explained_variance(values, flat_targets)
        return Estimate(advantages, state, metrics, value_targets=targets)

    return Estimator(EmptyState, estimate, needs_values=True)
