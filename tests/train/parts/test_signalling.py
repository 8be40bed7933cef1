"""The signalling term: marginals per minibatch, its value on a hand case, its seats."""

import math
from types import SimpleNamespace

import pytest
import torch

from coplay.algos.losses.signalling import SignallingConfig
from coplay.train.parts.signalling import Signalling, choice_marginals, signals

HALF = torch.tensor([0.5, 0.5]).log()
H = -(0.8 * math.log(0.8) + 0.2 * math.log(0.2))  # entropy of (0.8, 0.2)


class _Learner:
    """Scores each decision with the distribution its prompt names."""

    micro_batch_size = 1
    micro_batch_tokens = 10**9
    logit_weight = 1
    checkpointing = False

    def __init__(self, table):
        def score(decisions):
            return SimpleNamespace(
                dists=[torch.tensor(table[d.prompt_ids]).log() for d in decisions]
            )

        self.policy = SimpleNamespace(scorer=SimpleNamespace(score=score))


def test_marginals_and_information_of_a_perfect_code(sample_of):
    # Two observations answered with opposite certain choices: I(x; m) = log 2.
    learner = _Learner({(1,): [1.0, 0.0], (2,): [0.0, 1.0]})
    own = [sample_of(prompt=(1,)), sample_of(prompt=(2,))]
    marginals, mi = choice_marginals(learner, own)
    assert marginals[((1,), (2,))].exp().tolist() == pytest.approx([0.5, 0.5])
    assert mi == pytest.approx(math.log(2))
    term = Signalling(SignallingConfig(coef=1.0, seats=[1]))  # seat 0 is not covered
    assert term.prepare(learner, own, 0) == ({}, {"loss/signalling_mi": 0.0})


def test_the_bonus_of_a_hand_case(micro_of, sample_of):
    # Per decision CE(pi, pi_bar) - H(pi) with pi_bar uniform: log 2 - H(pi).
    micro, _ = micro_of([sample_of(), sample_of()], [[0.5, 0.5], [0.8, 0.2]])
    marginals = {((1,), (2,)): HALF}
    value, metrics = Signalling(SignallingConfig(coef=2.0)).loss(marginals, micro)
    assert value.item() == pytest.approx(-2.0 * (math.log(2) - H) / 2, rel=1e-5)
    bonus = metrics["loss/signalling"]
    assert bonus.value == pytest.approx((math.log(2) - H) / 2, rel=1e-5) and bonus.count == 2


def test_only_the_listed_seats_get_the_bonus(micro_of, sample_of):
    micro, _ = micro_of([sample_of(player=0), sample_of(player=1)], [[0.8, 0.2], [0.5, 0.5]])
    marginals = {((1,), (2,)): HALF}
    value, metrics = Signalling(SignallingConfig(coef=1.0, seats=[1])).loss(marginals, micro)
    assert value.item() == pytest.approx(0.0, abs=1e-7)  # seat 1's uniform answer: 0
    # a mean over seat 1's one decision, which the update weighs as one
    assert metrics["loss/signalling"] == (pytest.approx(0.0, abs=1e-7), 1)
    assert signals(sample_of(player=None), [1])  # an unknown seat counts as any


def test_no_marginals_no_term(micro_of, sample_of):
    micro, _ = micro_of([sample_of()], [[0.5, 0.5]])
    assert Signalling(SignallingConfig(coef=1.0)).loss({}, micro) == (None, {})
