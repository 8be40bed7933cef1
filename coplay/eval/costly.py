"""Where a policy's losses come from: the positions whose one change is worth the most.

For a policy in one seat against a fixed opponent, each position the policy can be
asked about (one observation: a tic-tac-toe board, a poker information state) gets

    gain(x, a) = sum over histories h the policy sees as x of reach(h) * (Q(h, a) - V(h))

where reach is the probability of arriving at h, V(h) the seat's expected return from
h when both sides keep their policies, and Q(h, a) the same after playing a at h. It
is exactly what the seat's expected return in the match would gain if the policy
answered a at x and changed nothing else (a history never passes the same observation
twice: perfect recall). A position's cost is its best gain, the action that earns it
is the one-step improvement there, and the costliest positions are where training
should look first: a tic-tac-toe agent's missed blocks, each reached once in fifty
games, show up here long before a sampled evaluation could tell them apart.

The walk is the exact match's (``exact_match.walk``), with every action of the policy
expanded, so Q is known for moves it (almost) never plays.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from functools import partial

import pyspiel

from coplay.envs.renderers import legal_action_map
from coplay.eval.exact import env_state, solvable_game
from coplay.eval.exact_match import MAX_NODES, Oracle
from coplay.eval.forfeits import forfeit_share, round_forfeits
from coplay.types import TabularQueryable


@dataclass(frozen=True)
class CostlyPosition:
    """One observation of the policy's seat and what changing its answer there is worth."""

    seat: int
    observation: str
    reach: float
    """Probability of arriving at the observation (summed over its histories)."""
    cost: float
    """Expected return the seat gains if the policy played ``best`` here instead."""
    played: str
    """The policy's most likely action here."""
    played_prob: float
    best: str
    """The action whose gain is ``cost``."""


@dataclass
class _Node:
    reach: float
    children: list[tuple[int, float, str]] = field(default_factory=list)
    """(node index, probability, the action's name where the policy moves)."""
    value: float = 0.0
    key: Hashable | None = None
    """The policy's observation key, at its own decision nodes."""
    text: str = ""


def costly_positions(
    policy: TabularQueryable,
    opponent: TabularQueryable,
    game_name: str,
    *,
    params: Mapping[str, object] | None = None,
    top: int = 10,
    max_nodes: int = MAX_NODES,
) -> tuple[tuple[CostlyPosition, ...], ...]:
    """Per seat (the policy there, the opponent elsewhere), the ``top`` positions with
    the largest cost, costliest first; positions with no gain are left out."""
    env, game = solvable_game(game_name, params)
    mine, theirs = Oracle(policy, env), Oracle(opponent, env)
    return tuple(
        rank(seat, tree(game, mine, theirs, seat, max_nodes), mine, top)
        for seat in range(game.num_players())
    )


def tree(
    game: pyspiel.Game, mine: Oracle, theirs: Oracle, seat: int, max_nodes: int = MAX_NODES
) -> list[_Node]:
    """Every history reachable with positive probability, with the seat's values.

    Built depth by depth (each side asked once per depth); a child's index is larger
    than its parent's, so one backward sweep fills the values."""
    nodes = [_Node(reach=1.0)]
    frontier: list[tuple[int, pyspiel.State]] = [(0, game.new_initial_state())]

    def share(node: pyspiel.State) -> float:
        """The forfeit share of whoever moves at ``node`` (``round_forfeits``)."""
        return forfeit_share((mine if node.current_player() == seat else theirs)([node])[0])

    while frontier:
        nxt: list[tuple[int, pyspiel.State]] = []
        grow = partial(_grow, nodes, nxt)
        movers: dict[bool, list[tuple[int, pyspiel.State]]] = {True: [], False: []}
        for idx, state in frontier:
            if state.is_terminal():
                nodes[idx].value = state.returns()[seat]
            elif state.is_chance_node():
                for a, p in state.chance_outcomes():
                    grow(idx, state, a, p)
            else:
                movers[state.current_player() == seat].append((idx, state))
        others = movers[False]
        for (idx, state), probs in zip(others, theirs([s for _, s in others]), strict=True):
            for a, p in probs.items():
                if p > 0:
                    grow(idx, state, a, p)
            _forfeit(nodes, idx, state, probs, mine.env.spec, seat, share)
        own = movers[True]
        states = [s for _, s in own]
        for (idx, state), probs, obs in zip(own, mine(states), mine.observe(states), strict=True):
            nodes[idx].key, nodes[idx].text = mine.key(obs), obs.text
            names = legal_action_map(mine.env.renderer, env_state(state), seat)
            for name, a in names.items():
                if probs.get(a, 0.0) > 0 or nodes[idx].reach > 0:
                    grow(idx, state, a, probs.get(a, 0.0), name)
            _forfeit(nodes, idx, state, probs, mine.env.spec, seat, share)
        if len(nodes) > max_nodes:
            raise ValueError(
                f"finding the costly positions of {game} visits over {max_nodes:,} histories"
            )
        frontier = nxt
    for node in reversed(nodes):
        if node.children:
            node.value = sum(p * nodes[c].value for c, p, _ in node.children)
    return nodes


def _grow(
    nodes: list[_Node],
    frontier: list[tuple[int, pyspiel.State]],
    parent: int,
    state: pyspiel.State,
    action: int,
    p: float,
    name: str = "",
) -> None:
    """Add the child of ``parent`` after ``action`` (probability ``p``) to the next depth."""
    nodes.append(_Node(reach=nodes[parent].reach * p))
    nodes[parent].children.append((len(nodes) - 1, p, name))
    frontier.append((len(nodes) - 1, state.child(action)))


FORFEIT = "(forfeit)"
"""The name of a sampled text policy's forfeit among a position's answers."""


def _forfeit(nodes, parent: int, state, probs, spec, seat: int, share) -> None:
    """A terminal child for the share of ``probs`` that forfeits (a sampled text
    policy's invalid answers under the forfeit treatment), if any; its value counts the
    forfeits of the players after it in a round of simultaneous moves (``share``:
    their forfeit shares; ``round_forfeits``). Their answers on that branch are folded
    into the value, not positions of their own: no gain is counted for changing them."""
    if left := forfeit_share(probs):
        value = sum(p * r[seat] for p, r in round_forfeits(state, spec, share))
        nodes.append(_Node(reach=nodes[parent].reach * left, value=value))
        nodes[parent].children.append((len(nodes) - 1, left, FORFEIT))


def rank(seat: int, nodes: list[_Node], mine: Oracle, top: int) -> tuple[CostlyPosition, ...]:
    """Sum each action's gain over the histories of each observation; the costliest."""
    gains: dict[Hashable, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    reach: dict[Hashable, float] = defaultdict(float)
    first: dict[Hashable, _Node] = {}
    for node in nodes:
        if node.key is None or node.reach == 0:
            continue
        first.setdefault(node.key, node)
        reach[node.key] += node.reach
        for c, _, name in node.children:
            gains[node.key][name] += node.reach * (nodes[c].value - node.value)
    out = []
    for key, by_action in gains.items():
        moves = {name: g for name, g in by_action.items() if name != FORFEIT}
        best = max(moves, key=moves.__getitem__)
        if by_action[best] <= 1e-12:
            continue
        probs = {name: p for _, p, name in first[key].children}
        played = max(probs, key=probs.__getitem__)
        out.append(
            CostlyPosition(
                seat=seat,
                observation=first[key].text,
                reach=reach[key],
                cost=by_action[best],
                played=played,
                played_prob=probs[played],
                best=best,
            )
        )
    return tuple(sorted(out, key=lambda c: -c.cost)[:top])
