"""Meta-solvers: which mixture of a population to play, given its meta-game.

A meta-game uses OpenSpiel's layout (``open_spiel.python.algorithms.psro_v2`` and
``jpsro``): a list with one payoff tensor per player, each of shape
``(|S_1|, ..., |S_n|)``, where entry ``[s_1, ..., s_n]`` is that player's expected
return when player ``k`` plays its strategy ``s_k``.

Every solver returns a ``MetaSolution`` holding both per-player marginals and the
joint distribution over strategy profiles. PSRO solvers (uniform, Nash, PRD, α-rank)
choose marginals and their joint is the product; JPSRO solvers (correlated and coarse
correlated equilibria; Marris et al. 2021, "Multi-Agent Training beyond Zero-Sum with
Correlated Equilibrium Meta-Solvers") choose a joint and their marginals are its sums.

OpenSpiel's projected replicator dynamics and α-rank are used directly. Its LP solver
(``lp_solver``) and JPSRO solvers need ``cvxpy``, which coplay does not depend on, so
the same programs are solved here with scipy: the zero-sum Nash LP and the
max-welfare (C)CE LPs with HiGHS, the max-Gini (C)CE quadratic programs with SLSQP.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from open_spiel.python.algorithms import projected_replicator_dynamics as os_prd
from scipy.optimize import linprog, minimize

ZERO_SUM_TOL = 1e-9
"""How far the payoffs of a 2-player game may be from a constant sum for ``nash``."""


@dataclass(frozen=True)
class MetaSolution:
    """A mixture over a population's strategies."""

    marginals: tuple[np.ndarray, ...]
    """Per player, the probability of each of its strategies, shape ``(|S_p|,)``."""
    joint: np.ndarray
    """Probability of each strategy profile, shape ``(|S_1|, ..., |S_n|)``; sums to 1."""
    correlated: bool
    """True when ``joint`` was solved for (JPSRO solvers, multi-population α-rank);
    False when it is the product of the marginals."""


# --- input -----------------------------------------------------------------------


def as_meta_game(payoffs: Sequence[object]) -> tuple[np.ndarray, ...]:
    """Validate a meta-game and return it as float arrays.

    Raises ValueError naming the problem: not one tensor per player, ragged or
    mismatched shapes, an empty strategy set, or non-finite payoffs.
    """
    if isinstance(payoffs, np.ndarray) or not isinstance(payoffs, Sequence) or not payoffs:
        raise ValueError(
            "a meta-game is a non-empty list with one payoff tensor per player "
            f"(OpenSpiel layout), got {type(payoffs).__name__}"
        )
    tensors = tuple(_as_tensor(p, t) for p, t in enumerate(payoffs))
    n = len(tensors)
    if n < 2:
        raise ValueError(f"a meta-game needs at least 2 players, got {n}")
    shape = tensors[0].shape
    for p, t in enumerate(tensors):
        if t.ndim != n:
            raise ValueError(
                f"payoff tensor of player {p} has {t.ndim} dimensions; a {n}-player "
                f"meta-game needs one per player (shape (|S_1|, ..., |S_{n}|))"
            )
        if t.shape != shape:
            raise ValueError(f"payoff tensor of player {p} has shape {t.shape}, player 0's {shape}")
    if min(shape) < 1:
        raise ValueError(f"every player needs at least one strategy, got shape {shape}")
    return tensors


def _as_tensor(player: int, tensor: object) -> np.ndarray:
    try:
        arr = np.asarray(tensor, dtype=float)
    except (ValueError, TypeError) as err:
        raise ValueError(f"payoff tensor of player {player} is ragged or not numeric") from err
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"payoff tensor of player {player} holds NaN or infinite values")
    return arr


def _from_marginals(marginals: Sequence[np.ndarray]) -> MetaSolution:
    ms = tuple(_normalised(np.asarray(m, dtype=float).reshape(-1)) for m in marginals)
    joint = ms[0]
    for m in ms[1:]:
        joint = np.multiply.outer(joint, m)
    return MetaSolution(marginals=ms, joint=joint, correlated=False)


def _from_joint(joint: np.ndarray) -> MetaSolution:
    joint = _normalised(joint)
    axes = range(joint.ndim)
    marginals = tuple(joint.sum(axis=tuple(a for a in axes if a != p)) for p in axes)
    return MetaSolution(marginals=marginals, joint=joint, correlated=True)


def _normalised(p: np.ndarray) -> np.ndarray:
    """Clip solver round-off below zero and renormalise to sum 1."""
    p = np.clip(p, 0.0, None)
    return p / p.sum()


# --- PSRO solvers ----------------------------------------------------------------


def uniform(payoffs: Sequence[object]) -> MetaSolution:
    """Every strategy of every player equally likely (fictitious play's meta-solver)."""
    shape = as_meta_game(payoffs)[0].shape
    return _from_marginals([np.full(k, 1.0 / k) for k in shape])


