"""Types, registry and shared helpers for advantage estimators.

An estimator is an optax-style pair of pure functions::

    est = make_estimator("grpo", scale_by_std=False)
    state = est.init()
    out = est.estimate(episodes, state)   # Estimate(advantages, state, metrics)
    state = out.state

``out.advantages[e][s][t]`` is the advantage of turn ``t`` of
``episodes[e].trajectories[s].turns``. Estimators never mutate episodes or state;
``assign_advantages`` is the one explicit step that writes them onto the turns.
"""

from __future__ import annotations

import inspect
import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

from coplay.types import Episode, Trajectory

S = TypeVar("S")

Advantages = tuple[tuple[tuple[float, ...], ...], ...]
"""Indexed ``[episode][seat][turn]``, aligned with ``trajectories[seat].turns``."""

TurnCredit = Callable[[Trajectory, float], tuple[float, ...]]
"""Spreads one trajectory-level value over the trajectory's turns."""


class EmptyState(NamedTuple):
    """State of an estimator that keeps none (REINFORCE, GRPO); ``EmptyState`` is its init."""


def check_gamma(gamma: float) -> None:
    """Reject a discount outside [0, 1] when the estimator is built."""
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")


def check_eps(eps: float) -> None:
    """Reject a negative stabiliser when the estimator is built."""
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")


@dataclass(frozen=True)
class Estimate(Generic[S]):
    """What an estimator returns for one batch."""

    advantages: Advantages
    state: S
    """The estimator's state after this batch; pass it to the next call."""
    metrics: dict[str, float]
    """Namespaced ``adv/...`` scalars for the trainer to log."""
    value_targets: Advantages | None = None
    """Regression targets for the critic, per turn (estimators that need values)."""
    baselines: Sequence[Sequence[float]] | None = None
    """Per episode and seat, the value subtracted from the seat's return (estimators
    with a return baseline): each learner logs the mean of its own
    (``policy_turn_metrics``), as the metrics' ``adv/baseline_seat{s}`` mix every
    policy's."""


class Estimator(NamedTuple, Generic[S]):
    """An ``init``/``estimate`` pair of pure functions, as in optax."""

    init: Callable[[], S]
    estimate: Callable[[Sequence[Episode], S], Estimate[S]]
    needs_values: bool = False
    """True when ``estimate`` reads ``Turn.value``: the trainer then runs a critic."""
    needs_groups: bool = False
    """True when the baseline comes from the other episodes of a group (same seed):
    with ``rollout.group_size`` 1 every advantage would be 0, so the config refuses it."""


ESTIMATORS: dict[str, Callable[..., Estimator[Any]]] = {}
"""Estimator factories by name; each takes keyword-only hyper-parameters."""


def register(name: str) -> Callable[[Callable[..., Estimator[Any]]], Callable[..., Estimator[Any]]]:
    """Decorator adding an estimator factory to ``ESTIMATORS`` under ``name``."""

    def add(factory: Callable[..., Estimator[Any]]) -> Callable[..., Estimator[Any]]:
        if name in ESTIMATORS:
            raise ValueError(f"estimator {name!r} is already registered")
        ESTIMATORS[name] = factory
        return factory

    return add


