"""Entropy bonus, its weight on a linear schedule (``loss.entropy``).

Adds ``-weight * agg(entropy)`` per unit, aggregated like the objective. The weight
decays linearly from ``coef`` to ``coef * final_frac`` at the run's last update:
explore early, sharpen late.
"""

from __future__ import annotations

from torch import Tensor

from coplay.algos.losses.regularizers import EntropyConfig, entropy_bonus
from coplay.train.parts.term import Metrics, Micro, Owner, Setup, Term


class Entropy(Term):
    """The entropy bonus; its context is the update's weight."""

    per_unit = True
    idle_metrics = {"loss/entropy_coef": 0.0}
    section = EntropyConfig

    def __init__(self, cfg: EntropyConfig, iterations: int):
        self.cfg, self.iterations = cfg, iterations

    @classmethod
    def build(cls, section: EntropyConfig | None, setup: Setup) -> Entropy | None:
        return None if section is None else cls(section, setup.iterations)

    def weight(self, iteration: int) -> float:
        """The weight at update ``iteration`` (0-based), held after the last one."""
        if self.cfg.final_frac == 1.0:
            return self.cfg.coef
        span = max(1, self.iterations - 1)
        frac = 1.0 - (1.0 - self.cfg.final_frac) * min(iteration, span) / span
        return self.cfg.coef * frac

    def prepare(self, learner: Owner, own, iteration: int) -> tuple[float, Metrics]:
        return self.weight(iteration), {}

    def loss(self, weight: float, micro: Micro) -> tuple[Tensor | None, Metrics]:
        if not weight > 0.0 or not micro.rows:
            return None, {}
        bonus = micro.aggregate(entropy_bonus(micro.entropy), micro.mask, denom=micro.denom)
        return weight * bonus, {}

    def after_update(self, learner: Owner, iteration: int) -> Metrics:
        return {"loss/entropy_coef": self.weight(iteration)}
