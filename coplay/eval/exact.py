"""Exact game-theoretic evaluation of any policy through OpenSpiel.

The policy is queried once per information state, with the very observation the
environment would show there, and its answers fill an OpenSpiel ``TabularPolicy``;
OpenSpiel's best responses then give NashConv and exploitability exactly (no
sampling). Only games with an OpenSpiel backend qualify.

Any number of players and any payoff structure: NashConv (the sum over players of
what a best response gains over the policy) is defined for all of them. Games with
simultaneous moves are evaluated on OpenSpiel's turn-based transform, in which each
player still sees the state before anyone's move of the round, as in the env.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyspiel
from open_spiel.python import policy as os_policy
from open_spiel.python.algorithms import expected_game_score
from open_spiel.python.algorithms import exploitability as os_exploitability

from coplay.envs.openspiel_env import observation_for_state
from coplay.envs.registry import make_env
from coplay.envs.renderers import legal_action_map
from coplay.types import GameSpec, Observation, TabularQueryable

QUERY_BATCH = 512
"""Information states per ``action_probs`` call (one batched forward for an LM)."""


@dataclass(frozen=True)
class ExploitabilityResult:
    """Exact distance from equilibrium of one policy playing every seat.

    ``nash_conv`` is the headline number for every game. ``exploitability`` is
    NashConv divided by the number of players (OpenSpiel's convention: uniform random
    Kuhn poker gives 11/24); only in two-player zero-sum games is it the value a best
    responder gains over the game value. With three or more players, or in
    general-sum games, read it as NashConv / n and nothing more.
    """

    exploitability: float
    nash_conv: float
    best_response_values: tuple[float, ...]
    """Value a best responder gets in each seat against the policy."""
    on_policy_values: tuple[float, ...]
    """Value of the policy in each seat in self-play."""
    num_info_states: int


def solvable_game(game_name: str, params: Mapping[str, object] | None):
    """The env and the game exact evaluation walks: OpenSpiel's turn-based transform
    when the game has simultaneous moves (best responses need one mover per node)."""
    env = make_env(game_name, **dict(params or {}))
    game = getattr(env, "game", None)
    if not isinstance(game, pyspiel.Game):
        raise ValueError(f"game {game_name!r} has no OpenSpiel backend; exact evaluation needs one")
    if game.get_type().dynamics == pyspiel.GameType.Dynamics.SIMULTANEOUS:
        game = pyspiel.convert_to_turn_based(game)
    return env, game


AUTO_MAX_HISTORIES = 100_000
"""Largest game tree (histories, terminal included) that ``train.exact: auto`` evaluates
exactly: Leduc has 9,457 and 2-player Liar's dice 294,883, where one evaluation asks
the model about every information state and takes minutes."""


def tree_size(game: pyspiel.Game, cap: int) -> int | None:
    """Histories in ``game``'s tree (terminal ones included), or None once over ``cap``:
    the walk stops early, so asking about a huge game costs about ``cap`` steps."""
    count, stack = 0, [game.new_initial_state()]
    while stack:
        state = stack.pop()
        count += 1
        if count > cap:
            return None
        if not state.is_terminal():
            stack.extend(state.child(a) for a in state.legal_actions())
    return count


def decide_exact(
    mode: bool | str, spec: GameSpec, game_name: str, params: Mapping[str, object] | None
) -> bool:
    """Whether to evaluate exactly: ``mode`` True (required: an error where impossible),
    False, or "auto" (where possible and the tree has at most ``AUTO_MAX_HISTORIES``)."""
    possible = spec.openspiel_name is not None and not spec.perfect_information
    if mode is True and not possible:
        raise ValueError(
            f"train.exact=on needs an imperfect-information OpenSpiel game; "
            f"{spec.name!r} is not one"
        )
    if mode is False or not possible:
        return False
    if mode is True:
        return True
    _, game = solvable_game(game_name, params)
    return tree_size(game, AUTO_MAX_HISTORIES) is not None


def env_state(state: pyspiel.State) -> pyspiel.State:
    """The state the env shows: in a turn-based transform, the simultaneous state with
    none of this round's moves applied, so no player sees another's pending choice."""
    is_transform = state.get_game().get_type().short_name == "turn_based_simultaneous_game"
    return state.simultaneous_game_state() if is_transform else state


def to_openspiel_policy(
    policy: TabularQueryable,
    game_name: str,
    *,
    params: Mapping[str, object] | None = None,
) -> os_policy.TabularPolicy:
    """An OpenSpiel tabular policy holding ``policy``'s action distribution at every
    information state of ``game_name``."""
    tab = to_table(policy, game_name, params=params)
    _check_distributions(tab)
    return tab


def to_table(
    policy: TabularQueryable,
    game_name: str,
    *,
    params: Mapping[str, object] | None = None,
) -> os_policy.TabularPolicy:
    """``to_openspiel_policy`` without checking that rows sum to 1: a sampled text
    policy's rows leave out its forfeits (``coplay.eval.forfeits``)."""
    if not hasattr(policy, "action_probs"):
        raise TypeError(f"{type(policy).__name__} cannot report action probabilities")
    env, game = solvable_game(game_name, params)
    tab = os_policy.TabularPolicy(game)
    tab.action_probability_array[:] = 0.0
    for start in range(0, len(tab.states), QUERY_BATCH):
        states = tab.states[start : start + QUERY_BATCH]
        observations = [
            observation_for_state(
                env_state(s), s.current_player(), game_name=env.spec.name, renderer=env.renderer
            )
            for s in states
        ]
        answers = checked_answers(policy, observations)
        for i, (s, probs) in enumerate(zip(states, answers, strict=True), start=start):
            ids = legal_action_map(env.renderer, env_state(s), s.current_player())
            for action, p in probs.items():
                tab.action_probability_array[i, ids[action]] = p
    return tab


