"""LossConfig validation, term composition, and micro-batch invariance (1 x 8 == 8 x 1)."""

import pytest
import torch
from pydantic import ValidationError

from coplay.algos.losses import LossConfig, global_denom, policy_loss, ppo_clip, token_mean

B, T, V = 8, 6, 11


@pytest.mark.parametrize(
    ("field", "value", "hint"),
    [
        ("clip_low", 0.0, "greater than 0"),
        ("clip_high", -0.1, "greater than 0"),
        ("kl_coef", -1.0, "greater than or equal to 0"),
        ("entropy_coef", -1.0, "greater than or equal to 0"),
        ("aggregation", "median", "constant_norm.*sequence_mean.*token_mean"),
        ("kl_estimator", "k9", "k1.*k2.*k3"),
        ("kl_coeff", 0.1, "Extra inputs"),
    ],
)
def test_config_errors_name_field_and_allowed_values(field, value, hint):
    with pytest.raises(ValidationError, match=f"(?s){field}.*{hint}"):
        LossConfig(**{field: value})


def make_batch(seed: int = 0):
    """A tiny 'model' (per-position logits) and padded per-unit inputs, in float64."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=g, dtype=torch.float64).requires_grad_()
    actions = torch.randint(0, V, (B, T), generator=g)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).to(torch.float64)  # (B, T)
    old_logp = torch.log_softmax(logits.detach(), -1).gather(-1, actions[..., None])[..., 0]
    old_logp = old_logp + 0.3 * torch.randn(B, T, generator=g, dtype=torch.float64)
    ref_logp = old_logp + 0.2 * torch.randn(B, T, generator=g, dtype=torch.float64)
    adv = torch.randn(B, 1, generator=g, dtype=torch.float64)
    return logits, actions, mask, old_logp, ref_logp, adv


def forward(logits, actions):
    logprobs = torch.log_softmax(logits, -1)  # (B, T, V)
    logp = logprobs.gather(-1, actions[..., None])[..., 0]  # (B, T)
    entropy = -(logprobs.exp() * logprobs).sum(-1)  # (B, T)
    return logp, entropy


def loss_and_grad(cfg, rows, denom, batch):
    logits, actions, mask, old_logp, ref_logp, adv = batch
    logits.grad = None
    logp, entropy = forward(logits[rows], actions[rows])
    loss, _ = policy_loss(
        cfg,
        logp=logp,
        old_logp=old_logp[rows],
        adv=adv[rows],
        mask=mask[rows],
        ref_logp=ref_logp[rows],
        entropy=entropy,
        denom=denom,
    )
    loss.backward()
    return loss.detach(), logits.grad.clone()


@pytest.mark.parametrize("aggregation", ["token_mean", "constant_norm", "sequence_mean"])
def test_micro_batches_of_one_equal_one_batch_of_eight(aggregation):
    cfg = LossConfig(aggregation=aggregation, kl_coef=0.1, entropy_coef=0.01, clip_low=0.1)
    batch = make_batch()
    mask = batch[2]
    micro = [slice(i, i + 1) for i in range(B)]
    denom = global_denom(aggregation, [mask[s] for s in micro], units_per_row=T)
    assert denom == global_denom(aggregation, [mask], units_per_row=T)
    full_loss, full_grad = loss_and_grad(cfg, slice(0, B), denom, batch)
    parts = [loss_and_grad(cfg, s, denom, batch) for s in micro]
    assert sum(p[0] for p in parts).item() == pytest.approx(full_loss.item(), abs=1e-6)
    assert torch.allclose(sum(p[1] for p in parts), full_grad, atol=1e-6, rtol=0)


def test_local_token_mean_is_not_invariant():
    """Without the global denominator, accumulation weighs short rows up: the check bites."""
    cfg = LossConfig()
    batch = make_batch()
    _, full_grad = loss_and_grad(cfg, slice(0, B), None, batch)
    summed = sum(loss_and_grad(cfg, slice(i, i + 1), None, batch)[1] for i in range(B)) / B
    assert not torch.allclose(summed, full_grad, atol=1e-6)


def test_terms_are_added_only_when_on_and_given():
    logits, actions, mask, old_logp, ref_logp, adv = make_batch(1)
    logp, entropy = forward(logits, actions)
    kw = dict(logp=logp, old_logp=old_logp, adv=adv, mask=mask)
    per_unit, _ = ppo_clip(logp, old_logp, adv, mask=mask)
    policy = token_mean(per_unit, mask)

    loss, m = policy_loss(LossConfig(), ref_logp=ref_logp, entropy=entropy, **kw)
    assert loss.item() == pytest.approx(policy.item())
    assert "loss/kl" not in m and "loss/entropy" not in m

    loss, m = policy_loss(LossConfig(kl_coef=0.5, entropy_coef=0.1), **kw)
    assert loss.item() == pytest.approx(policy.item())  # coefficients on, inputs absent

    cfg = LossConfig(kl_coef=0.5, entropy_coef=0.1, kl_estimator="k1")
    loss, m = policy_loss(cfg, ref_logp=ref_logp, entropy=entropy, **kw)
    kl = token_mean(logp - ref_logp, mask)
    ent = token_mean(entropy, mask)
    assert loss.item() == pytest.approx((policy + 0.5 * kl - 0.1 * ent).item())
    assert m["loss/policy"] == pytest.approx(policy.item())
    assert m["loss/kl"] == pytest.approx(kl.item())
    assert m["loss/entropy"] == pytest.approx(ent.item())
    assert m["loss/total"] == pytest.approx(loss.item())
    assert {"loss/clip_frac", "loss/approx_kl"} <= set(m)


def test_on_policy_gradient_is_minus_advantage_over_token_count():
    logp = torch.zeros(2, 3, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]], dtype=torch.float64)
    adv = torch.tensor([[1.0], [-2.0]], dtype=torch.float64)
    loss, _ = policy_loss(LossConfig(), logp=logp, old_logp=logp.detach(), adv=adv, mask=mask)
    loss.backward()
    want = torch.tensor([[-1.0, -1.0, -1.0], [2.0, 0.0, 0.0]], dtype=torch.float64) / 4
    assert torch.allclose(logp.grad, want)
