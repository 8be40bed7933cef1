"""The entropy term: its linear schedule, its value on a hand case, and the action
entropy of free-text answers against the exact gradient."""

import math

import pytest
import torch

from coplay.algos.losses.aggregation import token_mean
from coplay.algos.losses.regularizers import EntropyConfig
from coplay.train.parts.entropy import Entropy
from coplay.train.parts.term import Micro, Sample
from coplay.types import Decision


def test_the_weight_anneals_linearly_and_holds_after_the_last_update():
    term = Entropy(EntropyConfig(coef=0.1, final_frac=0.2), iterations=3)
    assert [term.weight(i) for i in (0, 1, 2, 99)] == pytest.approx([0.1, 0.06, 0.02, 0.02])
    assert Entropy(EntropyConfig(coef=0.1), iterations=3).weight(2) == 0.1  # constant
    assert term.after_update(None, 1) == {"loss/entropy_coef": pytest.approx(0.06)}
    assert term.prepare(None, [], 2) == (pytest.approx(0.02), {})


def test_an_entropy_of_a_hand_case_lowers_the_loss(micro_of, sample_of):
    # Entropies log 2 and H(0.8, 0.2), token mean over two units, weight 0.1.
    micro, leaf = micro_of([sample_of(), sample_of()], [[0.5, 0.5], [0.8, 0.2]])
    h = -(0.8 * math.log(0.8) + 0.2 * math.log(0.2))
    value, metrics = Entropy(EntropyConfig(coef=0.1), 1).loss(0.1, micro)
    assert value.item() == pytest.approx(-0.1 * (math.log(2) + h) / 2, rel=1e-6)
    assert metrics == {}


def test_a_zero_weight_adds_nothing(micro_of, sample_of):
    # final_frac 0 reaches weight 0 at the last update: the term skips it, as before.
    micro, _ = micro_of([sample_of()], [[0.5, 0.5]])
    term = Entropy(EntropyConfig(coef=0.1, final_frac=0.0), iterations=2)
    assert term.weight(1) == 0.0
    assert term.loss(term.weight(1), micro) == (None, {})


def test_off_the_weight_is_still_logged():
    assert Entropy.idle_metrics == {"loss/entropy_coef": 0.0}


def _answers(theta, n, seed):
    """n answers of a one-state, two-action softmax policy: samples and a micro-batch
    whose per-row log-prob is the chosen action's under ``theta`` (with gradients)."""
    logp_all = torch.log_softmax(theta, -1)
    picks = torch.multinomial(
        logp_all.exp().detach(), n, replacement=True, generator=torch.Generator().manual_seed(seed)
    )
    names = ("[Pass]", "[Bet]")
    samples = [
        Sample(
            Decision(
                text=names[a],
                action=names[a],
                policy_id="me",
                prompt_ids=(7,),
                logprobs=(float(logp_all[a].detach()),),
            ),
            0.0,
            0,
        )
        for a in picks.tolist()
    ]
    logp = logp_all[picks][:, None]  # (B, 1)
    micro = Micro(
        batch=samples,
        start=0,
        scored=None,
        rows=list(range(n)),
        logp=logp,
        mask=torch.ones(n, 1),
        entropy=torch.zeros(n, 1),
        aggregate=token_mean,
        denom=float(n),
        size=n,
    )
    return samples, micro


def test_over_actions_follows_the_exact_action_entropy_gradient():
    # The score-function estimate from sampled answers against autograd of H(softmax).
    theta = torch.tensor([0.8, -0.4], requires_grad=True)
    term = Entropy(EntropyConfig(coef=0.1, over="actions"), iterations=1)
    samples, micro = _answers(theta, 20_000, seed=0)
    _, recalled = term.recall(samples)
    context, _ = term.prepare(None, samples, 0)
    value, _ = term.loss(context, micro)
    value.backward()
    estimate = theta.grad.clone()
    theta.grad = None
    p = torch.softmax(theta, -1)
    (-0.1 * -(p * p.log()).sum()).backward()  # the bonus of choice mode, exactly
    assert estimate.tolist() == pytest.approx(theta.grad.tolist(), abs=3e-3)
    assert abs(theta.grad[0].item()) > 0.02  # a real push, not two zeros
    h = -(p * p.log()).sum().item()
    assert recalled["loss/action_entropy"] == pytest.approx(h, abs=0.01)


def test_over_actions_gives_invalid_answers_nothing_and_counts_only_valid_ones():
    def answer(action):
        return Sample(
            Decision(
                text="x", action=action, policy_id="me", prompt_ids=(1,), logprobs=(-1.0, -2.0)
            ),
            0.0,
            0,
        )

    samples = [answer("[Pass]"), answer("[Pass]"), answer("[Bet]"), answer(None)]
    term = Entropy(EntropyConfig(coef=0.1, over="actions"), iterations=1)
    term.recall(samples)
    context, _ = term.prepare(None, samples, 0)
    h = -(2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3))
    expected = [-math.log(2 / 3) - h] * 2 + [-math.log(1 / 3) - h, 0.0]
    assert context.surprisal.tolist() == pytest.approx(expected, rel=1e-6)
    assert term.after_update(None, 0) == {"loss/entropy_coef": 0.1}
    # The update's surprisals are forgotten: a later decision unseen by recall gets 0.
    assert term.prepare(None, samples[:1], 1)[0].surprisal.tolist() == [0.0]


def test_over_tokens_is_the_default_and_keeps_the_plain_weight():
    assert EntropyConfig(coef=0.1).over == "tokens"
    with pytest.raises(ValueError):
        EntropyConfig(coef=0.1, over="words")
