"""The update's metrics: extremes over every step, means that do not depend on the
micro-batches."""

import copy
from dataclasses import replace

import numpy as np
import pytest
import torch

from coplay.algos.losses.compose import LossConfig
from coplay.algos.losses.regularizers import EntropyConfig, KLConfig
from coplay.algos.losses.signalling import SignallingConfig
from coplay.train import learner_update as update_module
from coplay.train.config import OptimConfig
from coplay.train.learner import make_learner
from coplay.train.learner_update import update
from coplay.train.parts.policy_iteration import TargetConfig
from tests.train.learners import kuhn_policy, kuhn_samples, targeted


def test_the_ratio_extremes_are_over_every_minibatch_and_the_rest_means_per_step(monkeypatch):
    # loss/ratio_min and loss/ratio_max were averaged over the minibatches and epochs,
    # which reported neither extreme.
    steps = []
    real = update_module._minibatch_step

    def spy(*args):
        steps.append(real(*args))
        return steps[-1]

    monkeypatch.setattr(update_module, "_minibatch_step", spy)
    policy = kuhn_policy()
    optim = OptimConfig(lr=5e-2, epochs=3, minibatch_size=4)
    metrics = update(
        make_learner(policy, LossConfig(), optim), kuhn_samples(policy), np.random.default_rng(0)
    )
    assert len(steps) == 6
    low, high = (m["loss/ratio_min"] for m in steps), (m["loss/ratio_max"] for m in steps)
    assert metrics["loss/ratio_min"] == min(low) < np.mean([m["loss/ratio_min"] for m in steps])
    assert metrics["loss/ratio_max"] == max(high) > np.mean([m["loss/ratio_max"] for m in steps])
    assert metrics["loss/grad_norm"] == pytest.approx(np.mean([m["loss/grad_norm"] for m in steps]))


@pytest.mark.parametrize("mode", ["choice", "text"])
def test_the_update_metrics_do_not_depend_on_the_micro_batches(mode):
    # Weights moved off the sampling policy, so ratios differ from 1 and from row to row.
    base = kuhn_policy(mode)
    samples = kuhn_samples(base)
    if mode == "text":  # answers of 1 to 6 tokens: per-token means weigh them unequally
        samples = [
            replace(s, decision=replace(s.decision, response_ids=ids, logprobs=lps))
            for i, s in enumerate(samples)
            for ids, lps in [
                (s.decision.response_ids[: 1 + i % 6], s.decision.logprobs[: 1 + i % 6])
            ]
        ]
    with torch.no_grad():
        for p in base.model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    runs = []
    for budget in (10**9, 1):  # one pass; every decision alone
        optim = OptimConfig(lr=1e-3, epochs=1, minibatch_size=8, micro_batch_tokens=budget)
        loss = LossConfig(entropy=EntropyConfig(coef=0.01), kl=KLConfig(coef=0.1))
        runs.append(
            update(
                make_learner(copy.deepcopy(base), loss, optim), samples, np.random.default_rng(0)
            )
        )
    one, split = runs
    assert one["loss/ratio_min"] < 1 < one["loss/ratio_max"]
    for key in ("ratio_min", "ratio_max", "clip_frac", "approx_kl", "entropy", "policy", "kl"):
        assert split[f"loss/{key}"] == pytest.approx(one[f"loss/{key}"], rel=1e-5, abs=1e-7), key


def test_the_means_over_some_decisions_do_not_depend_on_the_micro_batches():
    # A term's mean over the decisions it covers (targets, listed seats) was weighed by
    # its micro-batch's size: with three targets cut 2 + 1 into micro-batches of 3, the
    # logged cross-entropy was no longer their mean.
    base = kuhn_policy()
    with torch.no_grad():
        for p in base.model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    samples = targeted(base)
    width = len(samples[2].decision.choice_ids)
    samples[2] = replace(samples[2], target=(1.0,) + (0.0,) * (width - 1))
    samples = [replace(s, player=0 if i % 3 == 0 else 1) for i, s in enumerate(samples)]
    loss = LossConfig(signalling=SignallingConfig(coef=1.0, beta=0.3, seats=[0]))
    runs = []
    for micro in (8, 3):
        optim = OptimConfig(lr=1e-3, minibatch_size=8, micro_batch_size=micro)
        learner = make_learner(copy.deepcopy(base), loss, optim, target=TargetConfig(coef=0.5))
        runs.append(update(learner, samples, np.random.default_rng(0)))
    one, split = runs
    for key in ("policy_iteration", "signalling"):
        assert split[f"loss/{key}"] == pytest.approx(one[f"loss/{key}"], rel=1e-6), key
