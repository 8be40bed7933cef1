"""Exact win / draw / loss probabilities of a policy against a fixed opponent.

The game tree is walked depth by depth from the start, every chance, opponent and
policy branch weighted by its probability; at each depth both sides are asked, in
batches, for their action distributions at the states the walk reached (an answer is
shared by states whose observations the policy cannot tell apart, e.g. the same
tic-tac-toe board reached by different move orders). The match's outcome is then
known without sampling noise: a tic-tac-toe agent's loss rate against the perfect
player from each seat, where 150 sampled games per seat leave a 95% interval of about
+-0.05 around it.

``greedy`` plays the policy's most likely action everywhere instead (ties to the
first legal action): in a perfect-information game a deterministic policy can be
optimal, and the gap between the sampled and the greedy loss rate says how much of
the loss is the policy's remaining spread rather than its preferred moves.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyspiel

from coplay.envs.openspiel_env import observation_for_state
from coplay.envs.renderers import legal_action_map
from coplay.eval.exact import QUERY_BATCH, checked_answers, env_state, solvable_game, tree_size
from coplay.eval.forfeits import forfeit_share, round_forfeits
from coplay.eval.matches import outcome
from coplay.types import GameSpec, Observation, TabularQueryable

MAX_NODES = 2_000_000
"""Most histories one walk visits (both tables' zero-probability branches are skipped);
beyond it the walk stops with an error rather than run for minutes."""

AUTO_MAX_HISTORIES = 1_000_000
"""``train.exact_matches: auto`` walks perfect-information games whose whole tree holds
at most this many histories (tic-tac-toe: 549,946)."""


@dataclass(frozen=True)
class ExactOutcome:
    """The exact result of the policy in one seat, every other seat the opponent."""

    seat: int
    win: float
    draw: float
    loss: float
    mean_return: float
    nodes: int
    """Histories the walk visited."""


def exact_outcomes(
    policy: TabularQueryable,
    opponent: TabularQueryable,
    game_name: str,
    *,
    params: Mapping[str, object] | None = None,
    greedy: bool = False,
    max_nodes: int = MAX_NODES,
) -> tuple[ExactOutcome, ...]:
    """The policy's exact outcome from every seat against ``opponent`` in the others."""
    env, game = solvable_game(game_name, params)
    mine = Oracle(policy, env, greedy=greedy)
    return outcomes(game, mine, Oracle(opponent, env), max_nodes=max_nodes)


def sampled_and_greedy_outcomes(
    policy: TabularQueryable,
    opponent: TabularQueryable,
    game_name: str,
    *,
    params: Mapping[str, object] | None = None,
    max_nodes: int = MAX_NODES,
) -> tuple[tuple[ExactOutcome, ...], tuple[ExactOutcome, ...]]:
    """``exact_outcomes`` of the policy and of its argmax, asking each side once."""
    env, game = solvable_game(game_name, params)
    mine, theirs = Oracle(policy, env), Oracle(opponent, env)
    return (
        outcomes(game, mine, theirs, max_nodes=max_nodes),
        outcomes(game, mine.argmax(), theirs, max_nodes=max_nodes),
    )


def outcomes(
    game: pyspiel.Game, mine: Oracle, theirs: Oracle, *, max_nodes: int = MAX_NODES
) -> tuple[ExactOutcome, ...]:
    """One walk per seat, the policy's oracle in that seat and the opponent's elsewhere."""
    return tuple(
        walk(game, mine, theirs, seat, max_nodes=max_nodes) for seat in range(game.num_players())
    )


class Oracle:
    """One side's action distributions by OpenSpiel action id, asked in batches and
    remembered by the policy's ``observation_key`` (the whole observation if it has
    none)."""

    def __init__(self, policy: TabularQueryable, env, *, greedy: bool = False) -> None:
        if not hasattr(policy, "action_probs"):
            raise TypeError(f"{type(policy).__name__} cannot report action probabilities")
        self.policy, self.env, self.greedy = policy, env, greedy
        self.key: Callable[[Observation], Hashable] = getattr(
            policy, "observation_key", lambda obs: obs
        )
        self.cache: dict[Hashable, dict[str, float]] = {}

    def observe(self, states: Sequence[pyspiel.State]) -> list[Observation]:
        """What the player to move sees in each state."""
        return [
            observation_for_state(
                env_state(s),
                s.current_player(),
                game_name=self.env.spec.name,
                renderer=self.env.renderer,
            )
            for s in states
        ]

    def __call__(self, states: Sequence[pyspiel.State]) -> list[dict[int, float]]:
        shown = [env_state(s) for s in states]
        obs = self.observe(states)
        keys = [self.key(o) for o in obs]
        todo = {k: o for k, o in zip(keys, obs, strict=True) if k not in self.cache}
        items = list(todo.items())
        for i in range(0, len(items), QUERY_BATCH):
            batch = items[i : i + QUERY_BATCH]
            answers = checked_answers(self.policy, [o for _, o in batch])
            self.cache.update(zip((k for k, _ in batch), answers, strict=True))
        out = []
        for s, st, k in zip(states, shown, keys, strict=True):
            ids = legal_action_map(self.env.renderer, st, s.current_player())
            out.append({ids[a]: p for a, p in self._shape(self.cache[k]).items()})
        return out

    def argmax(self) -> Oracle:
        """The same side playing its most likely action, sharing the answers asked so far."""
        other = copy.copy(self)
        other.greedy = True
        return other

    def _shape(self, probs: dict[str, float]) -> dict[str, float]:
        if not self.greedy:
            return probs
        best = max(probs, key=probs.__getitem__)  # the first of tied actions
        return {best: 1.0}


def walk(
    game: pyspiel.Game, mine: Oracle, theirs: Oracle, seat: int, *, max_nodes: int = MAX_NODES
) -> ExactOutcome:
    """Sum the outcome over every history reachable with positive probability, one
    depth at a time so that each side is asked once per depth."""
    totals = np.zeros(4)  # win, draw, loss, return

    def share(node: pyspiel.State) -> float:
        """The forfeit share of whoever moves at ``node`` (later in a round of
        simultaneous moves than a forfeit; ``round_forfeits``)."""
        return forfeit_share((mine if node.current_player() == seat else theirs)([node])[0])

    nodes = 0
    frontier: list[tuple[pyspiel.State, float]] = [(game.new_initial_state(), 1.0)]
    while frontier:
        nodes += len(frontier)
        if nodes > max_nodes:
            raise ValueError(
                f"an exact match of {game} visits over {max_nodes:,} histories; "
                "evaluate by sampled games (train.exact_matches=off)"
            )
        nxt: list[tuple[pyspiel.State, float]] = []
        movers: dict[bool, list[tuple[pyspiel.State, float]]] = {True: [], False: []}
        for state, reach in frontier:
            if state.is_terminal():
                returns = state.returns()
                totals[1 - outcome(returns, seat)] += reach
                totals[3] += reach * returns[seat]
            elif state.is_chance_node():
                nxt.extend((state.child(a), reach * p) for a, p in state.chance_outcomes())
            else:
                movers[state.current_player() == seat].append((state, reach))
        for is_mine, group in movers.items():
            if group:
                answers = (mine if is_mine else theirs)([s for s, _ in group])
                for (state, reach), probs in zip(group, answers, strict=True):
                    nxt.extend((state.child(a), reach * p) for a, p in probs.items() if p > 0)
                    if left := forfeit_share(probs):  # a sampled text policy's forfeits
                        for p, returns in round_forfeits(state, mine.env.spec, share):
                            totals[1 - outcome(returns, seat)] += reach * left * p
                            totals[3] += reach * left * p * returns[seat]
        frontier = nxt
    win, draw, loss, ret = totals
    return ExactOutcome(seat, float(win), float(draw), float(loss), float(ret), nodes)


OPTIMAL_BOTS = frozenset({"nash", "perfect", "optimal"})
"""Opponents that ``auto`` evaluates exactly: optimal play, whose pruned tree is small
(against the perfect tic-tac-toe player about 70,000 histories per seat; against a
random one the whole 549,946)."""


def exact_match_opponents(
    mode: bool | str,
    spec: GameSpec,
    game_name: str,
    params: Mapping[str, object] | None,
    opponents: Mapping[str, object],
    *,
    exact: bool,
) -> tuple[str, ...]:
    """The evaluation opponents to add exact matches against. ``mode`` True: every one
    that reports action probabilities (a text-mode policy's are those of its sampled
    answers: callers read it through a ``SampledPolicy``, never its ``action_probs``;
    an error where the game has no OpenSpiel backend); False: none; "auto": the
    optimal bots, where exact exploitability is on or in perfect-information OpenSpiel
    games of at most ``AUTO_MAX_HISTORIES``."""
    if mode is True and spec.openspiel_name is None:
        raise ValueError(
            f"train.exact_matches=on needs an OpenSpiel game; {spec.name!r} is not one"
        )
    if mode is False or spec.openspiel_name is None:
        return ()
    able = [n for n, opp in opponents.items() if hasattr(opp, "action_probs")]
    if mode is True:
        return tuple(able)
    able = [n for n in able if n in OPTIMAL_BOTS]
    if not able or not (exact or spec.perfect_information):
        return ()
    if not exact and tree_size(solvable_game(game_name, params)[1], AUTO_MAX_HISTORIES) is None:
        return ()
    return tuple(able)
