"""Ratings of a population from head-to-head results: Elo, OpenSkill and α-rank.

Results come as a win matrix (``wins[i, j]`` = games i won against j) with an
optional symmetric draw matrix, or as a list of ``PairOutcome`` records, which
``outcome_matrices`` turns into those matrices.

- Elo: OpenSpiel's maximum-likelihood Bradley–Terry fit (``pyspiel.elo``, the MM
  algorithm of Hunter 2004), a draw counting half a win for each side; ratings in
  Elo points (400 · log10 odds), the lowest rated player at 0. A player without a
  game against anyone else has no rating (NaN), not a made-up one.
- OpenSkill: the ``openskill`` Plackett–Luce model (Weng & Lin 2011), updated game by
  game; ``ordinal = mu - 3 sigma`` is a conservative skill estimate.
- α-rank: the stationary mass of each player under α-rank of the empirical payoff
  matrix of a two-player game (``coplay.eval.meta_openspiel.alpharank``). Without that
  matrix (``payoff`` None: cross-play of more players, which is not the whole
  meta-game) every player's α-rank is NaN, no rating rather than a wrong one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from open_spiel.python.algorithms import elo as os_elo
from openskill.models import PlackettLuce

from coplay.eval.meta_openspiel import alpharank


@dataclass(frozen=True)
class PairOutcome:
    """One game between two named players."""

    first: str
    second: str
    score: float
    """1.0 if ``first`` won, 0.5 for a draw, 0.0 if ``second`` won."""


@dataclass(frozen=True)
class SkillRating:
    """An OpenSkill rating: mean skill, its uncertainty and ``mu - 3 sigma``."""

    mu: float
    sigma: float
    ordinal: float


@dataclass(frozen=True)
class Ratings:
    """Every rating of a population, in the order of ``names``."""

    names: tuple[str, ...]
    elo: tuple[float, ...]
    openskill: tuple[SkillRating, ...]
    alpharank: tuple[float, ...]
    """α-rank stationary mass (sums to 1); NaN for every player when it was not
    computed (no two-player payoff matrix, see ``rate``)."""


# --- results -----------------------------------------------------------------------


def check_results(wins: object, draws: object | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Validate win and draw counts; return them as integer arrays (draws zero if None).

    Both must be square, of equal shape, non-negative whole numbers; draws symmetric.
    """
    w = _counts(wins, "wins")
    d = np.zeros_like(w) if draws is None else _counts(draws, "draws")
    if d.shape != w.shape:
        raise ValueError(f"draws has shape {d.shape}, wins {w.shape}")
    if not np.array_equal(d, d.T):
        raise ValueError("draws must be symmetric (draws[i, j] == draws[j, i])")
    return w, d


