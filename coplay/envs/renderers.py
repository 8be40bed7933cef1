"""Text renderers: how an OpenSpiel state looks to one player.

A renderer is a pair of pure functions of a pyspiel state: ``describe(state, player)``
writes what that player may know, and ``action_name(state, player, action_id)`` names
an action. ``render`` composes them into the text and the bracketed legal actions
with their action ids. Because rendering depends only on ``(state, player)``, exact
evaluation can enumerate information states and see exactly what the env shows.

Hand-written renderers exist for Kuhn, Leduc and tic-tac-toe; every other game gets
the generic one (OpenSpiel's own observation string). Hand-written renderers read
only the player's own private card and public information (the action history), so
two states in the same information set render identically.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import pyspiel

from coplay.envs.actions import bracket

Describe = Callable[[pyspiel.State, int], str]
ActionName = Callable[[pyspiel.State, int, int], str]


def openspiel_action_name(state: pyspiel.State, player: int, action: int) -> str:
    """OpenSpiel's action string, made safe to put inside brackets.

    Some games tag actions with the player (goofspiel: ``"[P0]Bid: 1"``); the tag is
    dropped and stray brackets become parentheses so parsing stays unambiguous.
    """
    name = re.sub(r"^\[P\d+\]\s*", "", state.action_to_string(player, action))
    name = " ".join(name.replace("[", "(").replace("]", ")").split())
    return name or str(action)


@dataclass(frozen=True)
class Renderer:
    """How one game is written as text for a player."""

    describe: Describe
    action_name: ActionName = openspiel_action_name
    per_info_state: bool = False
    """Whether what it writes for a player is a function of that player's information
    state (OpenSpiel's string): then an env renders each information state once."""
    per_observation: bool = False
    """Whether it is even a function of the player's observation string: then an env
    renders each observation once, however many histories reach it (tic-tac-toe's
    boards are some 5k, its move histories some 550k)."""


@dataclass(frozen=True)
class Rendered:
    """One player's view of one state: text plus legal actions in OpenSpiel order."""

    text: str
    legal_actions: tuple[str, ...]
    """Bracketed action strings, unique ignoring case."""
    action_ids: tuple[int, ...]
    """OpenSpiel action id of each entry of ``legal_actions``."""

    def action_id(self, action: str) -> int:
        """OpenSpiel id of a canonical bracketed legal action."""
        return self.action_ids[self.legal_actions.index(action)]


def legal_action_ids(state: pyspiel.State, player: int) -> list[int]:
    """Actions ``player`` may take now; empty when it is not their turn."""
    if state.is_terminal() or state.is_chance_node():
        return []
    return list(state.legal_actions(player))


def _unique_names(names: list[str], ids: list[int]) -> list[str]:
    """Disambiguate names that would collide when matched case-insensitively."""
    seen: set[str] = set()
    unique = []
    for name, action in zip(names, ids, strict=True):
        if name.casefold() in seen:
            name = f"{name} #{action}"
        seen.add(name.casefold())
        unique.append(name)
    return unique


def legal_action_map(renderer: Renderer, state: pyspiel.State, player: int) -> dict[str, int]:
    """Bracketed legal action string -> OpenSpiel action id, in OpenSpiel order."""
    ids = legal_action_ids(state, player)
    names = _unique_names([renderer.action_name(state, player, a) for a in ids], ids)
    return {bracket(n): a for n, a in zip(names, ids, strict=True)}


def render(renderer: Renderer, state: pyspiel.State, player: int) -> Rendered:
    """Text and bracketed legal actions that ``player`` sees in ``state``."""
    actions = legal_action_map(renderer, state, player)
    text = renderer.describe(state, player)
    if actions:
        text += f"Your legal actions: {' '.join(actions)}\n"
    return Rendered(text=text, legal_actions=tuple(actions), action_ids=tuple(actions.values()))


# --- shared helpers ---------------------------------------------------------------


def _card_names(num_ranks: int) -> tuple[str, ...]:
    """Rank names from lowest to highest: J Q K A, or numbers for bigger decks."""
    if num_ranks <= 4:
        return tuple("JQKA"[:num_ranks])
    return tuple(str(r + 1) for r in range(num_ranks))


def _moves(state: pyspiel.State) -> list[tuple[int, int]]:
    """(player, action) of every non-chance move so far; public in the poker games."""
    return [(pa.player, pa.action) for pa in state.full_history() if pa.player >= 0]


def _chance_outcomes(state: pyspiel.State) -> list[int]:
    """Chance outcomes so far, in order (deals first)."""
    return [pa.action for pa in state.full_history() if pa.player < 0]


def _move_list(state: pyspiel.State, moves: list[tuple[int, int]]) -> str:
    """``"p0 Pass, p1 Bet"``, or ``"none"``."""
    if not moves:
        return "none"
    return ", ".join(f"p{p} {state.action_to_string(p, a)}" for p, a in moves)


# --- Kuhn poker -------------------------------------------------------------------


def _kuhn_describe(state: pyspiel.State, player: int) -> str:
    """Own card and the betting history; the other cards stay hidden."""
    n = state.get_game().num_players()
    cards = _card_names(n + 1)
    deals = _chance_outcomes(state)
    own = cards[deals[player]] if player < len(deals) else "not dealt yet"
    return (
        f"Kuhn poker, {n} players, cards {'<'.join(cards)}, ante 1.\n"
        f"You are player {player}. Your card: {own}.\n"
        f"History: {_move_list(state, _moves(state))}.\n"
    )


# --- Leduc poker ------------------------------------------------------------------


def _leduc_cards_per_rank(state: pyspiel.State) -> int:
    """What a dealt card id is divided by for its rank: OpenSpiel deals card ids, two
    suits a rank, or with ``suit_isomorphism`` the ranks themselves."""
    return 1 if state.get_game().get_parameters()["suit_isomorphism"] else 2


def _leduc_pot(state: pyspiel.State, player: int) -> str:
    """Pot size as OpenSpiel tracks it, read from the player's own information state."""
    found = re.search(r"\[Pot: (\d+)\]", state.information_state_string(player))
    return found.group(1) if found else "?"


def _leduc_describe(state: pyspiel.State, player: int) -> str:
    """Own card, the public card once revealed, pot and the bets of each round."""
    n = state.get_game().num_players()
    cards = _card_names(n + 1)
    outcomes, per_rank = _chance_outcomes(state), _leduc_cards_per_rank(state)
    own = cards[outcomes[player] // per_rank] if player < len(outcomes) else "not dealt yet"
    public = cards[outcomes[n] // per_rank] if len(outcomes) > n else "not revealed yet"
    # Moves made after the public card was dealt belong to round 2.
    chance_seen, rounds = 0, ([], [])
    for pa in state.full_history():
        chance_seen += pa.player < 0
        if pa.player >= 0:
            rounds[int(chance_seen > n)].append((pa.player, pa.action))
    deck = " ".join(c + c for c in cards)
    return (
        f"Leduc poker, {n} players, deck {deck}. Raise 2 in round 1, 4 in round 2. "
        "A pair with the public card wins, else the higher card.\n"
        f"You are player {player}. Your card: {own}. Public card: {public}.\n"
        f"Pot: {_leduc_pot(state, player)}. Round 1: {_move_list(state, rounds[0])}. "
        f"Round 2: {_move_list(state, rounds[1])}.\n"
    )


# --- tic-tac-toe ------------------------------------------------------------------

_TTT_MARKS = ("x", "o")


def _ttt_describe(state: pyspiel.State, player: int) -> str:
    """The board with empty cells numbered 0-8, and the mark this player plays."""
    cells = "".join(str(state).split())
    shown = [c if c in _TTT_MARKS else str(i) for i, c in enumerate(cells)]
    rows = "\n".join(" ".join(shown[r : r + 3]) for r in range(0, 9, 3))
    return (
        f"Tic-tac-toe. You play {_TTT_MARKS[player]}; x moves first. "
        "Three in a row wins.\n"
        f"Board (digits are empty cells):\n{rows}\n"
    )


def _ttt_action_name(state: pyspiel.State, player: int, action: int) -> str:
    """Cells are named by their number, 0-8 row by row."""
    return str(action)


# --- any other game ---------------------------------------------------------------


def visible_string(state: pyspiel.State, player: int) -> str:
    """OpenSpiel's text of what ``player`` may see, whichever string the game provides."""
    game_type = state.get_game().get_type()
    if game_type.provides_observation_string:
        return state.observation_string(player)
    if game_type.provides_information_state_string:
        return state.information_state_string(player)
    if game_type.information == pyspiel.GameType.Information.PERFECT_INFORMATION:
        return str(state)
    return ""


def _generic_describe(state: pyspiel.State, player: int) -> str:
    """Game name, seat, and OpenSpiel's observation string for the player."""
    game = state.get_game()
    seen = visible_string(state, player).rstrip()
    return (
        f"{game.get_type().long_name}, {game.num_players()} players. "
        f"You are player {player}.\n{seen}\n"
    )


GENERIC = Renderer(describe=_generic_describe)

RENDERERS: dict[str, Renderer] = {
    "kuhn_poker": Renderer(describe=_kuhn_describe, per_info_state=True),
    "leduc_poker": Renderer(describe=_leduc_describe, per_info_state=True),
    "tic_tac_toe": Renderer(
        describe=_ttt_describe,
        action_name=_ttt_action_name,
        per_info_state=True,
        per_observation=True,
    ),
}
"""Hand-written renderers by OpenSpiel short name."""


def renderer_for(openspiel_name: str) -> Renderer:
    """The hand-written renderer for a game, or the generic one."""
    return RENDERERS.get(openspiel_name, GENERIC)
