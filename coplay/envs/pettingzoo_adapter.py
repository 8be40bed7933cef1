"""PettingZoo adapters, both directions (needs the ``pettingzoo`` extra).

``to_pettingzoo(name_or_factory, **params)`` makes any coplay game a PettingZoo AEC
environment; ``PettingZooEnv(factory, render_obs=...)`` (``coplay.envs.pettingzoo_env``,
re-exported here) plays any PettingZoo AEC environment whose observations are text (or
can be written as text) in coplay's engine.

coplay as PettingZoo (``CoplayAECEnv``):

- agents ``player_0 .. player_{n-1}``: seat ``p`` is ``player_p``.
- observation ``{"text": str, "action_mask": int8 array}``. The text sits under
  ``"text"``, not PettingZoo's usual ``"observation"``, because ``api_test`` requires
  a numpy dtype of whatever sits under ``"observation"`` and a string has none.
- actions: ``Discrete`` over the game's fixed action list when it has one. For an
  OpenSpiel game the index is the OpenSpiel action id (``num_distinct_actions``); for
  another game it indexes ``env.all_actions``, an optional attribute that lists every
  bracketed action the game can offer. A game without a fixed list (free-text turns,
  or no ``all_actions``) takes text actions (``TextSpace``): the text is read by the
  game's ``parse_action``, and text naming no legal action forfeits, the engine's
  default treatment. ``infos[agent]["legal_actions"]`` maps each legal action's name
  to the action that plays it, for the agent to act.
- rewards: each step's rewards, and at the end the remainder up to ``returns()``, so
  an agent's rewards sum to its return, as the engine credits turns.
- terminations when the game ends; truncations after ``spec.max_turns`` steps, the
  engine's limit.
- simultaneous moves: the acting players are asked in seat order and the joint action
  is applied once all have chosen; nobody observes another's pending choice.
- seeding: ``reset(seed=s)`` plays coplay seed ``s`` (the chance outcomes of
  ``play_episodes`` with seed ``s``); ``reset()`` draws the next seed from a generator
  seeded by the last seed given.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from coplay.envs.chance import check_seed
from coplay.envs.openspiel_env import OpenSpielEnv
from coplay.envs.pettingzoo_deps import AECEnv, Box, Dict, Discrete, gymnasium
from coplay.envs.pettingzoo_env import PettingZooEnv, index_name, text_of
from coplay.envs.registry import make_env
from coplay.envs.renderers import legal_action_map
from coplay.rollout.invalid import forfeit_returns
from coplay.types import Env, GameSpec

__all__ = ["CoplayAECEnv", "PettingZooEnv", "TextSpace", "index_name", "text_of", "to_pettingzoo"]

MAX_TEXT_LENGTH = 1 << 16
"""Default bound of the text spaces (observations and text actions), in characters."""


class TextSpace(gymnasium.spaces.Text):
    """Any string of at most ``max_length`` characters; samples draw printable ASCII."""

    def __init__(self, max_length: int = MAX_TEXT_LENGTH, *, seed: int | None = None) -> None:
        super().__init__(max_length, min_length=0, charset=string.printable, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length


# --- fixed action lists -------------------------------------------------------------


@dataclass(frozen=True)
class OpenSpielActions:
    """Index = OpenSpiel action id; names come from the env's renderer."""

    size: int

    def legal(self, env: Env, player: int) -> dict[int, str]:
        """Index -> bracketed action, for the actions ``player`` may take now."""
        pairs = legal_action_map(env.renderer, env.state, player).items()
        return {i: name for name, i in pairs}


@dataclass(frozen=True)
class ListedActions:
    """Index into the env's ``all_actions``, matched as the env spells them."""

    names: tuple[str, ...]

    @property
    def size(self) -> int:
        return len(self.names)

    def legal(self, env: Env, player: int) -> dict[int, str]:
        listed = env.observe(player).legal_actions
        if listed is None:
            raise ValueError(
                f"game {env.spec.name!r} asks player {player} for free text, which its "
                "all_actions cannot express; remove all_actions to play it with text actions"
            )
        missing = [a for a in listed if a not in self.names]
        if missing:
            raise ValueError(
                f"game {env.spec.name!r} offers {', '.join(missing)}, absent from its all_actions"
            )
        return {self.names.index(a): a for a in listed}


