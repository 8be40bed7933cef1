"""Hand-made micro-batches for the loss terms' tests: known distributions, no model."""

import math

import pytest
import torch

from coplay.algos.losses.aggregation import token_mean
from coplay.policies.scorer import Scored
from coplay.train.parts.term import Micro, Sample
from coplay.types import Decision


def decision(prompt=(1,), choices=((1,), (2,)), counterfactuals=()):
    return Decision(
        text="[a]",
        action="[a]",
        policy_id="me",
        prompt_ids=prompt,
        logprobs=(math.log(0.5),),
        choice_ids=choices,
        counterfactual_prompt_ids=counterfactuals,
    )


def make_micro(samples, probs, *, start=0, size=None, denom=None):
    """A micro-batch of choice decisions whose distributions are ``probs`` (one row per
    sample, a leaf with gradients) and whose chosen action is the first."""
    dist_leaf = torch.tensor(probs, dtype=torch.float32).log().requires_grad_()
    dists = tuple(dist_leaf[i] for i in range(len(samples)))
    logp = dist_leaf[:, :1]  # (B, 1): one unit per decision
    entropy = -(dist_leaf.exp() * dist_leaf).sum(-1, keepdim=True)
    mask = torch.ones(len(samples), 1)
    rows = [i for i, s in enumerate(samples) if not s.replay]
    micro = Micro(
        batch=samples,
        start=start,
        scored=Scored(logp=logp, entropy=entropy, mask=mask, dists=dists),
        rows=rows,
        logp=logp[rows],
        mask=mask[rows],
        entropy=entropy[rows],
        aggregate=token_mean,
        denom=float(len(rows)) if denom is None else denom,
        size=len(rows) if size is None else size,
    )
    return micro, dist_leaf


@pytest.fixture
def micro_of():
    return make_micro


@pytest.fixture
def sample_of():
    def make(player=0, target=None, replay=False, **kw):
        return Sample(decision(**kw), 1.0, player, target, replay)

    return make
