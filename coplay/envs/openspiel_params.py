"""Game parameters that OpenSpiel loads but that break the game.

OpenSpiel checks few parameter values when it loads a game: goofspiel of -1 cards
loads, then fails at its first deal (``vector::reserve``), and a few values crash the
process outright, which no ``except`` can catch. A game loaded with parameters is
therefore checked twice, once per distinct game (loaded games are cached):

- ``crash_problem``, before OpenSpiel sees the values: those known to crash it
  (SIGSEGV, SIGABRT) or to hang it;
- ``play_problem``, after loading: the number of players, the length, and a play of
  ``PROBE_NODES`` nodes from the deal of ``reset(0)`` on, taking the first legal
  action and reading the strings a player's view is drawn from.

Both return what is wrong as a phrase, or None.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import pyspiel

from coplay.envs.chance import ChanceDraws, is_distribution

PROBE_NODES = 64
"""Nodes played by ``play_problem``: past the deal and the first moves of every seat,
in under a millisecond for most games (once per game; bridge's deal, which solves its
double-dummy table, takes half a second at every reset anyway)."""

_AT_LEAST: dict[str, dict[str, int]] = {
    "blotto": {"fields": 1},  # -1: SIGSEGV at load
    "connect_four": {"rows": 1, "columns": 1},  # rows=0: SIGSEGV at the first view
    "go_fish": {"initial_cards": 1},  # 0: SIGSEGV at the deal (-1, the default: the rules')
    "havannah": {"board_size": 1},  # -1: SIGSEGV at the first state
    "sheriff": {"max_bribe": 0, "max_items": 1},  # -1: takes memory until none is left
    "y": {"board_size": 1},  # -1: SIGSEGV at the first state
}
"""Smallest values of integer parameters, by game: smaller ones crash or hang OpenSpiel.
A value equal to the default (a sentinel such as go_fish's -1) is OpenSpiel's own."""


def crash_problem(game_type: pyspiel.GameType, params: Mapping[str, object]) -> str | None:
    """What is wrong with ``params`` that OpenSpiel would crash on rather than refuse."""
    spec = game_type.parameter_specification
    for key, least in _AT_LEAST.get(game_type.short_name, {}).items():
        value = params.get(key)
        if _is_int(value) and value != spec[key] and value < least:
            return f"{key} must be at least {least}, got {value}"
    rule = _RULES.get(game_type.short_name)
    return rule(params, spec) if rule else None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _out_of(settings: Mapping[str, object], bounds: Mapping[str, tuple[int, int]]) -> str | None:
    """The first integer setting outside its inclusive bounds."""
    for key, (low, high) in bounds.items():
        if not low <= settings[key] <= high:
            return f"{key} must be {low} to {high}, got {settings[key]}"
    return None


def _hanabi(params: Mapping[str, object], defaults: Mapping[str, object]) -> str | None:
    """The Hanabi Learning Environment's requirements (hanabi_game.cc), which abort the
    process. OpenSpiel hands it only the values given: its defaults, 0, stand for the
    rules' (2 players, 5 colours, 5 ranks, 5 cards a hand, 4 from 4 players on)."""
    given = {k: params[k] for k in ("players", "colors", "ranks", "hand_size") if k in params}
    if not all(_is_int(v) for v in given.values()):
        return None  # OpenSpiel refuses a value of the wrong type itself
    ruled = {"players": 2, "colors": 5, "ranks": 5, **given}
    hand = ruled.pop("hand_size", None)
    why = _out_of(ruled, {"players": (2, 5), "colors": (1, 5), "ranks": (1, 5)})
    if why:
        return why
    if hand is not None and hand < 1:  # 0: SIGSEGV at the deal
        return f"hand_size must be at least 1, got {hand}"
    players, colors, ranks = ruled.values()
    hand = hand or (5 if players < 4 else 4)
    # Three 1s, two of each middle rank and one of the top rank, per colour.
    deck = colors * (3 + (ranks > 1) + 2 * max(ranks - 2, 0))
    if hand * players > deck:
        return f"{players} hands of {hand} cards need {hand * players} cards; the deck has {deck}"
    return None


def _leading_ints(text: object) -> list[int]:
    """The integers a space-separated list starts with, as ACPC's reader takes them."""
    values = []
    for token in str(text).split():
        if not re.fullmatch(r"[+-]?\d+", token):
            break
        values.append(int(token))
    return values


def _universal_poker(params: Mapping[str, object], defaults: Mapping[str, object]) -> str | None:
    """The checks of ACPC's game reader (project_acpc_server/game.c): OpenSpiel goes on
    with the game the reader refuses, and crashes."""
    settings = {**defaults, **params}
    counts = {
        "numPlayers": (2, 10),
        "numRounds": (1, 4),
        "numSuits": (1, 4),
        "numRanks": (1, 13),
        "numHoleCards": (1, 3),
    }
    if not all(_is_int(settings[k]) for k in counts):
        return None
    why = _out_of(settings, counts)
    if why:
        return why
    players, rounds = settings["numPlayers"], settings["numRounds"]
    blind, board = _leading_ints(settings["blind"]), _leading_ints(settings["numBoardCards"])
    needs = [("blind", blind, players), ("numBoardCards", board, rounds)]
    stack: list[int] = []
    if settings["betting"] == "limit":
        # The reader counts 4 stacks, each unbounded, where none is given (limit games).
        if players > 4:
            return f"a limit game takes at most 4 players, got numPlayers {players}"
        needs.append(("raiseSize", _leading_ints(settings["raiseSize"]), rounds))
    else:
        stack = _leading_ints(settings["stack"])
        needs.append(("stack", stack, players if settings["stack"] else 0))
    for key, values, need in needs:
        if len(values) < need:
            return f"{key} lists {len(values)} numbers; {need} are needed"
    if any(b > s for b, s in zip(blind[:players], stack, strict=False)):
        return f"a blind is larger than its player's stack (blind {blind}, stack {stack})"
    if stack and all(b >= s for b, s in zip(blind[:players], stack, strict=False)):
        # Everyone is all-in before acting, and ACPC looks for a player to act forever.
        return f"some stack must be larger than its player's blind (blind {blind}, stack {stack})"
    first = _leading_ints(settings["firstPlayer"])[:rounds]
    if not all(1 <= p <= players for p in first):
        return f"firstPlayer must name players 1 to {players} per round, got {first}"
    if min(board[:rounds]) < 0:
        return f"numBoardCards must not be negative, got {board[:rounds]}"
    if sum(board[:rounds]) > 7:  # ACPC's MAX_BOARD_CARDS: a crash at load, or at a late deal
        return f"numBoardCards come to {sum(board[:rounds])}; a board holds at most 7"
    cards = settings["numHoleCards"] * players + sum(board[:rounds])
    deck = settings["numSuits"] * settings["numRanks"]
    if cards > deck:
        return f"hole and board cards come to {cards}; the deck has {deck}"
    return None


_RULES: dict[str, Callable[[Mapping[str, object], Mapping[str, object]], str | None]] = {
    "hanabi": _hanabi,
    "universal_poker": _universal_poker,
}
"""Games whose settings must agree with each other, or OpenSpiel crashes at load; a rule
sees the parameters given and OpenSpiel's defaults."""


class _Broken(Exception):
    """What ``_play_first_moves`` met."""


def play_problem(game: pyspiel.Game) -> str | None:
    """What breaks the loaded ``game`` at its start, or None. OpenSpiel prints its
    errors to the C++ stderr as well: call it where that is silenced. Mean-field games,
    whose distribution nodes no seat plays, are refused before it runs."""
    game_type = game.get_type()
    players, low, high = game.num_players(), game_type.min_num_players, game_type.max_num_players
    if not low <= players <= high:
        seats = f"{players} player{'s' * (players != 1)}"
        return f"the game would have {seats}; OpenSpiel plays it with {low} to {high}"
    if game.max_game_length() < 1:
        return f"the game would have no moves (its max_game_length is {game.max_game_length()})"
    try:
        _play_first_moves(game)
    except _Broken as broken:
        return str(broken)
    return None


def _play_first_moves(game: pyspiel.Game) -> None:
    """Play ``PROBE_NODES`` nodes: chance as ``reset(0)`` deals (the first outcomes may
    deal go_fish's books whole, and end it), then the first legal action."""
    players, game_type, moves = game.num_players(), game.get_type(), 0
    chance = ChanceDraws(0)
    try:
        state = game.new_initial_state()
        for _ in range(PROBE_NODES):
            if state.is_terminal():
                if not moves:
                    raise _Broken("the game ends before anyone moves")
                return
            if state.is_chance_node():
                outcomes = state.chance_outcomes()
                if not outcomes:
                    raise _Broken(f"a chance node has no outcomes {_when(moves)}")
                probs = [prob for _, prob in outcomes]
                if not is_distribution(probs):
                    raise _Broken(
                        f"a chance node's probabilities {probs} are no distribution {_when(moves)}"
                    )
                drawn = chance.choose(probs)
                state.apply_action(outcomes[drawn][0])
                continue
            if state.is_simultaneous_node():
                legal = [state.legal_actions(p) for p in range(players)]
                if not any(legal):
                    raise _Broken(f"no player has a legal move {_when(moves)}")
                for p, actions in enumerate(legal):
                    if actions:
                        _views(state, game_type, p, actions[0])
                state.apply_actions([a[0] if a else pyspiel.INVALID_ACTION for a in legal])
            else:
                p = state.current_player()
                legal = state.legal_actions(p)
                if not legal:
                    raise _Broken(f"player {p} has no legal move {_when(moves)}")
                _views(state, game_type, p, legal[0])
                state.apply_action(legal[0])
            moves += 1
    except _Broken:
        raise
    except Exception as err:  # noqa: BLE001 - any error of OpenSpiel's is the finding
        raise _Broken(f"OpenSpiel fails {_when(moves)}: {spiel_reason(err)}") from err


def _views(state: pyspiel.State, game_type: pyspiel.GameType, player: int, action: int) -> None:
    """The strings ``player``'s observation is drawn from (``renderers.visible_string``)."""
    if game_type.provides_observation_string:
        state.observation_string(player)
    if game_type.provides_information_state_string:
        state.information_state_string(player)
    state.action_to_string(player, action)


def _when(moves: int) -> str:
    return "before the first move" if not moves else f"after {moves} move{'s' * (moves > 1)}"


def spiel_reason(err: Exception) -> str:
    """An OpenSpiel error on one line, without the C++ source location it starts with:
    ``num_players_ <= kGameType.max_num_players (num_players_ = 99, ...)``; another
    error after its type (``ValueError: vector::reserve`` is a C++ exception,
    ``ZeroDivisionError: ...`` a Python game's)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    if not lines:
        return type(err).__name__
    head = re.sub(r"^\S+\.(cc|h):\d+\s*", "", lines[0])
    reason = head + (f" ({'; '.join(lines[1:])})" if lines[1:] else "")
    return reason if isinstance(err, pyspiel.SpielError) else f"{type(err).__name__}: {reason}"
