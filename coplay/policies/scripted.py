"""Scripted policies: uniform random, exact Nash for the poker games, perfect tic-tac-toe.

Each reports its full distribution over the legal actions (``action_probs``) and samples
from it in ``act`` with its own seeded Generator. Game knowledge is read from
``Observation.info_key`` (OpenSpiel's information-state string), never from the text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from coplay.policies.solvers import (
    NASH_ITERATIONS,
    NashTable,
    kuhn_leduc_nash_table,
    tic_tac_toe_optimal_actions,
)
from coplay.rollout.streams import SeatStream, uniforms
from coplay.types import Decision, Observation, Policy


def _legal(observation: Observation) -> tuple[str, ...]:
    if not observation.legal_actions:
        raise ValueError(
            f"scripted policies need legal actions; observation of player "
            f"{observation.player} in {observation.game!r} has none"
        )
    return observation.legal_actions


Source = np.random.Generator | SeatStream
"""Where a scripted draw comes from: the policy's own generator or a seat's stream."""


class ScriptedPolicy:
    """Shared ``act``: sample each observation's action from ``action_probs``."""

    policy_id: str
    version: int = 0

    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)

    def action_probs(self, observations: Sequence[Observation]) -> list[dict[str, float]]:
        raise NotImplementedError

    def sampler_state(self) -> dict:
        """Its sampling generator's state, which a resumed run restores."""
        return self._rng.bit_generator.state

    def load_sampler_state(self, state: dict) -> None:
        self._rng.bit_generator.state = state

    def act(self, observations: Sequence[Observation]) -> list[Decision]:
        return self._act(observations, [self._rng] * len(observations))

    def act_streamed(
        self, observations: Sequence[Observation], streams: Sequence[SeatStream]
    ) -> list[Decision]:
        """``act`` with observation ``i``'s action drawn from ``streams[i]`` (its seat's
        stream, ``coplay.rollout.streams``)."""
        if len(streams) != len(observations):
            raise ValueError(f"got {len(observations)} observations but {len(streams)} streams")
        return self._act(observations, streams)

    def _act(
        self, observations: Sequence[Observation], sources: Sequence[Source]
    ) -> list[Decision]:
        """Each observation's action drawn by ``sources[i]``: the CDF of its
        distribution inverted at one uniform, which is ``Generator.choice(k, p=...)``'s
        own draw."""
        decisions = []
        for probs, u in zip(self.action_probs(observations), _uniforms(sources), strict=True):
            actions = list(probs)
            weights = np.fromiter(probs.values(), dtype=float)
            cdf = (weights / weights.sum()).cumsum()
            action = actions[int(np.searchsorted(cdf / cdf[-1], u, side="right"))]
            decisions.append(Decision(text=action, action=action, policy_id=self.policy_id))
        return decisions


def _uniforms(sources: Sequence[Source]) -> Sequence[float]:
    """One uniform per source, in order: seats' streams in one vectorised draw."""
    if sources and all(isinstance(s, SeatStream) for s in sources):
        return uniforms(sources, [1] * len(sources)).tolist()
    return [float(s.random()) for s in sources]


class RandomPolicy(ScriptedPolicy):
    """Uniform over the legal actions of any game."""

    def __init__(self, seed: int = 0, *, policy_id: str = "random") -> None:
        super().__init__(seed)
        self.policy_id = policy_id

    def action_probs(self, observations: Sequence[Observation]) -> list[dict[str, float]]:
        probs = []
        for obs in observations:
            legal = _legal(obs)
            probs.append(dict.fromkeys(legal, 1.0 / len(legal)))
        return probs

    def _act(
        self, observations: Sequence[Observation], sources: Sequence[Source]
    ) -> list[Decision]:
        """Uniform over the legal actions; a free-text turn (no legal list, such as a
        message turn of a talk game) is answered with an empty message."""
        rows = [
            (o, r)
            for o, r in zip(observations, sources, strict=True)
            if o.legal_actions is not None
        ]
        chosen = iter(super()._act([o for o, _ in rows], [r for _, r in rows]))
        return [
            next(chosen)
            if o.legal_actions is not None
            else Decision(text="", action="", policy_id=self.policy_id)
            for o in observations
        ]


