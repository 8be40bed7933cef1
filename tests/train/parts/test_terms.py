"""The registry of loss terms: its order, what each section turns on, and a toy term
added through the registry alone, whose gradient is checked by hand."""

import copy

import numpy as np
import torch

from coplay.algos.losses.compose import LossConfig
from coplay.algos.losses.regularizers import EntropyConfig, KLConfig
from coplay.envs.registry import make_env
from coplay.models.tiny import TinyModelConfig, build_tiny_model
from coplay.models.tokenizer import train_tokenizer
from coplay.policies.lm import LMPolicy
from coplay.rollout.engine import play_episodes
from coplay.train.config import OptimConfig
from coplay.train.learner import make_learner
from coplay.train.learner_update import update
from coplay.train.parts.policy_iteration import TargetConfig
from coplay.train.parts.term import Sample, Setup, Term
from coplay.train.parts.terms import TERMS, build_terms


def _policy():
    env = make_env("kuhn_poker")
    tok = train_tokenizer([env.observe(0).text, "Action: [Pass] [Bet]"] * 10, vocab_size=300)
    model = build_tiny_model(TinyModelConfig(vocab_size=300), vocab_size=len(tok), seed=0)
    return LMPolicy(model, tok, mode="choice", seed=0)


def test_terms_are_added_in_the_order_the_results_were_measured_with():
    assert list(TERMS) == ["kl", "entropy", "signalling", "target", "listening"]


def test_each_section_turns_on_its_term_and_the_rest_stay_off():
    policy = _policy()
    setup = Setup(policy, copy.deepcopy, 0.0, 10)
    terms, idle = build_terms({}, setup)
    assert terms == {} and idle == {"loss/entropy_coef": 0.0}
    sections = {"entropy": EntropyConfig(coef=0.1), "target": TargetConfig(coef=1.0)}
    terms, idle = build_terms(sections, setup)
    assert list(terms) == ["entropy", "target"] and idle == {}
    learner = make_learner(policy, LossConfig(kl=KLConfig(coef=0.1)), OptimConfig())
    assert list(learner.terms) == ["kl"] and learner.reference is not None


class Toy(Term):
    """coef * (sum of the own decisions' log-probs) / minibatch size: pushes them down."""

    def __init__(self, coef):
        self.coef = coef

    @classmethod
    def build(cls, section, setup):
        return cls(0.3)  # no config section: on whenever registered

    def loss(self, context, micro):
        return self.coef * micro.logp.sum() / micro.size, {"loss/toy": 1.0}


def test_a_term_added_through_the_registry_alone_changes_the_gradient(monkeypatch):
    base = _policy()
    eps = play_episodes(lambda: make_env("kuhn_poker"), [[base, base]] * 4, range(4))
    # Zero advantages: the PPO objective has no gradient, so all of it is the toy's.
    samples = [Sample(t.decision, 0.0) for e in eps for t in e.turns][:6]
    monkeypatch.setitem(TERMS, "toy", Toy)
    optim = OptimConfig(lr=1e-3, minibatch_size=6, micro_batch_size=4, max_grad_norm=1e9)
    learner = make_learner(copy.deepcopy(base), LossConfig(), optim)
    metrics = update(learner, samples, np.random.default_rng(0))
    got = torch.cat([p.grad.flatten() for p in learner.policy.model.parameters()])
    # By hand: 0.3 * d/dtheta (sum of log pi(a_i)) / 6 at the initial weights.
    ref = copy.deepcopy(base)
    ref.model.train()
    (0.3 * ref.scorer.score([s.decision for s in samples]).logp.sum() / 6).backward()
    want = torch.cat([p.grad.flatten() for p in ref.model.parameters()])
    assert metrics["loss/toy"] == 1.0
    assert want.abs().max() > 0
    assert torch.allclose(got, want, atol=1e-7, rtol=1e-4)


def _signalling_samples(n=6):
    """Both seats' decisions in the signalling game (the receiver's list the messages it
    could have received), two with targets, and one replayed target."""
    make = lambda: make_env("signalling", candidates=2)  # noqa: E731
    texts = [make().observe(0).text, "Candidates: red circle, blue star. The sender says: "]
    tok = train_tokenizer(texts * 10 + ["[Say A] [Say B] [Pick red circle]"] * 10, vocab_size=300)
    model = build_tiny_model(TinyModelConfig(vocab_size=300), vocab_size=len(tok), seed=0)
    policy = LMPolicy(model, tok, mode="choice", seed=0)
    eps = play_episodes(make, [[policy, policy]] * n, list(range(n)))
    rng = np.random.default_rng(0)
    samples = [
        Sample(t.decision, float(rng.normal()), seat)
        for e in eps
        for seat, tr in enumerate(e.trajectories)
        for t in tr.turns
    ]
    for i in (0, 3):
        width = len(samples[i].decision.choice_ids)
        samples[i] = Sample(samples[i].decision, 0.0, 0, (1.0,) + (0.0,) * (width - 1))
    width = len(samples[1].decision.choice_ids)
    replay = Sample(samples[1].decision, 0.0, 0, (0.0,) * (width - 1) + (1.0,), replay=True)
    return policy, [*samples, replay]


def test_micro_batches_equal_one_batch_with_every_term_on():
    base, samples = _signalling_samples()
    loss = LossConfig(
        kl=KLConfig(coef=0.1),
        entropy=EntropyConfig(coef=0.01, final_frac=0.5),
        signalling={"coef": 0.5, "seats": [0]},
        listening={"coef": 0.7},
    )
    n = len(samples) - 1  # the minibatch's own samples; the replay comes on top
    grads = []
    for micro in (len(samples), 1, 5):
        optim = OptimConfig(lr=1e-2, minibatch_size=len(samples), micro_batch_size=micro)
        learner = make_learner(
            copy.deepcopy(base), loss, optim, target=TargetConfig(coef=0.5), reference_ema=0.1
        )
        metrics = update(learner, samples, np.random.default_rng(0))
        grads.append(torch.cat([p.grad.flatten() for p in learner.policy.model.parameters()]))
    assert n == 12 and list(learner.terms) == ["kl", "entropy", "signalling", "target", "listening"]
    for key in ("kl", "signalling", "listening", "policy_iteration", "policy_iteration_replay"):
        assert f"loss/{key}" in metrics
    assert grads[0].abs().max() > 0
    for other in grads[1:]:
        assert torch.allclose(grads[0], other, atol=1e-7, rtol=1e-4)