def make_estimator(name: str, **params: Any) -> Estimator[Any]:
    """Build the estimator registered as ``name`` with hyper-parameters ``params``.

    Raises ValueError naming the known estimators (unknown ``name``) or the
    offending parameter and the accepted ones (unknown parameter).
    """
    if name not in ESTIMATORS:
        raise ValueError(f"unknown estimator {name!r}; known estimators: {sorted(ESTIMATORS)}")
    factory = ESTIMATORS[name]
    accepted = [
        p.name
        for p in inspect.signature(factory).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ValueError(
            f"estimator {name!r} has no parameter {unknown[0]!r}; its parameters are {accepted}"
        )
    return factory(**params)


# --- shared helpers -------------------------------------------------------------------


RoleKey = tuple[str, int, str]
"""(game, seat, policy id): a role, whose returns a per-role statistic averages."""


def role_key(episode: Episode, seat: int) -> RoleKey:
    """The role of ``seat`` in ``episode``: its game, the seat, and the policy that held
    it. Against a fixed opponent the learner's seat changes from group to group, so a
    seat alone would average the learner's returns there with the opponent's."""
    return (episode.game, seat, episode.seats[seat])


def role_names(keys: Iterable[RoleKey]) -> dict[RoleKey, str]:
    """Each role's metric suffix: ``<game>/seat<s>``, with ``/<policy id>`` added where
    several policies held the seat (self-play's seats keep their plain names)."""
    keys = sorted(keys)
    held = Counter((game, seat) for game, seat, _ in keys)
    return {
        (game, seat, pid): f"{game}/seat{seat}" + (f"/{pid}" if held[(game, seat)] > 1 else "")
        for game, seat, pid in keys
    }


def seat_returns(episode: Episode) -> tuple[float, ...]:
    """Each seat's episode return (``Trajectory.ret``, dense rewards included)."""
    return tuple(traj.ret for traj in episode.trajectories)


def sparse_credit(traj: Trajectory, value: float) -> tuple[float, ...]:
    """Every turn of the trajectory gets the same value (sparse reward, no discount)."""
    return (value,) * len(traj.turns)


def expand_to_turns(
    episodes: Sequence[Episode],
    per_seat: Sequence[Sequence[float]],
    *,
    credit: TurnCredit = sparse_credit,
) -> Advantages:
    """Spread per-(episode, seat) values over turns with ``credit``.

    The one place where trajectory-level advantages become per-turn ones, so that a
    turn-level scheme (reward-to-go, discounting) only swaps ``credit``.
    """
    return tuple(
        tuple(credit(traj, value) for traj, value in zip(ep.trajectories, values, strict=True))
        for ep, values in zip(episodes, per_seat, strict=True)
    )


def reward_to_go(rewards: Sequence[float], gamma: float = 1.0) -> tuple[float, ...]:
    """``G_t = sum_{k >= t} gamma^(k - t) r_k`` for every ``t``, computed backwards."""
    out = [0.0] * len(rewards)
    acc = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        acc = rewards[t] + gamma * acc
        out[t] = acc
    return tuple(out)


def turn_returns(episodes: Sequence[Episode], gamma: float = 1.0) -> Advantages:
    """Each turn's discounted return-to-go over its own player's ``Turn.reward`` s.

    Indexed ``[episode][seat][turn]`` like ``Advantages``. The engine credits each
    trajectory's rewards so that they sum to ``Trajectory.ret``, so with ``gamma = 1``
    a trajectory's first turn has ``G_0 = ret``.
    """
    return tuple(
        tuple(reward_to_go([t.reward for t in traj.turns], gamma) for traj in ep.trajectories)
        for ep in episodes
    )


def mean(xs: Iterable[float]) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else 0.0


def baseline_mean(xs: Sequence[float]) -> float:
    """The mean of ``xs`` as a baseline: their common value where all are equal.

    Equal returns carry no signal and must get an advantage of exactly 0, which the
    zero-advantage filter drops; a plain mean rounds (three returns of 0.1 have mean
    0.10000000000000002) and leaves each an advantage of -1e-17, which it keeps.
    """
    return xs[0] if xs and min(xs) == max(xs) else mean(xs)


def std(xs: Iterable[float], *, ddof: int = 0) -> float:
    xs = list(xs)
    if len(xs) <= ddof:
        return 0.0
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - ddof))


def summary_metrics(
    advantages: Advantages, baselines: Sequence[Sequence[float]] | None = None
) -> dict[str, float]:
    """``adv/mean`` and ``adv/std`` over all turns, and ``adv/baseline_seat{s}``
    (a learner replaces the first two with its own turns': ``policy_turn_metrics``).

    ``baselines[e][s]`` is the value subtracted from seat ``s``'s return in episode
    ``e``; the metric is its mean over the batch's episodes that have seat ``s``.
    """
    metrics = turn_metrics([a for ep in advantages for seat in ep for a in seat])
    if baselines is not None:
        metrics |= seat_baselines(
            (s, b) for ep_baselines in baselines for s, b in enumerate(ep_baselines)
        )
    return metrics


BASELINE_KEY = "adv/baseline_seat"
"""Prefix of the per-seat mean baseline metrics (``adv/baseline_seat0``, ...)."""


def seat_baselines(pairs: Iterable[tuple[int, float]]) -> dict[str, float]:
    """``adv/baseline_seat{s}``: the mean of the baselines ``(seat, baseline)`` per seat."""
    by_seat: dict[int, list[float]] = {}
    for seat, b in pairs:
        by_seat.setdefault(seat, []).append(b)
    return {f"{BASELINE_KEY}{seat}": mean(bs) for seat, bs in sorted(by_seat.items())}


def turn_metrics(advantages: Sequence[float]) -> dict[str, float]:
    """``adv/mean``, ``adv/std`` and ``adv/num_turns`` of these turns' advantages."""
    return {
        "adv/mean": mean(advantages),
        "adv/std": std(advantages),
        "adv/num_turns": float(len(advantages)),
    }


def policy_turn_metrics(
    episodes: Sequence[Episode],
    advantages: Advantages,
    policy_id: str,
    baselines: Sequence[Sequence[float]] | None = None,
) -> dict[str, float]:
    """``turn_metrics`` over the turns of ``policy_id``'s trajectories only, and with
    ``baselines`` (``Estimate.baselines``) ``adv/baseline_seat{s}`` over the seats it
    sat in. An estimator's ``summary_metrics`` take every seat's turns and baselines, an
    opponent's and another learner's too, since it estimates them all; a learner logs
    its own."""
    own = [
        (seat, traj, e)
        for e, ep in enumerate(episodes)
        for seat, traj in enumerate(ep.trajectories)
        if traj.policy_id == policy_id
    ]
    metrics = turn_metrics([a for seat, _, e in own for a in advantages[e][seat]])
    if baselines is not None:
        metrics |= seat_baselines((seat, baselines[e][seat]) for seat, _, e in own)
    return metrics


def assign_advantages(episodes: Sequence[Episode], advantages: Advantages) -> None:
    """Write ``advantages`` onto ``Turn.advantage`` (the only mutating helper here)."""
    for ep, ep_adv in zip(episodes, advantages, strict=True):
        for traj, seat_adv in zip(ep.trajectories, ep_adv, strict=True):
            for turn, a in zip(traj.turns, seat_adv, strict=True):
                turn.advantage = a
