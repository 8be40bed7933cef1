"""The term protocol's records and defaults."""

import copy

import numpy as np
import torch

from coplay.envs.registry import make_env
from coplay.models.tiny import TinyModelConfig, build_tiny_model
from coplay.models.tokenizer import train_tokenizer
from coplay.policies.lm import LMPolicy
from coplay.rollout.engine import play_episodes
from coplay.train.parts.term import Term, choice_dists


def test_micro_own_lists_the_rows_that_are_not_replays(micro_of, sample_of):
    samples = [sample_of(prompt=(1,)), sample_of(prompt=(2,), replay=True), sample_of(prompt=(3,))]
    micro, _ = micro_of(samples, [[0.5, 0.5]] * 3)
    assert micro.rows == [0, 2]
    assert [s.decision.prompt_ids for s in micro.own] == [(1,), (3,)]
    assert micro.logp.shape == (2, 1)


def test_a_term_without_steps_adds_nothing_and_keeps_no_state(micro_of, sample_of):
    term = Term()
    micro, _ = micro_of([sample_of()], [[0.5, 0.5]])
    assert term.prepare(None, [], 0) == (None, {})
    assert term.loss(None, micro) == (None, {})
    assert term.after_update(None, 0) == {} and term.recall([]) == ([], {})
    assert term.state_dict() is None
    assert Term.build(None, None) is None  # its section is off


class _Learner:
    def __init__(self, policy, micro_batch_size):
        self.policy, self.micro_batch_size = policy, micro_batch_size
        self.micro_batch_tokens, self.logit_weight = 10**9, 1
        self.checkpointing = False


def test_choice_dists_in_micro_batches_equal_one_batch():
    env = make_env("kuhn_poker")
    tok = train_tokenizer([env.observe(0).text, "Action: [Pass] [Bet]"] * 10, vocab_size=300)
    model = build_tiny_model(TinyModelConfig(vocab_size=300), vocab_size=len(tok), seed=0)
    policy = LMPolicy(model, tok, mode="choice", seed=0)
    eps = play_episodes(lambda: make_env("kuhn_poker"), [[policy, policy]] * 4, range(4))
    decisions = [t.decision for e in eps for t in e.turns][:7]
    with torch.no_grad():
        whole = choice_dists(_Learner(policy, 7), decisions)
        split = choice_dists(_Learner(copy.copy(policy), 3), decisions)
    assert len(whole) == 7
    for a, b in zip(whole, split, strict=True):
        assert torch.allclose(a, b, atol=1e-6)
        assert np.isclose(float(a.exp().sum()), 1.0, atol=1e-5)
