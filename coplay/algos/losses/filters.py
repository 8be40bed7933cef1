"""Masks that drop uninformative samples before the update.

A sample whose advantage is zero adds nothing to the policy gradient but still counts
in the loss's denominator, diluting the samples that do carry signal. Likewise a group
of episodes from the same start whose returns are all equal gives every member a
group-relative advantage of 0. DAPO (Yu et al., 2025, arXiv 2503.14476) filters such
groups out ("dynamic sampling") and refills the batch.

Each function maps per-sample inputs of shape (N,) to a boolean keep-mask of shape
(N,): True keeps the sample. Combine masks with ``&``; ``filter_metrics`` reports the
share each one drops.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np
from numpy.typing import ArrayLike


def nonzero_advantage_mask(adv: ArrayLike, *, eps: float = 0.0) -> np.ndarray:
    """Keep samples with |A| > eps; same shape as ``adv``, dtype bool.

    >>> nonzero_advantage_mask([0.5, 0.0, -1e-9, -2.0], eps=1e-6).tolist()
    [True, False, False, True]
    """
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    return np.abs(np.asarray(adv, dtype=np.float64)) > eps


def informative_groups(group_ids: Sequence[Hashable], returns: ArrayLike) -> np.ndarray:
    """Keep samples whose group's returns are not all equal; shape (N,), dtype bool.

    ``group_ids[i]`` is any hashable key naming sample i's group (e.g. ``(game,
    group_id, seat)``), ``returns[i]`` its return. A group of one has nothing to be
    compared with, so it is dropped too. Equality is tested exactly (min == max),
    not as std == 0, which rounding can miss.

    >>> informative_groups(["a", "a", "b", "b", "c"], [1.0, 0.0, 1.0, 1.0, 3.0]).tolist()
    [True, True, False, False, False]
    """
    returns = np.asarray(returns, dtype=np.float64)
    if returns.shape != (len(group_ids),):
        raise ValueError(
            f"returns must have shape ({len(group_ids)},), one per group id; got {returns.shape}"
        )
    spans: dict[Hashable, tuple[float, float]] = {}
    for key, r in zip(group_ids, returns.tolist(), strict=True):
        lo, hi = spans.get(key, (r, r))
        spans[key] = (min(lo, r), max(hi, r))
    return np.array([spans[key][0] < spans[key][1] for key in group_ids], dtype=bool)


def filter_metrics(**keeps: np.ndarray) -> dict[str, float]:
    """Share of samples each named keep-mask drops, and the share all of them drop.

    >>> filter_metrics(zero_adv=np.array([True, False]), flat_group=np.array([False, False]))
    {'adv/zero_adv_dropped_frac': 0.5, 'adv/flat_group_dropped_frac': 1.0, 'adv/dropped_frac': 1.0}
    """
    metrics = {f"adv/{name}_dropped_frac": _dropped(keep) for name, keep in keeps.items()}
    if keeps:
        metrics["adv/dropped_frac"] = _dropped(np.logical_and.reduce(list(keeps.values())))
    return metrics


def _dropped(keep: np.ndarray) -> float:
    """Share of False in ``keep``; 0 for an empty mask."""
    return float(1.0 - keep.mean()) if keep.size else 0.0
