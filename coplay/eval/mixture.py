"""A population's mixture (a meta-strategy over member policies), for play and exact evaluation.

A mixture over behaviour policies means: *at the start of each episode* draw one member
with its weight and let it play the whole episode. It is not the per-state average
of the members' action probabilities. The single behaviour policy that plays the same
(realisation-equivalent) weights each member by the probability that the member itself
would have reached the information state (Kuhn's theorem; Heinrich et al. 2015, XFP):

    pi_mix(a | s) = sum_i w_i r_i(s) pi_i(a | s) / sum_i w_i r_i(s)

with ``r_i(s)`` the product of member i's own action probabilities on the way to s.
This is what OpenSpiel's ``policy_aggregator`` computes by a walk of the game tree (the
tests check the two agree); here it fills a ``TabularPolicy`` directly, so every exact
metric of ``coplay.eval.exact`` applies. In two-player games each seat may mix the members with
its own weights (a meta-game solution has one marginal per player).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyspiel
from open_spiel.python import policy as os_policy

from coplay.eval.exact import (
    ExploitabilityResult,
    solvable_game,
    tabular_exploitability,
    to_openspiel_policy,
)
from coplay.types import Policy, TabularQueryable

Weights = Sequence[float] | Sequence[Sequence[float]]
"""One weight per member (every seat mixes alike) or one such row per seat."""


def seat_weights(weights: Weights, num_members: int, num_players: int) -> np.ndarray:
    """Validated weights as an array of shape ``(num_players, num_members)``, rows summing to 1.

    A flat sequence is shared by every seat. Raises ValueError on a wrong shape,
    negative or non-finite weights, or a seat whose weights are all zero.
    """
    try:
        w = np.asarray(weights, dtype=float)
    except (TypeError, ValueError) as err:
        raise ValueError("mixture weights must be numbers (ragged or not numeric)") from err
    if w.ndim == 1:
        w = np.tile(w, (num_players, 1))
    if w.shape != (num_players, num_members):
        raise ValueError(
            f"mixture weights must have {num_members} entries (one per member), or "
            f"shape ({num_players}, {num_members}) for per-seat weights; got shape {w.shape}"
        )
    if not np.isfinite(w).all() or (w < 0).any():
        raise ValueError(f"mixture weights must be finite and non-negative, got {w.tolist()}")
    sums = w.sum(axis=1, keepdims=True)
    if (sums <= 0).any():
        raise ValueError(f"every seat needs a positive weight, got {w.tolist()}")
    return w / sums


def aggregate_tables(
    game: pyspiel.Game, tables: Sequence[os_policy.Policy], weights: Weights
) -> os_policy.TabularPolicy:
    """The reach-weighted mixture of ``tables`` as one OpenSpiel tabular policy.

    Needs perfect recall (every history of an information state has the same own
    reach), as Kuhn and Leduc poker have. Information states no weighted member
    reaches get the plain weighted average (any distribution plays the same there).
    """
    if not tables:
        raise ValueError("a mixture needs at least one member")
    w = seat_weights(weights, len(tables), game.num_players())
    out = os_policy.TabularPolicy(game)
    for i, state in enumerate(out.states):
        mix = w[state.current_player()]
        reach = np.array([_own_reach(state, t) for t in tables]) * mix
        coef = reach / reach.sum() if reach.sum() > 0 else mix
        row = out.action_probability_array[i]
        row[:] = 0.0
        for c, table in zip(coef, tables, strict=True):
            for action, p in table.action_probabilities(state).items():
                row[action] += c * p
    return out


def _own_reach(state: pyspiel.State, table: os_policy.Policy) -> float:
    """Product of the acting player's own action probabilities along ``state``'s history."""
    player = state.current_player()
    walk = state.get_game().new_initial_state()
    reach = 1.0
    for item in state.full_history():
        if walk.current_player() == player:
            reach *= table.action_probabilities(walk).get(item.action, 0.0)
        walk.apply_action(item.action)
    return reach


def tables_exploitability(
    game: pyspiel.Game, tables: Sequence[os_policy.Policy], weights: Weights
) -> ExploitabilityResult:
    """Exact exploitability and NashConv of the mixture of OpenSpiel policies."""
    return tabular_exploitability(game, aggregate_tables(game, tables, weights))


def mixture_exploitability(
    members: Sequence[TabularQueryable],
    weights: Weights,
    game_name: str,
    *,
    params: Mapping[str, object] | None = None,
) -> ExploitabilityResult:
    """Exact exploitability of the mixture of ``members`` (policies that report their
    action probabilities) with ``weights`` (per member, or per seat and member)."""
    _, game = solvable_game(game_name, params)
    tables = [to_openspiel_policy(m, game_name, params=params) for m in members]
    return tables_exploitability(game, tables, weights)


@dataclass(frozen=True)
class MixturePolicy:
    """A meta-strategy for play: one member drawn per episode, never per decision.

    It is deliberately not a ``Policy``: an ``act`` that mixed per decision would play
    the per-state average, a different (and wrong) strategy. Fill the seat of each
    episode with ``draw`` instead (``seatings`` does so for every seat).
    """

    members: tuple[Policy, ...]
    weights: tuple[float, ...]

    def __post_init__(self) -> None:
        seat_weights(self.weights, len(self.members), 1)  # raises on bad weights

    def draw(self, rng: np.random.Generator, n: int) -> list[Policy]:
        """The member that plays each of ``n`` episodes."""
        p = seat_weights(self.weights, len(self.members), 1)[0]
        return [self.members[i] for i in rng.choice(len(self.members), size=n, p=p)]


def seatings(
    mixtures: Sequence[MixturePolicy], episodes: int, rng: np.random.Generator
) -> list[list[Policy]]:
    """Seat lists for ``episodes`` games, seat s played by a member drawn from ``mixtures[s]``."""
    drawn = [m.draw(rng, episodes) for m in mixtures]
    return [[column[e] for column in drawn] for e in range(episodes)]
