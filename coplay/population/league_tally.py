"""The learner's results against the league's members, and the Elo ratings they give.

P[learner beats member] is estimated from the episodes the learner played against the
member (``Episode.seats`` names each seat's policy). Each game counts once per seat the
member holds (n - 1 head-to-head results in an n-player game, one in a two-player
game): won if the learner's return is higher than that seat's, drawn if equal. So
equal policies score 1/2 whatever n, where "the learner's return is the table's best"
would give 1/n. The estimate is (wins + draws / 2 + 1/2) / (results + 1), one half-won
pseudo-result, so an unplayed member starts at 1/2. Elo ratings of the learner and
every member come from the same results (the learner's rating pools its whole
history).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from coplay.eval.ratings import elo_ratings
from coplay.types import Episode


@dataclass(frozen=True)
class Tally:
    """The learner's results against each member, shape (K,) each.

    A game against a member counts once per seat the member holds: n - 1 head-to-head
    results in an n-player game with the learner in one seat, one (the game's own
    result) in a two-player game. ``wins``, ``draws`` and ``losses`` count those
    results; ``games`` counts games.
    """

    wins: np.ndarray
    draws: np.ndarray
    games: np.ndarray
    losses: np.ndarray

    @staticmethod
    def empty(k: int) -> Tally:
        return Tally(*(np.zeros(k, np.int64) for _ in range(4)))

    @staticmethod
    def restored(saved: Sequence[object]) -> Tally:
        """A tally from its saved ``[wins, draws, games, losses]``; a state saved before
        losses were kept holds ``[wins, draws, games]``, one result per game."""
        wins, draws, games, *rest = (np.asarray(x, np.int64) for x in saved)
        return Tally(wins, draws, games, rest[0] if rest else games - wins - draws)

    def saved(self) -> list[np.ndarray]:
        """``[wins, draws, games, losses]`` as the league's state holds them (the first
        three where states before losses were kept held them, so those still load)."""
        return [self.wins, self.draws, self.games, self.losses]

    def __add__(self, other: Tally) -> Tally:
        k = max(len(self.games), len(other.games))
        a, b = self.grown(k), other.grown(k)
        return Tally(*(x + y for x, y in zip(a.saved(), b.saved(), strict=True)))

    def grown(self, k: int) -> Tally:
        """The same tally for a league grown to ``k`` members (new ones unplayed)."""
        return Tally(*(np.pad(x, (0, k - len(x))) for x in self.saved()))

    @property
    def results(self) -> np.ndarray:
        """Head-to-head results against each member (wins, draws and losses)."""
        return self.wins + self.draws + self.losses

    def win_rates(self) -> np.ndarray:
        """Estimated P[learner beats member]: one half-won pseudo-result per member."""
        return (self.wins + 0.5 * self.draws + 0.5) / (self.results + 1.0)

    def score(self) -> float:
        """The learner's score (wins + draws / 2) per result over all members; NaN if none."""
        n = self.results.sum()
        return float((self.wins.sum() + 0.5 * self.draws.sum()) / n) if n else float("nan")


def tally_games(episodes: Sequence[Episode], learner_id: str, member_ids: Sequence[str]) -> Tally:
    """The learner's results in ``episodes`` against each of ``member_ids``: one per
    (learner seat, member seat) pair of a game, judged on the two seats' returns.

    Self-play episodes (only the learner seated) and games against anyone not in the
    league are skipped.
    """
    index = {m: i for i, m in enumerate(member_ids)}
    t = Tally.empty(len(member_ids))
    for e in episodes:
        others = {s for s in e.seats if s != learner_id}
        if learner_id not in e.seats or len(others) != 1 or next(iter(others)) not in index:
            continue
        i = index[next(iter(others))]
        returns = e.game_returns
        mine = [returns[s] for s, who in enumerate(e.seats) if who == learner_id]
        theirs = [returns[s] for s, who in enumerate(e.seats) if who != learner_id]
        t.games[i] += 1
        for a in mine:
            for b in theirs:
                t.wins[i] += a > b
                t.draws[i] += a == b
                t.losses[i] += a < b
    return t


def league_elo(t: Tally) -> np.ndarray:
    """Elo of the learner (index 0) and each member from the learner's league results;
    NaN for a member that has played none (a snapshot added at the end): no rating."""
    k = len(t.games) + 1
    wins, draws = np.zeros((k, k), np.int64), np.zeros((k, k), np.int64)
    wins[0, 1:] = t.wins
    wins[1:, 0] = t.losses
    draws[0, 1:] = draws[1:, 0] = t.draws
    return elo_ratings(wins, draws)