def nash(payoffs: Sequence[object]) -> MetaSolution:
    """A Nash equilibrium of a 2-player zero-sum (constant-sum) meta-game, by LP.

    Each player maximises its guaranteed payoff (the maximin LP of OpenSpiel's
    ``lp_solver.solve_zero_sum_matrix_game``). General-sum and n-player meta-games
    have no such program; OpenSpiel's PSRO ``nash`` refuses them too.
    """
    tensors = as_meta_game(payoffs)
    if len(tensors) != 2:
        raise ValueError(
            f"nash needs a 2-player zero-sum meta-game, got {len(tensors)} players; "
            "use prd, alpharank, ce or cce"
        )
    row, col = tensors
    total = row + col
    if np.ptp(total) > ZERO_SUM_TOL:
        raise ValueError(
            "nash needs a zero-sum (constant-sum) meta-game, but the payoff sums range "
            f"over [{total.min():.4g}, {total.max():.4g}]; use prd, alpharank, ce or cce"
        )
    return _from_marginals([_maximin(row), _maximin(col.T)])


def _maximin(payoff: np.ndarray) -> np.ndarray:
    """The row player's mixture maximising its worst-case payoff over the columns.

    Variables ``(x_1..x_m, v)``: maximise v s.t. ``payoff[:, j] @ x >= v`` for every
    column j, ``sum(x) = 1``, ``x >= 0``.
    """
    m, k = payoff.shape
    cost = np.r_[np.zeros(m), -1.0]
    a_ub = np.c_[-payoff.T, np.ones(k)]  # v - x @ payoff[:, j] <= 0
    a_eq = np.r_[np.ones(m), 0.0][None, :]
    bounds = [(0.0, None)] * m + [(None, None)]
    res = linprog(cost, A_ub=a_ub, b_ub=np.zeros(k), A_eq=a_eq, b_eq=[1.0], bounds=bounds)
    _check(res, "zero-sum Nash LP")
    return res.x[:m]


def prd(
    payoffs: Sequence[object],
    *,
    iterations: int = 10_000,
    dt: float = 1e-3,
    gamma: float = 1e-6,
    average_last: int | None = 1_000,
) -> MetaSolution:
    """Projected replicator dynamics (Lanctot et al. 2017), OpenSpiel's implementation.

    Starts from uniform; returns the average of the last ``average_last`` iterates
    (None: of the whole trajectory, as PSRO does with 100k iterations). ``gamma`` is
    the least probability any strategy keeps (exploration).
    """
    tensors = as_meta_game(payoffs)
    if iterations < 1 or dt <= 0 or gamma < 0 or (average_last is not None and average_last < 1):
        raise ValueError(
            f"prd needs iterations >= 1, dt > 0, gamma >= 0 and average_last >= 1 or None; "
            f"got iterations={iterations}, dt={dt}, gamma={gamma}, average_last={average_last}"
        )
    strategies = os_prd.projected_replicator_dynamics(
        list(tensors),
        prd_iterations=iterations,
        prd_dt=dt,
        prd_gamma=gamma,
        average_over_last_n_strategies=average_last,
    )
    return _from_marginals(strategies)


def alpharank(payoffs: Sequence[object]) -> MetaSolution:
    """α-rank (Omidshafiei et al. 2019) at infinite α, OpenSpiel's ε-sweep as in PSRO.

    A symmetric 2-player meta-game (``payoffs[1] == payoffs[0].T``) is ranked as one
    population, both players sharing its distribution; any other meta-game with one
    population per player, whose stationary distribution over profiles is the joint.
    """
    tensors = as_meta_game(payoffs)
    os_alpharank = _openspiel_alpharank()
    if len(tensors) == 2 and np.array_equal(tensors[1], tensors[0].T):
        pi = os_alpharank.sweep_pi_vs_epsilon([tensors[0]])
        return _from_marginals([pi, pi])
    # OpenSpiel numbers profiles in row-major order (utils.get_id_from_strat_profile).
    pi = os_alpharank.sweep_pi_vs_epsilon(list(tensors))
    return _from_joint(np.asarray(pi).reshape(tensors[0].shape))


def _openspiel_alpharank() -> types.ModuleType:
    """OpenSpiel's α-rank, which imports its plotting module (matplotlib, networkx).

    Ranking never plots, so when those are missing a placeholder module stands in
    for the plotting one and only the plotting functions stay unavailable.
    """
    name = "open_spiel.python.egt.alpharank_visualizer"
    try:
        from open_spiel.python.egt import alpharank as os_alpharank
    except ImportError:
        sys.modules.setdefault(name, types.ModuleType(name))
        from open_spiel.python.egt import alpharank as os_alpharank
    return os_alpharank


# --- JPSRO solvers ---------------------------------------------------------------


