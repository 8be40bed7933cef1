"""General-sum and cooperative evaluation: what the players get, together and apart.

Pure functions of a list of finished ``Episode`` s (typically self-play, every seat
the same policy):

* ``returns_by_seat``: each seat's mean return with a 95% interval (over the game's return bounds where given).
* ``social_welfare``: the mean over episodes of the sum of all players' returns.
* ``fairness``: how evenly the seats' mean returns are spread. Returns are first
  shifted so that the lowest return a player can get is 0 (``x_i = mean_i - floor``,
  ``floor`` the game's ``min_return``, or a lower seat mean where invalid-action
  penalties pushed one below it), because both indices assume non-negative amounts:

  - Jain's index ``J = (sum x_i)^2 / (n * sum x_i^2)``, from 1/n (one seat gets
    everything) to 1 (all equal); Jain, Chiu and Hawe (1984), DEC-TR-301.
  - the min/max ratio ``min x_i / max x_i``, 0 when some seat gets the floor.

  When every shifted mean is 0 the seats are equal and both indices are 1.
* ``cooperation_rate``: in prisoner's-dilemma-like games, the share of decisions
  offering both a cooperate and a defect action in which cooperate was played.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from coplay.envs.actions import bracket
from coplay.eval.matches import Interval, mean_interval
from coplay.types import Episode


@dataclass(frozen=True)
class Fairness:
    """Spread of the seats' mean returns after shifting the floor to 0."""

    jain: float
    min_max_ratio: float


@dataclass(frozen=True)
class WelfareResult:
    """Everything a general-sum or cooperative self-play evaluation reports."""

    episodes: int
    returns_by_seat: tuple[Interval, ...]
    welfare: Interval
    fairness: Fairness
    cooperation_rate: float | None
    """None when no decision offered both cooperate and defect."""


def return_matrix(episodes: Sequence[Episode]) -> np.ndarray:
    """What the game paid (``Episode.game_returns``) as an array of shape (episodes,
    seats); all episodes must share a seat count."""
    if not episodes:
        raise ValueError("need at least one episode, got none")
    seats = {len(e.returns) for e in episodes}
    if len(seats) > 1:
        raise ValueError(f"episodes have different numbers of seats: {sorted(seats)}")
    return np.asarray([e.game_returns for e in episodes], dtype=float)  # (E, n)


def returns_by_seat(
    episodes: Sequence[Episode], *, bounds: tuple[float, float] | None = None
) -> tuple[Interval, ...]:
    """Each seat's mean return with a 95% interval (``mean_interval``: with the game's
    return ``bounds``, one that holds its level from a few games on).

    >>> from coplay.types import Episode
    >>> eps = [Episode("g", 0, 0, ("a", "b"), (), (1.0, 3.0)),
    ...        Episode("g", 1, 1, ("a", "b"), (), (3.0, 3.0))]
    >>> [r.value for r in returns_by_seat(eps)]
    [2.0, 3.0]
    """
    rets = return_matrix(episodes)
    return tuple(mean_interval(rets[:, s], bounds=bounds) for s in range(rets.shape[1]))


def social_welfare(
    episodes: Sequence[Episode], *, bounds: tuple[float, float] | None = None
) -> Interval:
    """Mean over episodes of the sum of every player's return, with a 95% interval;
    ``bounds``: one player's return bounds (the sum's are n times them)."""
    rets = return_matrix(episodes)
    n = rets.shape[1]
    summed = None if bounds is None else (n * bounds[0], n * bounds[1])
    return mean_interval(rets.sum(axis=1), bounds=summed)


def jain_index(amounts: Sequence[float]) -> float:
    """Jain's fairness index of non-negative amounts; 1 when all are equal (or all 0).

    >>> jain_index([1.0, 1.0, 1.0]), jain_index([3.0, 0.0, 0.0])
    (1.0, 0.3333333333333333)
    """
    x = _non_negative(amounts)
    total_sq = float((x * x).sum())
    if total_sq == 0.0:
        return 1.0
    return float(x.sum() ** 2 / (x.size * total_sq))


def min_max_ratio(amounts: Sequence[float]) -> float:
    """``min / max`` of non-negative amounts; 1 when all are 0.

    >>> min_max_ratio([2.0, 4.0])
    0.5
    """
    x = _non_negative(amounts)
    top = float(x.max())
    return 1.0 if top == 0.0 else float(x.min()) / top


def _non_negative(amounts: Sequence[float]) -> np.ndarray:
    x = np.asarray(amounts, dtype=float)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"need a non-empty list of amounts, got {list(amounts)!r}")
    if (x < 0).any() or not np.isfinite(x).all():
        raise ValueError(f"fairness needs finite amounts >= 0, got {x.tolist()}")
    return x


def fairness(episodes: Sequence[Episode], *, min_return: float) -> Fairness:
    """Jain's index and min/max ratio of the seats' mean returns minus the floor.

    ``min_return`` is the game's lowest return (``GameSpec.min_return``); the floor is
    it or any lower seat mean, so shifted amounts are never negative.
    """
    means = return_matrix(episodes).mean(axis=0)  # (n,)
    shifted = means - min(float(min_return), float(means.min()))
    return Fairness(jain=jain_index(shifted), min_max_ratio=min_max_ratio(shifted))


def cooperation_rate(
    episodes: Sequence[Episode], *, cooperate: str = "Cooperate", defect: str = "Defect"
) -> float | None:
    """Share of cooperate among decisions that offered both ``cooperate`` and ``defect``.

    Action names match case-insensitively, brackets optional (``[COOPERATE]`` counts as
    ``Cooperate``); other actions (messages, say) are ignored. None when no decision
    offered the choice.
    """
    coop, defe = (bracket(name.strip("[] ")).casefold() for name in (cooperate, defect))
    plays = [
        (t.played_action or "").casefold() == coop
        for e in episodes
        for t in e.turns
        if {coop, defe} <= {a.casefold() for a in t.observation.legal_actions or ()}
    ]
    return float(np.mean(plays)) if plays else None


def welfare_report(
    episodes: Sequence[Episode], *, min_return: float, max_return: float | None = None
) -> WelfareResult:
    """Per-seat returns, welfare, fairness and (where it applies) cooperation rate; with
    ``max_return`` the intervals know the game's bounds (``mean_interval``)."""
    bounds = None if max_return is None else (min_return, max_return)
    return WelfareResult(
        episodes=len(episodes),
        returns_by_seat=returns_by_seat(episodes, bounds=bounds),
        welfare=social_welfare(episodes, bounds=bounds),
        fairness=fairness(episodes, min_return=min_return),
        cooperation_rate=cooperation_rate(episodes),
    )
