"""Token-level policy-gradient objectives.

Every objective maps padded per-unit tensors of shape (B, T) to a per-unit loss of
shape (B, T) plus scalar metrics; aggregation over units is a separate step
(``aggregation.py``). A unit is a generated token (free-text mode) or a decision
(choice mode). ``mask`` (B, T) is 1.0 on real units and 0.0 on padding.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``x`` over units where ``mask`` is 1 (0 when there are none)."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def ppo_clip(
    logp: Tensor,
    old_logp: Tensor,
    adv: Tensor,
    *,
    mask: Tensor | None = None,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
) -> tuple[Tensor, dict[str, float]]:
    """PPO's clipped surrogate with separate low and high clip ranges.

        r = exp(logp - old_logp)
        loss = -min(r * A, clip(r, 1 - clip_low, 1 + clip_high) * A)      # (B, T)

    Schulman et al., 2017 (arXiv 1707.06347); the decoupled ``clip_high`` >
    ``clip_low`` ("clip-higher") is from DAPO (Yu et al., 2025, arXiv 2503.14476).
    ``adv`` is (B, T) or broadcastable to it, e.g. (B, 1).

    Metrics: ``loss/clip_frac``, the share of units where the clipped term is the
    active one (zero gradient), and ``loss/approx_kl``, the k3 estimate of
    KL(old || new), mean of (r - 1) - log r over ``mask`` (Schulman, 2020,
    "Approximating KL divergence"); ``loss/ratio_min`` and ``loss/ratio_max``, the
    spread of r over ``mask``, which grows with the staleness of asynchronous samples.
    """
    mask = torch.ones_like(logp) if mask is None else mask
    log_ratio = logp - old_logp
    ratio = torch.exp(log_ratio)  # (B, T)
    unclipped = -ratio * adv
    clipped = -torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv
    loss = torch.maximum(unclipped, clipped)  # (B, T)
    with torch.no_grad():
        clip_frac = masked_mean((clipped > unclipped).to(logp.dtype), mask)
        approx_kl = masked_mean((ratio - 1.0) - log_ratio, mask)
        out = mask == 0
        low = (
            ratio.masked_fill(out, math.inf).min() if ratio.numel() else ratio.new_tensor(math.inf)
        )
        high = ratio.masked_fill(out, -math.inf).max() if ratio.numel() else -low
        # One read of all four: each ``.item()`` would be a host sync of its own.
        frac, kl, low, high = torch.stack([clip_frac, approx_kl, low, high]).tolist()
    spread = (low, high) if low <= high else (1.0, 1.0)  # no valid unit: no spread
    return loss, {
        "loss/clip_frac": frac,
        "loss/approx_kl": kl,
        "loss/ratio_min": spread[0],
        "loss/ratio_max": spread[1],
    }


def reinforce_objective(logp: Tensor, adv: Tensor) -> tuple[Tensor, dict[str, float]]:
    """Plain policy gradient: loss = -A * logp per unit (Williams, 1992).

    Its gradient equals ``ppo_clip``'s at ratio 1; use it when samples are exactly
    on-policy and no old log-probs are kept.
    """
    return -adv * logp, {}


def dual_clip(
    loss: Tensor, adv: Tensor, *, c: float, mask: Tensor | None = None
) -> tuple[Tensor, dict[str, float]]:
    """Bound a per-unit PPO loss at c * |A| where the advantage is negative (dual clip).

        loss' = min(loss, -c * A)   if A < 0                                  # (B, T)
        loss' = loss                otherwise

    Ye et al., 2020, "Mastering Complex Control in MOBA Games with Deep RL" (arXiv
    1912.09729), objective max(min(r A, clip(r) A), c A) for A < 0. PPO's pessimistic
    bound keeps -r * A for A < 0, which grows without limit when a stale sample's
    ratio r is huge; past r = c the unit's gradient is 0. ``c`` must exceed 1, or the
    bound would cut units whose ratio is still 1. ``adv`` broadcasts to ``loss``.

    Metric: ``loss/dual_clip_frac``, the share of valid units where the bound is active.
    """
    if c <= 1.0:
        raise ValueError(f"dual clip c must be greater than 1, got {c}")
    bound = -c * adv  # only compared where adv < 0, so positive
    clipped = torch.where(adv < 0, torch.minimum(loss, bound), loss)  # (B, T)
    mask = torch.ones_like(loss) if mask is None else mask
    with torch.no_grad():
        active = ((adv < 0) & (bound < loss)).to(loss.dtype)
        frac = masked_mean(active, mask)
    return clipped, {"loss/dual_clip_frac": frac.item()}


def truncated_is_weights(
    old_logp: Tensor, behavior_logp: Tensor, *, cap: float, mask: Tensor | None = None
) -> tuple[Tensor, dict[str, float]]:
    """Truncated importance weights for samples drawn by a behaviour policy, detached.

        w = min(exp(old_logp - behavior_logp), cap)                           # (B, T)

    Multiplying the per-unit PPO loss by ``w`` corrects for units sampled by a policy
    other than the one PPO's ratio is taken against (an older policy version, or an
    inference engine whose numerics differ from the trainer's); the cap bounds the
    variance. Truncated IS, as in TIS (Yao et al., 2025, "Your Efficient RL Framework
    Secretly Brings You Off-Policy RL Training"; verl's ``tis_imp_ratio_cap``). The
    weights are constants: no gradient flows to either log-prob through them.

    Metrics: ``loss/tis_weight_mean`` and ``loss/tis_capped_frac`` over valid units.
    """
    if cap <= 0.0:
        raise ValueError(f"tis cap must be greater than 0, got {cap}")
    mask = torch.ones_like(old_logp) if mask is None else mask
    with torch.no_grad():
        raw = torch.exp(old_logp - behavior_logp)
        weights = raw.clamp(max=cap)
        metrics = {
            "loss/tis_weight_mean": masked_mean(weights, mask).item(),
            "loss/tis_capped_frac": masked_mean((raw > cap).to(raw.dtype), mask).item(),
        }
    return weights, metrics
