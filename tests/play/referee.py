"""The rules of the games the play tests use, written out independently of OpenSpiel,
so a result shown to a person is checked against the game's rules, not against itself."""

from __future__ import annotations

import re
from collections.abc import Sequence

KUHN_RANK = {"J": 0, "Q": 1, "K": 2}
LINES = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]


def kuhn_card(view: str) -> str:
    """The private card a Kuhn observation shows its seat."""
    return re.search(r"Your card: ([JQK])", view).group(1)


def kuhn_returns(cards: Sequence[str], moves: Sequence[str]) -> tuple[float, float]:
    """Two-player Kuhn poker: ante 1, one bet of 1; a fold loses the pot so far, a
    showdown goes to the higher card. ``moves`` are Pass/Bet in play order from seat 0."""
    moves = [m.strip("[]") for m in moves]
    high = 0 if KUHN_RANK[cards[0]] > KUHN_RANK[cards[1]] else 1
    showdown = {("Pass", "Pass"): 1, ("Bet", "Bet"): 2, ("Pass", "Bet", "Bet"): 2}
    folds = {("Bet", "Pass"): 0, ("Pass", "Bet", "Pass"): 1}  # who wins the ante
    if tuple(moves) in showdown:
        stake, winner = showdown[tuple(moves)], high
    else:
        stake, winner = 1, folds[tuple(moves)]
    return (float(stake), -float(stake)) if winner == 0 else (-float(stake), float(stake))


def tic_tac_toe_board(view: str) -> list[str]:
    """The nine cells of a tic-tac-toe observation's board: 'x', 'o' or a digit."""
    rows = [line.split() for line in view.splitlines() if re.fullmatch(r"[xo\d]( [xo\d]){2}", line)]
    return [cell for row in rows[-3:] for cell in row]


def tic_tac_toe_returns(board: Sequence[str]) -> tuple[float, float]:
    """x (seat 0) wins with three in a row, o (seat 1) likewise; else a draw."""
    for mark, ret in (("x", (1.0, -1.0)), ("o", (-1.0, 1.0))):
        if any(all(board[i] == mark for i in line) for line in LINES):
            return ret
    return (0.0, 0.0)
