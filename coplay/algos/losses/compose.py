"""The policy objective (PPO clip, dual clip, truncated IS), and the loss config.

    pg   = w * dual_clip(ppo_clip)        # each step only when configured
    loss = agg(pg)

``dual_clip`` bounds the loss of negative-advantage units (Ye et al., 2020); ``w`` are
truncated importance weights for samples from a behaviour policy (TIS). See
``objectives.py`` for both.

The other terms of the loss are the learner's parts (``coplay.train.parts``), each
configured by an optional section of ``LossConfig`` (None when off): ``kl`` and
``entropy`` are aggregated like the objective (one ``denom``), so gradient
accumulation with ``denom=global_denom(cfg.aggregation, masks)`` stays exact;
``signalling`` and ``listening`` are per-decision bonuses.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError
from torch import Tensor

from coplay.algos.losses.aggregation import AGGREGATIONS
from coplay.algos.losses.objectives import dual_clip, ppo_clip, truncated_is_weights
from coplay.algos.losses.regularizers import EntropyConfig, KLConfig
from coplay.algos.losses.signalling import ListeningConfig, SignallingConfig

MOVED_KEYS: dict[str, str] = {
    "kl_coef": ".kl.coef",
    "kl_estimator": ".kl.estimator",
    "entropy_coef": ".entropy.coef",
    "entropy_final_frac": ".entropy.final_frac",
    "signalling_coef": ".signalling.coef",
    "signalling_beta": ".signalling.beta",
    "signalling_seats": ".signalling.seats",
    "listening_coef": ".listening.coef",
    "tis_cap": "rollout.explore.tis_cap",
    "policy_iteration_coef": "rollout.restarts.exploring_starts.target.coef",
    "policy_iteration_memory": "rollout.restarts.exploring_starts.target.memory",
}
"""Flat keys of the loss config before its terms became sections -> where each is now:
'.x.y' inside the loss section, otherwise a key of the run config."""


def moved_key(section: str, key: str) -> str:
    """``loss.kl_coef is now loss.kl.coef``: the line for an old key found in ``section``."""
    new = MOVED_KEYS[key]
    return f"{section}.{key} is now {section + new if new.startswith('.') else new}"


class LossConfig(BaseModel):
    """The policy objective and the optional terms added to it; validated when built."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    clip_low: float = Field(0.2, gt=0.0, lt=1.0)
    """The probability ratio is clipped below at 1 - clip_low (from 1 on, a ratio is
    never below it: no clip at all)."""
    clip_high: float = Field(0.2, gt=0.0)
    """The probability ratio is clipped above at 1 + clip_high (DAPO uses 0.28)."""
    aggregation: str = "token_mean"
    """How per-unit losses become a scalar: token_mean, sequence_mean or constant_norm."""
    dual_clip: float | None = None
    """Dual clip c > 1: bound the loss of negative-advantage units at c*|A|; None is off."""
    kl: KLConfig | None = None
    """A KL penalty to the reference policy, e.g. {coef: 0.1}; None is off."""
    entropy: EntropyConfig | None = None
    """An entropy bonus, e.g. {coef: 0.05, final_frac: 0.1}; None is off."""
    signalling: SignallingConfig | None = None
    """The positive-signalling bonus (Eccles et al., 2019), e.g. {coef: 2.0, seats: [0]};
    None is off."""
    listening: ListeningConfig | None = None
    """The positive-listening bonus (Eccles et al., 2019), e.g. {coef: 0.1}; None is off."""

    @model_validator(mode="before")
    @classmethod
    def _no_flat_term_keys(cls, data: Any) -> Any:
        moved = [k for k in data if k in MOVED_KEYS] if isinstance(data, dict) else []
        if moved:
            # The run config's error line names each key with its full path (``moved_key``).
            lines = "; ".join(moved_key("loss", k) for k in moved)
            raise PydanticCustomError("moved_key", lines, {"keys": moved})
        return data

    @field_validator("dual_clip")
    @classmethod
    def _dual_clip_above_one(cls, v: float | None) -> float | None:
        if v is not None and not v > 1.0:
            raise ValueError(
                f"dual_clip must be greater than 1 (c <= 1 would cut units at ratio 1), "
                f"or None to turn it off; got {v}"
            )
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
    denom: float | None = None,
    behavior_logp: Tensor | None = None,
    tis_cap: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """The aggregated objective and its metrics from padded (B, T) per-unit tensors.

    ``adv`` is (B, T) or broadcastable, e.g. (B, 1). ``denom`` overrides the
    aggregation's denominator (see ``global_denom``), which gradient accumulation
    needs. ``tis_cap`` turns on truncated IS weights pi_old / pi_behavior capped at it;
    ``behavior_logp`` (B, T), the log-probs under the policy that sampled the units,
    are then required.

    Metrics: ``loss/policy`` is the aggregated objective (with a global ``denom``, this
    micro-batch's share: sum it over micro-batches); ``loss/clip_frac`` and
    ``loss/approx_kl`` are means over this micro-batch's valid units, as are
    ``loss/dual_clip_frac`` and ``loss/tis_weight_mean``, ``loss/tis_capped_frac``
    when those steps are on.
    """
    per_unit, metrics = _per_unit_policy_loss(
        cfg,
        logp=logp,
        old_logp=old_logp,
        adv=adv,
        mask=mask,
        behavior_logp=behavior_logp,
        tis_cap=tis_cap,
    )
    policy = AGGREGATIONS[cfg.aggregation](per_unit, mask, denom=denom)
    metrics["loss/policy"] = policy.item()
    return policy, metrics


def _per_unit_policy_loss(
    cfg: LossConfig,
    *,
    logp: Tensor,
    old_logp: Tensor,
    adv: Tensor,
    mask: Tensor,
    behavior_logp: Tensor | None,
    tis_cap: float | None,
) -> tuple[Tensor, dict[str, float]]:
    """PPO-clip, then dual clip and truncated IS weights where configured; (B, T)."""
    per_unit, metrics = ppo_clip(
        logp, old_logp, adv, mask=mask, clip_low=cfg.clip_low, clip_high=cfg.clip_high
    )
    if cfg.dual_clip is not None:
        per_unit, dual_metrics = dual_clip(per_unit, adv, c=cfg.dual_clip, mask=mask)
        metrics.update(dual_metrics)
    if tis_cap is not None:
        if behavior_logp is None:
            raise ValueError(
                "tis_cap is set but behavior_logp was not given: pass the sampling "
                "policy's log-probs, or set tis_cap=None"
            )
        weights, tis_metrics = truncated_is_weights(old_logp, behavior_logp, cap=tis_cap, mask=mask)
        per_unit = per_unit * weights
        metrics.update(tis_metrics)
    return per_unit, metrics
