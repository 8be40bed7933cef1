"""Any OpenSpiel game as a text ``Env``.

Chance nodes are sampled with a numpy Generator seeded by ``reset(seed)``, so the same
seed deals the same cards (groups of repeated seeds rely on it), and are advanced
automatically: players only ever see decision nodes. What a player sees is
``observation_for_state(state, player)``, a pure function of the pyspiel state, which
exact evaluation calls on enumerated information states.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyspiel

from coplay.envs import actions as action_text
from coplay.envs.actions import check_acting
from coplay.envs.chance import ChanceDraws
from coplay.envs.openspiel_games import load_openspiel_game
from coplay.envs.renderers import RENDERERS, Rendered, Renderer, render, renderer_for
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


def game_spec(game: pyspiel.Game, name: str) -> GameSpec:
    """Static facts of an OpenSpiel game in coplay's terms."""
    game_type = game.get_type()
    simultaneous = game_type.dynamics == pyspiel.GameType.Dynamics.SIMULTANEOUS
    # OpenSpiel marks goofspiel, oshi_zumo and the Python iterated dilemma perfect-
    # information: all is public once a round is played. Within a round no player sees
    # the others' choices, so the game is one of imperfect information (exact
    # evaluation walks it through its turn-based transform, where it is).
    hidden_moves = simultaneous and game.num_players() > 1
    return GameSpec(
        name=name,
        num_players=game.num_players(),
        kind=_KINDS[game_type.utility],
        max_turns=min(game.max_game_length(), MAX_TURNS_CAP),
        perfect_information=(
            game_type.information == pyspiel.GameType.Information.PERFECT_INFORMATION
            and not hidden_moves
        ),
        simultaneous=simultaneous,
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
    return _info_key(state, player, state.get_game().get_type())


def _info_key(state: pyspiel.State, player: int, game_type: pyspiel.GameType) -> str | None:
    """``info_key`` for a game whose type is at hand (looking it up is a copy)."""
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


_VIEWS_KEPT = 20_000
"""Views kept per game: enough for every information state of the small games;
tic-tac-toe's histories are many more, so its views are forgotten and rebuilt."""


class _Views:
    """What each player sees, shared by every env of one game and renderer.

    A player's observation and legal actions are a function of its information state
    (OpenSpiel's string) for a renderer that says so (``Renderer.per_info_state``),
    so they are rendered once per information state rather than at every turn of
    every game. Other renderers, or games without that string, render every time.
    A renderer that depends on the observation string alone
    (``Renderer.per_observation``) renders once per observation; each information
    state then only gets its own key.
    """

    def __init__(self, renderer: Renderer, name: str, game: pyspiel.Game) -> None:
        game_type = game.get_type()
        self.renderer, self.name = renderer, name
        self.keyed = renderer.per_info_state and game_type.provides_information_state_string
        self.by_observation = (
            self.keyed and renderer.per_observation and game_type.provides_observation_string
        )
        self._type = game_type  # for ``info_key``, which every view records
        self._seen: dict[tuple[int, int, str], tuple[Observation, dict[str, int]]] = {}
        self._drawn: dict[tuple[int, int, str], tuple[Rendered, dict[str, int]]] = {}

    def get(self, state: pyspiel.State, player: int) -> tuple[Observation, dict[str, int]]:
        if not self.keyed:
            return self._render(state, player)
        # The player to move is in the key too: terminal and chance states must not
        # borrow the legal actions of a decision state that reads alike.
        key = (player, state.current_player(), state.information_state_string(player))
        view = self._seen.get(key)
        if view is None:
            if len(self._seen) >= _VIEWS_KEPT:
                self._seen.clear()
            view = self._seen[key] = self._render(state, player, key[2])
        return view

    def _render(
        self, state: pyspiel.State, player: int, info: str | None = None
    ) -> tuple[Observation, dict[str, int]]:
        """``observation_for_state`` and the action id of each legal action's string
        (``info``: the information-state string, where already read)."""
        rendered, ids = self._drawing(state, player)
        obs = Observation.fast(
            game=self.name,
            player=player,
            text=rendered.text,
            legal_actions=rendered.legal_actions,
            info_key=_info_key(state, player, self._type) if info is None else info,
        )
        return obs, ids

    def _drawing(self, state: pyspiel.State, player: int) -> tuple[Rendered, dict[str, int]]:
        """The renderer's text and legal actions, kept by observation where they
        depend on it alone."""
        if not self.by_observation:
            return _with_ids(render(self.renderer, state, player))
        key = (player, state.current_player(), state.observation_string(player))
        drawn = self._drawn.get(key)
        if drawn is None:
            if len(self._drawn) >= _VIEWS_KEPT:
                self._drawn.clear()
            drawn = self._drawn[key] = _with_ids(render(self.renderer, state, player))
        return drawn


def _with_ids(rendered: Rendered) -> tuple[Rendered, dict[str, int]]:
    return rendered, dict(zip(rendered.legal_actions, rendered.action_ids, strict=True))


@dataclass(frozen=True)
class _Shared:
    """What every env of one loaded game under one name and renderer shares."""

    game: pyspiel.Game
    """Held, so that the game's id in the key is never reused."""
    spec: GameSpec
    views: _Views


_SHARED: dict[tuple, _Shared] = {}


def _shared(game: pyspiel.Game, renderer: Renderer, name: str) -> _Shared:
    """The spec and views of every env of ``game`` (a cached object) as ``name``."""
    key = (id(game), renderer, name)
    if key not in _SHARED:
        _SHARED[key] = _Shared(game, game_spec(game, name), _Views(renderer, name, game))
    return _SHARED[key]


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
        shared = _shared(self.game, self.renderer, name or default_game_name(openspiel_name))
        self.spec, self._views = shared.spec, shared.views
        self._rewards = self.game.get_type().reward_model == pyspiel.GameType.RewardModel.REWARDS
        self._state: pyspiel.State | None = None
        self._acting: list[int] = []
        self._shown: dict[int, tuple[Observation, Mapping[str, int]]] = {}

    def sibling(self) -> OpenSpielEnv:
        """A fresh env of the same game, name and renderer, not yet reset: what the
        constructor builds, by copying the attributes every env of the game shares
        instead of looking the game and its views up again (a rollout builds one env
        per game played, and the lookups cost more than a Kuhn deal)."""
        env = copy.copy(self)
        env._state, env._acting, env._shown = None, [], {}
        return env

    @property
    def state(self) -> pyspiel.State:
        """The current pyspiel state; before the first ``reset``, that of ``reset(0)``
        (built on first use: the engine resets every env it makes, once)."""
        if self._state is None:
            self.reset(0)
        return self._state

    def reset(self, seed: int) -> None:
        """Start a new game; chance outcomes are drawn as a Generator seeded by ``seed``
        would draw them (``coplay.envs.chance``)."""
        self._chance = ChanceDraws(seed)
        self._state = self.game.new_initial_state()
        self._advance_chance()
        self._moved()

    def _moved(self) -> None:
        """After every change of the state: whether it is over, who acts now, and no
        view shown yet. The engine asks these several times per step; each answer
        costs calls into OpenSpiel (an information-state string for a view)."""
        state = self._state
        self._shown.clear()
        self._terminal = state.is_terminal()
        self._simultaneous = False
        if self._terminal:
            self._acting = []
        elif state.is_simultaneous_node():
            self._simultaneous = True
            players = range(self.game.num_players())
            self._acting = [p for p in players if state.legal_actions(p)]
        else:
            self._acting = [state.current_player()]

    def _advance_chance(self) -> None:
        """Sample chance nodes until a decision or the end."""
        state = self._state
        while state.is_chance_node():
            drawn = state.chance_outcomes()
            if not drawn:  # OpenSpiel builds some degenerate games (goofspiel of 0 cards)
                raise ValueError(
                    f"{self.spec.name}: a chance node without outcomes; check the game's parameters"
                )
            outcomes, probs = zip(*drawn, strict=True)
            state.apply_action(outcomes[self._chance.choose(probs)])

    def _returns_so_far(self) -> np.ndarray:
        """Cumulative returns (of a game that defines intermediate rewards).

        Step rewards are differences of these: a game's ``rewards()`` after a chance
        node may still hold the previous player move's reward (OpenSpiel's Python
        iterated prisoner's dilemma does), so summing it would count a reward twice.
        """
        # A copy: Python games may hand out the very array they keep updating.
        return np.array(self.state.returns(), dtype=float)

    def players_to_act(self) -> list[int]:
        """The current player, or every player with a legal action at simultaneous nodes."""
        if self._state is None:
            self.reset(0)
        return list(self._acting)

    def observe(self, player: int) -> Observation:
        return self._view(player)[0]

    def observe_state(self, state: pyspiel.State, player: int) -> Observation:
        """What ``player`` would see in any ``state`` of this env's game."""
        return observation_for_state(
            state, player, game_name=self.spec.name, renderer=self.renderer
        )

    def _view(self, player: int) -> tuple[Observation, Mapping[str, int]]:
        """What ``player`` sees now and the action id of each legal action's string."""
        view = self._shown.get(player)
        if view is None:
            view = self._shown[player] = self._views.get(self.state, player)
        return view

    def parse_action(self, player: int, text: str) -> str | None:
        legal = self._view(player)[1]
        return action_text.parse_action(text, list(legal))

    def _action_id(self, player: int, text: str) -> int:
        legal = self._view(player)[1]
        if text in legal:  # the engine plays legal strings as listed: no parsing
            return legal[text]
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
        check_acting(self.spec.name, actions, acting)
        # Games that pay only at the end (in returns()) have nothing to difference.
        before = self._returns_so_far() if self._rewards else None
        state = self._state
        if self._simultaneous:
            ids = {p: self._action_id(p, text) for p, text in actions.items()}
            # Players without a legal action at this node pass OpenSpiel's invalid id.
            all_ids = [ids.get(p, pyspiel.INVALID_ACTION) for p in range(self.game.num_players())]
            state.apply_actions(all_ids)
        else:
            state.apply_action(self._action_id(acting[0], actions[acting[0]]))
        self._advance_chance()
        self._moved()
        if before is None:
            return dict.fromkeys(range(self.spec.num_players), 0.0)
        earned = self._returns_so_far() - before
        return {p: float(r) for p, r in enumerate(earned)}

    def is_terminal(self) -> bool:
        if self._state is None:
            self.reset(0)
        return self._terminal

    def returns(self) -> list[float]:
        return [float(r) for r in self.state.returns()]
