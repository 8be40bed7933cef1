"""Shared record builders for the advantage-estimator tests.

Each test file keeps its own plain-loop reference implementation; only the
episode/turn construction and comparison helpers live here.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Sequence

import pytest

from coplay.algos.advantages import EmptyState
from coplay.types import Decision, Episode, Observation, Trajectory, Turn


def make_turn(
    player: int,
    step: int,
    game: str = "g",
    *,
    reward: float = 0.0,
    text: str = "",
    info_key: str | None = None,
) -> Turn:
    obs = Observation(game=game, player=player, text=text, info_key=info_key)
    return Turn(
        player=player, observation=obs, decision=Decision("", "a", "p"), step=step, reward=reward
    )


def make_episode(returns, turns=None, *, game="g", group_id=0, seed=0) -> Episode:
    """One episode with terminal ``returns`` per seat; ``turns[s]`` turns for seat s (default 1)."""
    turns = turns or [1] * len(returns)
    trajs = tuple(
        Trajectory(p, f"pol{p}", [make_turn(p, 2 * k + p, game) for k in range(n)], ret=r)
        for p, (r, n) in enumerate(zip(returns, turns, strict=True))
    )
    seats = tuple(t.policy_id for t in trajs)
    return Episode(game, seed, group_id, seats, trajs, tuple(returns))


def make_reward_episode(seats, *, game="g", group_id=0, info=False) -> Episode:
    """``seats[s]`` lists that seat's per-turn rewards; returns are their sums.

    A turn entry may also be an ``(observation text, reward)`` pair; ``info`` copies the
    text to ``info_key``.
    """

    def split(entry):
        return entry if isinstance(entry, tuple) else ("", entry)

    trajs = []
    for p, entries in enumerate(seats):
        pairs = [split(e) for e in entries]
        turns = [
            make_turn(p, 2 * k + p, game, reward=r, text=text, info_key=text if info else None)
            for k, (text, r) in enumerate(pairs)
        ]
        trajs.append(Trajectory(p, f"pol{p}", turns, ret=sum(r for _, r in pairs)))
    trajs = tuple(trajs)
    return Episode(game, 0, group_id, tuple(t.policy_id for t in trajs), trajs,
                   tuple(t.ret for t in trajs))  # fmt: skip


def random_episodes(
    rng: random.Random,
    n: int,
    num_seats: int = 2,
    *,
    draw: Callable[[random.Random, int], float] | None = None,
    groups: int | None = None,
    games: Sequence[str] = ("g", "h"),
) -> list[Episode]:
    """Random terminal-return episodes.

    ``draw(rng, seat)`` gives a seat's return (default: one of -1, 0, 1); ``groups``
    draws a group id below it (else every episode is in group 0).
    """
    draw = draw or (lambda r, _seat: r.choice([-1.0, 0.0, 1.0]))
    out = []
    for _ in range(n):
        returns = [draw(rng, seat) for seat in range(num_seats)]
        turns = [rng.randint(0, 3) for _ in range(num_seats)]
        group_id = rng.randrange(groups) if groups is not None else 0
        out.append(make_episode(returns, turns=turns, group_id=group_id, game=rng.choice(games)))
    return out


def random_reward_episodes(
    rng: random.Random, n: int, num_seats: int = 2, *, values: Sequence[float]
) -> list[Episode]:
    """Random dense-reward episodes: 0 to 4 turns per seat, rewards drawn from ``values``."""
    return [
        make_reward_episode(
            [[rng.choice(values) for _ in range(rng.randint(0, 4))] for _ in range(num_seats)],
            game=rng.choice(["g", "h"]),
        )
        for _ in range(n)
    ]


def as_lists(adv):
    return [[list(seat) for seat in ep] for ep in adv]


def assert_close(got, want):
    """Nested [seat][turn] sequences equal within float tolerance."""
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert list(g) == pytest.approx(list(w))


def permute_seats(ep: Episode, order: list[int]) -> Episode:
    """The same games with the policies seated in ``order`` (new seat k = old order[k])."""
    trajs = tuple(ep.trajectories[i] for i in order)
    return Episode(
        ep.game,
        ep.seed,
        ep.group_id,
        tuple(ep.seats[i] for i in order),
        trajs,
        tuple(ep.returns[i] for i in order),
    )


def assert_permutation_equivariant(estimate, episodes, rng, *, metrics: bool = True) -> None:
    """Permuting episodes permutes advantages (and keeps metrics); inputs stay untouched.

    ``estimate`` maps a list of episodes to an ``Estimate`` of a stateless estimator.
    """
    snapshot = copy.deepcopy(episodes)
    perm = list(range(len(episodes)))
    rng.shuffle(perm)
    base = estimate(episodes)
    permuted = estimate([episodes[i] for i in perm])
    for j, i in enumerate(perm):
        assert_close(permuted.advantages[j], base.advantages[i])
    if metrics:
        assert permuted.metrics == pytest.approx(base.metrics)
    assert base.state == EmptyState()
    assert episodes == snapshot
