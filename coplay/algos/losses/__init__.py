"""Composable loss terms (objectives, regularisers, aggregation, composition) and filters."""

from coplay.algos.losses.aggregation import (
    AGGREGATIONS,
    GLOBAL_DENOMS,
    constant_norm,
    global_denom,
    sequence_mean,
    token_mean,
)
from coplay.algos.losses.compose import LossConfig, policy_loss
from coplay.algos.losses.filters import filter_metrics, informative_groups, nonzero_advantage_mask
from coplay.algos.losses.objectives import (
    dual_clip,
    masked_mean,
    ppo_clip,
    reinforce_objective,
    truncated_is_weights,
)
from coplay.algos.losses.regularizers import KL_ESTIMATORS, entropy_bonus, kl_penalty

__all__ = [
    "AGGREGATIONS",
    "GLOBAL_DENOMS",
    "KL_ESTIMATORS",
    "LossConfig",
    "constant_norm",
    "dual_clip",
    "entropy_bonus",
    "filter_metrics",
    "global_denom",
    "informative_groups",
    "kl_penalty",
    "masked_mean",
    "nonzero_advantage_mask",
    "policy_loss",
    "ppo_clip",
    "reinforce_objective",
    "sequence_mean",
    "token_mean",
    "truncated_is_weights",
]
