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

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from coplay.algos.losses.regularizers import KLConfig, kl_penalty
from coplay.policies.lm import LMPolicy
from coplay.train.micro import learner_passes
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
        self._scored: dict[int, tuple[Decision, int]] = {}
        """This update's decisions scored so far, by identity: each with its row in
        the scored parts taken together (``_table``)."""
        self._parts: list[Tensor] = []
        """The reference's (B, T) log-probs of those decisions, a tensor per pass."""
        self._table: Tensor | None = None
        """The parts as one (N, T) tensor, zeros past each row's units (built on use)."""
        self._scored_at: int | None = None
        """The update (policy version) they were scored in."""

    @classmethod
    def build(cls, section: KLConfig | None, setup: Setup) -> KL | None:
        if section is None and not setup.reference_ema > 0:
            return None
        ref = setup.reference(setup.policy)
        return cls(section, ref, ema=setup.reference_ema, own=ref.model is not setup.policy.model)

    def begin_update(self, learner: Owner, samples: Sequence[Sample], iteration: int) -> Metrics:
        """The reference's log-probs of every decision the update trains on, scored
        before its first step: the reference moves only after the update (the magnet),
        so each decision is scored once per update, and all of them together take
        fewer forward passes than each minibatch's apart (a small game's update
        repeats a few information states, which one pass scores once)."""
        if self.cfg is not None:
            self._score(learner, [s for s in samples if not s.replay], iteration)
        return {}

    def prepare(self, learner: Owner, own: Sequence[Sample], iteration: int):
        """The reference's per-unit log-probs of the minibatch's own decisions, in order
        (scored here if ``begin_update`` did not see them)."""
        if self.cfg is None:
            return None, {}
        self._score(learner, own, iteration)
        if not own:
            return None, {}
        if self._table is None:
            width = max(p.shape[1] for p in self._parts)
            self._table = torch.cat([F.pad(p, (0, width - p.shape[1])) for p in self._parts])
        scored = self._scored
        rows = torch.from_numpy(
            np.fromiter((scored[id(s.decision)][1] for s in own), dtype=np.int64, count=len(own))
        )
        # One (B, T) tensor, zeros past each row's units, which ``loss`` indexes.
        return self._table[rows.to(self._table.device)], {}

    def _score(self, learner: Owner, own: Sequence[Sample], iteration: int) -> None:
        """Score the decisions of ``own`` not yet scored in update ``iteration``."""
        if self._scored_at != iteration:  # a new update: the reference has moved
            self._forget()
            self._scored_at = iteration
        todo = [s.decision for s in own if id(s.decision) not in self._scored]
        for rows in learner_passes(learner, todo):  # rows are kept by id: any order
            part = [todo[i] for i in rows]
            scored = self.reference.scorer.score(part)
            first = sum(len(p) for p in self._parts)
            # Held with its decision, so the id cannot be reused while kept.
            self._scored |= {id(d): (d, first + i) for i, d in enumerate(part)}
            self._parts.append(scored.logp.masked_fill(scored.mask == 0, 0.0))
            self._table = None

    def _forget(self) -> None:
        self._scored, self._parts, self._table, self._scored_at = {}, [], None, None

    def loss(self, context: Any, micro: Micro) -> tuple[Tensor | None, Metrics]:
        if self.cfg is None or not micro.rows:
            return None, {}
        width = micro.logp.shape[1]
        # Own samples come first in the minibatch's order and in each micro-batch, so
        # the micro-batch's own rows are the context's rows from its start on: a slice.
        rows = context[micro.start : micro.start + len(micro.rows), :width]
        ref_logp = F.pad(rows, (0, max(0, width - context.shape[1])))
        per_unit = kl_penalty(micro.logp, ref_logp, estimator=self.cfg.estimator)
        kl = micro.aggregate(per_unit, micro.mask, denom=micro.denom)
        return self.cfg.coef * kl, {"loss/kl": kl.item()}

    def after_update(self, learner: Owner, iteration: int) -> Metrics:
        self._forget()
        if self.ema > 0:
            move_magnet(self.reference.model, learner.policy.model, self.ema)
        return {}

    def state_dict(self) -> dict[str, Any] | None:
        return {"weights": self.reference.model.state_dict()} if self.own_weights else None

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.reference.model.load_state_dict(state["weights"])


@torch.no_grad()
def move_magnet(magnet: torch.nn.Module, policy: torch.nn.Module, ema: float) -> None:
    """magnet <- magnet + ema * (policy - magnet), every parameter in one call (one op
    per parameter, as a loop of ``lerp_`` computes it, without a Python step each)."""
    pairs = list(zip(magnet.parameters(), policy.parameters(), strict=True))
    torch._foreach_lerp_([m for m, _ in pairs], [p for _, p in pairs], ema)
