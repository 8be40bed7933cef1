"""PPO-clip, dual clip, truncated IS, REINFORCE: gradient signs and sizes at hand-picked points."""

import math

import pytest
import torch

from coplay.algos.losses import dual_clip, ppo_clip, reinforce_objective, truncated_is_weights


def grad_of_ppo(ratio: float, adv: float, **clip) -> tuple[float, float]:
    """(per-unit loss, d loss / d logp) at one unit with the given ratio and advantage."""
    logp = torch.tensor([[math.log(ratio)]], dtype=torch.float64, requires_grad=True)
    old = torch.zeros(1, 1, dtype=torch.float64)
    loss, _ = ppo_clip(logp, old, torch.tensor([[adv]], dtype=torch.float64), **clip)
    loss.sum().backward()
    return loss.item(), logp.grad.item()


@pytest.mark.parametrize("adv", [2.0, -0.5])
def test_gradient_is_minus_advantage_at_ratio_one(adv):
    loss, grad = grad_of_ppo(1.0, adv)
    assert loss == pytest.approx(-adv)
    assert grad == pytest.approx(-adv)  # positive advantage: descending raises logp


def test_clipped_region_has_zero_gradient():
    assert grad_of_ppo(1.5, 1.0)[1] == 0.0  # too likely already, positive advantage
    assert grad_of_ppo(0.5, -1.0)[1] == 0.0  # too unlikely already, negative advantage
    loss, grad = grad_of_ppo(1.5, -1.0)  # pessimistic bound keeps the unclipped term
    assert loss == pytest.approx(1.5)
    assert grad == pytest.approx(1.5)  # -A * ratio
    loss, grad = grad_of_ppo(1.5, 1.0)
    assert loss == pytest.approx(-1.2)


def test_low_and_high_clip_are_separate():
    clip = {"clip_low": 0.1, "clip_high": 0.3}
    assert grad_of_ppo(1.2, 1.0, **clip)[1] == pytest.approx(-1.2)  # inside 1 + 0.3
    assert grad_of_ppo(1.35, 1.0, **clip)[1] == 0.0  # above 1 + 0.3
    assert grad_of_ppo(1.35, 1.0, **clip)[0] == pytest.approx(-1.3)
    assert grad_of_ppo(0.95, -1.0, **clip)[1] == pytest.approx(0.95)  # inside 1 - 0.1
    assert grad_of_ppo(0.85, -1.0, **clip)[1] == 0.0  # below 1 - 0.1
    assert grad_of_ppo(0.85, -1.0, **clip)[0] == pytest.approx(0.9)


def test_metrics_clip_frac_and_k3_approx_kl_over_mask():
    ratios = torch.tensor([[2.0, 1.0, 0.5, 3.0, 0.1]], dtype=torch.float64)
    logp = torch.log(ratios)
    adv = torch.tensor([[1.0, 1.0, -1.0, 1.0, -1.0]], dtype=torch.float64)
    # the last two units are padding, one above and one below every valid ratio
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0, 0.0]], dtype=torch.float64)
    _, m = ppo_clip(logp, torch.zeros_like(logp), adv, mask=mask)
    assert m["loss/clip_frac"] == pytest.approx(2 / 3)  # units 0 and 2 are clipped
    # the spread of the ratio over the valid units (the padded 3.0 and 0.1 are not)
    assert (m["loss/ratio_min"], m["loss/ratio_max"]) == pytest.approx((0.5, 2.0))
    k3 = [(r - 1) - math.log(r) for r in (2.0, 1.0, 0.5)]
    assert m["loss/approx_kl"] == pytest.approx(sum(k3) / 3)


def test_metrics_of_a_batch_with_no_valid_unit_are_neutral():
    # A micro-batch of padding only: no unit is clipped, no KL, no spread (not NaN from
    # 0 / 0, nor the infinities the masked min and max leave).
    logp = torch.log(torch.tensor([[2.0, 0.5]], dtype=torch.float64))
    adv = torch.ones(1, 2, dtype=torch.float64)
    _, m = ppo_clip(logp, torch.zeros_like(logp), adv, mask=torch.zeros_like(logp))
    assert m == {
        "loss/clip_frac": 0.0,
        "loss/approx_kl": 0.0,
        "loss/ratio_min": 1.0,
        "loss/ratio_max": 1.0,
    }


def test_advantage_broadcasts_per_row():
    logp = torch.zeros(2, 3, dtype=torch.float64, requires_grad=True)
    loss, _ = ppo_clip(logp, logp.detach(), torch.tensor([[1.0], [-2.0]], dtype=torch.float64))
    loss.sum().backward()
    assert torch.equal(logp.grad, torch.tensor([[-1.0] * 3, [2.0] * 3], dtype=torch.float64))


def test_reinforce_objective_gradient():
    logp = torch.tensor([[-0.3, -2.0]], requires_grad=True)
    adv = torch.tensor([[1.5, -1.0]])
    loss, metrics = reinforce_objective(logp, adv)
    loss.sum().backward()
    assert torch.allclose(logp.grad, -adv)
    assert metrics == {}


