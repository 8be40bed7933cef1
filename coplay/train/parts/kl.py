"""KL to a reference policy: a frozen copy of the initial policy, or a moving magnet.

``loss.kl`` adds ``coef * agg(KL(pi || ref))`` per unit, aggregated like the objective.
With a ``magnet`` section the reference is a *magnet* that moves toward the learner
by ``magnet.ema`` of the gap after every update (magnetic mirror descent, Sokota et
al., 2023); without a KL section the magnet still exists and is then only an
exponential average of the learner's weights (``magnet.final: true`` outputs it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from coplay.algos.losses.regularizers import KLConfig, kl_penalty
from coplay.policies.lm import LMPolicy
from coplay.train.micro import learner_micro_batches
from coplay.train.parts.term import Metrics, Micro, Owner, Sample, Setup, Term
from coplay.types import Decision


class KL(Term):
    """The KL penalty (when configured) and the reference it is taken against."""

    per_unit = True
    section = KLConfig

    def __init__(self, cfg: KLConfig | None, reference: LMPolicy, *, ema: float, own: bool):
        self.cfg, self.reference, self.ema = cfg, reference, ema
        self.own_weights = own
        """False when the reference shares the policy's model (a LoRA role's base)."""
        self._scored: dict[int, tuple[Decision, Tensor]] = {}
        """The reference's log-probs of this update's decisions so far, by identity."""
        self._scored_at: int | None = None
        """The update (policy version) they were scored in."""

    @classmethod
    def build(cls, section: KLConfig | None, setup: Setup) -> KL | None:
        if section is None and not setup.reference_ema > 0:
            return None
        ref = setup.reference(setup.policy)
        return cls(section, ref, ema=setup.reference_ema, own=ref.model is not setup.policy.model)

    def prepare(self, learner: Owner, own: Sequence[Sample], iteration: int):
        """The reference's per-unit log-probs of the minibatch's own decisions, in order.

        The reference moves only after the update (the magnet), so each decision is
        scored by it once per update, in the first epoch that meets it, not again in
        every epoch."""
        if self.cfg is None:
            return None, {}
        if self._scored_at != iteration:  # a new update: the reference has moved
            self._scored, self._scored_at = {}, iteration
        todo = [s.decision for s in own if id(s.decision) not in self._scored]
        for start, end in learner_micro_batches(learner, todo):
            part = todo[start:end]
            scored = self.reference.scorer.score(part)
            lengths = scored.mask.sum(1).long().tolist()
            for d, lp, n in zip(part, scored.logp, lengths, strict=True):
                # Held with its decision, so the id cannot be reused while kept.
                self._scored[id(d)] = (d, lp[:n])
        rows = [self._scored[id(s.decision)][1] for s in own]
        # One (B, T) tensor, zeros past each row's units, which ``loss`` indexes.
        return (_stack(rows) if rows else None), {}

    def loss(self, context: Any, micro: Micro) -> tuple[Tensor | None, Metrics]:
        if self.cfg is None or not micro.rows:
            return None, {}
        width = micro.logp.shape[1]
        # Own samples come first in the minibatch's order, so row r is own sample start + r.
        index = torch.tensor(micro.rows, device=context.device) + micro.start
        ref_logp = F.pad(context[index, :width], (0, max(0, width - context.shape[1])))
        per_unit = kl_penalty(micro.logp, ref_logp, estimator=self.cfg.estimator)
        kl = micro.aggregate(per_unit, micro.mask, denom=micro.denom)
        return self.cfg.coef * kl, {"loss/kl": kl.item()}

    def after_update(self, learner: Owner, iteration: int) -> Metrics:
        self._scored, self._scored_at = {}, None
        if self.ema > 0:
            move_magnet(self.reference.model, learner.policy.model, self.ema)
        return {}

    def state_dict(self) -> dict[str, Any] | None:
        return {"weights": self.reference.model.state_dict()} if self.own_weights else None

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.reference.model.load_state_dict(state["weights"])


def _stack(rows: Sequence[Tensor]) -> Tensor:
    """Rows of different lengths as one (B, T) tensor, zeros after each row's end."""
    if all(len(r) == len(rows[0]) for r in rows):
        return torch.stack(list(rows))
    return torch.nn.utils.rnn.pad_sequence(list(rows), batch_first=True)


@torch.no_grad()
def move_magnet(magnet: torch.nn.Module, policy: torch.nn.Module, ema: float) -> None:
    """magnet <- magnet + ema * (policy - magnet), parameter by parameter."""
    for m, p in zip(magnet.parameters(), policy.parameters(), strict=True):
        m.lerp_(p, ema)
