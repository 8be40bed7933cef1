"""KL to a reference policy: a frozen copy of the initial policy, or a moving magnet.

``loss.kl`` adds ``coef * agg(KL(pi || ref))`` per unit, aggregated like the objective.
With a ``magnet`` section the reference is a *magnet* that moves toward the learner
by ``magnet.ema`` of the gap after every update (magnetic mirror descent, Sokota et
al., 2023); without a KL section the magnet still exists and is then only an
exponential average of the learner's weights (``magnet.final: true`` outputs it).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from coplay.algos.losses.regularizers import KLConfig, kl_penalty
from coplay.policies.lm import LMPolicy
from coplay.train.parts.term import Metrics, Micro, Owner, Setup, Term


class KL(Term):
    """The KL penalty (when configured) and the reference it is taken against."""

    per_unit = True
    section = KLConfig

    def __init__(self, cfg: KLConfig | None, reference: LMPolicy, *, ema: float, own: bool):
        self.cfg, self.reference, self.ema = cfg, reference, ema
        self.own_weights = own
        """False when the reference shares the policy's model (a LoRA role's base)."""

    @classmethod
    def build(cls, section: KLConfig | None, setup: Setup) -> KL | None:
        if section is None and not setup.reference_ema > 0:
            return None
        ref = setup.reference(setup.policy)
        return cls(section, ref, ema=setup.reference_ema, own=ref.model is not setup.policy.model)

    def loss(self, context: Any, micro: Micro) -> tuple[Tensor | None, Metrics]:
        if self.cfg is None or not micro.rows:
            return None, {}
        with torch.no_grad():
            ref = self.reference.scorer.score([s.decision for s in micro.own]).logp
        # Replays in the micro-batch may have widened the scored rows (padding).
        ref_logp = torch.nn.functional.pad(ref, (0, micro.logp.shape[1] - ref.shape[1]))
        per_unit = kl_penalty(micro.logp, ref_logp, estimator=self.cfg.estimator)
        kl = micro.aggregate(per_unit, micro.mask, denom=micro.denom)
        return self.cfg.coef * kl, {"loss/kl": kl.item()}

    def after_update(self, learner: Owner, iteration: int) -> Metrics:
        if self.ema > 0:
            move_magnet(self.reference.model, learner.policy.model, self.ema)
        return {}

    def state_dict(self) -> dict[str, Any] | None:
        return {"weights": self.reference.model.state_dict()} if self.own_weights else None

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.reference.model.load_state_dict(state["weights"])


@torch.no_grad()
def move_magnet(magnet: torch.nn.Module, policy: torch.nn.Module, ema: float) -> None:
    """magnet <- magnet + ema * (policy - magnet), parameter by parameter."""
    for m, p in zip(magnet.parameters(), policy.parameters(), strict=True):
        m.lerp_(p, ema)
