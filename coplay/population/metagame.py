"""Meta-games of a population: payoffs, meta-strategies, what a response faces.

Shared by the population drivers (PSRO, the league's meta sampler): the exact or
sampled payoff tables of a population of frozen policies, a meta-solver that never
aborts a run, and the exact best response that measures an oracle's shortfall.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyspiel
import torch
from open_spiel.python import policy as os_policy
from open_spiel.python.algorithms import best_response, expected_game_score

from coplay.distributed import evaluation_source
from coplay.envs.gameref import GameRef
from coplay.envs.probe import resolve_factory
from coplay.eval.crossplay import cross_play
from coplay.eval.meta_solution import MetaSolution, NotConstantSumError
from coplay.eval.metasolvers import FALLBACKS, FallbackSolution, solve_with_fallback
from coplay.eval.mixture import aggregate_tables
from coplay.models.loading import PlayedGame, load_policy
from coplay.policies.solvers import named_table
from coplay.train.config import RunConfig
from coplay.train.trainer import save_checkpoint, wants_exact
from coplay.types import GameKind, GameSpec, Policy


def opponent_distributions(
    solution: MetaSolution, *, conditional: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Distribution over members of the opponent when the learner sits in seat 0 and 1.

    PSRO and JPSRO(CCE): the other player's marginal. JPSRO(CE) (``conditional`` with a
    correlated joint): the other player's distribution conditioned on the learner's
    seat being recommended its most likely strategy, the one response of
    ``RECOMMENDATIONS["likeliest"]``; ``"each"`` answers every recommended strategy.
    """
    if solution.joint.ndim != 2:
        raise ValueError(f"opponent distributions need a 2-player joint, got {solution.joint.ndim}")
    m0, m1 = solution.marginals
    if not (conditional and solution.correlated):
        return m1, m0
    row = solution.joint[int(np.argmax(m0))]
    col = solution.joint[:, int(np.argmax(m1))]
    return row / row.sum(), col / col.sum()


RECOMMEND_TOL = 1e-8
"""Joint entries below this are the solver's rounding, not recommendations: the
interior-point (C)CE programs leave 1e-9 and less where the answer is 0 (Kuhn's
meta-games), and a response to such a slice would answer nothing the meta-strategy
plays. OpenSpiel's JPSRO drops them alike (``jpsro.DIST_TOL``)."""


@dataclass(frozen=True)
class Recommendation:
    """What one best response answers: the opponent it faces in each seat, and the
    seats where the meta-strategy recommends what it answers."""

    by_seat: tuple[np.ndarray, ...]
    """The opponent's distribution over the members when the learner sits in seat 0
    and in seat 1 (``opponent_distributions``' layout)."""
    seats: tuple[int, ...] = (0, 1)
    """The learner's seats with a recommendation to answer. A member i recommended in
    one seat only (P_s(i) = 0 in the other) has none in the other seat: there
    ``by_seat`` holds the opponent's marginal and no game group trains."""


def likeliest(solution: MetaSolution) -> tuple[Recommendation, ...]:
    """One response per iteration, PSRO's cost: in each seat against the opponent
    given that seat's most likely recommendation (``opponent_distributions``)."""
    return (Recommendation(opponent_distributions(solution, conditional=True)),)


def each_recommended(solution: MetaSolution) -> tuple[Recommendation, ...]:
    """JPSRO(CE) (Marris et al. 2021, Algorithm 1 with the CE best response, as
    OpenSpiel's ``jpsro.find_best_response`` with target ``ce``): one response per member
    i recommended in either seat, facing in seat s the joint's slice at i, renormalised,
    in the members' order. Without one per recommendation JPSRO(CE) has no guarantee of
    reaching a CE.

    One population fills both seats, so one response answers i in every seat that
    recommends it, where OpenSpiel's populations, one per seat, train one per seat."""
    if not solution.correlated:
        return likeliest(solution)  # a product joint: every conditional is the marginal
    joint = np.where(solution.joint < RECOMMEND_TOL, 0.0, solution.joint)  # (row, column)
    marginal = opponent_distributions(solution, conditional=False)
    told = [i for i in range(len(joint)) if joint[i].sum() > 0 or joint[:, i].sum() > 0]
    return tuple(_conditional_on(joint[i], joint[:, i], marginal) for i in told)


def _conditional_on(
    row: np.ndarray, column: np.ndarray, marginal: tuple[np.ndarray, ...]
) -> Recommendation:
    """The recommendation of one member: its joint's row (the column player's draws
    when seat 0 is told it) and column (seat 1 told it)."""
    seats = tuple(s for s, told in enumerate((row, column)) if told.sum() > 0)
    # Where it is never recommended, any opponent would do: the exact oracle's best
    # response per seat is independent of the other seat's, so it answers the
    # marginal there, and the LM oracle trains no game in that seat.
    by_seat = tuple(
        told / told.sum() if s in seats else marginal[s] for s, told in enumerate((row, column))
    )
    return Recommendation(by_seat, seats)


