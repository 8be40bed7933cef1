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

OpenSpiel's projected replicator dynamics and α-rank are used directly. The linear and
quadratic programs are the ones of OpenSpiel's ``lp_solver`` and ``jpsro``, solved with
``cvxpy``: the zero-sum Nash LP and the max-welfare (C)CE LPs with HiGHS (through
scipy), Clarabel if HiGHS fails; the max-Gini (C)CE quadratic programs with Clarabel,
SCS if Clarabel fails. Every (C)CE answer is checked against its deviation gains
before it is returned. A solver that cannot answer raises ``MetaSolverError``;
``solve_with_fallback`` then tries max-welfare CE and uniform, as PSRO and leagues do.
"""

from __future__ import annotations

import contextlib
import sys
import types
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import cvxpy as cp
import numpy as np
from open_spiel.python.algorithms import projected_replicator_dynamics as os_prd

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


class MetaSolverError(ValueError):
    """A meta-solver found no answer (every numerical solver it tried failed)."""


class NotConstantSumError(ValueError):
    """``nash`` was given a meta-game whose payoffs do not sum to a constant.

    Bad input for ``solve_with_fallback``, which raises it; a population driver that
    admitted only zero-sum games (``coplay.population.metagame.solve``) falls back from
    it instead, since its sampled meta-game can stray from a constant sum.
    """


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
    total = p.sum()
    if not np.isfinite(total) or total <= 0:
        raise MetaSolverError(f"the solver returned no distribution (total mass {total})")
    return p / total


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
        raise NotConstantSumError(
            "nash needs a zero-sum (constant-sum) meta-game, but the payoff sums range "
            f"over [{total.min():.4g}, {total.max():.4g}]; use prd, alpharank, ce or cce"
        )
    return _from_marginals([_maximin(row), _maximin(col.T)])


def _maximin(payoff: np.ndarray) -> np.ndarray:
    """The row player's mixture maximising its worst-case payoff over the columns.

    Maximise v s.t. ``x @ payoff[:, j] >= v`` for every column j, ``x`` a distribution.
    """
    x, v = cp.Variable(payoff.shape[0], nonneg=True), cp.Variable()
    problem = cp.Problem(cp.Maximize(v), [payoff.T @ x >= v, cp.sum(x) == 1])
    return _solve(problem, x, LP_SOLVERS, "zero-sum Nash LP", accept=lambda _: None)


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
    with _openspiel_failure("prd"):
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
        with _openspiel_failure("alpharank"):
            pi = os_alpharank.sweep_pi_vs_epsilon([tensors[0]])
        return _from_marginals([pi, pi])
    # OpenSpiel numbers profiles in row-major order (utils.get_id_from_strat_profile).
    with _openspiel_failure("alpharank"):
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


@contextlib.contextmanager
def _openspiel_failure(name: str) -> Iterator[None]:
    """Report an OpenSpiel solver's numerical failure (the meta-game itself was already
    validated) as ``MetaSolverError``: e.g. α-rank's sweep finding no stationary
    distribution raises RuntimeError, a singular system LinAlgError or ValueError."""
    try:
        yield
    except (ArithmeticError, RuntimeError, ValueError, np.linalg.LinAlgError) as err:
        raise MetaSolverError(f"{name} failed: {err}") from err


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
    return _from_joint(joint.reshape(tensors[0].shape))


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
    joint = _normalised(x.value)
    if fault := accept(joint):
        raise MetaSolverError(fault)
    return joint


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


# --- fallback --------------------------------------------------------------------

FALLBACKS = ("mwce", "uniform")
"""What PSRO and leagues play, in turn, when their meta-solver fails: max-welfare CE (an
LP, which exists for every game), then uniform (which cannot fail)."""


@dataclass(frozen=True)
class FallbackSolution:
    """The answer of ``solve_with_fallback``: a solution, who gave it and why others did not."""

    solution: MetaSolution
    requested: str
    """The meta-solver asked for."""
    solver: str
    """The meta-solver that gave ``solution``: ``requested`` or one of ``FALLBACKS``."""
    failures: tuple[str, ...] = ()
    """Why each meta-solver tried before ``solver`` failed."""

    @property
    def level(self) -> int:
        """0 when the requested solver answered, else 1 + the index in ``FALLBACKS`` of the
        one that did (1: max-welfare CE, 2: uniform)."""
        return 0 if self.solver == self.requested else 1 + FALLBACKS.index(self.solver)

    def warning(self) -> str:
        """One line for the log: which solver failed and what was played instead."""
        return (
            f"meta-solver {self.requested!r} failed, playing {self.solver!r} instead: "
            + "; ".join(self.failures)
        )


def solve_with_fallback(name: str, payoffs: Sequence[object]) -> FallbackSolution:
    """Solve with ``name``, falling back along ``FALLBACKS`` on ``MetaSolverError``.

    Bad input (an unknown name, a malformed meta-game, ``nash`` on a general-sum game)
    still raises: only a solver's numerical failure is fallen back from.
    """
    failures: list[str] = []
    for solver in dict.fromkeys((name, *FALLBACKS)):
        try:
            solution = solve_meta_game(solver, payoffs)
        except MetaSolverError as err:
            failures.append(f"{solver}: {err}")
            continue
        return FallbackSolution(solution, name, solver, tuple(failures))
    raise MetaSolverError("every fallback failed: " + "; ".join(failures))  # uniform cannot
