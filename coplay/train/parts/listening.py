"""Positive-listening bonus (``loss.listening``): reward answers that change with the
message (``coplay.algos.losses.signalling.listening_bonus``).

Per decision, the mean of its choice distribution over its counterfactual prompts
(every message it could have received) is computed once per minibatch under that
step's weights and held fixed for its micro-batches, like the signalling marginals.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import Tensor

from coplay.algos.losses.signalling import ListeningConfig, listening_bonus
from coplay.train.parts.term import LossMetrics, Mean, Micro, Owner, Sample, Term, choice_dists


@torch.no_grad()
def listening_marginals(learner: Owner, samples: Sequence[Sample]) -> list[Tensor | None]:
    """Per sample, the log of its mean choice distribution over its counterfactual
    prompts under the current weights; None for samples without counterfactuals."""
    alts = [
        (i, replace(s.decision, prompt_ids=prompt))
        for i, s in enumerate(samples)
        for prompt in s.decision.counterfactual_prompt_ids
    ]
    dists = choice_dists(learner, [d for _, d in alts])
    members: list[list[Tensor]] = [[] for _ in samples]
    for (i, _), lp in zip(alts, dists, strict=True):
        if lp is not None:
            members[i].append(lp.exp())
    return [torch.stack(ps).mean(0).clamp_min(1e-12).log() if ps else None for ps in members]


class Listening(Term):
    """Minus ``coef`` times the bonus summed over the decisions with counterfactuals,
    divided by the minibatch's size; its context is the own samples' marginals."""

    section = ListeningConfig

    def __init__(self, cfg: ListeningConfig):
        self.cfg = cfg

    def prepare(self, learner: Owner, own: Sequence[Sample], iteration: int):
        return listening_marginals(learner, own), {}

    def loss(
        self, marginals: list[Tensor | None], micro: Micro
    ) -> tuple[Tensor | None, LossMetrics]:
        if not marginals:  # a minibatch of replays alone
            return None, {}
        # The own samples come first in the minibatch's order; replays have no marginal.
        at = [micro.start + i for i in range(len(micro.batch))]
        aligned = [marginals[j] if j < len(marginals) else None for j in at]
        terms = [
            listening_bonus(lp, m)
            for lp, m in zip(micro.scored.dists, aligned, strict=True)
            if lp is not None and m is not None
        ]
        bonus = torch.stack(terms).sum() if terms else torch.zeros(())
        value = -(self.cfg.coef * bonus.to(micro.scored.logp.device) / micro.size)
        # A mean over the decisions with counterfactuals, not over the micro-batch's.
        if not terms:
            return value, {}
        return value, {"loss/listening": Mean(float(bonus.detach()) / len(terms), len(terms))}
