"""Per-unit regularisers added to the policy loss: KL to a reference, entropy bonus.

Inputs are (B, T) per-unit tensors; outputs are (B, T) per-unit losses to be
aggregated like the policy term. ``KLConfig`` and ``EntropyConfig`` are their loss
config sections (``loss.kl``, ``loss.entropy``); the learner's terms
(``coplay.train.parts.kl``, ``.entropy``) apply them.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator
from torch import Tensor


def kl_k1(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k1 = logp - ref_logp: unbiased for KL(new || ref) under samples from new, high variance."""
    return logp - ref_logp


def kl_k2(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k2 = (logp - ref_logp)^2 / 2: low variance, biased; its gradient is the KL's."""
    return 0.5 * (logp - ref_logp) ** 2


def kl_k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k3 = exp(ref - logp) - (ref - logp) - 1: unbiased for KL(new || ref), always >= 0."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1.0


KL_ESTIMATORS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "k1": kl_k1,
    "k2": kl_k2,
    "k3": kl_k3,
}
"""Per-unit KL estimators (Schulman, 2020, "Approximating KL divergence"); GRPO uses k3.
Their gradients as a loss differ: see ``KLConfig.estimator``."""


def kl_penalty(logp: Tensor, ref_logp: Tensor, *, estimator: str = "k3") -> Tensor:
    """Per-unit estimate of KL(new || ref) with the named estimator, shape (B, T)."""
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"kl estimator must be one of {sorted(KL_ESTIMATORS)}, got {estimator!r}")
    return KL_ESTIMATORS[estimator](logp, ref_logp)


def entropy_bonus(entropy: Tensor) -> Tensor:
    """-entropy per unit: adding it with a positive coefficient maximises entropy."""
    return -entropy


def action_surprisal(
    states: Sequence[Hashable], actions: Sequence[str | None]
) -> tuple[list[float], float]:
    """Each answer's ``-log p(a|s) - H(s)`` and the answers' mean ``H(s)``, where p is the
    share of the valid answers at state s that chose a and H its plug-in entropy.

    Used as an advantage, the surprisal is a score-function estimate of the gradient
    of the action entropy: ``grad H(s) = E_a[-log p(a|s) grad log pi(a|s)]``, whatever
    text leads to the action; subtracting H(s) is a baseline (the bonuses at a state sum
    to 0). An invalid answer (None) gets 0 and is not counted, so the bonus never pays
    for writing outside the format; a state answered once gets 0.

    >>> bonus, h = action_surprisal(["s", "s", "s", "s", "t"], ["P", "P", "P", "B", None])
    >>> [round(b, 3) for b in bonus], round(h, 3)
    ([-0.275, -0.275, -0.275, 0.824, 0.0], 0.562)
    """
    counts = Counter((s, a) for s, a in zip(states, actions, strict=True) if a is not None)
    totals = Counter(s for s, a in zip(states, actions, strict=True) if a is not None)
    entropy: dict[Hashable, float] = dict.fromkeys(totals, 0.0)
    for (s, _), c in counts.items():
        entropy[s] -= c / totals[s] * math.log(c / totals[s])
    bonus = [
        0.0 if a is None else -math.log(counts[s, a] / totals[s]) - entropy[s]
        for s, a in zip(states, actions, strict=True)
    ]
    valid = [entropy[s] for s, a in zip(states, actions, strict=True) if a is not None]
    return bonus, (sum(valid) / len(valid) if valid else 0.0)


class KLConfig(BaseModel):
    """``loss.kl``: a KL penalty to the reference policy (a frozen copy of the initial
    policy, or a magnet that trails the learner: ``magnet.ema``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    coef: float = Field(gt=0.0, allow_inf_nan=False)
    """Weight of the KL penalty (leave the section out, loss.kl=null, to turn it off)."""
    estimator: str = "k3"
    """Per-unit KL estimator: k1, k2 or k3. Each value estimates KL(new || ref), but as a
    loss on the policy's own samples their gradients differ (Tang & Munos, 2025, "On a
    few pitfalls in KL divergence gradient estimation for RL"): k2's is the gradient of
    KL(new || ref), which magnetic mirror descent's pull is; k3's (GRPO's) that of the
    forward KL(ref || new); k1's is zero in expectation, so it only adds noise."""

    @field_validator("estimator")
    @classmethod
    def _known_estimator(cls, v: str) -> str:
        if v not in KL_ESTIMATORS:
            raise ValueError(f"estimator must be one of {sorted(KL_ESTIMATORS)}, got {v!r}")
        return v


class EntropyConfig(BaseModel):
    """``loss.entropy``: an entropy bonus, its weight on a linear schedule."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    coef: float = Field(gt=0.0, allow_inf_nan=False)
    """Weight of the entropy bonus at the first iteration (leave the section out,
    loss.entropy=null, to turn it off)."""
    final_frac: float = Field(1.0, ge=0.0, allow_inf_nan=False)
    """The weight decays linearly from coef to coef times this over the run's
    iterations (1 keeps it constant): explore early, sharpen late, as a best response
    must end near-deterministic."""
    over: Literal["tokens", "actions"] = "tokens"
    """What the entropy is of. tokens: every unit's next-token distribution (in choice
    mode the action distribution itself); actions: the distribution of the parsed
    actions at each state, estimated from the iteration's answers there (free text,
    where a per-token bonus rewards varied writing rather than varied play)."""
