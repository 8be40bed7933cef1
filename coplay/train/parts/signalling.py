"""Positive-signalling bonus (``loss.signalling``): reward choices that depend on what
the chooser sees (``coplay.algos.losses.signalling`` has the bonus and why).

The marginals are computed once per minibatch under that step's weights and held
fixed for its micro-batches, so accumulation stays exact; held over several steps, a
stale marginal would reward every choice moving away from it together (a collapse
onto one symbol) instead of moving apart.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from coplay.algos.losses.signalling import (
    SignallingConfig,
    group_marginals,
    mutual_information,
    signalling_bonus,
)
from coplay.train.parts.term import LossMetrics, Mean, Micro, Owner, Sample, Term, choice_dists

Marginals = dict[tuple, Tensor]
"""Log of the mean choice distribution per action set (``signalling.group_marginals``)."""


def signals(sample: Sample, seats: Sequence[int] | None) -> bool:
    """Whether the bonus covers ``sample``'s decision (``loss.signalling.seats``)."""
    return seats is None or sample.player is None or sample.player in seats


@torch.no_grad()
def choice_marginals(
    learner: Owner, samples: Sequence[Sample], seats: Sequence[int] | None = None
) -> tuple[Marginals, float]:
    """The bonus's marginals over the covered ``samples`` under the current weights, and
    their mutual information, weighted by group size."""
    samples = [s for s in samples if signals(s, seats)]
    dists = choice_dists(learner, [s.decision for s in samples])
    keys = [s.decision.choice_ids for s in samples]
    marginals = group_marginals(dists, keys)
    groups = [[d for d, k in zip(dists, keys, strict=True) if k == g] for g in marginals]
    total = sum(len(g) for g in groups)
    mi = sum(len(g) * mutual_information(g) for g in groups) / total if total else 0.0
    return marginals, mi


class Signalling(Term):
    """Minus ``coef`` times the bonus summed over the covered decisions, divided by the
    minibatch's size; its context is the minibatch's marginals."""

    section = SignallingConfig

    def __init__(self, cfg: SignallingConfig):
        self.cfg = cfg

    def prepare(self, learner: Owner, own: Sequence[Sample], iteration: int):
        marginals, mi = choice_marginals(learner, own, self.cfg.seats)
        return marginals, {"loss/signalling_mi": mi}

    def loss(self, marginals: Marginals, micro: Micro) -> tuple[Tensor | None, LossMetrics]:
        if not marginals:
            return None, {}
        terms = [
            signalling_bonus(lp, marginals[s.decision.choice_ids], self.cfg.beta)
            for lp, s in zip([micro.scored.dists[i] for i in micro.rows], micro.own, strict=True)
            if lp is not None and s.decision.choice_ids in marginals and signals(s, self.cfg.seats)
        ]
        bonus = torch.stack(terms).sum() if terms else torch.zeros(())
        # Divided by the minibatch's size, not the micro-batch's: accumulation stays exact.
        value = -(self.cfg.coef * bonus.to(micro.scored.logp.device) / micro.size)
        # A mean over the covered decisions, not the micro-batch's: seats may leave some out.
        if not terms:
            return value, {}
        return value, {"loss/signalling": Mean(float(bonus.detach()) / len(terms), len(terms))}
