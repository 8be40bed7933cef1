"""Cross-play: every policy of a population against every other, with 95% intervals.

Two-player games: each unordered pair (and each policy against itself) plays
``episodes`` games with the seats alternating, and both sides are read from the same
games, so ``results[i][j]`` and ``results[j][i]`` are the two sides of one match.
A policy against itself sits in every seat, so ``results[i][i]`` reads every seat
(its win and loss rates are equal and, in a zero-sum game, its mean return is 0).

n-player games (n > 2): each ordered pair plays "focal against the field": policy i
in one seat, rotating through every seat, and copies of policy j in all the others.
The full n-player meta-game (every assignment of policies to seats) is not played;
its cost grows as K**n.

Either way the meta-game is a two-population game in OpenSpiel's layout:
``meta_game[0][i, j]`` is the focal policy i's mean return against j,
``meta_game[1][i, j]`` the field's (for two players, j's return, so
``meta_game[1] == meta_game[0].T``), ready for ``coplay.eval.metasolvers`` and α-rank.
Every match uses the same chance seeds (common random numbers), which makes
differences between rows less noisy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from coplay.envs.probe import resolve_factory
from coplay.eval.matches import MatchResult, outcome, summarize
from coplay.eval.ratings import Ratings, rate
from coplay.rollout.engine import play_episodes
from coplay.rollout.invalid import InvalidActionConfig
from coplay.types import Episode, Policy

MAX_GAMES_PER_CALL = 4096
"""Games played at once; bounds memory when many matches meet a language model."""


@dataclass(frozen=True)
class CrossPlayResult:
    """All matches of a population; index i is ``names[i]``."""

    game: str
    names: tuple[str, ...]
    num_players: int
    episodes: int
    """Games per match."""
    results: tuple[tuple[MatchResult, ...], ...]
    """``results[i][j]``: policy i's side of its match against j (intervals included)."""
    wins: np.ndarray
    """``wins[i, j]``: games i won against j (diagonal: zero), shape (K, K)."""
    draws: np.ndarray
    """``draws[i, j] == draws[j, i]``: drawn games between i and j, shape (K, K)."""
    meta_game: tuple[np.ndarray, np.ndarray]
    """Focal and field mean returns, each (K, K): OpenSpiel's meta-game layout."""

    @property
    def payoff(self) -> np.ndarray:
        """Mean return of row i against column j, shape (K, K)."""
        return self.meta_game[0]


