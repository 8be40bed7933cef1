"""Exact solutions behind the scripted policies: CFR+ for poker, minimax for tic-tac-toe.

Leduc's CFR+ solution takes seconds, so solved tables are cached in memory and on disk
under ``$COPLAY_CACHE_DIR`` (default ``~/.cache/coplay``), keyed by game and iterations.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
from pathlib import Path

import pyspiel
from open_spiel.python import policy as os_policy

from coplay.envs.openspiel_env import info_key
from coplay.envs.renderers import legal_action_map, renderer_for

NASH_ITERATIONS = {"kuhn_poker": 2000, "leduc_poker": 400}
"""CFR+ iterations: exploitability about 4e-5 for Kuhn, 1e-3 for Leduc."""

NashTable = dict[str, dict[str, float]]
"""Information-state string -> bracketed action -> probability."""


def cache_dir() -> Path:
    """Where solved tables are kept between processes."""
    return Path(os.environ.get("COPLAY_CACHE_DIR", "~/.cache/coplay")).expanduser()


def _action_names(game: pyspiel.Game) -> dict[str, dict[int, str]]:
    """Information state -> action id -> bracketed name, for every decision node."""
    renderer = renderer_for(game.get_type().short_name)
    names: dict[str, dict[int, str]] = {}
    stack = [game.new_initial_state()]
    while stack:
        state = stack.pop()
        if state.is_terminal():
            continue
        if not state.is_chance_node():
            player = state.current_player()
            legal = legal_action_map(renderer, state, player)
            names[info_key(state, player)] = {a: name for name, a in legal.items()}
        stack.extend(state.child(a) for a in state.legal_actions())
    return names


def named_table(game: pyspiel.Game, policy: os_policy.Policy) -> NashTable:
    """``policy``'s distribution at every decision node of ``game``, keyed by the
    information-state string and the bracketed action names the envs show."""
    names = _action_names(game)
    table: NashTable = {}
    stack = [game.new_initial_state()]
    while stack:
        state = stack.pop()
        if state.is_terminal():
            continue
        if not state.is_chance_node():
            key = info_key(state, state.current_player())
            if key not in table:
                probs = policy.action_probabilities(state)
                table[key] = {names[key][a]: float(probs.get(a, 0.0)) for a in names[key]}
        stack.extend(state.child(a) for a in state.legal_actions())
    return table


def solve_cfr_plus(game_name: str, iterations: int) -> NashTable:
    """Average policy of ``iterations`` of OpenSpiel's C++ CFR+, with named actions."""
    game = pyspiel.load_game(game_name)
    solver = pyspiel.CFRPlusSolver(game)
    for _ in range(iterations):
        solver.evaluate_and_update_policy()
    table = solver.tabular_average_policy().policy_table()
    names = _action_names(game)
    return {
        key: {names[key][a]: float(p) for a, p in row if a in names[key]}
        for key, row in table.items()
    }


def _write_atomic(path: Path, table: NashTable) -> None:
    """Write via a temporary file so concurrent processes never read half a table."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as f:
        json.dump(table, f)
    os.replace(f.name, path)


@functools.cache
def kuhn_leduc_nash_table(game_name: str, iterations: int | None = None) -> NashTable:
    """CFR+ equilibrium of 2-player ``kuhn_poker`` or ``leduc_poker``, cached on disk."""
    if game_name not in NASH_ITERATIONS:
        raise ValueError(
            f"no Nash solver for {game_name!r}; available: {', '.join(NASH_ITERATIONS)}"
        )
    iterations = iterations or NASH_ITERATIONS[game_name]
    path = cache_dir() / f"nash_{game_name}_cfrplus{iterations}.json"
    if path.exists():
        return json.loads(path.read_text())
    table = solve_cfr_plus(game_name, iterations)
    _write_atomic(path, table)
    return table


# --- tic-tac-toe ------------------------------------------------------------------

_TTT_VALUES: dict[str, float] = {}
"""Board string -> minimax value for player 0 (the board fixes who moves next)."""


@functools.cache
def _tic_tac_toe() -> pyspiel.Game:
    return pyspiel.load_game("tic_tac_toe")


def _value_for_x(state: pyspiel.State) -> float:
    """Minimax value of ``state`` for player 0 (x), memoised over boards."""
    key = str(state)
    if key not in _TTT_VALUES:
        if state.is_terminal():
            value = state.returns()[0]
        else:
            children = [_value_for_x(state.child(a)) for a in state.legal_actions()]
            value = max(children) if state.current_player() == 0 else min(children)
        _TTT_VALUES[key] = value
    return _TTT_VALUES[key]


@functools.cache
def tic_tac_toe_optimal_actions(history: tuple[int, ...]) -> frozenset[int]:
    """Cells that keep the best achievable outcome for the player to move after ``history``."""
    state = _tic_tac_toe().new_initial_state()
    for action in history:
        state.apply_action(action)
    sign = 1.0 if state.current_player() == 0 else -1.0
    values = {a: sign * _value_for_x(state.child(a)) for a in state.legal_actions()}
    best = max(values.values())
    return frozenset(a for a, v in values.items() if v == best)
