"""The listening term: counterfactual marginals, a hand case, alignment with replays."""

from types import SimpleNamespace

import pytest
import torch

from coplay.algos.losses.signalling import ListeningConfig
from coplay.train.parts.listening import Listening, listening_marginals

CF = ((1,), (2,))  # the two messages a receiver could have got


class _Learner:
    micro_batch_size = 2
    micro_batch_tokens = 10**9
    logit_weight = 1
    checkpointing = False

    def __init__(self, table):
        def score(decisions):
            return SimpleNamespace(
                dists=[torch.tensor(table[d.prompt_ids]).log() for d in decisions]
            )

        self.policy = SimpleNamespace(scorer=SimpleNamespace(score=score))


def test_the_marginal_is_the_mean_over_counterfactual_prompts(sample_of):
    learner = _Learner({(1,): [1.0, 0.0], (2,): [0.0, 1.0]})
    own = [sample_of(counterfactuals=CF), sample_of()]  # the second has none
    m, none = listening_marginals(learner, own)
    assert m.exp().tolist() == pytest.approx([0.5, 0.5]) and none is None


def test_the_bonus_of_a_hand_case(micro_of, sample_of):
    # ||(0.8, 0.2) - (0.5, 0.5)||_1 = 0.6
    micro, _ = micro_of([sample_of(counterfactuals=CF)], [[0.8, 0.2]], size=2)
    term = Listening(ListeningConfig(coef=0.5))
    value, metrics = term.loss([torch.tensor([0.5, 0.5]).log()], micro)
    assert value.item() == pytest.approx(-0.5 * 0.6 / 2, rel=1e-5)
    assert metrics["loss/listening"] == (pytest.approx(0.6, rel=1e-5), 1)


def test_a_later_micro_batch_reads_its_own_marginals_and_replays_get_none(micro_of, sample_of):
    # The minibatch's order: own samples a, b, then a replay; this micro-batch is b and
    # the replay (start 1). Only b's marginal (uniform) counts.
    far, uniform = torch.tensor([1.0, 1e-12]).log(), torch.tensor([0.5, 0.5]).log()
    samples = [sample_of(counterfactuals=CF), sample_of(counterfactuals=CF, replay=True)]
    micro, _ = micro_of(samples, [[0.8, 0.2], [0.5, 0.5]], start=1, size=2)
    value, metrics = Listening(ListeningConfig(coef=1.0)).loss([far, uniform], micro)
    assert metrics["loss/listening"] == (pytest.approx(0.6, rel=1e-5), 1)
    assert value.item() == pytest.approx(-0.6 / 2, rel=1e-5)


def test_a_minibatch_of_replays_alone_has_no_term(micro_of, sample_of):
    micro, _ = micro_of([sample_of(replay=True)], [[0.5, 0.5]], size=1)
    assert Listening(ListeningConfig(coef=1.0)).loss([], micro) == (None, {})
