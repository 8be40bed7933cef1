"""The objective of a micro-batch: exploration reweighted, padded log-probs, the
constant normaliser's budget."""

import copy
import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from coplay.algos.losses.compose import LossConfig
from coplay.train.config import OptimConfig
from coplay.train.learner import Sample, make_learner
from coplay.train.learner_objective import units_per_row
from coplay.train.learner_update import update
from tests.train.learners import kuhn_policy, kuhn_samples, last_grad


def test_exploratory_turns_are_reweighted_by_policy_over_mixture():
    base = kuhn_policy()
    samples = kuhn_samples(base)
    # drawn from a mixture twice as likely as the policy: weight pi_old / mixture = 1/2
    halved = [
        Sample(
            replace(s.decision, behavior_logprobs=(s.decision.logprobs[0] + math.log(2),)),
            s.advantage,
        )
        for s in samples
    ]
    grads = []
    for batch in (samples, halved):
        # no gradient clipping: it would rescale both to the same norm
        optim = OptimConfig(lr=1e-3, minibatch_size=8, max_grad_norm=1e9)
        learner = make_learner(copy.deepcopy(base), LossConfig(), optim, tis_cap=1.0)
        metrics = update(learner, batch, np.random.default_rng(0))
        grads.append(last_grad(learner))
    assert metrics["loss/tis_weight_mean"] == pytest.approx(0.5)
    assert grads[0].abs().max() > 0
    assert torch.allclose(grads[1], grads[0] / 2, atol=1e-9, rtol=1e-4)
    # rollout.explore_correction=none leaves rollout.tis_cap unset: the mixture is not read
    uncorrected = []
    for batch in (samples, halved):
        optim = OptimConfig(lr=1e-3, minibatch_size=8, max_grad_norm=1e9)
        learner = make_learner(copy.deepcopy(base), LossConfig(), optim)
        update(learner, batch, np.random.default_rng(0))
        uncorrected.append(last_grad(learner))
    assert torch.equal(uncorrected[0], uncorrected[1])
    assert torch.allclose(uncorrected[0], grads[0], atol=1e-9, rtol=1e-4)


def test_padded_rows_and_columns_round_as_torch_tensor_does():
    from coplay.train.learner_objective import _column, _pad

    rng = np.random.default_rng(0)
    values = (rng.normal(size=64) * 10.0 ** rng.integers(-8, 8, size=64)).tolist()
    want = torch.tensor(values)[:, None]
    assert torch.equal(_column(values), want)
    assert torch.equal(_pad([(v,) for v in values], 1), want)  # one unit a row
    rows = [tuple(values[i : i + k]) for i, k in ((0, 3), (3, 1), (4, 2))]
    wide = _pad(rows, 4)
    assert torch.equal(wide[0, :3], torch.tensor(values[:3])) and wide[0, 3] == 0.0
    assert wide[1].tolist() == [torch.tensor(values[3]).item(), 0.0, 0.0, 0.0]


def test_constant_norm_divides_by_the_answer_budget_of_every_row():
    assert units_per_row(kuhn_policy("text")) == 6.0  # max_new_tokens
    assert units_per_row(kuhn_policy("choice")) == 1.0  # one chosen action
    grads = {}
    for aggregation in ("token_mean", "constant_norm"):
        policy = kuhn_policy("text")
        samples = kuhn_samples(policy)
        loss = LossConfig(aggregation=aggregation)
        learner = make_learner(policy, loss, OptimConfig(lr=1e-2, minibatch_size=8))
        update(learner, samples, np.random.default_rng(0))
        grads[aggregation] = torch.cat([p.grad.flatten() for p in policy.model.parameters()])
    tokens = sum(max(1, len(s.decision.logprobs)) for s in samples)
    scale = tokens / (len(samples) * 6.0)  # token_mean's denominator over constant_norm's
    assert torch.allclose(grads["constant_norm"], grads["token_mean"] * scale, atol=1e-8, rtol=1e-4)
