"""Entropy bonus, its weight on a linear schedule (``loss.entropy``).

Adds ``-weight * agg(entropy)`` per unit, aggregated like the objective. The weight
decays linearly from ``coef`` to ``coef * final_frac`` at the run's last update:
explore early, sharpen late.

``over: actions`` takes the entropy of the *parsed actions* at each state instead of
every token's: a free-text answer spends a per-token bonus on varied wording (and,
pushed far enough, on answers that no longer parse), not on varied play. The action
entropy has no closed form there (the reasoning is marginalised out), so its gradient
is estimated from the iteration's answers: each answer's surprisal
``-log p(a|s) - H(s)`` (``action_surprisal``; states keyed by the prompt) weighs its
whole answer's log-probability, like an advantage, through the same importance ratio
and aggregation as the objective.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import torch
from torch import Tensor

from coplay.algos.losses.regularizers import EntropyConfig, action_surprisal, entropy_bonus
from coplay.train.parts.term import Metrics, Micro, Owner, Sample, Setup, Term
from coplay.types import Decision


class ActionBonus(NamedTuple):
    """An update's context with ``over: actions``: the weight, and the surprisal of
    each of the minibatch's own samples, in order (B,)."""

    weight: float
    surprisal: Tensor


class Entropy(Term):
    """The entropy bonus; its context is the update's weight (with ``over: actions``,
    an ``ActionBonus``)."""

    per_unit = True
    idle_metrics = {"loss/entropy_coef": 0.0}
    section = EntropyConfig

    def __init__(self, cfg: EntropyConfig, iterations: int):
        self.cfg, self.iterations = cfg, iterations
        self._surprisal: dict[tuple[tuple[int, ...], str | None], float] = {}
        """``over: actions``: this update's surprisal by (prompt, action), the two things
        it depends on. Not by the decision's identity: the update may hand the terms
        copies of the recalled decisions (an engine's log-probs rebased on the
        learner's, ``coplay.train.mismatch``), and the copies must find their bonus."""

    @classmethod
    def build(cls, section: EntropyConfig | None, setup: Setup) -> Entropy | None:
        return None if section is None else cls(section, setup.iterations)

    def weight(self, iteration: int) -> float:
        """The weight at update ``iteration`` (0-based), held after the last one."""
        if self.cfg.final_frac == 1.0:
            return self.cfg.coef
        span = max(1, self.iterations - 1)
        frac = 1.0 - (1.0 - self.cfg.final_frac) * min(iteration, span) / span
        return self.cfg.coef * frac

    def recall(self, samples: Sequence[Sample]) -> tuple[list[Sample], Metrics]:
        """``over: actions``: the surprisal of every fresh answer, from all of them (a
        minibatch alone would see fewer answers per state)."""
        if self.cfg.over != "actions":
            return [], {}
        decisions = [s.decision for s in samples]
        surprisal, entropy = action_surprisal(
            [d.prompt_ids for d in decisions], [d.action for d in decisions]
        )
        self._surprisal = {_state_action(d): b for d, b in zip(decisions, surprisal, strict=True)}
        return [], {"loss/action_entropy": entropy}

    def prepare(self, learner: Owner, own: Sequence[Sample], iteration: int) -> tuple[Any, Metrics]:
        weight = self.weight(iteration)
        if self.cfg.over != "actions":
            return weight, {}
        # A decision the update was not told about (none in a training run) gets 0.
        rows = [self._surprisal.get(_state_action(s.decision), 0.0) for s in own]
        return ActionBonus(weight, torch.tensor(rows, dtype=torch.float32)), {}

    def loss(self, context: Any, micro: Micro) -> tuple[Tensor | None, Metrics]:
        weight = context.weight if isinstance(context, ActionBonus) else context
        if not weight > 0.0 or not micro.rows:
            return None, {}
        if isinstance(context, ActionBonus):
            return -weight * _surprisal_objective(context.surprisal, micro), {}
        bonus = micro.aggregate(entropy_bonus(micro.entropy), micro.mask, denom=micro.denom)
        return weight * bonus, {}

    def after_update(self, learner: Owner, iteration: int) -> Metrics:
        self._surprisal = {}
        return {"loss/entropy_coef": self.weight(iteration)}


def _state_action(decision: Decision) -> tuple[tuple[int, ...], str | None]:
    return decision.prompt_ids, decision.action


def _surprisal_objective(surprisal: Tensor, micro: Micro) -> Tensor:
    """``agg(b * ratio)`` over the micro-batch's own rows: the surprisal b of each row
    as its advantage, the ratio pi / pi_old per unit as the objective has it."""
    device = micro.logp.device
    # Own samples come first in the minibatch's order, so row r is own sample start + r.
    index = torch.tensor(micro.rows, device=device) + micro.start
    b = surprisal.to(device)[index][:, None]  # (B, 1)
    old = torch.zeros_like(micro.logp)  # (B, T), zeros past each row's units
    for i, s in enumerate(micro.own):
        lp = s.decision.logprobs[: old.shape[1]]
        old[i, : len(lp)] = torch.tensor(lp, dtype=old.dtype)
    ratio = torch.exp((micro.logp - old) * micro.mask)
    return micro.aggregate(b * ratio, micro.mask, denom=micro.denom)