def _counts(matrix: object, name: str) -> np.ndarray:
    try:
        arr = np.asarray(matrix, dtype=float)
    except (ValueError, TypeError) as err:
        raise ValueError(
            f"{name} must be a square matrix of counts (ragged or not numeric)"
        ) from err
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1] or arr.shape[0] < 2:
        raise ValueError(f"{name} must be a square matrix of at least 2 players, got {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0) or np.any(arr != np.round(arr)):
        raise ValueError(f"{name} must hold non-negative whole game counts")
    return arr.astype(np.int64)


def outcome_matrices(
    outcomes: Sequence[PairOutcome], names: Sequence[str]
) -> tuple[np.ndarray, np.ndarray]:
    """Win and draw count matrices (rows and columns in ``names`` order) of ``outcomes``."""
    index = {name: i for i, name in enumerate(names)}
    if len(index) != len(names):
        raise ValueError(f"player names must be distinct, got {list(names)}")
    k = len(names)
    wins, draws = np.zeros((k, k), np.int64), np.zeros((k, k), np.int64)
    for o in outcomes:
        for name in (o.first, o.second):
            if name not in index:
                raise ValueError(f"outcome names unknown player {name!r}; known: {list(names)}")
        i, j = index[o.first], index[o.second]
        if o.score == 1.0:
            wins[i, j] += 1
        elif o.score == 0.0:
            wins[j, i] += 1
        elif o.score == 0.5:
            draws[i, j] += 1
            draws[j, i] += 1
        else:
            raise ValueError(f"outcome score must be 1.0, 0.5 or 0.0, got {o.score}")
    return wins, draws


# --- ratings -----------------------------------------------------------------------


def elo_ratings(wins: object, draws: object | None = None) -> np.ndarray:
    """Bradley–Terry maximum-likelihood Elo ratings (OpenSpiel), lowest at 0.

    Self-play counts on the diagonal say nothing about relative strength and are
    ignored. A 75% score against one opponent gives ``400 * log10(3) ≈ 191`` points;
    OpenSpiel's small default smoothing keeps unbeaten players finite. Players with
    no game against another get NaN: the fit would only give them its prior.

    All players with games are fitted in one fit, but ratings compare only within a
    group connected by games: for groups that never met (directly or through common
    opponents) the fit has nothing to place one against the other, so the offset
    between their ratings is arbitrary; only differences within a group mean anything.
    """
    w, d = check_results(wins, draws)
    np.fill_diagonal(w, 0)
    np.fill_diagonal(d, 0)
    played = (w + w.T + d).sum(axis=1) > 0
    out = np.full(len(w), np.nan)
    if played.sum() >= 2:
        sub = np.ix_(played, played)
        out[played] = os_elo.compute_ratings_from_matrices(w[sub], d[sub])
    return out


def openskill_ratings(wins: object, draws: object | None = None) -> tuple[SkillRating, ...]:
    """Plackett–Luce OpenSkill ratings after replaying every counted game.

    OpenSkill updates game by game, so order matters; games are replayed in an
    interleaved order (``replay_order``) that spreads each pair's wins, losses and
    draws evenly, which a matrix of counts is the fairest reading of. Games at one
    time still go in some order, which favoured the lower-numbered player: two players
    of 10 wins each were rated 25.70 and 24.30. So the replay is made twice, with the
    players numbered forwards and backwards, and mu and sigma are averaged: reversing
    the players reverses the ratings, two equal records get equal ratings, and three
    players of equal records lie within 0.001 of each other (1.9 apart before).
    """
    w, d = check_results(wins, draws)
    forward = _replayed(w, d)
    backward = _replayed(w[::-1, ::-1], d[::-1, ::-1])[::-1]
    out = []
    for (mu_f, sigma_f), (mu_b, sigma_b) in zip(forward, backward, strict=True):
        mu, sigma = (mu_f + mu_b) / 2, (sigma_f + sigma_b) / 2
        out.append(SkillRating(mu, sigma, mu - ORDINAL_Z * sigma))
    return tuple(out)


ORDINAL_Z = 3.0
"""OpenSkill's ordinal (its default): mu - 3 sigma, a conservative skill estimate."""


def _replayed(w: np.ndarray, d: np.ndarray) -> list[tuple[float, float]]:
    """(mu, sigma) of each player after replaying ``replay_order(w, d)`` once."""
    model = PlackettLuce()
    players = [model.rating() for _ in range(len(w))]
    for i, j, score in replay_order(w, d):
        ranks = {1.0: [0, 1], 0.5: [0, 0], 0.0: [1, 0]}[score]
        [[players[i]], [players[j]]] = model.rate([[players[i]], [players[j]]], ranks=ranks)
    return [(p.mu, p.sigma) for p in players]


def replay_order(wins: np.ndarray, draws: np.ndarray) -> list[tuple[int, int, float]]:
    """Every off-diagonal game as ``(i, j, score of i)``, each kind spread evenly in time.

    A pair's c games of one kind get times ``(k + 0.5) / c``; all games are sorted by
    time, so a 3:1 record replays as win, loss, win, win rather than three wins first.
    """
    games = []
    k = len(wins)
    for i in range(k):
        for j in range(i + 1, k):
            for count, score in ((wins[i, j], 1.0), (wins[j, i], 0.0), (draws[i, j], 0.5)):
                games.extend(((n + 0.5) / count, i, j, score) for n in range(count))
    return [(i, j, score) for _, i, j, score in sorted(games)]


def alpharank_ratings(payoff: object) -> np.ndarray:
    """α-rank mass of each player from ``payoff[i, j]``, i's mean return against j in a
    two-player game.

    The population is one (every player can take either seat), so the meta-game is
    the symmetric ``[payoff, payoff.T]``: ``payoff.T[i, j]`` is j's return in the same
    games. With more players that is no longer so (j's side is several copies of j),
    and α-rank needs every assignment of players to seats; see ``rate``.
    """
    m = np.asarray(payoff, dtype=float)
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        raise ValueError(f"payoff must be a square matrix, got shape {m.shape}")
    return alpharank([m, m.T]).marginals[0]


def rate(
    names: Sequence[str], wins: object, draws: object | None, payoff: object | None
) -> Ratings:
    """Elo, OpenSkill and α-rank of ``names`` from their results and payoff matrix.

    ``payoff`` is a two-player game's ``payoff[i, j]`` (``alpharank_ratings``); None
    leaves α-rank out (NaN for every player), as for a game of more players, whose
    matches of one policy against copies of another are not the meta-game α-rank ranks.
    """
    w, d = check_results(wins, draws)
    if len(names) != len(w) or (payoff is not None and np.shape(payoff) != w.shape):
        raise ValueError(
            f"got {len(names)} names, a {w.shape} result matrix and a {np.shape(payoff)} "
            "payoff matrix; all must cover the same players"
        )
    mass = np.full(len(w), np.nan) if payoff is None else alpharank_ratings(payoff)
    return Ratings(
        names=tuple(names),
        elo=tuple(float(r) for r in elo_ratings(w, d)),
        openskill=openskill_ratings(w, d),
        alpharank=tuple(float(p) for p in mass),
    )
