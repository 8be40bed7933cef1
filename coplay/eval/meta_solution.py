"""A meta-game as the meta-solvers take it, and the mixture they answer with.

A meta-game uses OpenSpiel's layout (``open_spiel.python.algorithms.psro_v2`` and
``jpsro``): a list with one payoff tensor per player, each of shape
``(|S_1|, ..., |S_n|)``, where entry ``[s_1, ..., s_n]`` is that player's expected
return when player ``k`` plays its strategy ``s_k``.

Every solver returns a ``MetaSolution`` holding both per-player marginals and the
joint distribution over strategy profiles: a solver that chooses marginals builds it
with ``from_marginals`` (the joint is their product), one that chooses a joint with
``from_joint`` (the marginals are its sums).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


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


def from_marginals(marginals: Sequence[np.ndarray]) -> MetaSolution:
    """The solution of these (normalised) marginals, its joint their product."""
    ms = tuple(normalised(np.asarray(m, dtype=float).reshape(-1)) for m in marginals)
    joint = ms[0]
    for m in ms[1:]:
        joint = np.multiply.outer(joint, m)
    return MetaSolution(marginals=ms, joint=joint, correlated=False)


def from_joint(joint: np.ndarray) -> MetaSolution:
    """The correlated solution of this (normalised) joint, its marginals the joint's sums."""
    joint = normalised(joint)
    axes = range(joint.ndim)
    marginals = tuple(joint.sum(axis=tuple(a for a in axes if a != p)) for p in axes)
    return MetaSolution(marginals=marginals, joint=joint, correlated=True)


def normalised(p: np.ndarray) -> np.ndarray:
    """Clip solver round-off below zero and renormalise to sum 1."""
    p = np.clip(p, 0.0, None)
    total = p.sum()
    if not np.isfinite(total) or total <= 0:
        raise MetaSolverError(f"the solver returned no distribution (total mass {total})")
    return p / total
