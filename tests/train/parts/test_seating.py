"""Seatings: the learner's seat per group, and who sits in the other seats."""

from collections.abc import Sequence

import numpy as np
import pytest

from coplay.policies.scripted import RandomPolicy
from coplay.population.opponents import OpponentPool
from coplay.train.parts.seating import (
    Against,
    Fixed,
    FromPool,
    SelfPlay,
    group_seats,
    tally_after,
)

RNG = np.random.default_rng(0)


def test_group_seats_interleave_in_proportion():
    assert group_seats(6, 2, None) == [0, 1, 0, 1, 0, 1]
    assert group_seats(6, 3, None) == [0, 1, 2, 0, 1, 2]
    assert group_seats(6, 2, [1.0, 1.0]) == [0, 1, 0, 1, 0, 1]
    assert group_seats(3, 3, [0.0, 0.0, 2.0]) == [2, 2, 2]
    assert group_seats(8, 2, [1.0, 3.0]) == [1, 0, 1, 1, 1, 0, 1, 1]
    seats = group_seats(100, 3, [1.0, 2.0, 7.0])
    assert [seats.count(s) for s in range(3)] == [10, 20, 70]
    # every prefix stays within one group of its share
    for k in range(1, 101):
        assert abs(seats[:k].count(2) - 0.7 * k) < 1


def test_group_seats_need_one_weight_per_seat():
    with pytest.raises(ValueError, match="seat_weights has 3 weights for 2 seats"):
        group_seats(4, 2, [1.0, 2.0, 3.0])


def test_self_play_fills_every_seat():
    assert SelfPlay("me", 3).rows(2, RNG) == [("me", "me", "me")] * 2


def test_a_fixed_opponent_fills_the_seats_the_learner_leaves():
    rows = Against("me", "bot", 2).rows(4, RNG)
    assert rows == [("me", "bot"), ("bot", "me"), ("me", "bot"), ("bot", "me")]
    rows = Against("me", "bot", 3).rows(3, RNG)
    assert rows == [("me", "bot", "bot"), ("bot", "me", "bot"), ("bot", "bot", "me")]


def test_seat_weights_split_the_groups_between_seats():
    rows = Against("me", "bot", 2, seat_weights=(1.0, 3.0)).rows(8, RNG)
    assert [row.index("me") for row in rows] == [1, 0, 1, 1, 1, 0, 1, 1]
    assert all(row.count("me") == 1 for row in rows)


def test_a_pool_seats_the_learner_against_drawn_members():
    bot = RandomPolicy(seed=0, policy_id="bot")
    rows = FromPool("me", OpponentPool([bot], self_play=0.0), 2).rows(4, RNG)
    assert rows == [("me", "bot"), ("bot", "me"), ("me", "bot"), ("bot", "me")]
    assert FromPool("me", OpponentPool([bot], self_play=1.0), 2).rows(2, RNG) == [("me", "me")] * 2


def test_a_pool_draws_one_opponent_per_group_from_its_distribution():
    bots = [RandomPolicy(seed=i, policy_id=f"bot{i}") for i in range(2)]
    pool = OpponentPool(bots, probs=[0.0, 1.0])
    rows = FromPool("me", pool, 2).rows(6, np.random.default_rng(1))
    assert [set(row) for row in rows] == [{"me", "bot1"}] * 6
    rows = FromPool("me", OpponentPool(bots), 2).rows(400, np.random.default_rng(1))
    share = sum("bot0" in row for row in rows) / len(rows)
    assert share == pytest.approx(0.5, abs=0.08)


class SeatedPool:
    """A pool whose opponent depends on the learner's seat (as a PSRO meta-strategy's
    does): ``by_seat[s]`` plays against a learner in seat ``s``. Records the seats."""

    def __init__(self, by_seat: Sequence[RandomPolicy]) -> None:
        self.by_seat = list(by_seat)
        self.seen: list[int] = []

    def sample(self, rng: np.random.Generator, seats: Sequence[int]) -> list[RandomPolicy]:
        self.seen.extend(seats)
        return [self.by_seat[s] for s in seats]


@pytest.mark.parametrize("weights", [None, (1.0, 3.0)])
def test_a_seat_dependent_pool_sees_the_seat_actually_used(weights):
    pool = SeatedPool([RandomPolicy(seed=0, policy_id="a"), RandomPolicy(seed=1, policy_id="b")])
    rows = FromPool("me", pool, 2, seat_weights=weights).rows(8, RNG)
    seats = [row.index("me") for row in rows]
    assert pool.seen == seats == group_seats(8, 2, weights)
    assert all(row[1 - s] == ("a", "b")[s] for row, s in zip(rows, seats, strict=True))


def test_a_roster_keeps_its_seats_or_rotates_them_by_one_per_group():
    assert Fixed(("x", "y", "z")).rows(2, RNG) == [("x", "y", "z")] * 2
    rows = Fixed(("x", "y", "z"), rotate=True).rows(4, RNG)
    assert rows == [("x", "y", "z"), ("z", "x", "y"), ("y", "z", "x"), ("x", "y", "z")]
    for g, row in enumerate(rows):  # each member moves one seat on per group
        assert row.index("x") == g % 3


@pytest.mark.parametrize(
    "weights", [None, (1.0, 3.0), (0.3, 0.7), (1.0, 2.0, 7.0), (0.0, 1.0, 1.0)]
)
def test_group_seats_go_on_from_a_tally_as_one_sequence(weights):
    n = len(weights) if weights else 3
    whole = group_seats(40, n, weights)
    tally, parts = (), []
    for size in (3, 1, 7, 0, 5, 24):
        seats = group_seats(size, n, weights, tally)
        parts += seats
        tally = tally_after(tally, seats, n)
    assert parts == whole
    assert tally == tuple(whole.count(s) for s in range(n))


def test_a_tally_must_count_every_seat():
    with pytest.raises(ValueError, match="a seat tally of 3 seats for 2 seats"):
        group_seats(4, 2, None, (1, 1, 1))


@pytest.mark.parametrize("weights", [None, (1.0, 3.0)])
def test_every_seating_goes_on_from_the_tally(weights):
    bot = RandomPolicy(seed=0, policy_id="bot")
    for seating in (
        Against("me", "bot", 2, seat_weights=weights),
        FromPool("me", OpponentPool([bot], self_play=0.0), 2, seat_weights=weights),
    ):
        first = seating.rows(3, RNG)
        later = seating.rows(5, RNG, tally_after((), seating.seats(3), 2))
        assert first + later == seating.rows(8, RNG)
    rotated = Fixed(("x", "y", "z"), rotate=True)
    assert rotated.rows(2, RNG, (1, 1, 0)) == rotated.rows(4, RNG)[2:]
    assert Fixed(("x", "y", "z")).rows(2, RNG, (1, 1, 0)) == [("x", "y", "z")] * 2
    assert SelfPlay("me", 2).rows(1, RNG, (1, 0)) == [("me", "me")]
