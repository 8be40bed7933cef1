"""Advantage estimators, registered by name in ``ESTIMATORS``.

Importing this package registers every built-in estimator; ``make_estimator(name,
**params)`` builds one from the registry with its hyper-parameters validated.
"""

from coplay.algos.advantages import (
    alignment,
    dr_mas,
    gae,
    gigpo,
    gra,
    grpo,
    mars,
    rae,
    reinforce,
    rloo,
)
from coplay.algos.advantages.base import (
    ESTIMATORS,
    Advantages,
    EmptyState,
    Estimate,
    Estimator,
    assign_advantages,
    expand_to_turns,
    make_estimator,
    register,
)

__all__ = [
    "ESTIMATORS",
    "Advantages",
    "EmptyState",
    "Estimate",
    "Estimator",
    "alignment",
    "assign_advantages",
    "dr_mas",
    "expand_to_turns",
    "gae",
    "gigpo",
    "gra",
    "grpo",
    "make_estimator",
    "mars",
    "rae",
    "register",
    "reinforce",
    "rloo",
]
