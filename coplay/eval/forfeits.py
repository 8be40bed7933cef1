"""Exact values of a policy that may forfeit: its distributions may sum to less than 1.

A free-text policy can answer with no legal action; under the game's ``forfeit``
treatment (``coplay.rollout.invalid``) the game then ends and the offender gets the
game's minimum return (``forfeit_returns``). OpenSpiel's best responses know no such
move, so a tabular policy whose row at an information state sums to ``1 - f`` is read
here as forfeiting with probability ``f`` there, and NashConv is computed by our own
walk of the tree: the best responder faces the others' forfeits as terminal outcomes
(it never forfeits itself: the minimum return is never better than a move).

Where no row has a deficit this equals OpenSpiel's ``nash_conv`` (tested).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable

import numpy as np
import pyspiel
from open_spiel.python import policy as os_policy

from coplay.eval.exact import ExploitabilityResult
from coplay.rollout.invalid import forfeit_returns
from coplay.types import GameSpec

FORFEIT_TOL = 1e-9
"""A deficit below this is float error, not a forfeit."""


def forfeit_share(probs) -> float:
    """The probability a distribution (``dict`` or row) leaves to a forfeit."""
    total = float(sum(probs.values()) if isinstance(probs, dict) else np.sum(probs))
    left = 1.0 - total
    return left if left > FORFEIT_TOL else 0.0


def has_forfeits(tab: os_policy.TabularPolicy) -> bool:
    return bool(np.any(1.0 - tab.action_probability_array.sum(axis=1) > FORFEIT_TOL))


TURN_BASED = "turn_based_simultaneous_game"
"""OpenSpiel's transform of a simultaneous-move game, which exact evaluation walks."""


def round_forfeits(
    state: pyspiel.State, spec: GameSpec, share: Callable[[pyspiel.State], float]
) -> list[tuple[float, list[float]]]:
    """The outcomes of a forfeit by the player to move at ``state``: (probability,
    returns) pairs, the probabilities summing to 1.

    In a turn-based game the forfeit ends it there: one outcome. In a round of
    simultaneous moves (OpenSpiel's turn-based transform) the players after it in the
    round still answer, as they do in play, and may forfeit too, each with its own
    ``share(state)`` at its own node (which does not show the offender's move); every
    player who forfeits in the round is charged (``forfeit_returns``), as the rollout
    engine charges them.
    """
    offender = state.current_player()
    rest = _rest_of_round(state)
    out = []
    for forfeits in itertools.product((False, True), repeat=len(rest)):
        p = 1.0
        for later, forfeited in zip(rest, forfeits, strict=True):
            q = share(later)
            p *= q if forfeited else 1.0 - q
        if p > 0:
            late = [s.current_player() for s, f in zip(rest, forfeits, strict=True) if f]
            out.append((p, forfeit_returns(spec, offender, *late)))
    return out


def _rest_of_round(state: pyspiel.State) -> list[pyspiel.State]:
    """The nodes of the players who move after ``state``'s in its round of simultaneous
    moves (none outside OpenSpiel's turn-based transform). Any move leads there: a
    player's view in the round does not show the moves made before it."""
    if state.get_game().get_type().short_name != TURN_BASED:
        return []
    played = len(state.simultaneous_game_state().history())
    rest, node = [], state
    while True:
        node = node.child(node.legal_actions()[0])
        if node.is_terminal() or len(node.simultaneous_game_state().history()) != played:
            return rest
        rest.append(node)