def deviation_gains(payoffs: Sequence[object], *, coarse: bool) -> np.ndarray:
    """Rows ``g`` with ``g @ joint.ravel() <= 0`` exactly when no deviation pays.

    CE (``coarse=False``): one row per player p and pair of its strategies a != a':
    the gain of playing a' whenever the recommendation is a. CCE (``coarse=True``):
    one row per player p and strategy a': the gain of always playing a' instead of
    following the recommendation. Shape ``(num_constraints, prod |S_p|)``.
    """
    tensors = as_meta_game(payoffs)
    rows = []
    for p, u in enumerate(tensors):
        recommended = np.arange(u.shape[p]).reshape([-1 if i == p else 1 for i in range(u.ndim)])
        for dev in range(u.shape[p]):
            gain = np.take(u, [dev], axis=p) - u  # broadcast over p's recommended strategy
            if coarse:
                rows.append(gain.ravel())
                continue
            rows.extend(
                np.where(recommended == a, gain, 0.0).ravel() for a in range(u.shape[p]) if a != dev
            )
    # A player with one strategy has no deviation: keep the (0, size) shape then.
    return np.asarray(rows, dtype=np.float64).reshape(len(rows), tensors[0].size)


def max_welfare_ce(payoffs: Sequence[object]) -> MetaSolution:
    """The correlated equilibrium with the largest total payoff (an LP)."""
    return _max_welfare(payoffs, coarse=False)


def max_welfare_cce(payoffs: Sequence[object]) -> MetaSolution:
    """The coarse correlated equilibrium with the largest total payoff (an LP)."""
    return _max_welfare(payoffs, coarse=True)


def max_gini_ce(payoffs: Sequence[object]) -> MetaSolution:
    """The correlated equilibrium of largest Gini impurity ``1 - sum(joint**2)``.

    Unique (a strictly concave objective over a polytope): JPSRO's recommended
    meta-solver, MGCE.
    """
    return _max_gini(payoffs, coarse=False)


def max_gini_cce(payoffs: Sequence[object]) -> MetaSolution:
    """The coarse correlated equilibrium of largest Gini impurity (JPSRO's MGCCE)."""
    return _max_gini(payoffs, coarse=True)


def _max_welfare(payoffs: Sequence[object], *, coarse: bool) -> MetaSolution:
    tensors = as_meta_game(payoffs)
    gains = deviation_gains(tensors, coarse=coarse)
    welfare = np.sum(tensors, axis=0).ravel()
    size = welfare.size
    res = linprog(
        -welfare,
        A_ub=gains if len(gains) else None,
        b_ub=np.zeros(len(gains)) if len(gains) else None,
        A_eq=np.ones((1, size)),
        b_eq=[1.0],
        bounds=[(0.0, None)] * size,
    )
    _check(res, "max-welfare (C)CE LP")
    return _from_joint(res.x.reshape(tensors[0].shape))


def _max_gini(payoffs: Sequence[object], *, coarse: bool) -> MetaSolution:
    tensors = as_meta_game(payoffs)
    gains = deviation_gains(tensors, coarse=coarse)
    size = gains.shape[1]
    constraints = [
        {"type": "eq", "fun": lambda x: x.sum() - 1.0, "jac": lambda x: np.ones_like(x)},
    ]
    if len(gains):
        constraints.append({"type": "ineq", "fun": lambda x: -gains @ x, "jac": lambda x: -gains})
    res = minimize(
        lambda x: x @ x,
        np.full(size, 1.0 / size),
        jac=lambda x: 2.0 * x,
        bounds=[(0.0, 1.0)] * size,
        constraints=constraints,
        method="SLSQP",
        options={"ftol": 1e-12, "maxiter": 1_000},
    )
    _check(res, "max-Gini (C)CE QP")
    return _from_joint(res.x.reshape(tensors[0].shape))


def _check(res: object, what: str) -> None:
    if not res.success:
        raise RuntimeError(f"{what} failed: {res.message}")


# --- registry --------------------------------------------------------------------

MetaSolver = Callable[[Sequence[object]], MetaSolution]

META_SOLVERS: dict[str, MetaSolver] = {
    "uniform": uniform,
    "nash": nash,
    "prd": prd,
    "alpharank": alpharank,
    "ce": max_gini_ce,
    "cce": max_gini_cce,
    "mwce": max_welfare_ce,
    "mwcce": max_welfare_cce,
}
"""PSRO solvers (uniform, nash, prd, alpharank) and JPSRO ones: ``ce``/``cce`` are the
max-Gini equilibria (unique), ``mwce``/``mwcce`` the max-welfare ones."""


def solve_meta_game(name: str, payoffs: Sequence[object]) -> MetaSolution:
    """Solve ``payoffs`` with the meta-solver registered as ``name``."""
    if name not in META_SOLVERS:
        raise ValueError(f"unknown meta-solver {name!r}; available: {', '.join(META_SOLVERS)}")
    return META_SOLVERS[name](payoffs)