def cross_play(
    game: str,
    policies: Mapping[str, Policy],
    *,
    episodes: int,
    seed: int = 0,
    params: Mapping[str, object] | None = None,
    invalid: InvalidActionConfig | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> CrossPlayResult:
    """Play every pairing of ``policies`` in ``game`` (see the module docstring).

    ``game`` is anything ``coplay.envs.probe.resolve_factory`` builds (a registered name,
    ``openspiel:<name>``, ``package.module:factory``); ``on_progress(done, total)`` is
    told the number of finished games as play goes on.
    """
    names = tuple(policies)
    if len(names) < 2:
        raise ValueError(f"cross-play needs at least 2 policies, got {len(names)}")
    if episodes < 1:
        raise ValueError(f"episodes must be positive, got {episodes}")
    make = resolve_factory(game, dict(params or {}))
    n = make().spec.num_players
    pool = [policies[name] for name in names]
    pairs = _pairings(len(names), n)
    seats = [e % n for e in range(episodes)]
    seeds = [seed * 1_000_003 + e for e in range(episodes)]
    matches: list[list[Episode]] = []
    total = len(pairs) * episodes
    for i, j in pairs:
        told = None
        if on_progress is not None:
            base = len(matches) * episodes
            told = lambda done, _m, base=base: on_progress(base + done, total)  # noqa: E731
        try:
            seatings = [_seating(pool[i], pool[j], s, n) for s in seats]
            matches.append(_play(make, seatings, seeds, invalid, told))
        except Exception as err:
            unplayed = [[] for _ in pairs[len(matches) :]]
            partial = _collect(game, names, n, episodes, pairs, matches + unplayed, seats)
            raise CrossPlayInterrupted(partial, (names[i], names[j]), len(matches)) from err
    return _collect(game, names, n, episodes, pairs, matches, seats)


class CrossPlayInterrupted(RuntimeError):
    """A policy failed during ``match`` (a remote endpoint went down, say).

    ``partial`` holds the ``played`` matches finished before it; the others have no
    games (NaN means, zero wins). The error that stopped it is ``__cause__``.
    """

    def __init__(self, partial: CrossPlayResult, match: tuple[str, str], played: int) -> None:
        super().__init__(f"cross-play stopped in {match[0]} vs {match[1]} after {played} matches")
        self.partial, self.match, self.played = partial, match, played


def _pairings(k: int, num_players: int) -> list[tuple[int, int]]:
    """Unordered pairs with self-play for 2 players (both sides read from one match);
    ordered pairs for more, where focal-vs-field differs from field-vs-focal."""
    if num_players == 2:
        return [(i, j) for i in range(k) for j in range(i, k)]
    return [(i, j) for i in range(k) for j in range(k)]


def _seating(focal: Policy, field: Policy, seat: int, num_players: int) -> list[Policy]:
    return [focal if s == seat else field for s in range(num_players)]


def _play(make, seatings, seeds, invalid, on_progress=None) -> list[Episode]:
    episodes: list[Episode] = []
    total = len(seatings)
    for start in range(0, total, MAX_GAMES_PER_CALL):
        stop = start + MAX_GAMES_PER_CALL
        told = None
        if on_progress is not None:
            told = lambda done, start=start: on_progress(start + done, total)  # noqa: E731
        episodes += play_episodes(
            make, seatings[start:stop], seeds[start:stop], invalid=invalid, on_progress=told
        )
    return episodes


def _collect(
    game: str,
    names: tuple[str, ...],
    n: int,
    episodes: int,
    pairs: Sequence[tuple[int, int]],
    matches: Sequence[Sequence[Episode]],
    seats: Sequence[int],
) -> CrossPlayResult:
    k = len(names)
    results: list[list[MatchResult | None]] = [[None] * k for _ in range(k)]
    wins, draws = np.zeros((k, k), np.int64), np.zeros((k, k), np.int64)
    field = np.zeros((k, k))
    for (i, j), eps in zip(pairs, matches, strict=True):
        if not eps:  # unplayed (an interrupted cross-play)
            results[i][j] = summarize([], [], n)
            if n == 2:
                results[j][i] = results[i][j]
            field[i, j] = np.nan
            continue
        if i == j:
            results[i][i] = _self_play(eps, n)
            field[i, i] = results[i][i].mean_return.value
            continue
        results[i][j] = summarize(eps, seats, n)
        field[i, j] = _field_return(eps, seats)
        if n == 2:
            results[j][i] = summarize(eps, [1 - s for s in seats], n)
        _tally(wins, draws, i, j, [outcome(e.returns, s) for e, s in zip(eps, seats, strict=True)])
    focal = np.array([[r.mean_return.value for r in row] for row in results])
    return CrossPlayResult(
        game=game,
        names=names,
        num_players=n,
        episodes=episodes,
        results=tuple(tuple(row) for row in results),
        wins=wins,
        draws=draws,
        meta_game=(focal, focal.T.copy() if n == 2 else field),
    )


def _self_play(episodes: Sequence[Episode], n: int) -> MatchResult:
    """A policy against copies of itself is in every seat: read every seat of every game,
    so that in a zero-sum game its mean return is exactly 0, as the symmetry demands."""
    every_seat = [s for s in range(n) for _ in episodes]
    return summarize(list(episodes) * n, every_seat, n)


def _field_return(episodes: Sequence[Episode], seats: Sequence[int]) -> float:
    """Mean return of the seats around the focal policy, per game, then over games."""
    per_game = [
        np.mean([r for s, r in enumerate(e.returns) if s != focal])
        for e, focal in zip(episodes, seats, strict=True)
    ]
    return float(np.mean(per_game))


def _tally(wins: np.ndarray, draws: np.ndarray, i: int, j: int, outcomes: Sequence[int]) -> None:
    """Count focal i's wins, losses (a win of j) and draws against j."""
    wins[i, j] += outcomes.count(1)
    wins[j, i] += outcomes.count(-1)
    draws[i, j] += outcomes.count(0)
    draws[j, i] += outcomes.count(0)


def games_total(players: int, num_players: int, episodes: int) -> int:
    """Games ``cross_play`` plays for ``players`` policies in a ``num_players`` game."""
    return len(_pairings(players, num_players)) * episodes


def rate_cross_play(result: CrossPlayResult) -> Ratings:
    """Elo and OpenSkill from the games' wins and draws; α-rank from the mean returns."""
    return rate(result.names, result.wins, result.draws, result.payoff)


def to_json(result: CrossPlayResult, ratings: Ratings | None = None) -> dict:
    """A JSON-ready record of the cross-play matrix (value, low, high) and the ratings."""

    def num(x: float) -> float | None:
        return x if np.isfinite(x) else None  # JSON has no NaN or infinity

    def iv(x) -> dict[str, float | None]:
        return {"value": num(x.value), "low": num(x.low), "high": num(x.high)}

    data = {
        "game": result.game,
        "players": list(result.names),
        "num_players": result.num_players,
        "episodes_per_match": result.episodes,
        "mean_return": [[iv(r.mean_return) for r in row] for row in result.results],
        "win_rate": [[iv(r.win) for r in row] for row in result.results],
        "draw_rate": [[iv(r.draw) for r in row] for row in result.results],
        "invalid_rate": [[r.invalid_rate for r in row] for row in result.results],
        "wins": result.wins.tolist(),
        "draws": result.draws.tolist(),
        "meta_game": [[[num(x) for x in row] for row in m.tolist()] for m in result.meta_game],
    }
    if ratings is not None:
        data["ratings"] = {
            "elo": [num(x) for x in ratings.elo],
            "openskill": [
                {"mu": s.mu, "sigma": s.sigma, "ordinal": s.ordinal} for s in ratings.openskill
            ],
            "alpharank": list(ratings.alpharank),
        }
    return data