ActionList = OpenSpielActions | ListedActions


def fixed_actions(env: Env) -> ActionList | None:
    """The game's fixed action list, or None when it has none (text actions)."""
    if isinstance(env, OpenSpielEnv):
        return OpenSpielActions(env.game.num_distinct_actions())
    names = getattr(env, "all_actions", None)
    if names is None:
        return None
    names = tuple(names)
    if not names or len(set(names)) != len(names):
        raise ValueError(f"all_actions of {env.spec.name!r} must be non-empty and unique")
    return ListedActions(names)


# --- coplay -> PettingZoo -------------------------------------------------------------


class CoplayAECEnv(AECEnv):
    """A coplay ``Env`` as a PettingZoo AEC environment (see the module docstring)."""

    metadata = {"render_modes": ["ansi", "human"], "is_parallelizable": False}

    def __init__(
        self,
        factory: Callable[[], Env],
        *,
        render_mode: str | None = None,
        max_text_length: int = MAX_TEXT_LENGTH,
    ) -> None:
        super().__init__()
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(f"render_mode {render_mode!r} is not one of None, 'ansi', 'human'")
        self.game = factory()
        self.game_spec: GameSpec = self.game.spec
        self.metadata = {**self.metadata, "name": self.game_spec.name}
        self.render_mode = render_mode
        self.max_text_length = max_text_length
        self.possible_agents = [f"player_{p}" for p in range(self.game_spec.num_players)]
        self.actions = fixed_actions(self.game)
        self._action_spaces = {a: self._new_action_space() for a in self.possible_agents}
        self._observation_spaces = {a: self._new_observation_space() for a in self.possible_agents}
        self._seeds = np.random.default_rng()
        self.agents: list[str] = []

    def _new_action_space(self) -> gymnasium.Space:
        return Discrete(self.actions.size) if self.actions else TextSpace(self.max_text_length)

    def _new_observation_space(self) -> Dict:
        spaces: dict[str, gymnasium.Space] = {"text": TextSpace(self.max_text_length)}
        if self.actions:
            spaces["action_mask"] = Box(0, 1, (self.actions.size,), np.int8)
        return Dict(spaces)

    def observation_space(self, agent: str) -> gymnasium.Space:
        return self._observation_spaces[agent]

    def action_space(self, agent: str) -> gymnasium.Space:
        return self._action_spaces[agent]

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        if seed is not None:
            self.episode_seed = check_seed(seed)
            self._seeds = np.random.default_rng(self.episode_seed)
        else:
            self.episode_seed = int(self._seeds.integers(2**31))
        self.game.reset(self.episode_seed)
        self.agents = list(self.possible_agents)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {a: {} for a in self.agents}
        self._pending: dict[int, str] = {}
        self._credited = [0.0] * len(self.agents)
        self.num_steps = 0
        self.forfeited_by: int | None = None
        self.agent_selection = self.agents[0]
        if self.game.is_terminal():
            self._end(self.game.returns(), truncated=False)
        else:
            self._select_next()

    def observe(self, agent: str) -> dict[str, Any]:
        player = self.possible_agents.index(agent)
        text = self.game.observe(player).text
        if len(text) > self.max_text_length:
            raise ValueError(
                f"observation of {agent} has {len(text)} characters, more than "
                f"max_text_length={self.max_text_length}; pass a larger max_text_length"
            )
        if not self.actions:
            return {"text": text}
        mask = np.zeros(self.actions.size, dtype=np.int8)
        if self._to_act(agent):
            mask[list(self.actions.legal(self.game, player))] = 1
        return {"text": text, "action_mask": mask}

    def step(self, action: Any) -> None:
        if not self.agents:
            raise RuntimeError("no live agents: call reset() first")
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        player = self.possible_agents.index(agent)
        chosen = self._action_text(agent, action)
        self._cumulative_rewards[agent] = 0.0
        self._clear_rewards()
        if chosen is None:
            self.forfeited_by = player
            self._end(forfeit_returns(self.game_spec, player), truncated=False)
        else:
            self._pending[player] = chosen
            if all(p in self._pending for p in self.game.players_to_act()):
                self._apply_joint_action()
        self._accumulate_rewards()
        if any(self.terminations.values()) or any(self.truncations.values()):
            self._deads_step_first()
        else:
            self._select_next()

    def render(self) -> str | None:
        if self.render_mode is None:
            gymnasium.logger.warn("render() needs render_mode 'ansi' or 'human'")
            return None
        text = self.observe(self.agent_selection)["text"] if self.agents else ""
        if self.render_mode == "human":
            print(text)
            return None
        return text

    def close(self) -> None:
        """Nothing to release: the game lives in memory."""

    # --- internals ---

    def _to_act(self, agent: str) -> bool:
        return bool(self.agents) and agent == self.agent_selection and not self.game.is_terminal()

    def _legal(self, player: int) -> dict[str, Any] | None:
        """Legal action name -> the action that plays it; None on a free-text turn."""
        if self.actions:
            return {name: i for i, name in self.actions.legal(self.game, player).items()}
        listed = self.game.observe(player).legal_actions
        return None if listed is None else {a: a for a in listed}

    def parse_text(self, agent: str, text: str) -> str | None:
        """``agent``'s free-text action as the game reads it (a message, cleaned), or None
        where the game takes no such text: what ``PettingZooEnv`` plays on the way back."""
        return self.game.parse_action(self.possible_agents.index(agent), text)

    def _action_text(self, agent: str, action: Any) -> str | None:
        """The bracketed action to play; None when free text names no legal action."""
        player = self.possible_agents.index(agent)
        if not self.actions:
            if not isinstance(action, str):
                raise ValueError(f"{agent}: actions of this game are text, got {action!r}")
            return self.game.parse_action(player, action)
        legal = self.actions.legal(self.game, player)
        if isinstance(action, np.ndarray) and action.shape == ():
            action = action.item()
        if not isinstance(action, int | np.integer) or int(action) not in legal:
            raise ValueError(f"{agent}: action {action!r} is not legal now; legal: {sorted(legal)}")
        return legal[int(action)]

    def _apply_joint_action(self) -> None:
        earned = self.game.step(dict(self._pending))
        self._pending.clear()
        self.num_steps += 1
        for p, r in earned.items():
            self._credit(p, r)
        if self.game.is_terminal():
            self._end(self.game.returns(), truncated=False)
        elif self.num_steps >= self.game_spec.max_turns:
            self._end(self.game.returns(), truncated=True)

    def _credit(self, player: int, reward: float) -> None:
        self.rewards[self.possible_agents[player]] += float(reward)
        self._credited[player] += float(reward)

    def _end(self, returns: list[float], *, truncated: bool) -> None:
        """Credit what is left of each return and mark every agent done."""
        for p, agent in enumerate(self.possible_agents):
            self._credit(p, float(returns[p]) - self._credited[p])
            self.infos[agent] = {}
            (self.truncations if truncated else self.terminations)[agent] = True

    def _select_next(self) -> None:
        """Point at the next acting player without a pending choice; fill its infos."""
        waiting = [p for p in self.game.players_to_act() if p not in self._pending]
        player = waiting[0]
        self.agent_selection = self.possible_agents[player]
        self.infos = {a: {} for a in self.agents}
        legal = self._legal(player)
        if legal is not None:
            self.infos[self.agent_selection] = {"legal_actions": legal}


def to_pettingzoo(
    name_or_factory: str | Callable[..., Env],
    *,
    render_mode: str | None = None,
    max_text_length: int = MAX_TEXT_LENGTH,
    **params: object,
) -> CoplayAECEnv:
    """A coplay game (registered name or env factory) as a PettingZoo AEC environment.

    ``params`` are the game's own parameters, as for ``make_env``.
    """
    if isinstance(name_or_factory, str):
        factory = partial(make_env, name_or_factory, **params)
    elif callable(name_or_factory):
        factory = partial(name_or_factory, **params)
    else:
        raise ValueError(
            f"expected a game name or an env factory, got {type(name_or_factory).__name__}"
        )
    return CoplayAECEnv(factory, render_mode=render_mode, max_text_length=max_text_length)