def grad_of_dual_clip(ratio: float, adv: float, c: float = 3.0) -> tuple[float, float]:
    """(per-unit loss, d loss / d logp) of dual-clipped PPO at one unit."""
    logp = torch.tensor([[math.log(ratio)]], dtype=torch.float64, requires_grad=True)
    a = torch.tensor([[adv]], dtype=torch.float64)
    loss, _ = ppo_clip(logp, torch.zeros(1, 1, dtype=torch.float64), a)
    loss, _ = dual_clip(loss, a, c=c)
    loss.sum().backward()
    return loss.item(), logp.grad.item()


def test_dual_clip_bounds_negative_advantage_at_c_times_minus_a():
    assert grad_of_ppo(50.0, -2.0) == (pytest.approx(100.0), pytest.approx(100.0))  # unbounded
    loss, grad = grad_of_dual_clip(50.0, -2.0, c=3.0)
    assert loss == pytest.approx(6.0)  # -c * A
    assert grad == 0.0


def test_dual_clip_leaves_other_units_as_ppo():
    # ratio below c with A < 0: PPO's -r * A, gradient -A * r
    assert grad_of_dual_clip(2.0, -1.0, c=3.0) == (pytest.approx(2.0), pytest.approx(2.0))
    # positive advantages are never touched, even at a huge ratio
    assert grad_of_dual_clip(50.0, 1.0) == grad_of_ppo(50.0, 1.0)
    assert grad_of_dual_clip(0.5, 1.0) == grad_of_ppo(0.5, 1.0)
    assert grad_of_dual_clip(1.0, -1.0) == grad_of_ppo(1.0, -1.0)


def test_dual_clip_broadcasts_advantage_and_counts_active_units():
    loss = torch.tensor([[10.0, 2.0, 0.5], [-1.2, 9.0, 9.0]], dtype=torch.float64)
    adv = torch.tensor([[-1.0], [1.0]], dtype=torch.float64)  # (B, 1)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=torch.float64)
    out, m = dual_clip(loss, adv, c=3.0, mask=mask)
    want = torch.tensor([[3.0, 2.0, 0.5], [-1.2, 9.0, 9.0]], dtype=torch.float64)
    assert torch.equal(out, want)
    assert m["loss/dual_clip_frac"] == pytest.approx(1 / 5)


@pytest.mark.parametrize("c", [1.0, 0.5])
def test_dual_clip_needs_c_above_one(c):
    with pytest.raises(ValueError, match="greater than 1"):
        dual_clip(torch.zeros(1, 1), torch.zeros(1, 1), c=c)


def test_truncated_is_weights_are_capped_ratios_without_gradient():
    old = torch.log(torch.tensor([[4.0, 0.5, 1.0, 9.0]], dtype=torch.float64)).requires_grad_()
    behavior = torch.zeros(1, 4, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]], dtype=torch.float64)  # last unit is padding
    w, m = truncated_is_weights(old, behavior, cap=2.0, mask=mask)
    assert torch.allclose(w, torch.tensor([[2.0, 0.5, 1.0, 2.0]], dtype=torch.float64))
    assert not w.requires_grad
    assert m["loss/tis_weight_mean"] == pytest.approx((2.0 + 0.5 + 1.0) / 3)
    assert m["loss/tis_capped_frac"] == pytest.approx(1 / 3)


def test_truncated_is_weight_scales_the_gradient():
    logp = torch.zeros(1, 2, dtype=torch.float64, requires_grad=True)
    adv = torch.tensor([[1.0, -2.0]], dtype=torch.float64)
    behavior = torch.log(torch.tensor([[4.0, 0.25]], dtype=torch.float64))  # w = 1/4, 4 -> cap 3
    loss, _ = ppo_clip(logp, logp.detach(), adv)
    w, _ = truncated_is_weights(logp.detach(), behavior, cap=3.0)
    (loss * w).sum().backward()
    assert torch.allclose(logp.grad, torch.tensor([[-0.25, 6.0]], dtype=torch.float64))


def test_a_weight_equal_to_the_cap_is_not_counted_as_capped():
    # Truncation changes nothing at w == cap: only weights above it were cut.
    old = torch.zeros(1, 2, dtype=torch.float64)
    behavior = torch.log(torch.tensor([[1.0, 0.25]], dtype=torch.float64))  # w = 1, 4
    w, m = truncated_is_weights(old, behavior, cap=1.0)
    assert w.tolist() == [[1.0, 1.0]]
    assert m["loss/tis_capped_frac"] == 0.5


@pytest.mark.parametrize("cap", [0.0, -1.0])
def test_truncated_is_needs_positive_cap(cap):
    with pytest.raises(ValueError, match="greater than 0"):
        truncated_is_weights(torch.zeros(1, 1), torch.zeros(1, 1), cap=cap)
