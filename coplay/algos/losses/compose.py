"""The policy loss: PPO-clip objective + optional KL and entropy terms, aggregated.

    pg   = w * dual_clip(ppo_clip)        # each step only when configured
    loss = agg(pg) + kl_coef * agg(kl) + entropy_coef * agg(-entropy)

``dual_clip`` bounds the loss of negative-advantage units (Ye et al., 2020); ``w`` are
truncated importance weights for samples from a behaviour policy (TIS). See
``objectives.py`` for both.

All terms share one aggregation (and one ``denom``), so gradient accumulation with
``denom=global_denom(cfg.aggregation, masks)`` is exact for the whole loss.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator
from torch import Tensor

from coplay.algos.losses.aggregation import AGGREGATIONS
from coplay.algos.losses.objectives import (
    dual_clip,
    masked_mean,
    ppo_clip,
    truncated_is_weights,
)
from coplay.algos.losses.regularizers import KL_ESTIMATORS, entropy_bonus, kl_penalty


class LossConfig(BaseModel):
    """Hyper-parameters of ``policy_loss``; validated when built."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    clip_low: float = Field(0.2, gt=0.0)
    """The probability ratio is clipped below at 1 - clip_low."""
    clip_high: float = Field(0.2, gt=0.0)
    """The probability ratio is clipped above at 1 + clip_high (DAPO uses 0.28)."""
    kl_coef: float = Field(0.0, ge=0.0)
    """Weight of the KL penalty to the reference policy; 0 turns it off."""
    kl_estimator: str = "k3"
    """Per-unit KL estimator: k1, k2 or k3."""
    entropy_coef: float = Field(0.0, ge=0.0)
    """Weight of the entropy bonus; 0 turns it off."""
    entropy_final_frac: float = Field(1.0, ge=0.0)
    """The entropy weight decays linearly from entropy_coef to entropy_coef times this
    over the run's iterations (1 keeps it constant): explore early, sharpen late, as a
    best response must end near-deterministic."""
    signalling_coef: float = Field(0.0, ge=0.0)
    """Weight of the positive-signalling bonus (Eccles et al., 2019), H(pi_bar) -
    signalling_beta * H(pi | x) over the iteration's choices among the same actions
    (see ``signalling.py``); 0 turns it off. For a speaker whose messages would
    otherwise collapse to one symbol for every observation."""
    signalling_beta: float = Field(1.0, ge=0.0)
    """Weight of the conditional entropy in the signalling bonus: 1 makes it the
    mutual information between observation and choice (use 1; ``signalling.py`` says
    how other values fail)."""
    signalling_seats: list[int] | None = None
    """Seats whose decisions the signalling bonus covers (the speakers); None covers
    every seat. A listener given the bonus is pushed to answer each message
    deterministically before it has learned what messages mean."""
    listening_coef: float = Field(0.0, ge=0.0)
    """Weight of the positive-listening bonus (Eccles et al., 2019): the L1 distance from
    a decision's choice distribution to its mean over every message it could have
    received (the observation's ``counterfactuals``), so a listener's answer depends on
    the message.
    Covers only decisions whose observation lists counterfactuals; 0 turns it off."""
    policy_iteration_coef: float = Field(0.0, ge=0.0)
    """Weight of the policy-iteration target at restart positions: the cross-entropy from
    the best-scoring first moves of each restarted group (``opening_targets``, needs
    ``rollout.restart_explore``) to the policy there. Unlike the policy gradient, its
    push does not fade as the policy grows sure of the wrong move; 0 turns it off."""
    policy_iteration_memory: int = Field(0, ge=0)
    """How many positions' latest policy-iteration targets are kept and trained toward
    again at every update (``coplay.train.target_memory``), so a target found once
    keeps its pull until a newer one at the same position replaces it; 0 keeps none.
    Needs policy_iteration_coef > 0."""
    aggregation: str = "token_mean"
    """How per-unit losses become a scalar: token_mean, sequence_mean or constant_norm."""
    dual_clip: float | None = None
    """Dual clip c > 1: bound the loss of negative-advantage units at c*|A|; None is off."""
    tis_cap: float | None = None
    """Cap of the truncated IS weights pi_old / pi_behavior (needs behavior_logp); None is off."""

    @field_validator("dual_clip")
    @classmethod
    def _dual_clip_above_one(cls, v: float | None) -> float | None:
        if v is not None and not v > 1.0:
            raise ValueError(
                f"dual_clip must be greater than 1 (c <= 1 would cut units at ratio 1), "
                f"or None to turn it off; got {v}"
            )
        return v

    @field_validator("tis_cap")
    @classmethod
    def _tis_cap_positive(cls, v: float | None) -> float | None:
        if v is not None and not v > 0.0:
            raise ValueError(
                f"tis_cap must be greater than 0 (e.g. 2.0), or None to turn it off; got {v}"
            )
        return v

    @field_validator("kl_estimator")
    @classmethod
    def _known_kl_estimator(cls, v: str) -> str:
        if v not in KL_ESTIMATORS:
            raise ValueError(f"kl_estimator must be one of {sorted(KL_ESTIMATORS)}, got {v!r}")
        return v

    @field_validator("aggregation")
    @classmethod
    def _known_aggregation(cls, v: str) -> str:
        if v not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {sorted(AGGREGATIONS)}, got {v!r}")
        return v


