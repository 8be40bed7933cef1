"""Role-conditioned Advantage Estimation (RAE; SPIRAL, Liu et al., 2025, arXiv 2506.24119).

RAE keeps an exponential-moving-average baseline per (game G, seat/role p), so that
in self-play each role is compared with its own typical return (a first-mover
advantage, for instance, is not credited to the moves). The role also names the
policy in the seat (``role_key``): against a fixed opponent the learner holds a seat
in some groups and the opponent in others, and the opponent's returns are no
baseline of the learner's.

    b(G, p) <- alpha * b(G, p) + (1 - alpha) * R          (baseline update)
    A(tau, p, t) = R(tau, p) - b(G, p)                     (every turn t of p in tau)

Baselines start at 0.0. Two choices are explicit options:

- ``update_before_advantage`` (default True). SPIRAL's Algorithm 1 first updates the
  baseline with the trajectory's return and then computes A with the *updated*
  baseline; that is what True implements. SPIRAL's released code reads the baseline
  before updating it, which is False: A with the baseline as it was before the update
  (a baseline independent of the current return, so the gradient estimate is
  strictly unbiased); the baseline is updated afterwards. The default stays True, the
  setting every bundled RAE preset's results were measured with.
- ``update`` (default ``"batch_mean"``). The paper writes the update per trajectory.
  Applied one trajectory at a time, the advantages of a batch would depend on the
  order of its episodes, which is arbitrary (it follows which game finished first).
  ``"batch_mean"`` therefore makes one EMA step per batch with the mean return of
  each (G, p) present, and every trajectory of the batch uses the same baseline:
  advantages are invariant to permuting episodes. ``"per_trajectory"`` applies the
  paper's recursion literally, in batch order.

State is a ``dict[(game, seat, policy id), float]``; it is returned new, never
mutated. A state saved before the policy was part of the key (``(game, seat)``) still
gives each seat's baseline until the role's own replaces it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from coplay.algos.advantages.base import (
    Estimate,
    Estimator,
    RoleKey,
    expand_to_turns,
    mean,
    register,
    role_key,
    role_names,
    seat_returns,
    summary_metrics,
)
from coplay.types import Episode

RaeState = dict[RoleKey, float]
UPDATES = ("batch_mean", "per_trajectory")


def ema(old: float, new: float, alpha: float) -> float:
    return alpha * old + (1.0 - alpha) * new


def baseline(state: Mapping, key: RoleKey) -> float:
    """The role's baseline; an older state's per-seat one, else 0."""
    return state.get(key, state.get(key[:2], 0.0))


def batch_mean_pass(
    episodes: Sequence[Episode], state: Mapping[RoleKey, float], *, alpha: float, before: bool
) -> tuple[list[list[float]], RaeState]:
    """One EMA step per role with the batch's mean return; returns baselines used."""
    returns: dict[RoleKey, list[float]] = {}
    for ep in episodes:
        for seat, r in enumerate(seat_returns(ep)):
            returns.setdefault(role_key(ep, seat), []).append(r)
    new_state = dict(state)
    for key, rs in returns.items():
        new_state[key] = ema(baseline(state, key), mean(rs), alpha)
    used = new_state if before else state
    baselines = [
        [baseline(used, role_key(ep, seat)) for seat in range(len(ep.trajectories))]
        for ep in episodes
    ]
    return baselines, new_state


def per_trajectory_pass(
    episodes: Sequence[Episode], state: Mapping[RoleKey, float], *, alpha: float, before: bool
) -> tuple[list[list[float]], RaeState]:
    """The paper's per-trajectory recursion, in batch order; returns baselines used."""
    new_state = dict(state)
    baselines = []
    for ep in episodes:
        ep_baselines = []
        for seat, r in enumerate(seat_returns(ep)):
            key = role_key(ep, seat)
            old = baseline(new_state, key)
            new_state[key] = ema(old, r, alpha)
            ep_baselines.append(new_state[key] if before else old)
        baselines.append(ep_baselines)
    return baselines, new_state


PASSES = {"batch_mean": batch_mean_pass, "per_trajectory": per_trajectory_pass}


@register("rae")
def rae(
    *, alpha: float = 0.95, update_before_advantage: bool = True, update: str = "batch_mean"
) -> Estimator[RaeState]:
    """RAE advantages with an EMA baseline per role (game, seat, policy); see the module
    docstring."""
    if not 0.0 <= alpha < 1.0:
        raise ValueError(f"alpha must be in [0, 1), got {alpha}")
    if update not in PASSES:
        raise ValueError(f"update must be one of {UPDATES}, got {update!r}")
    run_pass = PASSES[update]

    def init() -> RaeState:
        return {}

    def estimate(episodes: Sequence[Episode], state: RaeState) -> Estimate[RaeState]:
        baselines, new_state = run_pass(
            episodes, state, alpha=alpha, before=update_before_advantage
        )
        per_seat = [
            [r - b for r, b in zip(seat_returns(ep), bs, strict=True)]
            for ep, bs in zip(episodes, baselines, strict=True)
        ]
        advantages = expand_to_turns(episodes, per_seat)
        metrics = summary_metrics(advantages, baselines)
        roles = {key: b for key, b in new_state.items() if len(key) == 3}  # not an old seat's
        names = role_names(roles)
        for key, b in sorted(roles.items()):
            metrics[f"adv/role_baseline/{names[key]}"] = b
        return Estimate(advantages, new_state, metrics, baselines=baselines)

    return Estimator(init, estimate)
