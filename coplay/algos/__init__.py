"""Credit assignment and losses: advantage estimators and composable loss terms.

``advantages`` turns a batch of episodes into per-turn advantages (pure functions with
explicit state); ``losses`` turns per-unit log-probs and advantages into a scalar loss.
"""

from coplay.algos.advantages import ESTIMATORS, Estimate, Estimator, make_estimator
from coplay.algos.losses import AGGREGATIONS, LossConfig, global_denom, policy_loss

__all__ = [
    "AGGREGATIONS",
    "ESTIMATORS",
    "Estimate",
    "Estimator",
    "LossConfig",
    "global_denom",
    "make_estimator",
    "policy_loss",
]
