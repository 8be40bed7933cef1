"""Positive signalling and listening: values, gradients, and which way they push."""

import math

import pytest
import torch

from coplay.algos.losses.signalling import (
    group_marginals,
    listening_bonus,
    mutual_information,
    signalling_bonus,
)


def _entropy(p):
    return -(p * p.log()).sum(-1)


def _exact_bonus(logits, beta):
    """H(pi_bar) - beta * mean H(pi_i), pi_bar not held fixed: the quantity itself."""
    p = logits.softmax(-1)
    return _entropy(p.mean(0)) - beta * _entropy(p).mean()


def test_an_action_of_probability_zero_adds_no_nan_to_the_gradient():
    logdist = torch.tensor([0.0, -math.inf], requires_grad=True)
    half = torch.tensor([0.5, 0.5]).log()
    signalling_bonus(logdist, half, beta=1.0).backward()
    assert torch.isfinite(logdist.grad).all() and logdist.grad[1] == 0


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
def test_surrogate_has_the_value_and_gradient_of_the_bonus(beta):
    torch.manual_seed(0)
    logits = torch.randn(5, 4, requires_grad=True)
    exact = _exact_bonus(logits, beta)
    (g_exact,) = torch.autograd.grad(exact, logits)

    logp = logits.log_softmax(-1)
    marginal = group_marginals(list(logp), ["k"] * 5)["k"]
    surrogate = torch.stack([signalling_bonus(lp, marginal, beta) for lp in logp]).mean()
    (g_sur,) = torch.autograd.grad(surrogate, logits)
    assert float(surrogate) == pytest.approx(float(exact), abs=1e-6)
    assert torch.allclose(g_sur, g_exact, atol=1e-6)


def test_mutual_information_of_a_perfect_code_and_of_a_constant_message():
    code = [torch.tensor([0.0, -math.inf, -math.inf]), torch.tensor([-math.inf, 0.0, -math.inf])]
    assert mutual_information(code) == pytest.approx(math.log(2))
    same = [torch.tensor([0.2, 0.3, 0.5]).log()] * 3
    assert mutual_information(same) == pytest.approx(0.0, abs=1e-7)


def test_with_beta_one_the_bonus_averages_to_the_mutual_information():
    torch.manual_seed(1)
    logp = list(torch.randn(6, 3).log_softmax(-1))
    marginal = group_marginals(logp, ["k"] * 6)["k"]
    mean = float(torch.stack([signalling_bonus(lp, marginal) for lp in logp]).mean())
    assert mean == pytest.approx(mutual_information(logp), abs=1e-6)


def test_an_action_no_decision_takes_adds_no_nan():
    # Both decisions are sure of the first action: the marginal's second probability is
    # 0, whose log must stay finite (0 * log 0 is 0), and the bonus is 0.
    sure = [torch.tensor([0.0, -math.inf], requires_grad=True) for _ in range(2)]
    marginal = group_marginals(sure, ["k", "k"])["k"]
    bonus = signalling_bonus(sure[0], marginal)
    bonus.backward()
    assert bonus.item() == 0.0
    assert torch.isfinite(sure[0].grad).all()


def test_marginals_only_for_action_sets_that_several_decisions_share():
    a = torch.tensor([0.9, 0.1]).log()
    b = torch.tensor([0.1, 0.9]).log()
    out = group_marginals([a, b, a, None, None], ["x", "x", "y", "y", "z"])
    assert set(out) == {"x"}
    assert torch.allclose(out["x"].exp(), torch.tensor([0.5, 0.5]))


def test_gradient_pushes_each_distribution_away_from_the_average():
    logits = torch.tensor([[0.1, 0.0], [0.0, 0.1]], requires_grad=True)
    logp = logits.log_softmax(-1)
    marginal = group_marginals(list(logp), ["k", "k"])["k"]
    # Maximise the bonus: one gradient-ascent step makes the two more different.
    bonus = torch.stack([signalling_bonus(lp, marginal) for lp in logp]).sum()
    bonus.backward()
    step = logits + 1.0 * logits.grad
    assert mutual_information(list(step.log_softmax(-1))) > mutual_information(list(logp))


def test_listening_bonus_is_the_l1_distance_to_the_counterfactual_mean():
    per_message = torch.tensor([[0.9, 0.1], [0.3, 0.7], [0.6, 0.4]])
    marginal = per_message.mean(0).log()
    got = [float(listening_bonus(p.log(), marginal)) for p in per_message]
    assert got == pytest.approx([0.6, 0.6, 0.0], abs=1e-6)


def test_listening_gradient_has_full_size_where_kl_has_none():
    # An answer that barely depends on the message: KL's gradient is about the gap
    # squared, L1's stays of order one, and an ascent step widens the gap.
    logits = torch.tensor([0.001, 0.0], requires_grad=True)
    marginal = torch.tensor([0.0, 0.0]).log_softmax(-1)
    (g_l1,) = torch.autograd.grad(listening_bonus(logits.log_softmax(-1), marginal), logits)
    (g_kl,) = torch.autograd.grad(signalling_bonus(logits.log_softmax(-1), marginal), logits)
    assert g_l1.abs().max() > 0.4 > 1000 * g_kl.abs().max()
    step = (logits + 0.1 * g_l1).log_softmax(-1)
    assert float(listening_bonus(step, marginal)) > float(
        listening_bonus(logits.log_softmax(-1), marginal)
    )


def test_listening_bonus_holds_the_marginal_fixed():
    logits = torch.tensor([0.5, -0.5], requires_grad=True)
    marginal = logits.log_softmax(-1) * 0.5
    listening_bonus(logits.log_softmax(-1), marginal).backward()
    alone = torch.tensor([0.5, -0.5], requires_grad=True)
    listening_bonus(alone.log_softmax(-1), marginal.detach()).backward()
    assert torch.allclose(logits.grad, alone.grad)
