"""Composable loss terms: objectives, regularisers, aggregation, and their composition."""

from coplay.algos.losses.aggregation import (
    AGGREGATIONS,
    GLOBAL_DENOMS,
    constant_norm,
    global_denom,
    sequence_mean,
    token_mean,
)
from coplay.algos.losses.compose import LossConfig, policy_loss
from coplay.algos.losses.objectives import masked_mean, ppo_clip, reinforce_objective
from coplay.algos.losses.regularizers import KL_ESTIMATORS, entropy_bonus, kl_penalty

__all__ = [
    "AGGREGATIONS",
    "GLOBAL_DENOMS",
    "KL_ESTIMATORS",
    "LossConfig",
    "constant_norm",
    "entropy_bonus",
    "global_denom",
    "kl_penalty",
    "masked_mean",
    "policy_loss",
    "ppo_clip",
    "reinforce_objective",
    "sequence_mean",
    "token_mean",
]
