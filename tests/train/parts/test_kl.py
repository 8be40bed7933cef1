"""The KL term: its value on a hand case, when it exists, the magnet's move, its state."""

import copy
import math
from types import SimpleNamespace

import pytest
import torch

from coplay.algos.losses.regularizers import KLConfig
from coplay.train.parts.kl import KL, move_magnet
from coplay.train.parts.term import Setup


class _Ref:
    """A reference whose log-prob of every decision's unit is given, in order of the
    decisions it is asked about; it counts the decisions it scores."""

    def __init__(self, logp, model=None):
        self.logp, self.model = torch.tensor(logp).log()[:, None], model
        self.scorer = SimpleNamespace(score=self.score)
        self.scored = 0

    def score(self, decisions):
        rows = self.logp[self.scored : self.scored + len(decisions)]
        self.scored += len(decisions)
        return SimpleNamespace(logp=rows, mask=torch.ones_like(rows))


LEARNER = SimpleNamespace(
    micro_batch_size=1, micro_batch_tokens=10**9, logit_weight=1, checkpointing=False
)
"""Micro-batches of one decision: the reference is scored a decision at a time."""


def _kl_loss(term, micro):
    """The term's loss on a micro-batch that is its whole minibatch."""
    context, _ = term.prepare(LEARNER, micro.own, 0)
    return term.loss(context, micro)


def _setup(ema=0.0, reference=lambda p: copy.deepcopy(p)):
    policy = SimpleNamespace(model=torch.nn.Linear(2, 2))
    return Setup(policy=policy, reference=reference, reference_ema=ema, iterations=1)


@pytest.mark.parametrize(
    ("estimator", "coef", "kl"),
    [("k1", 0.5, math.log(2)), ("k3", 1.0, math.log(2) - 0.5)],
)
def test_the_kl_of_a_hand_case(micro_of, sample_of, estimator, coef, kl):
    # The policy gives its chosen actions 0.5 and 0.8, the reference 0.25 and 0.4: the
    # log-ratio is log 2 on both units; k3 = exp(-log 2) + log 2 - 1.
    micro, leaf = micro_of([sample_of(), sample_of()], [[0.5, 0.5], [0.8, 0.2]])
    term = KL(KLConfig(coef=coef, estimator=estimator), _Ref([0.25, 0.4]), ema=0.0, own=True)
    value, metrics = _kl_loss(term, micro)
    assert value.item() == pytest.approx(coef * kl, rel=1e-6)
    assert metrics["loss/kl"] == pytest.approx(kl, rel=1e-6)
    value.backward()
    # d/dlogp of token_mean(k1) is 1/2 per unit; of k3, (1 - exp(ref - logp)) / 2 = 1/4
    want = 0.5 if estimator == "k1" else 0.25
    assert leaf.grad[:, 0].tolist() == pytest.approx([coef * want] * 2, rel=1e-6)


def test_replays_get_no_kl(micro_of, sample_of):
    micro, _ = micro_of([sample_of(replay=True)], [[0.5, 0.5]])
    term = KL(KLConfig(coef=1.0), _Ref([0.25]), ema=0.0, own=True)
    assert _kl_loss(term, micro) == (None, {})


def test_the_term_exists_with_a_kl_section_or_a_moving_reference():
    assert KL.build(None, _setup()) is None
    frozen = KL.build(KLConfig(coef=0.1), _setup())
    assert frozen.cfg.coef == 0.1 and frozen.ema == 0.0
    magnet = KL.build(None, _setup(ema=0.5))  # only an average of iterates: no pull
    assert magnet.cfg is None and magnet.ema == 0.5


def test_a_magnet_without_kl_adds_nothing(micro_of, sample_of):
    micro, _ = micro_of([sample_of()], [[0.5, 0.5]])
    assert _kl_loss(KL.build(None, _setup(ema=0.5)), micro) == (None, {})


