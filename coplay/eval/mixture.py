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

A correlated meta-strategy (JPSRO's) is a joint distribution over profiles, one member
per seat, drawn together for the whole episode. No mixture per seat plays it: the
product of its marginals is another strategy. ``joint_cce_gap`` measures the joint
itself, by its CCE gap, as OpenSpiel's JPSRO does with ``pyspiel.cce_dist``, and
``joint_ce_gap`` by its CE gap, where each deviation knows its own recommendation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import product

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
class CceGap:
    """How far a joint distribution over profiles is from a coarse correlated equilibrium
    (CCE) of the full game (Marris et al. 2021): per player p, what its best deviation
    chosen before the draw gains, ``max(0, max_pi E_joint[u_p(pi, others)] - E_joint[u_p])``.

    ``gap`` is the sum over players, the convention of OpenSpiel's ``cce_dist``
    (``dist_value``) and of NashConv: a joint on one profile has ``gap`` equal to that
    profile's NashConv, n times OpenSpiel's exploitability.
    """

    gap: float
    per_player: tuple[float, ...]
    on_policy_values: tuple[float, ...]
    """Each player's expected return under the joint."""
    best_response_values: tuple[float, ...]
    """Each player's return from its best fixed deviation against the others' draws."""


def joint_weights(joint: object, num_members: int, num_players: int) -> np.ndarray:
    """A validated joint distribution of shape ``(num_members,) * num_players``, summing to 1.

    Raises ValueError on a wrong shape, negative or non-finite entries, or no mass.
    """
    try:
        dist = np.asarray(joint, dtype=float)
    except (TypeError, ValueError) as err:
        raise ValueError("a joint distribution must be numbers (ragged or not numeric)") from err
    shape = (num_members,) * num_players
    if dist.shape != shape:
        raise ValueError(
            f"a joint distribution over {num_players} seats of {num_members} members has "
            f"shape {shape}, got {dist.shape}"
        )
    if not np.isfinite(dist).all() or (dist < 0).any():
        raise ValueError("a joint distribution must be finite and non-negative")
    if dist.sum() <= 0:
        raise ValueError("a joint distribution needs a profile of positive probability")
    return dist / dist.sum()


def joint_cce_gap(
    game: pyspiel.Game,
    tables: Sequence[os_policy.TabularPolicy],
    joint: object,
    *,
    payoffs: Sequence[object] | None = None,
) -> CceGap:
    """The exact CCE gap of ``joint``, whose entry ``[i_1, ..., i_n]`` is the probability
    that each seat p plays ``tables[i_p]`` (a meta-solution's joint), computed as
    OpenSpiel's JPSRO does (``jpsro.find_best_response``, target ``cce``): each player's
    best deviation by ``pyspiel.cce_dist`` against the others' part of the joint, the
    joint's value from each profile's expected returns.

    ``payoffs``, each player's expected return at every profile (OpenSpiel's meta-game
    layout, as PSRO's exact meta-game holds them), spare computing those returns again
    (``pyspiel.expected_returns``). The tables are OpenSpiel tabular policies of ``game``
    keyed by information state.
    """
    n = game.num_players()
    dist = joint_weights(joint, len(tables), n)
    seats = [[_seat_policy(t, p) for p in range(n)] for t in tables]  # (members, players)
    values = _profile_values(game, seats, dist) if payoffs is None else _payoffs(payoffs, dist)
    on_policy = np.array([float(np.sum(dist * v)) for v in values])
    best = np.array([_deviation_value(game, seats, dist.sum(axis=p), p) for p in range(n)])
    gains = np.maximum(best - on_policy, 0.0)
    return CceGap(
        gap=float(gains.sum()),
        per_player=tuple(float(g) for g in gains),
        on_policy_values=tuple(float(v) for v in on_policy),
        best_response_values=tuple(float(v) for v in best),
    )


def _profile_values(
    game: pyspiel.Game, seats: Sequence[Sequence[pyspiel.TabularPolicy]], dist: np.ndarray
) -> np.ndarray:
    """Each player's expected return at every profile ``dist`` plays (0 at the others),
    shape ``(players, *dist.shape)``."""
    values = np.zeros((game.num_players(), *dist.shape))
    root = game.new_initial_state()
    for profile in zip(*np.nonzero(dist), strict=True):
        values[(slice(None), *profile)] = pyspiel.expected_returns(
            root, _profile(seats, profile), -1, True
        )
    return values


def _payoffs(payoffs: Sequence[object], dist: np.ndarray) -> list[np.ndarray]:
    """The given payoffs as arrays, one per player of ``dist``'s shape, or a ValueError."""
    values = [np.asarray(v, dtype=float) for v in payoffs]
    if len(values) != dist.ndim or any(v.shape != dist.shape for v in values):
        shapes = [v.shape for v in values]
        raise ValueError(
            f"payoffs need one tensor of shape {dist.shape} per player ({dist.ndim}), "
            f"got shapes {shapes}"
        )
    return values


def _deviation_value(
    game: pyspiel.Game,
    seats: Sequence[Sequence[pyspiel.TabularPolicy]],
    others: np.ndarray,
    player: int,
) -> float:
    """What ``player`` gets from a best response to ``others``, a distribution over the
    other seats' profiles (the joint's shape without ``player``'s axis). Its own seat in
    the device is never read, so member 0 fills it, and the device has one entry per
    profile of the others, not of all."""
    device = [
        (float(others[rest]), _profile(seats, (*rest[:player], 0, *rest[player:])))
        for rest in product(*map(range, others.shape))
        if others[rest] > 0
    ]
    info = pyspiel.cce_dist(game, device, player, prob_cut_threshold=0.0)
    return float(info.best_response_values[0])


@dataclass(frozen=True)
class CeGap:
    """How far a joint distribution over profiles is from a correlated equilibrium (CE)
    of the full game (Marris et al. 2021, JPSRO(CE)): per player p, the sum over the
    members r it is recommended of what its best deviation, chosen knowing r, gains:
    ``P(r) * (max_pi E[u_p(pi, others) | r] - E[u_p | r])``.

    Knowing r, a deviation can still play what one fixed before the draw would, so each
    player's CE gap is at least its CCE gap. ``gap`` sums the players, as ``CceGap.gap``
    and NashConv do. A product joint's equals its CCE gap: every r faces the same
    marginal, and ``P(r)``-weighted the terms add up to the best response's gain.
    """

    gap: float
    per_player: tuple[float, ...]
    per_recommendation: tuple[tuple[float, ...], ...]
    """Per player, each member's term ``P(r) * gain`` (0 where it is never recommended):
    JPSRO(CE) trains a response to every recommendation that gains."""


def joint_ce_gap(
    game: pyspiel.Game,
    tables: Sequence[os_policy.TabularPolicy],
    joint: object,
    *,
    payoffs: Sequence[object] | None = None,
) -> CeGap:
    """The exact CE gap of ``joint``, laid out as for ``joint_cce_gap``, computed as
    OpenSpiel's JPSRO does (``jpsro.find_best_response``, target ``ce``): for each player
    and member it is recommended with positive probability, a best response by
    ``pyspiel.cce_dist`` to the others' part of the joint given that recommendation.
    ``payoffs`` as for ``joint_cce_gap``.
    """
    n = game.num_players()
    dist = joint_weights(joint, len(tables), n)
    seats = [[_seat_policy(t, p) for p in range(n)] for t in tables]  # (members, players)
    values = _profile_values(game, seats, dist) if payoffs is None else _payoffs(payoffs, dist)
    terms = tuple(
        tuple(_recommendation_gain(game, seats, dist, values[p], p, r) for r in range(len(tables)))
        for p in range(n)
    )
    per = tuple(float(sum(row)) for row in terms)
    return CeGap(gap=float(sum(per)), per_player=per, per_recommendation=terms)


def _recommendation_gain(
    game: pyspiel.Game,
    seats: Sequence[Sequence[pyspiel.TabularPolicy]],
    dist: np.ndarray,
    value: np.ndarray,
    player: int,
    member: int,
) -> float:
    """``P(r) * gain`` of ``player``'s best deviation when recommended ``member`` (r);
    ``value`` is the player's return at each profile. The unnormalised slice of ``dist``
    at r weighs the deviation's value and the recommendation's alike."""
    given = np.take(dist, member, axis=player)  # P(r, others): the others' profiles
    mass = float(given.sum())
    if mass <= 0:
        return 0.0
    best = _deviation_value(game, seats, given / mass, player)
    on = float(np.sum(np.take(value, member, axis=player) * given))
    # Recommended r is itself a deviation, so only rounding makes the gain negative.
    return max(0.0, mass * best - on)


def _seat_policy(table: os_policy.TabularPolicy, player: int) -> pyspiel.TabularPolicy:
    """``table``'s rows at ``player``'s information states only: a joint profile takes
    each seat from another member, and OpenSpiel refuses two rows for one state."""
    rows = {}
    for key in table.states_per_player[player]:
        i = table.state_lookup[key]
        legal = np.flatnonzero(table.legal_actions_mask[i])
        rows[key] = [(int(a), float(table.action_probability_array[i, a])) for a in legal]
    return pyspiel.TabularPolicy(rows)


def _profile(
    seats: Sequence[Sequence[pyspiel.TabularPolicy]], profile: Sequence[int]
) -> pyspiel.TabularPolicy:
    """The joint policy in which seat p plays member ``profile[p]``."""
    return pyspiel.to_joint_tabular_policy(
        [seats[member][p] for p, member in enumerate(profile)], True
    )


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
