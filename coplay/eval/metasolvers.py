"""Meta-solvers: which mixture of a population to play, given its meta-game.

``META_SOLVERS`` names every solver. PSRO solvers (uniform, Nash, PRD, α-rank) choose
marginals and their joint is the product; JPSRO solvers (correlated and coarse
correlated equilibria) choose a joint and their marginals are its sums. The meta-game
and the answer are defined in ``meta_solution``, the convex programs (Nash, the (C)CE)
in ``meta_programs``, uniform and OpenSpiel's PRD and α-rank in ``meta_openspiel``. A
solver that cannot answer raises ``MetaSolverError``; ``solve_with_fallback`` then
tries max-welfare CE and uniform, as PSRO and leagues do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from coplay.eval.meta_openspiel import alpharank, prd, uniform
from coplay.eval.meta_programs import (
    max_gini_cce,
    max_gini_ce,
    max_welfare_cce,
    max_welfare_ce,
    nash,
)
from coplay.eval.meta_solution import MetaSolution, MetaSolverError

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
