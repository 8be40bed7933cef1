"""The meta-solvers that choose marginals without a program: uniform, and OpenSpiel's
projected replicator dynamics and α-rank, which are used directly.

An OpenSpiel solver's numerical failure is raised as ``MetaSolverError``.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator, Sequence

import numpy as np
from open_spiel.python.algorithms import projected_replicator_dynamics as os_prd

from coplay.eval.meta_solution import (
    MetaSolution,
    MetaSolverError,
    as_meta_game,
    from_joint,
    from_marginals,
)


def uniform(payoffs: Sequence[object]) -> MetaSolution:
    """Every strategy of every player equally likely (fictitious play's meta-solver)."""
    shape = as_meta_game(payoffs)[0].shape
    return from_marginals([np.full(k, 1.0 / k) for k in shape])


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
    return from_marginals(strategies)


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
        return from_marginals([pi, pi])
    # OpenSpiel numbers profiles in row-major order (utils.get_id_from_strat_profile).
    with _openspiel_failure("alpharank"):
        pi = os_alpharank.sweep_pi_vs_epsilon(list(tensors))
    return from_joint(np.asarray(pi).reshape(tensors[0].shape))


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
