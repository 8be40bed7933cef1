"""Seatings: which policy sits in which seat, per group of games, by policy id.

A seating is the one planning part every run has. It answers, for the iteration's
groups of ``rollout.group_size`` games (games that share a seed), the policy id of
every seat: ids, not objects, so a plan can cross a process boundary and the episode
source resolves them. The kinds:

* ``SelfPlay``: the learner in every seat (shared weights).
* ``Against``: the learner in one seat, one fixed opponent in the others; the learner's
  seat follows ``seat_weights`` (a smooth weighted round-robin) or rotates evenly.
* ``FromPool``: as ``Against``, with each group's opponent drawn from an opponent pool
  (a league, a PSRO meta-strategy) given the learner's seat, or plain self-play.
* ``Fixed``: a roster's seats, optionally rotated by one seat per group.

Seat and opponent change per group, never within one: a group baseline then compares
a learner's own returns from one seat against one opponent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from coplay.population.opponents import OpponentPool

Row = tuple[str, ...]
"""The policy id of every seat of one game."""


class Seating(Protocol):
    """Who plays in each of ``groups`` groups; may draw from ``rng``."""

    def rows(self, groups: int, rng: np.random.Generator) -> list[Row]: ...


def group_seats(groups: int, n: int, weights: Sequence[float] | None) -> list[int]:
    """The learner's seat in each of ``groups`` groups: ``g % n`` without weights, else
    a smooth weighted round-robin, so every prefix of the groups is split between the
    seats as close to ``weights`` as whole groups allow (equal weights give ``g % n``)."""
    if weights is None:
        return [g % n for g in range(groups)]
    if len(weights) != n:
        raise ValueError(f"seat_weights has {len(weights)} weights for {n} seats")
    total = float(sum(weights))
    credit = [0.0] * n
    seats = []
    for _ in range(groups):
        credit = [c + w for c, w in zip(credit, weights, strict=True)]
        pick = max(range(n), key=lambda s: credit[s])
        credit[pick] -= total
        seats.append(pick)
    return seats


def _seat(me: str, other: str | None, seat: int, n: int) -> Row:
    """``me`` in ``seat`` and ``other`` elsewhere; self-play when ``other`` is None."""
    return tuple(me if other is None or s == seat else other for s in range(n))


@dataclass(frozen=True)
class SelfPlay:
    """Shared-weight self-play: the learner in every seat."""

    learner: str
    players: int

    def rows(self, groups: int, rng: np.random.Generator) -> list[Row]:
        return [(self.learner,) * self.players] * groups


@dataclass(frozen=True)
class Against:
    """The learner against one fixed opponent, its seat rotating or weighted."""

    learner: str
    opponent: str
    players: int
    seat_weights: tuple[float, ...] | None = None

    def rows(self, groups: int, rng: np.random.Generator) -> list[Row]:
        seats = group_seats(groups, self.players, self.seat_weights)
        return [_seat(self.learner, self.opponent, s, self.players) for s in seats]


@dataclass
class FromPool:
    """The learner against an opponent drawn per group from ``pool`` (or self-play).

    The learner's seat is decided first, then the opponent is drawn for that seat, so
    a pool whose distribution depends on the seat (PSRO) sees the seat actually used."""

    learner: str
    pool: OpponentPool
    players: int
    seat_weights: tuple[float, ...] | None = None

    def rows(self, groups: int, rng: np.random.Generator) -> list[Row]:
        seats = group_seats(groups, self.players, self.seat_weights)
        drawn = self.pool.sample(rng, seats)
        return [
            _seat(self.learner, None if opp is None else opp.policy_id, s, self.players)
            for opp, s in zip(drawn, seats, strict=True)
        ]


@dataclass(frozen=True)
class Fixed:
    """A roster's seats; with ``rotate`` group g shifts the assignment by g seats."""

    seats: Row
    rotate: bool = False

    def rows(self, groups: int, rng: np.random.Generator) -> list[Row]:
        n = len(self.seats)
        out = []
        for g in range(groups):
            shift = g % n if self.rotate else 0
            out.append(tuple(self.seats[(s - shift) % n] for s in range(n)))
        return out
