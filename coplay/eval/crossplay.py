"""Cross-play: every policy of a population against every other, with 95% intervals.

Two-player games: each unordered pair (and each policy against itself) plays
``episodes`` games with the seats alternating, and both sides are read from the same
games, so ``results[i][j]`` and ``results[j][i]`` are the two sides of one match.
A policy against itself sits in every seat, so ``results[i][i]`` reads every seat
(its win and loss rates are equal and, in a zero-sum game, its mean return is 0); its
intervals count the games, each game's seats averaged, since one game's seats are no
independent samples.

n-player games (n > 2): each ordered pair plays "focal against the field": policy i
in one seat, rotating through every seat, and copies of policy j in all the others.
The full n-player meta-game (every assignment of policies to seats) is not played;
its cost grows as K**n.

Either way the results come as two (K, K) matrices in OpenSpiel's layout:
``meta_game[0][i, j]`` is the focal policy i's mean return against j,
``meta_game[1][i, j]`` the field's. For two players that is j's return, so
``meta_game[1] == meta_game[0].T``: the symmetric meta-game, ready for
``coplay.eval.metasolvers`` and α-rank. For more players it is the mean return of
the copies of j around i, a summary of the focal-against-field matches and not the
n-player meta-game, which has K**n profiles (i alone among copies of j is one; two
of i and two of j, or three different policies, are others): a meta-solver or α-rank
given it would rank another game, so ``rate_cross_play`` leaves α-rank out for them.
Every match uses the same chance seeds (common random numbers), which makes
differences between rows less noisy.

Given an ``EpisodeSource`` (``LocalSource``, or ``coplay.distributed``'s ``RaySource``
whose Ray workers share the games out), each match is played as a ``Plan`` by policy
id, every game drawing from its own random streams (``Plan.streams``, the same in
every match), so every source, with any number of workers, plays the same games.
These are other draws than those of the in-process default (each policy's own
generator), so the numbers agree with it only in distribution.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from coplay.envs.probe import resolve_factory
from coplay.eval.crossplay_play import by_plan, check_source, in_process
from coplay.eval.matches import (
    Interval,
    MatchResult,
    mean_interval,
    outcome,
    summarize,
    wilson,
)
from coplay.eval.ratings import Ratings, rate
from coplay.rollout.invalid import InvalidActionConfig
from coplay.rollout.source import EpisodeSource
from coplay.types import Episode, GameKind, GameSpec, Policy


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
    """Focal and field mean returns, each (K, K), in OpenSpiel's meta-game layout; the
    meta-game itself for two players only (see the module docstring)."""

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
    max_turns: int | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    source: EpisodeSource | None = None,
) -> CrossPlayResult:
    """Play every pairing of ``policies`` in ``game`` (see the module docstring).

    ``game`` is anything ``coplay.envs.probe.resolve_factory`` builds (a registered name,
    ``openspiel:<name>``, ``package.module:factory``); ``on_progress(done, total)`` is
    told the number of finished games as play goes on. ``max_turns`` truncates games as
    training does (``game.max_turns``; None: the game's own limit). ``source``: None
    plays in this process; else the source plays every match (it must play ``game``
    with ``invalid`` and ``max_turns``).
    """
    names = tuple(policies)
    if not names:  # one is its self-play alone: a population's first meta-game
        raise ValueError("cross-play needs at least one policy")
    if episodes < 1:
        raise ValueError(f"episodes must be positive, got {episodes}")
    make = resolve_factory(game, dict(params or {}))
    spec = make().spec
    n = spec.num_players
    if n < 2:  # a lone seat would "win" every game against nobody
        raise ValueError(f"cross-play needs a game of 2 or more players; {game!r} has {n}")
    pool = [policies[name] for name in names]
    pairs = _pairings(len(names), n)
    seats = [e % n for e in range(episodes)]
    seeds = [seed * 1_000_003 + e for e in range(episodes)]
    if source is None:
        play = in_process(make, pool, seeds, invalid, max_turns)
    else:
        check_source(source, game, params, invalid, max_turns)
        play = by_plan(source, names, pool, seeds)
    matches: list[list[Episode]] = []
    total = len(pairs) * episodes
    for i, j in pairs:
        told = None
        if on_progress is not None:
            base = len(matches) * episodes
            told = lambda done, _m, base=base: on_progress(base + done, total)  # noqa: E731
        try:
            matches.append(play([_seating(i, j, s, n) for s in seats], told))
        except Exception as err:
            unplayed = [[] for _ in pairs[len(matches) :]]
            partial = _collect(game, names, spec, episodes, pairs, matches + unplayed, seats)
            raise CrossPlayInterrupted(partial, (names[i], names[j]), len(matches)) from err
    return _collect(game, names, spec, episodes, pairs, matches, seats)


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


def _seating(focal: int, field: int, seat: int, num_players: int) -> list[int]:
    """Member indices per seat: ``focal`` in ``seat``, ``field`` in every other."""
    return [focal if s == seat else field for s in range(num_players)]


def _collect(
    game: str,
    names: tuple[str, ...],
    spec: GameSpec,
    episodes: int,
    pairs: Sequence[tuple[int, int]],
    matches: Sequence[Sequence[Episode]],
    seats: Sequence[int],
) -> CrossPlayResult:
    k, n, bounds = len(names), spec.num_players, (spec.min_return, spec.max_return)
    results: list[list[MatchResult | None]] = [[None] * k for _ in range(k)]
    wins, draws = np.zeros((k, k), np.int64), np.zeros((k, k), np.int64)
    field = np.zeros((k, k))
    for (i, j), eps in zip(pairs, matches, strict=True):
        if not eps:  # unplayed (an interrupted cross-play)
            results[i][j] = summarize([], [], n, bounds=bounds)
            if n == 2:
                results[j][i] = results[i][j]
            field[i, j] = np.nan
            continue
        if i == j:
            results[i][i] = _self_play(eps, spec)
            field[i, i] = results[i][i].mean_return.value
            continue
        results[i][j] = summarize(eps, seats, n, bounds=bounds)
        field[i, j] = _field_return(eps, seats)
        if n == 2:
            results[j][i] = summarize(eps, [1 - s for s in seats], n, bounds=bounds)
        _tally(
            wins, draws, i, j, [outcome(e.game_returns, s) for e, s in zip(eps, seats, strict=True)]
        )
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


def _self_play(episodes: Sequence[Episode], spec: GameSpec) -> MatchResult:
    """A policy against copies of itself is in every seat: read every seat of every game,
    so that in a zero-sum game its mean return is exactly 0, as the symmetry demands.

    The intervals count games, not seats: the seats of one game are no independent
    draws (a cooperative game pays them alike, a zero-sum one sums them to 0), so the
    sample is each game's seat-averaged return and win / draw / loss share."""
    n, bounds = spec.num_players, (spec.min_return, spec.max_return)
    every_seat = [s for s in range(n) for _ in episodes]
    seats = summarize(list(episodes) * n, every_seat, n, bounds=bounds)  # the point values
    games = len(episodes)

    def per_game(share: float) -> Interval:
        # Wilson's interval of ``games`` games at this rate (a game may count in part)
        iv = wilson(share * games, games)
        return Interval(share, iv.low, iv.high)

    return replace(
        seats,
        episodes=games,
        win=per_game(seats.win.value),
        draw=per_game(seats.draw.value),
        loss=per_game(seats.loss.value),
        # A zero-sum game's seat average is 0 game by game: the games show all its spread.
        mean_return=mean_interval(
            [float(np.mean(e.game_returns)) for e in episodes],
            bounds=None if spec.kind is GameKind.ZERO_SUM else bounds,
        ),
    )


def _field_return(episodes: Sequence[Episode], seats: Sequence[int]) -> float:
    """Mean return of the seats around the focal policy, per game, then over games."""
    per_game = [
        np.mean([r for s, r in enumerate(e.game_returns) if s != focal])
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
    """Elo and OpenSkill from the games' wins and draws; α-rank from the mean returns of
    a two-player game, NaN for more players.

    α-rank needs the whole meta-game; cross-play of n > 2 players plays one policy
    against copies of another. OpenSpiel's single-population α-rank compares two-player
    profiles only, and its multi-population chain visits every one of the K**n
    profiles, most of which these matches never play.
    """
    payoff = result.payoff if result.num_players == 2 else None
    return rate(result.names, result.wins, result.draws, payoff)


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
            "alpharank": [num(x) for x in ratings.alpharank],  # null: not computed
        }
    return data