ROW_TOL = 1e-4
"""How far from 1 a policy's answer may sum (above 1 anywhere; below 1 only where a
forfeit's share is left out of it, ``coplay.eval.forfeits``)."""


def checked_answers(
    policy: TabularQueryable, observations: Sequence[Observation]
) -> list[dict[str, float]]:
    """``policy``'s answers at ``observations``, one each, every one a distribution over
    that observation's legal actions summing to at most 1 (an illegal action of
    probability 0 is dropped). Anything else is a ValueError naming the state: a row
    with a negative entry, or over 1 in all, is no policy, and OpenSpiel evaluated it."""
    answers = policy.action_probs(observations)
    if len(answers) != len(observations):
        raise ValueError(
            f"policy {getattr(policy, 'policy_id', type(policy).__name__)!r} answered "
            f"{len(answers)} of the {len(observations)} information states it was asked"
        )
    return [_checked(probs, obs) for probs, obs in zip(answers, observations, strict=True)]


def _checked(probs: Mapping[str, float], obs: Observation) -> dict[str, float]:
    where = f"info state {obs.info_key!r}" if obs.info_key is not None else f"player {obs.player}"
    legal, row = set(obs.legal_actions or ()), {}
    for action, p in probs.items():
        # NaN passes every comparison below (and failed later, deep in OpenSpiel, with
        # "iteration over a 0-d array").
        if not np.isfinite(p):
            raise ValueError(
                f"policy probabilities are not finite at {where}: the weights diverged "
                "(a learning rate too high for the model? try a lower optim.lr)"
            )
        if p < 0:
            raise ValueError(f"policy gives {action!r} a negative probability ({p}) at {where}")
        if action in legal:
            row[action] = float(p)
        elif p > 0:
            raise ValueError(
                f"policy gives probability {p} to {action!r}, not a legal action at {where} "
                f"(legal: {' '.join(obs.legal_actions or ())})"
            )
    if (total := sum(row.values())) > 1.0 + ROW_TOL:
        raise ValueError(f"policy probabilities sum to {total:.6f} (not 1) at {where}")
    return row


def _check_distributions(tab: os_policy.TabularPolicy) -> None:
    """Refuse rows short of 1 (``to_table`` refused every other fault): only a sampled
    text policy's rows leave a forfeit's share out, and they are not read here."""
    sums = tab.action_probability_array.sum(axis=1)
    bad = np.flatnonzero(np.abs(sums - 1.0) > ROW_TOL)
    if bad.size:
        key = tab.states[bad[0]].information_state_string()
        raise ValueError(
            f"policy probabilities sum to {sums[bad[0]]:.6f} (not 1) at info state {key!r}"
        )


def exploitability(
    policy: TabularQueryable,
    game_name: str,
    *,
    params: Mapping[str, object] | None = None,
) -> ExploitabilityResult:
    """Exact exploitability and NashConv of ``policy`` playing every seat of the game."""
    _, game = solvable_game(game_name, params)
    tab = to_openspiel_policy(policy, game_name, params=params)
    return tabular_exploitability(game, tab)


def tabular_exploitability(
    game: pyspiel.Game, tab: os_policy.TabularPolicy
) -> ExploitabilityResult:
    """Exploitability of an OpenSpiel tabular policy (shared by every seat)."""
    res = os_exploitability.nash_conv(game, tab, return_only_nash_conv=False)
    improvements = np.asarray(res.player_improvements, dtype=float)
    on_policy = _on_policy_values(game, tab)
    n = game.num_players()
    return ExploitabilityResult(
        exploitability=float(res.nash_conv) / n,
        nash_conv=float(res.nash_conv),
        best_response_values=tuple(float(v) for v in on_policy + improvements),
        on_policy_values=tuple(float(v) for v in on_policy),
        num_info_states=len(tab.states),
    )


def _on_policy_values(game: pyspiel.Game, tab: os_policy.TabularPolicy) -> np.ndarray:
    return np.asarray(
        expected_game_score.policy_value(game.new_initial_state(), [tab] * game.num_players())
    )