class TablePolicy(ScriptedPolicy):
    """Plays a fixed table: OpenSpiel information-state string -> action name -> probability.

    The table form of ``coplay.policies.solvers`` (``NashTable``); used for solved
    equilibria and for exact best responses (PSRO's exact oracle).
    """

    def __init__(self, table: NashTable, *, policy_id: str = "table", seed: int = 0) -> None:
        super().__init__(seed)
        empty = next((key for key, row in table.items() if not sum(row.values()) > 0), None)
        if empty is not None:
            raise ValueError(
                f"{policy_id}: the table gives no action a positive probability at "
                f"information state {empty!r}"
            )
        self.table = table
        self.policy_id = policy_id

    def action_probs(self, observations: Sequence[Observation]) -> list[dict[str, float]]:
        probs = []
        for obs in observations:
            legal = _legal(obs)
            if obs.info_key not in self.table:
                raise KeyError(f"{self.policy_id}: unknown information state {obs.info_key!r}")
            row = self.table[obs.info_key]
            legal_probs = {a: row.get(a, 0.0) for a in legal}
            # Renormalising zero mass would play an arbitrary action, not the table
            if not sum(legal_probs.values()) > 0:
                raise ValueError(
                    f"{self.policy_id}: the table gives none of the legal actions "
                    f"{', '.join(legal)} a positive probability at information state "
                    f"{obs.info_key!r}"
                )
            probs.append(legal_probs)
        return probs


class NashPolicy(TablePolicy):
    """An approximate Nash equilibrium of 2-player Kuhn or Leduc poker (CFR+).

    The equilibrium table maps OpenSpiel information-state strings to action
    probabilities; see ``coplay.policies.solvers.kuhn_leduc_nash_table``.
    """

    def __init__(
        self, game_name: str = "kuhn_poker", seed: int = 0, *, iterations: int | None = None
    ) -> None:
        table = kuhn_leduc_nash_table(game_name, iterations)
        super().__init__(table, policy_id=f"nash:{game_name}", seed=seed)
        self.game_name = game_name


class PerfectPlayer(ScriptedPolicy):
    """Minimax-optimal tic-tac-toe, uniform among the optimal moves."""

    def __init__(self, game_name: str = "tic_tac_toe", seed: int = 0) -> None:
        if game_name != "tic_tac_toe":
            raise ValueError(f"PerfectPlayer plays tic_tac_toe only, not {game_name!r}")
        super().__init__(seed)
        self.policy_id = "perfect:tic_tac_toe"

    def action_probs(self, observations: Sequence[Observation]) -> list[dict[str, float]]:
        probs = []
        for obs in observations:
            legal = _legal(obs)
            best = tic_tac_toe_optimal_actions(_history(obs))
            named = [a for a in legal if int(a.strip("[]")) in best]
            probs.append({a: (1.0 / len(named) if a in named else 0.0) for a in legal})
        return probs


def _history(observation: Observation) -> tuple[int, ...]:
    """Tic-tac-toe's information-state string is the move history, e.g. ``"4, 0"``."""
    if observation.info_key is None:
        raise ValueError("tic-tac-toe observations must carry info_key (the move history)")
    return tuple(int(a) for a in observation.info_key.split(",") if a.strip())


# --- factory ----------------------------------------------------------------------

_NASH_GAMES = tuple(NASH_ITERATIONS)

_BUILDERS: dict[str, Callable[[str, int], Policy]] = {
    "random": lambda game, seed: RandomPolicy(seed),
    "nash": lambda game, seed: NashPolicy(game, seed),
    "perfect": lambda game, seed: PerfectPlayer(game, seed),
}

_OPTIMAL = {"kuhn_poker": "nash", "leduc_poker": "nash", "tic_tac_toe": "perfect"}
"""Which exact policy ``"optimal"`` means for each game."""

_SUPPORTED = {"nash": _NASH_GAMES, "perfect": ("tic_tac_toe",)}
"""Games each game-specific policy plays; absent means any game."""


def _resolve(name: str, game_name: str) -> str:
    if name != "optimal":
        return name
    if game_name not in _OPTIMAL:
        raise ValueError(
            f"no optimal scripted policy for {game_name!r}; available for: {', '.join(_OPTIMAL)}"
        )
    return _OPTIMAL[game_name]


def make_scripted(name: str, game_name: str, seed: int = 0) -> Policy:
    """Build a scripted policy by name: ``random``, ``nash``, ``perfect`` or ``optimal``."""
    resolved = _resolve(name, game_name)
    if resolved not in _BUILDERS:
        raise ValueError(
            f"unknown scripted policy {name!r}; available: {', '.join([*_BUILDERS, 'optimal'])}"
        )
    games = _SUPPORTED.get(resolved)
    if games is not None and game_name not in games:
        raise ValueError(
            f"scripted policy {resolved!r} does not play {game_name!r}; it plays: {', '.join(games)}"
        )
    return _BUILDERS[resolved](game_name, seed)
