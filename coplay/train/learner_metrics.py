"""The update's ``loss/*`` metrics from its micro-batches' and its steps': shares
added, extremes taken, means weighted by what each averaged over, so that no metric
depends on where the micro-batches are cut.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from coplay.train.parts.term import LossMetrics, Mean, Metrics


@dataclass(frozen=True)
class Part:
    """One micro-batch's metrics, with what their means are over."""

    size: int
    """Its samples, replays included."""
    units: float
    """Its own samples' units (decisions or tokens): what the objective's means are over."""
    per_unit: LossMetrics
    """The objective's and the per-unit terms' metrics."""
    others: LossMetrics
    """The other terms' metrics."""


ADDED = frozenset({"loss/policy", "loss/kl", "loss/total"})
"""Metrics that are a micro-batch's share of the minibatch's aggregate (a global
denominator): they add up."""
EXTREMA: dict[str, Callable[[Iterable[float]], float]] = {
    "loss/ratio_min": min,
    "loss/ratio_max": max,
}
"""Metrics that are an extreme over the micro-batch's units: the minibatch's is the
most extreme of its micro-batches', and the update's of its minibatches', not a mean."""


def combine(parts: Sequence[Part]) -> Metrics:
    """A minibatch's metrics from its micro-batches': shares added, extremes taken, and
    means weighted by what each micro-batch averaged over (the objective's by its own
    units, the other terms' by its size, a ``Mean`` by its count), over the
    micro-batches that report them (replayed targets report only their own), so that
    no metric depends on the cuts."""
    out: Metrics = {}
    for field_name, weight in (("per_unit", "units"), ("others", "size")):
        reports: dict[str, list[tuple[float, float]]] = {}
        for part in parts:
            for key, value in getattr(part, field_name).items():
                if isinstance(value, Mean):
                    reports.setdefault(key, []).append((value.count, value.value))
                else:
                    reports.setdefault(key, []).append((getattr(part, weight), value))
        for key, pairs in reports.items():
            if key in ADDED:
                out[key] = sum(v for _, v in pairs)
            elif key in EXTREMA:
                out[key] = EXTREMA[key](v for _, v in pairs)
            else:
                out[key] = sum(w * v for w, v in pairs) / sum(w for w, _ in pairs)
    return out
