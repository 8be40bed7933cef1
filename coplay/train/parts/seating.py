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

The seats follow one sequence over the whole run, not one per iteration: each
iteration's groups go on from a ``Tally`` of the groups played so far, which the loop
advances by the groups the planning parts leave as seated (restarts replace the last
ones). Begun afresh every iteration, the same positions would give the same seats each
time: with an odd number of groups seat 0 had one group more in every iteration, and
with restarts taking the last half of two groups the learner never trained in seat 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from coplay.population.opponents import OpponentPool

Row = tuple[str, ...]
"""The policy id of every seat of one game."""

Tally = tuple[int, ...]
"""Per seat, how many of the run's groups so far had the learner in that seat (a
rotating roster: were shifted by that many seats); ``()`` before the first."""


class Seating(Protocol):
    """Who plays in each of ``groups`` groups, going on from ``tally``; may draw from
    ``rng``. ``seats`` is the learner's seat (a roster's shift) of each of those groups,
    which ``rows`` seats, so the loop can advance the tally by the groups it keeps."""

    def seats(self, groups: int, tally: Tally = ()) -> list[int]: ...

    def rows(self, groups: int, rng: np.random.Generator, tally: Tally = ()) -> list[Row]: ...


def group_seats(
    groups: int, n: int, weights: Sequence[float] | None, tally: Tally = ()
) -> list[int]:
    """The learner's seat in each of the next ``groups`` groups of a run whose earlier
    groups gave ``tally``: round-robin without weights, else a smooth weighted
    round-robin, so every prefix of the run's groups is split between the seats as
    close to ``weights`` as whole groups allow (equal weights give the round-robin)."""
    counts = list(tally or (0,) * n)
    if len(counts) != n:
        raise ValueError(f"a seat tally of {len(counts)} seats for {n} seats")
    done = sum(counts)
    if weights is None:
        return [(done + g) % n for g in range(groups)]
    if len(weights) != n:
        raise ValueError(f"seat_weights has {len(weights)} weights for {n} seats")
    total = float(sum(weights))
    seats = []
    for k in range(done + 1, done + groups + 1):
        # Seat s's credit before the k-th pick: k weights earned, ``total`` per pick
        # spent. Computed afresh rather than summed up, so a run's sequence is the
        # same however its iterations split it.
        pick = max(range(n), key=lambda s: k * weights[s] - total * counts[s])
        counts[pick] += 1
        seats.append(pick)
    return seats


def tally_after(tally: Tally, seats: Sequence[int], n: int) -> Tally:
    """``tally`` with the groups of ``seats`` (a seat each) added."""
    counts = list(tally or (0,) * n)
    for s in seats:
        counts[s] += 1
    return tuple(counts)


def _seat(me: str, other: str | None, seat: int, n: int) -> Row:
    """``me`` in ``seat`` and ``other`` elsewhere; self-play when ``other`` is None."""
    return tuple(me if other is None or s == seat else other for s in range(n))


@dataclass(frozen=True)
class SelfPlay:
    """Shared-weight self-play: the learner in every seat."""

    learner: str
    players: int

    def seats(self, groups: int, tally: Tally = ()) -> list[int]:
        return group_seats(groups, self.players, None, tally)

    def rows(self, groups: int, rng: np.random.Generator, tally: Tally = ()) -> list[Row]:
        return [(self.learner,) * self.players] * groups


@dataclass(frozen=True)
class Against:
    """The learner against one fixed opponent, its seat rotating or weighted."""

    learner: str
    opponent: str
    players: int
    seat_weights: tuple[float, ...] | None = None

    def seats(self, groups: int, tally: Tally = ()) -> list[int]:
        return group_seats(groups, self.players, self.seat_weights, tally)

    def rows(self, groups: int, rng: np.random.Generator, tally: Tally = ()) -> list[Row]:
        return [
            _seat(self.learner, self.opponent, s, self.players) for s in self.seats(groups, tally)
        ]


@dataclass
class FromPool:
    """The learner against an opponent drawn per group from ``pool`` (or self-play).

    The learner's seat is decided first, then the opponent is drawn for that seat, so
    a pool whose distribution depends on the seat (PSRO) sees the seat actually used."""

    learner: str
    pool: OpponentPool
    players: int
    seat_weights: tuple[float, ...] | None = None

    def seats(self, groups: int, tally: Tally = ()) -> list[int]:
        return group_seats(groups, self.players, self.seat_weights, tally)

    def rows(self, groups: int, rng: np.random.Generator, tally: Tally = ()) -> list[Row]:
        seats = self.seats(groups, tally)
        drawn = self.pool.sample(rng, seats)
        return [
            _seat(self.learner, None if opp is None else opp.policy_id, s, self.players)
            for opp, s in zip(drawn, seats, strict=True)
        ]


@dataclass(frozen=True)
class Fixed:
    """A roster's seats (``order``); with ``rotate`` each group shifts the assignment by
    one seat more than the group before, over the whole run."""

    order: Row
    rotate: bool = False

    def seats(self, groups: int, tally: Tally = ()) -> list[int]:
        """The shift of each group: the round-robin with ``rotate``, else none."""
        n = len(self.order)
        return group_seats(groups, n, None, tally) if self.rotate else [0] * groups

    def rows(self, groups: int, rng: np.random.Generator, tally: Tally = ()) -> list[Row]:
        n = len(self.order)
        return [
            tuple(self.order[(s - shift) % n] for s in range(n))
            for shift in self.seats(groups, tally)
        ]
