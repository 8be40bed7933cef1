"""A tiny Kuhn policy, its samples and what an update left, shared by the learner's
test files."""

from dataclasses import replace

import numpy as np
import torch

from coplay.envs.registry import make_env
from coplay.models.tiny import TinyModelConfig, build_tiny_model
from coplay.models.tokenizer import train_tokenizer
from coplay.policies.lm import LMPolicy
from coplay.rollout.engine import play_episodes
from coplay.train.learner import Sample


def kuhn_policy(mode="choice"):
    env = make_env("kuhn_poker")
    tok = train_tokenizer([env.observe(0).text, "Action: [Pass] [Bet]"] * 10, vocab_size=300)
    model = build_tiny_model(TinyModelConfig(vocab_size=300), vocab_size=len(tok), seed=0)
    return LMPolicy(model, tok, mode=mode, max_new_tokens=6, seed=0)


def kuhn_samples(policy, n=8):
    eps = play_episodes(lambda: make_env("kuhn_poker"), [[policy, policy]] * n, list(range(n)))
    decs = [t.decision for e in eps for t in e.turns][:8]
    rng = np.random.default_rng(0)
    return [Sample(d, float(a)) for d, a in zip(decs, rng.normal(size=len(decs)), strict=True)]


def last_grad(learner):
    """The gradient the learner's last update accumulated, flattened."""
    return torch.cat([p.grad.flatten() for p in learner.policy.model.parameters()])


def targeted(policy):
    """Zero-advantage samples, the first two with a target on their last choice."""
    samples = [Sample(s.decision, 0.0) for s in kuhn_samples(policy)]
    for i in (0, 1):
        width = len(samples[i].decision.choice_ids)
        samples[i] = replace(samples[i], target=(0.0,) * (width - 1) + (1.0,))
    return samples