class _Tree:
    """Values of one tabular profile, every seat playing ``tab``."""

    def __init__(self, game: pyspiel.Game, tab: os_policy.TabularPolicy, spec: GameSpec) -> None:
        self.game, self.tab, self.spec = game, tab, spec
        self.n = game.num_players()

    def policy(self, state: pyspiel.State) -> tuple[list[tuple[int, float]], float]:
        """(action, probability) pairs at ``state`` and the forfeit share there."""
        row = self.tab.action_probability_array[self.tab.state_index(state)]
        moves = [(a, float(row[a])) for a in state.legal_actions() if row[a] > 0]
        return moves, forfeit_share(row)

    def values(self, state: pyspiel.State) -> np.ndarray:
        """Every seat's expected return from ``state`` on the profile."""
        if state.is_terminal():
            return np.asarray(state.returns(), dtype=float)
        if state.is_chance_node():
            return sum(p * self.values(state.child(a)) for a, p in state.chance_outcomes())
        moves, left = self.policy(state)
        out = np.zeros(self.n)
        if left:
            out += left * self.forfeited(state, lambda node: self.policy(node)[1])
        for a, p in moves:
            out = out + p * self.values(state.child(a))
        return out

    def forfeited(self, state: pyspiel.State, share: Callable[[pyspiel.State], float]):
        """Every seat's expected return when the player to move at ``state`` forfeits
        (``round_forfeits``; the others' forfeit shares read through ``share``)."""
        return sum(
            p * np.asarray(r, dtype=float) for p, r in round_forfeits(state, self.spec, share)
        )

    def best_response_value(self, player: int) -> float:
        """What ``player`` gets best-responding to the profile in the other seats."""
        infosets: dict[str, list[tuple[pyspiel.State, float]]] = defaultdict(list)
        self._collect(self.game.new_initial_state(), 1.0, player, infosets)
        best: dict[str, int] = {}
        memo: dict[str, float] = {}

        def others_share(node: pyspiel.State) -> float:
            return 0.0 if node.current_player() == player else self.policy(node)[1]

        def value(state: pyspiel.State) -> float:
            key = state.history_str()
            if key in memo:
                return memo[key]
            if state.is_terminal():
                v = state.returns()[player]
            elif state.is_chance_node():
                v = sum(p * value(state.child(a)) for a, p in state.chance_outcomes())
            elif state.current_player() == player:
                v = value(state.child(choose(state.information_state_string(player))))
            else:
                moves, left = self.policy(state)
                # the best responder never forfeits: the minimum is never better than a move
                v = left * self.forfeited(state, others_share)[player] if left else 0.0
                v += sum(p * value(state.child(a)) for a, p in moves)
            memo[key] = v
            return v

        def choose(infoset: str) -> int:
            if infoset not in best:
                members = infosets[infoset]
                actions = members[0][0].legal_actions()
                gains = [sum(r * value(h.child(a)) for h, r in members) for a in actions]
                best[infoset] = actions[int(np.argmax(gains))]
            return best[infoset]

        return value(self.game.new_initial_state())

    def _collect(self, state, reach: float, player: int, out) -> None:
        """Histories of ``player``'s information sets with the others' reach (chance
        included); branches the others never reach are skipped."""
        if state.is_terminal() or reach == 0.0:
            return
        if state.is_chance_node():
            for a, p in state.chance_outcomes():
                self._collect(state.child(a), reach * p, player, out)
        elif state.current_player() == player:
            out[state.information_state_string(player)].append((state, reach))
            for a in state.legal_actions():
                self._collect(state.child(a), reach, player, out)
        else:
            for a, p in self.policy(state)[0]:
                self._collect(state.child(a), reach * p, player, out)


def forfeit_exploitability(
    game: pyspiel.Game, tab: os_policy.TabularPolicy, spec: GameSpec
) -> ExploitabilityResult:
    """NashConv of ``tab`` in every seat where its deficits are forfeits."""
    tree = _Tree(game, tab, spec)
    on_policy = tree.values(game.new_initial_state())
    best = np.asarray([tree.best_response_value(p) for p in range(tree.n)])
    nash_conv = float(np.sum(best - on_policy))
    return ExploitabilityResult(
        exploitability=nash_conv / tree.n,
        nash_conv=nash_conv,
        best_response_values=tuple(float(v) for v in best),
        on_policy_values=tuple(float(v) for v in on_policy),
        num_info_states=len(tab.states),
    )
