"""KL estimators and entropy bonus: values and gradients at hand-computed points."""

import math

import pytest
import torch

from coplay.algos.losses import entropy_bonus, kl_penalty


def value_and_grad(estimator: str, logp: float, ref: float) -> tuple[float, float]:
    x = torch.tensor([[logp]], dtype=torch.float64, requires_grad=True)
    kl = kl_penalty(x, torch.tensor([[ref]], dtype=torch.float64), estimator=estimator)
    kl.sum().backward()
    return kl.item(), x.grad.item()


def test_k1_value_and_gradient():
    assert value_and_grad("k1", -1.0, -2.0) == pytest.approx((1.0, 1.0))
    assert value_and_grad("k1", -2.0, -1.0) == pytest.approx((-1.0, 1.0))


def test_k3_value_and_gradient():
    # d = ref - logp = -1: k3 = e^-1 + 1 - 1, d k3 / d logp = 1 - e^d
    value, grad = value_and_grad("k3", -1.0, -2.0)
    assert value == pytest.approx(math.exp(-1.0))
    assert grad == pytest.approx(1.0 - math.exp(-1.0))
    value, grad = value_and_grad("k3", -2.0, -1.0)  # d = 1
    assert value == pytest.approx(math.e - 2.0)
    assert grad == pytest.approx(1.0 - math.e)  # pulls logp up toward ref


def test_k3_is_zero_with_zero_gradient_at_the_reference():
    assert value_and_grad("k3", -0.7, -0.7) == (0.0, 0.0)


def test_k3_is_nonnegative():
    logp, ref = torch.randn(50, 7), torch.randn(50, 7)
    assert (kl_penalty(logp, ref) >= 0).all()


def test_k2_value_and_gradient():
    assert value_and_grad("k2", -1.0, -3.0) == pytest.approx((2.0, 2.0))


def test_k3_estimates_the_true_kl():
    """Averaged over samples of the new policy, k1 and k3 estimate KL(new || ref)."""
    new, ref = torch.tensor([0.7, 0.2, 0.1]), torch.tensor([0.3, 0.3, 0.4])
    exact = (new * (new / ref).log()).sum()
    # exact expectation over the three outcomes, weighting by new's probabilities
    for est in ("k1", "k3"):
        expected = (new * kl_penalty(new.log(), ref.log(), estimator=est)).sum()
        assert expected.item() == pytest.approx(exact.item(), rel=1e-5)


def test_unknown_estimator_names_the_allowed_ones():
    with pytest.raises(ValueError, match=r"\['k1', 'k2', 'k3'\]"):
        kl_penalty(torch.zeros(1, 1), torch.zeros(1, 1), estimator="k4")


def test_entropy_bonus_raises_entropy_when_minimised():
    logits = torch.tensor([[3.0, 0.0, -1.0]], requires_grad=True)

    def entropy(z):
        p = torch.softmax(z, -1)
        return -(p * p.log()).sum(-1)

    before = entropy(logits).item()
    entropy_bonus(entropy(logits)).sum().backward()
    with torch.no_grad():
        logits -= 0.1 * logits.grad  # gradient descent on the bonus
    assert entropy(logits).item() > before
    assert entropy_bonus(torch.tensor([0.5])).item() == -0.5


@pytest.mark.parametrize(
    ("estimator", "kl"),
    [
        ("k1", lambda p, q: 0.0 * p.sum()),
        ("k2", lambda p, q: (p * (p / q).log()).sum()),  # KL(new || ref): the magnet's pull
        ("k3", lambda p, q: (q * (q / p).log()).sum()),  # KL(ref || new)
    ],
)
def test_expected_gradient_of_each_estimator_as_a_loss(estimator, kl):
    """On the policy's own samples (weights held fixed), k1's gradient is 0 in
    expectation, k2's that of the reverse KL and k3's that of the forward KL
    (``KLConfig.estimator``)."""
    logits = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)
    logp = logits.log_softmax(-1)
    weights = logp.exp().detach()  # each outcome weighed by its probability, as sampled
    surrogate = (weights * kl_penalty(logp, ref.log(), estimator=estimator)).sum()
    (got,) = torch.autograd.grad(surrogate, logits)
    (want,) = torch.autograd.grad(kl(logits.softmax(-1), ref), logits)
    assert torch.allclose(got, want, atol=1e-12)
