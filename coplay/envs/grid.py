"""What the single-player grid games (FrozenLake, Sokoban) share: moves and input checks."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping

from coplay.envs.actions import parse_action
from coplay.types import Observation

Cell = tuple[int, int]
"""(row, column), row 0 at the top."""

MOVES: dict[str, Cell] = {
    "[Up]": (-1, 0),
    "[Down]": (1, 0),
    "[Left]": (0, -1),
    "[Right]": (0, 1),
}
ACTIONS = tuple(MOVES)
"""Every move is always legal: the action list never changes, only what a move does."""


def shift(cell: Cell, direction: Cell) -> Cell:
    """The neighbour of ``cell`` in ``direction``."""
    return (cell[0] + direction[0], cell[1] + direction[1])


def check_known_params(game: str, params: Mapping[str, object], cls: Callable) -> None:
    """One-line error for a parameter the game does not take, listing those it does."""
    allowed = [p for p in inspect.signature(cls).parameters if p != "self"]
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(
            f"unknown parameter(s) {', '.join(unknown)} for game {game!r}; "
            f"available: {', '.join(allowed)}"
        )


def check_int(game: str, name: str, value: object, allowed: range) -> int:
    """``value`` if it is an integer in ``allowed``, else a one-line error."""
    if not isinstance(value, int) or isinstance(value, bool) or value not in allowed:
        raise ValueError(
            f"{game}: {name} must be an integer in {allowed.start}..{allowed.stop - 1}, "
            f"got {value!r}"
        )
    return value


def check_choice(game: str, name: str, value: object, allowed: Mapping[str, object]) -> str:
    """``value`` if it names one of ``allowed``, else a one-line error."""
    # Only a string can name one, and a list or dict from a config would not even hash.
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{game}: {name} must be one of {', '.join(allowed)}, got {value!r}")
    return str(value)


def check_max_steps(game: str, max_steps: object, default: int) -> int:
    """The episode length limit: ``default`` when None, else a positive integer."""
    if max_steps is None:
        return default
    if not isinstance(max_steps, int) or isinstance(max_steps, bool) or max_steps < 1:
        raise ValueError(f"{game}: max_steps must be a positive integer, got {max_steps!r}")
    return max_steps


def check_player(game: str, player: int) -> None:
    """Single-player games only know player 0."""
    if player != 0:
        raise ValueError(f"{game} is a single-player game: player must be 0, got {player!r}")


def single_move(game: str, actions: Mapping[int, str], done: bool) -> str:
    """The canonical move of player 0 in ``actions``, or a one-line error naming the problem."""
    if done:
        raise ValueError(f"{game}: the episode is over; call reset(seed) first")
    if sorted(actions) != [0]:
        raise ValueError(
            f"{game}: expected an action for player 0 only, got players {sorted(actions)}"
        )
    action = parse_action(actions[0], ACTIONS)
    if action is None:
        raise ValueError(f"{game}: {actions[0]!r} names no move; legal: {' '.join(ACTIONS)}")
    return action


class SinglePlayer:
    """What the single-player grid games share: whose turn it is, the move parser, the
    observation around a rendered map, a done flag and the rewards paid so far (the
    return once the episode ends or is truncated). ``game_name`` is the registered name."""

    game_name: str
    _done: bool = False
    _total: float = 0.0

    def players_to_act(self) -> list[int]:
        return [] if self._done else [0]

    def parse_action(self, player: int, text: str) -> str | None:
        check_player(self.game_name, player)
        return None if self._done else parse_action(text, ACTIONS)

    def _observation(self, text: str, rows: list[str]) -> Observation:
        """``text`` plus the legal moves while the game runs; the map is the state key."""
        legal = () if self._done else ACTIONS
        if legal:
            text += f"Your legal actions: {' '.join(legal)}\n"
        return Observation(self.game_name, 0, text, legal, info_key="/".join(rows))

    def is_terminal(self) -> bool:
        return self._done

    def returns(self) -> list[float]:
        return [self._total]

    def _pay(self, reward: float) -> dict[int, float]:
        """Record ``reward`` for player 0 and return it as ``step``'s result."""
        self._total += reward
        return {0: reward}
