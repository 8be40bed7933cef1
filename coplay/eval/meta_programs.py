"""The meta-solvers that are convex programs, solved with ``cvxpy``.

The linear and quadratic programs are the ones of OpenSpiel's ``lp_solver`` and
``jpsro``: the zero-sum Nash LP (PSRO) and, for JPSRO (correlated and coarse
correlated equilibria; Marris et al. 2021, "Multi-Agent Training beyond Zero-Sum with
Correlated Equilibrium Meta-Solvers"), the max-welfare (C)CE LPs with HiGHS (through
scipy), Clarabel if HiGHS fails, and the max-Gini (C)CE quadratic programs with
Clarabel, SCS if Clarabel fails. Every (C)CE answer is checked against its deviation
gains before it is returned. A program no solver answers raises ``MetaSolverError``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import cvxpy as cp
import numpy as np

from coplay.eval.meta_solution import (
    MetaSolution,
    MetaSolverError,
    NotConstantSumError,
    as_meta_game,
    from_joint,
    from_marginals,
    normalised,
)

ZERO_SUM_TOL = 1e-9
"""How far the payoffs of a 2-player game may be from a constant sum for ``nash``."""
GAIN_TOL = 1e-7
"""The largest deviation gain a (C)CE answer may keep, per unit of payoff scale
(``max(1, max |payoff|)``); a solver's answer above it counts as a failure."""

Program = tuple[tuple[str, dict], ...]
"""cvxpy solvers to try in turn, each with its options."""
LP_SOLVERS: Program = (
    # HiGHS through scipy: the same solver as cvxpy's HIGHS, without its stdout banner.
    ("SCIPY", {"scipy_options": {"method": "highs", "primal_feasibility_tolerance": 1e-9}}),
    ("CLARABEL", {}),
)
QP_SOLVERS: Program = (
    ("CLARABEL", {}),
    ("SCS", {"eps_abs": 1e-9, "eps_rel": 1e-9, "max_iters": 200_000}),
)


# --- PSRO: the zero-sum Nash LP --------------------------------------------------


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
        raise NotConstantSumError(
            "nash needs a zero-sum (constant-sum) meta-game, but the payoff sums range "
            f"over [{total.min():.4g}, {total.max():.4g}]; use prd, alpharank, ce or cce"
        )
    return from_marginals([_maximin(row), _maximin(col.T)])


def _maximin(payoff: np.ndarray) -> np.ndarray:
    """The row player's mixture maximising its worst-case payoff over the columns.

    Maximise v s.t. ``x @ payoff[:, j] >= v`` for every column j, ``x`` a distribution.
    """
    x, v = cp.Variable(payoff.shape[0], nonneg=True), cp.Variable()
    problem = cp.Problem(cp.Maximize(v), [payoff.T @ x >= v, cp.sum(x) == 1])
    return _solve(problem, x, LP_SOLVERS, "zero-sum Nash LP", accept=lambda _: None)


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


def max_deviation_gain(payoffs: Sequence[object], joint: np.ndarray, *, coarse: bool) -> float:
    """The most any player gains by a (coarse, if ``coarse``) deviation from ``joint``'s
    recommendations; 0 when none pays (``joint`` is a CE, resp. CCE)."""
    return float(np.max(deviation_gains(payoffs, coarse=coarse) @ joint.ravel(), initial=0.0))


def _max_welfare(payoffs: Sequence[object], *, coarse: bool) -> MetaSolution:
    welfare = np.sum(as_meta_game(payoffs), axis=0).ravel()
    return _correlated(
        payoffs,
        coarse=coarse,
        objective=lambda x: cp.Maximize(welfare @ x),
        solvers=LP_SOLVERS,
        name="max-welfare",
    )


def _max_gini(payoffs: Sequence[object], *, coarse: bool) -> MetaSolution:
    # max 1 - sum(x**2) is min sum(x**2): the objective of OpenSpiel's jpsro._qp_ce.
    return _correlated(
        payoffs,
        coarse=coarse,
        objective=lambda x: cp.Minimize(cp.sum_squares(x)),
        solvers=QP_SOLVERS,
        name="max-Gini",
    )


def _correlated(
    payoffs: Sequence[object],
    *,
    coarse: bool,
    objective: Callable[[cp.Variable], cp.Minimize | cp.Maximize],
    solvers: Program,
    name: str,
) -> MetaSolution:
    """Optimise ``objective`` over the (C)CE polytope ``{x >= 0, sum x = 1, gains @ x <= 0}``.

    Only rows with a positive entry can bind (``x >= 0``), and each is scaled to a largest
    entry of 1: the same polytope, better conditioned for the interior-point solvers.
    """
    tensors = as_meta_game(payoffs)
    gains = deviation_gains(tensors, coarse=coarse)
    rows = gains[gains.max(axis=1, initial=0.0) > 0]
    rows = rows / np.abs(rows).max(axis=1, keepdims=True)
    x = cp.Variable(tensors[0].size, nonneg=True)
    constraints = [cp.sum(x) == 1] + ([rows @ x <= 0] if len(rows) else [])
    tol = GAIN_TOL * max(1.0, max(float(np.abs(t).max()) for t in tensors))

    def accept(joint: np.ndarray) -> str | None:
        gain = float(np.max(gains @ joint, initial=0.0))
        return f"deviation gain {gain:.2g} > {tol:.2g}" if gain > tol else None

    what = f"{name} {'CCE' if coarse else 'CE'}"
    joint = _solve(cp.Problem(objective(x), constraints), x, solvers, what, accept=accept)
    return from_joint(joint.reshape(tensors[0].shape))


def _solve(
    problem: cp.Problem,
    x: cp.Variable,
    solvers: Program,
    what: str,
    *,
    accept: Callable[[np.ndarray], str | None],
) -> np.ndarray:
    """``x`` at the optimum, normalised to a distribution, from the first of ``solvers``
    that reaches one ``accept`` finds no fault with (it returns the fault, else None).

    Raises MetaSolverError listing every solver's failure.
    """
    failures = []
    for solver, options in solvers:
        try:
            return _attempt(problem, x, solver, options, accept)
        except MetaSolverError as err:
            failures.append(f"{solver}: {err}")
    raise MetaSolverError(f"{what} failed: " + "; ".join(failures))


def _attempt(
    problem: cp.Problem,
    x: cp.Variable,
    solver: str,
    options: dict,
    accept: Callable[[np.ndarray], str | None],
) -> np.ndarray:
    try:
        with warnings.catch_warnings():
            # "Solution may be inaccurate": the answer is checked below instead.
            warnings.simplefilter("ignore", UserWarning)
            problem.solve(solver=solver, **options)
    except cp.SolverError as err:
        raise MetaSolverError(str(err)) from err
    if problem.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) or x.value is None:
        raise MetaSolverError(f"status {problem.status}")
    joint = normalised(x.value)
    if fault := accept(joint):
        raise MetaSolverError(fault)
    return joint
