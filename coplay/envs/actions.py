"""Bracketed action strings: how actions are written in observations and parsed from text.

Every legal action is shown to a player as a bracketed token such as ``[Bet]``; a
policy answers with free text, and the last bracketed token naming a legal action
is the action (models tend to reason first and answer last).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

_BRACKETED = re.compile(r"\[([^\[\]]*)\]")


def bracket(name: str) -> str:
    """Write an action name in the bracketed form shown to players.

    >>> bracket("Bet")
    '[Bet]'
    """
    return f"[{name}]"


def check_acting(game: str, actions: Mapping[int, str], acting: Sequence[int]) -> None:
    """Refuse a step whose actions are not one for each player ``acting`` (the game's
    ``players_to_act()``); with no one to act the game is over, where ``{}`` would pass
    the comparison and find no one to play."""
    if not acting:
        raise ValueError(f"{game}: the game is over; call reset(seed) first")
    if sorted(actions) != list(acting):
        raise ValueError(f"expected actions for players {list(acting)}, got {sorted(actions)}")


def _normalise(name: str) -> str:
    """Key for matching: case and surrounding whitespace do not matter."""
    return name.strip().casefold()


def parse_action(text: str, legal: Sequence[str]) -> str | None:
    """Canonical legal action named by the last matching bracketed token in ``text``.

    ``legal`` holds bracketed strings (``"[Pass]"``); returns one of them, or None.

    >>> parse_action("I hold K, so [ bet ]", ["[Pass]", "[Bet]"])
    '[Bet]'
    >>> parse_action("[Bet]? no: [Pass]. [Raise]", ["[Pass]", "[Bet]"])
    '[Pass]'
    >>> parse_action("Bet", ["[Pass]", "[Bet]"]) is None
    True
    """
    by_key = {_normalise(a.removeprefix("[").removesuffix("]")): a for a in legal}
    for inner in reversed(_BRACKETED.findall(text)):
        action = by_key.get(_normalise(inner))
        if action is not None:
            return action
    return None
