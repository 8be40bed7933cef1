"""Any OpenSpiel game as a text ``Env``.

Chance nodes are sampled with a numpy Generator seeded by ``reset(seed)``, so the same
seed deals the same cards (groups of repeated seeds rely on it), and are advanced
automatically: players only ever see decision nodes. What a player sees is
``observation_for_state(state, player)``, a pure function of the pyspiel state, which
exact evaluation calls on enumerated information states.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyspiel

from coplay.envs import actions as action_text
from coplay.envs.renderers import RENDERERS, Renderer, legal_action_map, render, renderer_for
from coplay.types import GameKind, GameSpec, Observation

MAX_TURNS_CAP = 1000
"""Turn limit for games whose own bound is larger (chess allows ~18k moves)."""

_KINDS = {
    pyspiel.GameType.Utility.ZERO_SUM: GameKind.ZERO_SUM,
    # Constant-sum games are zero-sum up to a shift of every return.
    pyspiel.GameType.Utility.CONSTANT_SUM: GameKind.ZERO_SUM,
    pyspiel.GameType.Utility.GENERAL_SUM: GameKind.GENERAL_SUM,
    pyspiel.GameType.Utility.IDENTICAL: GameKind.COOPERATIVE,
}


class UnknownGameError(ValueError):
    """A game name that neither the registry nor OpenSpiel knows."""


def _register_python_games(openspiel_name: str) -> None:
    """OpenSpiel's pure-Python games (``python_iterated_prisoners_dilemma``) register
    themselves on import; import them only when such a game is asked for."""
    if openspiel_name.startswith("python_") and openspiel_name not in pyspiel.registered_names():
        import open_spiel.python.games  # noqa: F401


def _game_valued(game_type: pyspiel.GameType, params: Mapping[str, object]) -> dict[str, object]:
    """Parameters that are themselves games (``repeated_game``'s ``stage_game``) may be
    written as a game string (``"matrix_pd"``, ``"goofspiel(num_cards=3)"``)."""
    spec = game_type.parameter_specification
    out = dict(params)
    for key, val in params.items():
        if isinstance(spec.get(key), dict) and isinstance(val, str):
            out[key] = pyspiel.game_parameters_from_string(val)
            if out[key]["name"] not in pyspiel.registered_names():
                raise UnknownGameError(
                    f"parameter {key!r} names unknown OpenSpiel game {val!r}; "
                    "see pyspiel.registered_names()"
                )
    return out


def load_openspiel_game(openspiel_name: str, params: Mapping[str, object]) -> pyspiel.Game:
    """``pyspiel.load_game`` with errors that say which name or parameter is wrong."""
    _register_python_games(openspiel_name)
    if openspiel_name not in pyspiel.registered_names():
        raise UnknownGameError(
            f"unknown OpenSpiel game {openspiel_name!r}; see pyspiel.registered_names()"
        )
    game_type = next(t for t in pyspiel.registered_games() if t.short_name == openspiel_name)
    allowed = sorted(game_type.parameter_specification)
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(
            f"unknown parameter(s) {', '.join(unknown)} for game {openspiel_name!r}; "
            f"available: {', '.join(allowed) or 'none'}"
        )
    try:
        return pyspiel.load_game(openspiel_name, _game_valued(game_type, params))
    except pyspiel.SpielError as err:
        first_line = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ValueError(f"bad parameters for game {openspiel_name!r}: {first_line}") from err


def game_spec(game: pyspiel.Game, name: str) -> GameSpec:
    """Static facts of an OpenSpiel game in coplay's terms."""
    game_type = game.get_type()
    return GameSpec(
        name=name,
        num_players=game.num_players(),
        kind=_KINDS[game_type.utility],
        max_turns=min(game.max_game_length(), MAX_TURNS_CAP),
        perfect_information=(
            game_type.information == pyspiel.GameType.Information.PERFECT_INFORMATION
        ),
        simultaneous=game_type.dynamics == pyspiel.GameType.Dynamics.SIMULTANEOUS,
        min_return=float(game.min_utility()),
        max_return=float(game.max_utility()),
        openspiel_name=game_type.short_name,
    )


def default_game_name(openspiel_name: str) -> str:
    """The registry name of an OpenSpiel game: its short name when it has its own
    renderer (``kuhn_poker``), else ``openspiel:<short name>``."""
    return openspiel_name if openspiel_name in RENDERERS else f"openspiel:{openspiel_name}"


def info_key(state: pyspiel.State, player: int) -> str | None:
    """OpenSpiel's information-state string, else its observation string, else None."""
    game_type = state.get_game().get_type()
    if game_type.provides_information_state_string:
        return state.information_state_string(player)
    if game_type.provides_observation_string:
        return state.observation_string(player)
    return None


def observation_for_state(
    state: pyspiel.State,
    player: int,
    *,
    game_name: str | None = None,
    renderer: Renderer | None = None,
) -> Observation:
    """What ``player`` sees in ``state``: the same Observation the env would show.

    ``game_name`` and ``renderer`` default to those the registry uses for the game.
    """
    short_name = state.get_game().get_type().short_name
    rendered = render(renderer or renderer_for(short_name), state, player)
    return Observation(
        game=game_name or default_game_name(short_name),
        player=player,
        text=rendered.text,
        legal_actions=rendered.legal_actions,
        info_key=info_key(state, player),
    )


class OpenSpielEnv:
    """An OpenSpiel game behind the ``Env`` protocol, rendered as text."""

    def __init__(
        self,
        openspiel_name: str,
        *,
        name: str | None = None,
        params: Mapping[str, object] | None = None,
        renderer: Renderer | None = None,
    ) -> None:
        self.game = load_openspiel_game(openspiel_name, params or {})
        self.renderer = renderer or renderer_for(openspiel_name)
        self.spec = game_spec(self.game, name or default_game_name(openspiel_name))
        self._reward_model = self.game.get_type().reward_model
        self.state: pyspiel.State
        self.reset(0)

    def reset(self, seed: int) -> None:
        """Start a new game; chance outcomes are drawn from a Generator seeded by ``seed``."""
        self._rng = np.random.default_rng(seed)
        self.state = self.game.new_initial_state()
        self._advance_chance()

    def _advance_chance(self) -> None:
        """Sample chance nodes until a decision or the end."""
        while self.state.is_chance_node():
            outcomes, probs = zip(*self.state.chance_outcomes(), strict=True)
            self.state.apply_action(outcomes[self._rng.choice(len(outcomes), p=probs)])

    def _returns_so_far(self) -> np.ndarray:
        """Cumulative returns for games that define intermediate rewards, else zeros.

        Step rewards are differences of these: a game's ``rewards()`` after a chance
        node may still hold the previous player move's reward (OpenSpiel's Python
        iterated prisoner's dilemma does), so summing it would count a reward twice.
        """
        if self._reward_model != pyspiel.GameType.RewardModel.REWARDS:
            return np.zeros(self.game.num_players())
        # A copy: Python games may hand out the very array they keep updating.
        return np.array(self.state.returns(), dtype=float)

    def players_to_act(self) -> list[int]:
        """The current player, or every player with a legal action at simultaneous nodes."""
        if self.state.is_terminal():
            return []
        if self.state.is_simultaneous_node():
            players = range(self.game.num_players())
            return [p for p in players if self.state.legal_actions(p)]
        return [self.state.current_player()]

    def observe(self, player: int) -> Observation:
        return self.observe_state(self.state, player)

    def observe_state(self, state: pyspiel.State, player: int) -> Observation:
        """What ``player`` would see in any ``state`` of this env's game."""
        return observation_for_state(
            state, player, game_name=self.spec.name, renderer=self.renderer
        )

    def parse_action(self, player: int, text: str) -> str | None:
        legal = legal_action_map(self.renderer, self.state, player)
        return action_text.parse_action(text, list(legal))

    def _action_id(self, player: int, text: str) -> int:
        legal = legal_action_map(self.renderer, self.state, player)
        action = action_text.parse_action(text, list(legal))
        if action is None:
            raise ValueError(
                f"player {player}: {text!r} names no legal action; legal: {' '.join(legal)}"
            )
        return legal[action]

    def step(self, actions: dict[int, str]) -> dict[int, float]:
        """Apply one action per acting player.

        Returns the rewards earned by this step for games with intermediate rewards;
        otherwise zeros (the outcome is in ``returns()``, which always holds the total).
        """
        acting = self.players_to_act()
        if sorted(actions) != acting:
            raise ValueError(f"expected actions for players {acting}, got {sorted(actions)}")
        ids = {p: self._action_id(p, text) for p, text in actions.items()}
        before = self._returns_so_far()
        if self.state.is_simultaneous_node():
            # Players without a legal action at this node pass OpenSpiel's invalid id.
            all_ids = [ids.get(p, pyspiel.INVALID_ACTION) for p in range(self.game.num_players())]
            self.state.apply_actions(all_ids)
        else:
            self.state.apply_action(ids[acting[0]])
        self._advance_chance()
        earned = self._returns_so_far() - before
        return {p: float(r) for p, r in enumerate(earned)}

    def is_terminal(self) -> bool:
        return self.state.is_terminal()

    def returns(self) -> list[float]:
        return [float(r) for r in self.state.returns()]