def test_the_reference_scores_each_decision_once_per_update(micro_of, sample_of):
    samples = [sample_of(), sample_of()]
    micro, _ = micro_of(samples, [[0.5, 0.5], [0.8, 0.2]])
    ref = _Ref([0.25, 0.4, 0.5, 0.5])
    term = KL(KLConfig(coef=1.0), ref, ema=0.0, own=True)
    first = _kl_loss(term, micro)[0]
    again = _kl_loss(term, micro)[0]  # a second epoch of the same update
    assert ref.scored == 2 and again.item() == first.item()
    term.after_update(SimpleNamespace(policy=None), 0)  # the reference may have moved
    assert _kl_loss(term, micro)[0].item() != first.item()
    assert ref.scored == 4


def test_the_whole_update_is_scored_before_its_first_step(micro_of, sample_of):
    samples = [sample_of(), sample_of(), sample_of(replay=True)]
    micro, _ = micro_of(samples[:2], [[0.5, 0.5], [0.8, 0.2]])
    calls = []
    ref = _Ref([0.25, 0.4])
    ref.scorer.score = lambda d: calls.append(len(d)) or ref.score(d)
    term = KL(KLConfig(coef=1.0, estimator="k1"), ref, ema=0.0, own=True)
    learner = SimpleNamespace(**{**vars(LEARNER), "micro_batch_size": 8})
    assert term.begin_update(learner, samples, 0) == {}
    assert calls == [2]  # one pass over the own samples, none for the replay
    value, _ = _kl_loss(term, micro)  # the minibatch finds them scored
    assert calls == [2] and value.item() == pytest.approx(math.log(2), rel=1e-6)
    assert KL(None, ref, ema=0.5, own=True).begin_update(learner, samples, 0) == {}
    assert calls == [2]  # a magnet without KL scores nothing


@pytest.mark.parametrize("ema", [0.0, 0.25, 1.0])
def test_the_magnet_moves_toward_the_policy_by_ema(ema):
    setup = _setup(ema)
    term = KL.build(KLConfig(coef=0.1), setup)
    before = [p.detach().clone() for p in term.reference.model.parameters()]
    with torch.no_grad():
        for p in setup.policy.model.parameters():
            p.add_(1.0)
    term.after_update(SimpleNamespace(policy=setup.policy), 0)
    for r0, r1, p in zip(
        before, term.reference.model.parameters(), setup.policy.model.parameters(), strict=True
    ):
        assert torch.allclose(r1, r0 + ema * (p - r0))


def test_move_magnet_is_a_lerp():
    magnet, policy = torch.nn.Linear(1, 1), torch.nn.Linear(1, 1)
    with torch.no_grad():
        magnet.weight.fill_(1.0)
        policy.weight.fill_(3.0)
    move_magnet(magnet, policy, 0.25)
    assert magnet.weight.item() == 1.5


def test_move_magnet_equals_a_lerp_per_parameter_bit_for_bit():
    torch.manual_seed(0)
    magnet, policy = torch.nn.Linear(7, 5), torch.nn.Linear(7, 5)
    expected = [
        m.detach().clone().lerp_(p.detach(), 0.05)
        for m, p in zip(magnet.parameters(), policy.parameters(), strict=True)
    ]
    move_magnet(magnet, policy, 0.05)
    assert all(torch.equal(m, e) for m, e in zip(magnet.parameters(), expected, strict=True))


def test_the_state_is_the_reference_weights_when_the_term_owns_them():
    setup = _setup(ema=0.5)
    term = KL.build(None, setup)
    state = term.state_dict()
    fresh = KL.build(None, _setup(ema=0.5))
    pairs = lambda: zip(  # noqa: E731
        fresh.reference.model.parameters(), term.reference.model.parameters(), strict=True
    )
    assert not all(torch.equal(a, b) for a, b in pairs())  # another initialisation
    fresh.load_state_dict(state)
    assert all(torch.equal(a, b) for a, b in pairs())
    # A LoRA role's reference is the shared base model: nothing of its own to save.
    shared = KL.build(KLConfig(coef=0.1), _setup(reference=lambda p: p))
    assert shared.state_dict() is None
