"""The league's opponent samplers (registry ``SAMPLERS``): each member's probability of
being drawn, from what the league knows of it.

Samplers (AlphaStar, Vinyals et al. 2019, prioritised fictitious self-play):
  uniform   every member alike (fictitious self-play);
  pfsp      weight f(x), x = P[learner beats member]: "hard" f = (1 - x)^p,
            "variance" f = x (1 - x);
  meta      a meta-solver's mixture of the members' own meta-game (two-player games).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from coplay.population.metagame import solve

if TYPE_CHECKING:
    from coplay.population.league_config import LeagueConfig


@dataclass(frozen=True)
class PoolView:
    """What a sampler may read about the league."""

    win_rates: np.ndarray
    """Estimated P[learner beats member], shape (K,)."""
    payoff: np.ndarray | None = None
    """``payoff[i, j]``: member i's mean return against j over both seats (meta only)."""
    metrics: dict[str, float] = field(default_factory=dict)
    """What the sampler reports for this iteration's log (the meta sampler's fallback)."""


def uniform_sampler(view: PoolView, cfg: LeagueConfig) -> np.ndarray:
    """Every member alike."""
    return np.full(len(view.win_rates), 1.0 / len(view.win_rates))


PFSP_WEIGHTINGS: dict[str, Callable[[np.ndarray, float], np.ndarray]] = {
    "hard": lambda x, p: (1.0 - x) ** p,
    "variance": lambda x, p: x * (1.0 - x),
}
POWERED_WEIGHTINGS = frozenset({"hard"})
"""The PFSP weightings that read ``pfsp_power`` (p)."""


def pfsp_sampler(view: PoolView, cfg: LeagueConfig) -> np.ndarray:
    """Prioritised fictitious self-play: probabilities proportional to f(win rate);
    uniform when every weight is zero (the learner beats everyone for sure)."""
    f = PFSP_WEIGHTINGS[cfg.pfsp_weighting](np.asarray(view.win_rates, float), cfg.pfsp_power)
    return f / f.sum() if f.sum() > 0 else uniform_sampler(view, cfg)


def meta_sampler(view: PoolView, cfg: LeagueConfig) -> np.ndarray:
    """The meta-solver's mixture of the members' symmetric meta-game ``[payoff, payoff.T]``;
    a failing meta-solver is replaced (max-welfare CE, then uniform) with a warning line
    and ``league/meta_fallback`` in ``view.metrics``."""
    if view.payoff is None:
        raise ValueError("the meta sampler needs the members' payoff matrix")
    meta = solve(cfg.meta_solver, (view.payoff, view.payoff.T))  # warns when it falls back
    view.metrics["league/meta_fallback"] = meta.level  # 1: max-welfare CE, 2: uniform
    return meta.solution.marginals[0]


@dataclass(frozen=True)
class Sampler:
    """An opponent sampler: ``weights`` gives each member's probability, shape (K,)."""

    weights: Callable[[PoolView, LeagueConfig], np.ndarray]
    needs_payoff: bool = False
    """Reads the members' meta-game (``PoolView.payoff``), which every snapshot then
    refreshes; the others never pay for it."""
    settings: frozenset[str] = frozenset()
    """The ``LeagueConfig`` fields it reads; another sampler's would have no effect
    with it, and the config refuses them."""


SAMPLERS: dict[str, Sampler] = {
    "uniform": Sampler(uniform_sampler),
    "pfsp": Sampler(pfsp_sampler, settings=frozenset({"pfsp_weighting", "pfsp_power"})),
    "meta": Sampler(
        meta_sampler, needs_payoff=True, settings=frozenset({"meta_solver", "meta_episodes"})
    ),
}
