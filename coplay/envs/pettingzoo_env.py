"""A PettingZoo AEC environment as a coplay game (needs the ``pettingzoo`` extra).

``PettingZooEnv(factory, render_obs=..., action_name=...)`` plays any PettingZoo AEC
environment whose observations are text, or can be written as text, in coplay's engine;
``coplay.envs.pettingzoo_adapter.to_pettingzoo`` is the other direction. A round trip
(coplay -> PettingZoo -> coplay) plays the same episodes as coplay alone (tested).

A forfeit pays the offender the spec's ``min_return``, and evaluation reads returns
against the spec's bounds, so they are never guessed: an environment made by
``to_pettingzoo`` keeps its game's, any other takes ``min_return`` and ``max_return``
as given, else is refused in one line. A ``reward_range`` it declares is not read:
Gym's bounds one step's reward, not a game's return.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from coplay.envs import actions as action_text
from coplay.envs.actions import check_acting
from coplay.envs.pettingzoo_deps import AECEnv, Discrete, gymnasium
from coplay.types import GameKind, GameSpec, Observation

RenderObs = Callable[[str, Any], str]
"""``(agent, observation) -> text``: writes a PettingZoo observation as text."""
ActionName = Callable[[str, int], str]
"""``(agent, action index) -> name``: names a Discrete action (brackets added if missing)."""


def index_name(agent: str, index: int) -> str:
    """Names a Discrete action by its index: ``[3]``."""
    return str(index)


def text_of(agent: str, observation: Any) -> str:
    """The text of an observation that is a string or a dict with a ``"text"`` string."""
    if isinstance(observation, Mapping) and isinstance(observation.get("text"), str):
        return observation["text"]
    if isinstance(observation, str):
        return observation
    raise ValueError(
        f"observation of {agent} is a {type(observation).__name__}, not text; "
        "pass render_obs=(agent, observation) -> str to write it as text"
    )


def _bracketed(name: str) -> str:
    return name if name.startswith("[") and name.endswith("]") else action_text.bracket(name)


def _mask(observation: Any, info: Mapping) -> np.ndarray | None:
    if isinstance(observation, Mapping) and "action_mask" in observation:
        return np.asarray(observation["action_mask"])
    return np.asarray(info["action_mask"]) if "action_mask" in info else None


class PettingZooEnv:
    """A PettingZoo AEC environment as a coplay ``Env``.

    Seat ``p`` is ``possible_agents[p]``; the acting player is ``agent_selection``.
    Legal actions come from ``infos[agent]["legal_actions"]`` (name -> action) when the
    environment gives it, else from the action mask of a ``Discrete`` space, named by
    ``action_name`` (default: the index). A ``Text`` action space means free-text turns.
    Agents that are done are stepped with ``None`` automatically; every reward is added
    to the agent's return. ``spec`` defaults to the coplay spec of an environment made
    by ``to_pettingzoo``, else to a general-sum spec with a 1000-step limit whose return
    bounds are ``min_return`` and ``max_return`` (the lowest and highest return a
    player can get), which must then be given. A game that ends outside its bounds is
    an error.
    """

    def __init__(
        self,
        aec_env_factory: Callable[[], AECEnv],
        *,
        render_obs: RenderObs = text_of,
        action_name: ActionName = index_name,
        spec: GameSpec | None = None,
        min_return: float | None = None,
        max_return: float | None = None,
    ) -> None:
        bounds = _given_bounds(min_return, max_return)
        if spec is not None and bounds is not None:
            raise ValueError("pass the return bounds in spec or as min_return/max_return, not both")
        self.aec = aec_env_factory()
        self.agents = list(self.aec.possible_agents)
        self.spec = spec or _default_spec(self.aec, bounds)
        if self.spec.num_players != len(self.agents):
            raise ValueError(
                f"spec has {self.spec.num_players} players but the environment has "
                f"{len(self.agents)} agents: {', '.join(self.agents)}"
            )
        self.render_obs = render_obs
        self.action_name = action_name
        self.reset(0)

    def reset(self, seed: int) -> None:
        self.aec.reset(seed=seed)
        self._returns = [0.0] * len(self.agents)
        self.truncated = False
        self._skip_done()

    def players_to_act(self) -> list[int]:
        return [] if self.is_terminal() else [self.agents.index(self.aec.agent_selection)]

    def observe(self, player: int) -> Observation:
        agent = self.agents[player]
        observation = self.aec.observe(agent)
        legal = self._legal(agent) if player in self.players_to_act() else {}
        return Observation(
            game=self.spec.name,
            player=player,
            text=self.render_obs(agent, observation),
            legal_actions=None if legal is None else tuple(legal),
        )

    def parse_action(self, player: int, text: str) -> str | None:
        return self._parse(player, text, self._legal(self.agents[player]))

    def _parse(self, player: int, text: str, legal: Mapping[str, Any] | None) -> str | None:
        """A legal action's name, or on a free-text turn the message as the game reads it:
        a coplay game behind ``to_pettingzoo`` (its ``parse_text``) reads it itself, as it
        does without the round trip; any other takes the text itself if the space holds it."""
        if legal is None:
            agent = self.agents[player]
            reads = getattr(self.aec.unwrapped, "parse_text", None)
            if reads is not None:
                return reads(agent, text)
            return text if text.strip() and self.aec.action_space(agent).contains(text) else None
        return action_text.parse_action(text, list(legal))

    def step(self, actions: dict[int, str]) -> dict[int, float]:
        acting = self.players_to_act()
        check_acting(self.spec.name, actions, acting)
        (player,) = acting
        legal = self._legal(self.agents[player])
        chosen = self._parse(player, actions[player], legal)
        if chosen is None:
            raise ValueError(f"player {player}: {actions[player]!r} names no legal action")
        before = list(self._returns)
        self._aec_step(chosen if legal is None else legal[chosen])
        self._skip_done()
        return {
            p: after - was for p, (after, was) in enumerate(zip(self._returns, before, strict=True))
        }

    def is_terminal(self) -> bool:
        return not self.aec.agents

    def returns(self) -> list[float]:
        return list(self._returns)

    def _legal(self, agent: str) -> dict[str, Any] | None:
        """Bracketed legal action -> the action to step with; None for free text."""
        info = self.aec.infos[agent]
        if "legal_actions" in info:
            return {_bracketed(name): a for name, a in info["legal_actions"].items()}
        space = self.aec.action_space(agent)
        if isinstance(space, gymnasium.spaces.Text):
            return None
        if not isinstance(space, Discrete):
            raise ValueError(
                f"{agent}'s action space {space} is neither Discrete nor Text; "
                "coplay plays named or free-text actions only"
            )
        mask = _mask(self.aec.observe(agent), info)
        indices = range(space.n) if mask is None else np.flatnonzero(mask)
        start = int(space.start)
        named = {
            _bracketed(self.action_name(agent, start + int(i))): start + int(i) for i in indices
        }
        if len({n.casefold() for n in named}) != len(indices):
            raise ValueError(f"action names of {agent} collide: {', '.join(named)}")
        return named

    def _aec_step(self, action: Any) -> None:
        self.aec.step(action)
        for agent, reward in self.aec.rewards.items():
            self._returns[self.agents.index(agent)] += float(reward)

    def _skip_done(self) -> None:
        """Step agents that are done with ``None`` until a live agent must act."""
        while self.aec.agents:
            agent = self.aec.agent_selection
            if not (self.aec.terminations[agent] or self.aec.truncations[agent]):
                return
            self.truncated |= self.aec.truncations[agent]
            self._aec_step(None)
        self._check_returns()

    def _check_returns(self) -> None:
        """Refuse an end outside the spec's bounds: a forfeit, which pays the lowest,
        could then beat playing on, and nothing downstream would say so."""
        if self.spec.holds(self._returns):
            return
        raise ValueError(
            f"{self.spec.name} ended with returns {self._returns}, outside its return "
            f"bounds [{self.spec.min_return}, {self.spec.max_return}]; pass bounds (min_return and max_return, or a spec) that "
            "hold every return"
        )


Bounds = tuple[float, float]
"""``(min_return, max_return)`` of a player."""


def _given_bounds(min_return: float | None, max_return: float | None) -> Bounds | None:
    """The bounds the caller passed, checked; None when it passed neither."""
    if min_return is None and max_return is None:
        return None
    if min_return is None or max_return is None:
        raise ValueError("pass both min_return and max_return, or neither")
    for key, value in (("min_return", min_return), ("max_return", max_return)):
        if not _is_finite(value):
            raise ValueError(f"{key} must be a finite number, got {value!r}")
    if min_return > max_return:
        raise ValueError(f"min_return {min_return} is above max_return {max_return}")
    return float(min_return), float(max_return)


def _is_finite(value: object) -> bool:
    # numbers.Real takes numpy's numbers too; a bool is an int to Python, and True as a
    # bound is a typo, not 1.
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _default_spec(aec: AECEnv, bounds: Bounds | None) -> GameSpec:
    own = getattr(aec.unwrapped, "game_spec", None)
    if isinstance(own, GameSpec):
        if bounds is not None:
            raise ValueError(
                f"{own.name} comes with its return bounds [{own.min_return}, "
                f"{own.max_return}]; drop min_return and max_return"
            )
        # AEC asks simultaneous movers one at a time: a round takes one step per player.
        rounds = own.num_players if own.simultaneous else 1
        return replace(own, simultaneous=False, max_turns=own.max_turns * rounds)
    name = f"pettingzoo:{aec.metadata.get('name', type(aec.unwrapped).__name__)}"
    if bounds is None:
        # Not its reward_range: Gym's bounds one step's reward, so a game of many steps
        # ends past it, and a loose one would make a forfeit cost more than any loss.
        raise ValueError(
            f"{name} has no known return bounds (a forfeit pays the lowest); pass "
            "min_return=... and max_return=... to PettingZooEnv (a reward_range bounds "
            "one step's reward, not a game's return)"
        )
    low, high = bounds
    return GameSpec(
        name=name,
        num_players=len(aec.possible_agents),
        kind=GameKind.GENERAL_SUM,
        max_turns=1000,
        perfect_information=False,
        min_return=low,
        max_return=high,
    )