def policy_loss(
    cfg: LossConfig,
    *,
    logp: Tensor,
    old_logp: Tensor,
    adv: Tensor,
    mask: Tensor,
    ref_logp: Tensor | None = None,
    entropy: Tensor | None = None,
    denom: float | None = None,
    behavior_logp: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Scalar loss and metrics from padded (B, T) per-unit tensors.

    ``adv`` is (B, T) or broadcastable, e.g. (B, 1). The KL term is added only when
    ``cfg.kl_coef > 0`` and ``ref_logp`` is given; the entropy term only when
    ``cfg.entropy_coef > 0`` and ``entropy`` is given. ``denom`` overrides the
    aggregation's denominator (see ``global_denom``), which gradient accumulation
    needs. ``behavior_logp`` (B, T) are the log-probs under the policy that sampled
    the units; they are used only when ``cfg.tis_cap`` is set, which requires them.

    Metrics: ``loss/policy``, ``loss/kl``, ``loss/total`` are the aggregated terms (with
    a global ``denom`` they are this micro-batch's share: sum them over micro-batches);
    ``loss/entropy`` (mean entropy), ``loss/clip_frac`` and ``loss/approx_kl`` are
    means over this micro-batch's valid units, as are ``loss/dual_clip_frac`` and
    ``loss/tis_weight_mean``, ``loss/tis_capped_frac`` when those terms are on.
    """
    aggregate = AGGREGATIONS[cfg.aggregation]
    per_unit, metrics = _per_unit_policy_loss(
        cfg, logp=logp, old_logp=old_logp, adv=adv, mask=mask, behavior_logp=behavior_logp
    )
    policy = aggregate(per_unit, mask, denom=denom)
    total = policy
    metrics["loss/policy"] = policy.item()
    if cfg.kl_coef > 0.0 and ref_logp is not None:
        kl = aggregate(kl_penalty(logp, ref_logp, estimator=cfg.kl_estimator), mask, denom=denom)
        total = total + cfg.kl_coef * kl
        metrics["loss/kl"] = kl.item()
    if cfg.entropy_coef > 0.0 and entropy is not None:
        total = total + cfg.entropy_coef * aggregate(entropy_bonus(entropy), mask, denom=denom)
        metrics["loss/entropy"] = masked_mean(entropy.detach(), mask).item()
    metrics["loss/total"] = total.item()
    return total, metrics


def _per_unit_policy_loss(
    cfg: LossConfig,
    *,
    logp: Tensor,
    old_logp: Tensor,
    adv: Tensor,
    mask: Tensor,
    behavior_logp: Tensor | None,
) -> tuple[Tensor, dict[str, float]]:
    """PPO-clip, then dual clip and truncated IS weights where configured; (B, T)."""
    per_unit, metrics = ppo_clip(
        logp, old_logp, adv, mask=mask, clip_low=cfg.clip_low, clip_high=cfg.clip_high
    )
    if cfg.dual_clip is not None:
        per_unit, dual_metrics = dual_clip(per_unit, adv, c=cfg.dual_clip, mask=mask)
        metrics.update(dual_metrics)
    if cfg.tis_cap is not None:
        if behavior_logp is None:
            raise ValueError(
                "tis_cap is set but behavior_logp was not given: pass the sampling "
                "policy's log-probs, or set tis_cap=None"
            )
        weights, tis_metrics = truncated_is_weights(
            old_logp, behavior_logp, cap=cfg.tis_cap, mask=mask
        )
        per_unit = per_unit * weights
        metrics.update(tis_metrics)
    return per_unit, metrics