@dataclass(frozen=True)
class Recommender:
    """What one PSRO iteration's responses answer, and whether a copy joins."""

    pick: Callable[[MetaSolution], tuple[Recommendation, ...]]
    """The recommendations its responses answer, in order."""
    distinct: bool
    """Whether a response joins only where no member plays it already: JPSRO's
    population is a set (Marris et al. 2021, Algorithm 1 adds a union; OpenSpiel's
    ``jpsro`` adds novel policies only), and answering every recommendation otherwise
    multiplies copies. PSRO's one response an iteration joins as it comes."""


RECOMMENDATIONS: dict[str, Recommender] = {
    "likeliest": Recommender(likeliest, distinct=False),
    "each": Recommender(each_recommended, distinct=True),
}
"""What one PSRO iteration answers with a conditional meta-solver, by
``PsroConfig.recommendations``."""


# --- meta-games --------------------------------------------------------------------


def exact_payoffs(
    game: pyspiel.Game,
    tables: Sequence[os_policy.Policy],
    previous: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact 2-player meta-game of ``tables``: ``payoffs[p][i, j]`` is player p's return
    with member i in seat 0 and member j in seat 1. Entries of ``previous`` (the
    meta-game of the first members) are reused and only new rows and columns are
    computed."""
    if game.num_players() != 2:
        raise ValueError(
            f"exact_payoffs builds 2-player meta-games; {game.get_type().short_name!r} has "
            f"{game.num_players()} players"
        )
    k = len(tables)
    done = 0 if previous is None else previous[0].shape[0]
    out = np.zeros((2, k, k))
    if previous is not None:
        out[:, :done, :done] = previous
    root = game.new_initial_state()
    for i in range(k):
        for j in range(k):
            if i >= done or j >= done:
                out[:, i, j] = expected_game_score.policy_value(root, [tables[i], tables[j]])
    return out[0], out[1]


def sampled_payoffs(
    members: Sequence[Policy], cfg: RunConfig, *, episodes: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Cross-play meta-game (mean returns, seats alternating) of any 2-player game,
    played on ``cfg.rollout.workers`` Ray workers where that is above 0 (started for
    this evaluation and stopped after it).

    Seat-averaged and symmetric, unlike ``exact_payoffs``: ``payoffs[0][i, j]`` is member
    i's mean return against j over both seats and ``payoffs[1] == payoffs[0].T`` (in a
    zero-sum game the diagonal, each member's self-play, is 0)."""
    game = GameRef(cfg.game.name, cfg.game.params)
    with evaluation_source(
        game,
        workers=cfg.rollout.workers,
        ray=cfg.ray,
        invalid=cfg.game.invalid,
        max_turns=cfg.game.max_turns,
    ) as source:
        res = cross_play(
            cfg.game.name,
            {m.policy_id: m for m in members},
            episodes=episodes,
            seed=seed,
            params=cfg.game.params,
            invalid=cfg.game.invalid,
            max_turns=cfg.game.max_turns,  # the game the responses train on
            source=source,
        )
    return res.meta_game


def check_meta_solver(name: str, spec: GameSpec) -> None:
    """Refuse Nash's LP for a game that is not zero-sum before anything is trained: its
    meta-game would not be either, and the solver refuses one (``meta_programs.nash``)
    only once the first response is in."""
    if name == "nash" and spec.kind is not GameKind.ZERO_SUM:
        raise ValueError(
            f"meta_solver=nash needs a zero-sum game, but {spec.name!r} is {spec.kind.value}; "
            "use prd, alpharank, ce or cce"
        )


def exact_game(cfg: RunConfig) -> pyspiel.Game | None:
    """The OpenSpiel game when the meta-game is computed exactly, else None (it is
    sampled): exact evaluation applies (``train.exact``, decided as the trainer decides
    it), the game moves turn by turn (members' tables are read on the game itself, not
    on a simultaneous game's turn-based transform), and members choose (a text-mode
    member has no exact choice distribution, only sampled answers)."""
    env = resolve_factory(cfg.game.name, cfg.game.params)()
    game = getattr(env, "game", None)
    if game is None or not wants_exact(cfg, env.spec) or cfg.model.mode == "text":
        return None
    sequential = game.get_type().dynamics == pyspiel.GameType.Dynamics.SEQUENTIAL
    return game if sequential else None


def solve(name: str, payoffs: tuple[np.ndarray, np.ndarray]) -> FallbackSolution:
    """``solve_with_fallback``: a failing meta-solver is replaced (max-welfare CE, then
    uniform) with a warning line, never aborts the run. A one-member population is
    answered directly: some (C)CE programs have no deviation constraints to build.

    ``nash`` given a meta-game that is not constant-sum falls back too: the drivers
    admit it for zero-sum games only (``check_meta_solver``), so such a meta-game was
    sampled so (in text mode both seats of a simultaneous game can forfeit one round,
    and ``forfeit_returns`` pays both the minimum), not asked for."""
    if payoffs[0].shape == (1, 1):
        one = np.ones(1)
        only = MetaSolution(marginals=(one, one), joint=np.ones((1, 1)), correlated=False)
        return FallbackSolution(only, requested=name, solver=name)
    try:
        meta = solve_with_fallback(name, list(payoffs))
    except NotConstantSumError as err:
        rest = solve_with_fallback(FALLBACKS[0], list(payoffs))
        meta = FallbackSolution(
            # nash's own advice (another solver) is what the fallback does already.
            rest.solution,
            name,
            rest.solver,
            (f"{name}: {str(err).split('; use ')[0]}", *rest.failures),
        )
    if meta.level:
        warnings.warn(meta.warning(), RuntimeWarning, stacklevel=2)
    return meta


class _BySeat(os_policy.Policy):
    """One OpenSpiel policy per seat, as a single policy (two best responses in one)."""

    def __init__(self, game: pyspiel.Game, seats: Sequence[os_policy.Policy]) -> None:
        super().__init__(game, list(range(game.num_players())))
        self._seats = seats

    def action_probabilities(self, state, player_id=None):
        return self._seats[state.current_player()].action_probabilities(state)


def meta_opponent(
    game: pyspiel.Game, tables: Sequence[os_policy.Policy], by_seat: Sequence[np.ndarray]
) -> os_policy.TabularPolicy:
    """What a response faces, as one tabular policy: in seat 1 the mixture
    ``by_seat[0]`` (the learner sits in seat 0), in seat 0 the mixture ``by_seat[1]``."""
    return aggregate_tables(game, tables, [by_seat[1], by_seat[0]])


def value_against(
    game: pyspiel.Game,
    table: os_policy.Policy,
    opponent: os_policy.Policy,
    seats: Sequence[int] = (0, 1),
) -> float:
    """Exact expected return of ``table`` against ``opponent``, averaged over ``seats``
    (a ``Recommendation``'s)."""
    root = game.new_initial_state()
    profiles = ([table, opponent], [opponent, table])  # table in seat 0, in seat 1
    values = [expected_game_score.policy_value(root, profiles[s])[s] for s in seats]
    return float(sum(values)) / len(seats)


def exact_best_response(
    game: pyspiel.Game, opponent: os_policy.Policy, seats: Sequence[int] = (0, 1)
) -> tuple[dict, float]:
    """OpenSpiel's best response to ``opponent`` in each seat, as one named table, and
    its value (mean over ``seats``, a ``Recommendation``'s: a member plays every seat,
    so the table answers each, but only these are recommended what it answers)."""
    responses = [best_response.BestResponsePolicy(game, s, opponent) for s in range(2)]
    root = game.new_initial_state()
    value = sum(responses[s].value(root) for s in seats) / len(seats)
    return named_table(game, _BySeat(game, responses)), float(value)


def freeze(
    policy: Policy, folder: Path, policy_id: str, *, seed: int = 0, game: PlayedGame | None = None
) -> Policy:
    """Save ``policy`` (playing ``game``) to ``folder`` and reload it as a frozen copy
    named ``policy_id``.

    The copy shares nothing with the original: later training cannot change it. It
    runs where and as the original does (a bf16 learner's copy in bf16, on its GPU),
    so that it plays the probabilities the original had.
    """
    save_checkpoint(policy, folder, game=game)
    weight = next(policy.model.parameters())
    return reload_frozen(folder, policy_id, seed=seed, device=weight.device, dtype=weight.dtype)


def reload_frozen(
    folder: Path,
    policy_id: str,
    *,
    seed: int,
    device: str | torch.device,
    dtype: torch.dtype | None = None,
) -> Policy:
    """The frozen copy in ``folder`` named ``policy_id``: ``freeze``'s, or one a resumed
    run reloads, in the dtype it was saved in (the learner's) unless ``dtype`` says."""
    frozen = load_policy(folder, seed=seed, device=device, dtype=dtype)
    frozen.model.requires_grad_(False)
    frozen.policy_id = policy_id
    return frozen
