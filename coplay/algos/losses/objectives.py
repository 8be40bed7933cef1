"""Token-level policy-gradient objectives.

Every objective maps padded per-unit tensors of shape (B, T) to a per-unit loss of
shape (B, T) plus scalar metrics; aggregation over units is a separate step
(``aggregation.py``). A unit is a generated token (free-text mode) or a decision
(choice mode). ``mask`` (B, T) is 1.0 on real units and 0.0 on padding.
"""

from __future__ import annotations

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
    "Approximating KL divergence").
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
    return loss, {"loss/clip_frac": clip_frac.item(), "loss/approx_kl": approx_kl.item()}


def reinforce_objective(logp: Tensor, adv: Tensor) -> tuple[Tensor, dict[str, float]]:
    """Plain policy gradient: loss = -A * logp per unit (Williams, 1992).

    Its gradient equals ``ppo_clip``'s at ratio 1; use it when samples are exactly
    on-policy and no old log-probs are kept.
    """
    return -adv * logp, {}
