"""LossConfig validation, the objective's steps, and micro-batch invariance (1 x 8 == 8 x 1)."""

import pytest
import torch
from pydantic import ValidationError

from coplay.algos.losses import LossConfig, global_denom, policy_loss, ppo_clip, token_mean
from coplay.algos.losses.compose import moved_key

B, T, V = 8, 6, 11


@pytest.mark.parametrize(
    ("field", "value", "hint"),
    [
        ("clip_low", 0.0, "greater than 0"),
        ("clip_low", 1.0, "less than 1"),
        ("clip_high", -0.1, "greater than 0"),
        ("kl", {"coef": 0.0}, "greater than 0"),
        ("entropy", {"coef": -1.0}, "greater than 0"),
        ("entropy", {"coef": 0.1, "final_frac": -1.0}, "greater than or equal to 0"),
        ("signalling", {"coef": 1.0, "beta": -1.0}, "greater than or equal to 0"),
        ("listening", {}, "coef.*Field required"),
        ("aggregation", "median", "constant_norm.*sequence_mean.*token_mean"),
        ("kl", {"coef": 0.1, "estimator": "k9"}, "k1.*k2.*k3"),
        ("kl_coeff", 0.1, "Extra inputs"),
        ("dual_clip", 1.0, "greater than 1"),
        ("dual_clip", -3.0, "greater than 1"),
    ],
)
def test_config_errors_name_field_and_allowed_values(field, value, hint):
    with pytest.raises(ValidationError, match=f"(?s){field}.*{hint}"):
        LossConfig(**{field: value})


@pytest.mark.parametrize(
    ("key", "line"),
    [
        ("kl_coef", "loss.kl_coef is now loss.kl.coef"),
        ("entropy_final_frac", "loss.entropy_final_frac is now loss.entropy.final_frac"),
        ("signalling_seats", "loss.signalling_seats is now loss.signalling.seats"),
        ("listening_coef", "loss.listening_coef is now loss.listening.coef"),
        ("tis_cap", "loss.tis_cap is now rollout.explore.tis_cap"),
        ("policy_iteration_memory", "is now rollout.restarts.exploring_starts.target.memory"),
    ],
)
def test_an_old_flat_key_names_its_new_place(key, line):
    with pytest.raises(ValidationError, match=line):
        LossConfig(**{key: 1.0})
    assert moved_key("loss", key).endswith(line)


def test_sections_are_off_by_default():
    cfg = LossConfig()
    assert (cfg.kl, cfg.entropy, cfg.signalling, cfg.listening) == (None, None, None, None)


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


def behavior_of(old_logp):
    """Log-probs of a sampler that drifted from the old policy; weights around 1, some capped."""
    g = torch.Generator().manual_seed(7)
    return old_logp + 0.5 * torch.randn(old_logp.shape, generator=g, dtype=torch.float64)


def forward(logits, actions):
    logprobs = torch.log_softmax(logits, -1)  # (B, T, V)
    logp = logprobs.gather(-1, actions[..., None])[..., 0]  # (B, T)
    entropy = -(logprobs.exp() * logprobs).sum(-1)  # (B, T)
    return logp, entropy


def loss_and_grad(cfg, rows, denom, batch, tis_cap=None):
    logits, actions, mask, old_logp, ref_logp, adv = batch
    logits.grad = None
    logp, _ = forward(logits[rows], actions[rows])
    loss, metrics = policy_loss(
        cfg,
        logp=logp,
        old_logp=old_logp[rows],
        adv=adv[rows],
        mask=mask[rows],
        denom=denom,
        behavior_logp=behavior_of(old_logp)[rows],
        tis_cap=tis_cap,
    )
    loss.backward()
    return loss.detach(), logits.grad.clone(), metrics


@pytest.mark.parametrize("aggregation", ["token_mean", "constant_norm", "sequence_mean"])
@pytest.mark.parametrize("off_policy", [False, True])
def test_micro_batches_of_one_equal_one_batch_of_eight(aggregation, off_policy):
    dual, tis_cap = (1.2, 1.2) if off_policy else (None, None)
    cfg = LossConfig(aggregation=aggregation, clip_low=0.1, dual_clip=dual)
    batch = make_batch()
    mask = batch[2]
    micro = [slice(i, i + 1) for i in range(B)]
    denom = global_denom(aggregation, [mask[s] for s in micro], units_per_row=T)
    assert denom == global_denom(aggregation, [mask], units_per_row=T)
    full_loss, full_grad, metrics = loss_and_grad(cfg, slice(0, B), denom, batch, tis_cap)
    if off_policy:  # both steps must be active somewhere, or the check proves nothing
        assert metrics["loss/dual_clip_frac"] > 0 and metrics["loss/tis_capped_frac"] > 0
    parts = [loss_and_grad(cfg, s, denom, batch, tis_cap) for s in micro]
    assert sum(p[0] for p in parts).item() == pytest.approx(full_loss.item(), abs=1e-6)
    assert torch.allclose(sum(p[1] for p in parts), full_grad, atol=1e-6, rtol=0)


def test_local_token_mean_is_not_invariant():
    """Without the global denominator, accumulation weighs short rows up: the check bites."""
    cfg = LossConfig()
    batch = make_batch()
    _, full_grad, _ = loss_and_grad(cfg, slice(0, B), None, batch)
    summed = sum(loss_and_grad(cfg, slice(i, i + 1), None, batch)[1] for i in range(B)) / B
    assert not torch.allclose(summed, full_grad, atol=1e-6)


def test_the_objective_is_the_aggregated_ppo_clip():
    logits, actions, mask, old_logp, _, adv = make_batch(1)
    logp, _ = forward(logits, actions)
    per_unit, _ = ppo_clip(logp, old_logp, adv, mask=mask)
    policy = token_mean(per_unit, mask)
    loss, m = policy_loss(LossConfig(), logp=logp, old_logp=old_logp, adv=adv, mask=mask)
    assert loss.item() == policy.item()
    assert m["loss/policy"] == policy.item()
    assert {"loss/clip_frac", "loss/approx_kl"} <= set(m)
    assert not {"loss/kl", "loss/entropy", "loss/total"} & set(m)  # the learner's terms


@pytest.mark.parametrize("aggregation", ["sequence_mean", "constant_norm"])
def test_the_configured_aggregation_is_the_one_applied(aggregation):
    # Rows of 3 and 1 valid units, per-unit losses -1 and 2 (ratio 1): token_mean gives
    # (-3 + 2) / 4, sequence_mean (-1 + 2) / 2, constant_norm over 2 rows x 3 units -1 / 6.
    logp = torch.zeros(2, 3, dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]], dtype=torch.float64)
    adv = torch.tensor([[1.0], [-2.0]], dtype=torch.float64)
    denom = global_denom(aggregation, [mask], units_per_row=3)
    cfg = LossConfig(aggregation=aggregation)
    loss, _ = policy_loss(cfg, logp=logp, old_logp=logp, adv=adv, mask=mask, denom=denom)
    assert loss.item() == pytest.approx(
        {"sequence_mean": 0.5, "constant_norm": -1 / 6}[aggregation]
    )


def test_on_policy_gradient_is_minus_advantage_over_token_count():
    logp = torch.zeros(2, 3, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]], dtype=torch.float64)
    adv = torch.tensor([[1.0], [-2.0]], dtype=torch.float64)
    loss, _ = policy_loss(LossConfig(), logp=logp, old_logp=logp.detach(), adv=adv, mask=mask)
    loss.backward()
    want = torch.tensor([[-1.0, -1.0, -1.0], [2.0, 0.0, 0.0]], dtype=torch.float64) / 4
    assert torch.allclose(logp.grad, want)


def test_defaults_ignore_behavior_logp():
    logits, actions, mask, old_logp, ref_logp, adv = make_batch(2)
    logp, _ = forward(logits, actions)
    kw = dict(logp=logp, old_logp=old_logp, adv=adv, mask=mask)
    plain, m = policy_loss(LossConfig(), **kw)
    with_behavior, _ = policy_loss(LossConfig(), behavior_logp=behavior_of(old_logp), **kw)
    assert with_behavior.item() == plain.item()
    assert not {"loss/dual_clip_frac", "loss/tis_weight_mean"} & set(m)


def test_tis_without_behavior_logp_says_what_is_missing():
    logp = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="behavior_logp"):
        policy_loss(LossConfig(), logp=logp, old_logp=logp, adv=logp, mask=logp + 1, tis_cap=2.0)


def test_dual_clip_and_tis_compose_by_hand():
    """Three units, token_mean over 3: a stale negative unit, a capped and a down-weighted one."""
    ratio = torch.tensor([[10.0, 1.0, 1.0]], dtype=torch.float64)
    logp = torch.log(ratio).requires_grad_()
    old = torch.zeros(1, 3, dtype=torch.float64)
    behavior = torch.log(torch.tensor([[1.0, 0.25, 2.0]], dtype=torch.float64))  # w = 1, 4->2, 0.5
    adv = torch.tensor([[-1.0, 1.0, -1.0]], dtype=torch.float64)
    mask = torch.ones(1, 3, dtype=torch.float64)
    cfg = LossConfig(dual_clip=3.0)
    loss, m = policy_loss(
        cfg, logp=logp, old_logp=old, adv=adv, mask=mask, behavior_logp=behavior, tis_cap=2.0
    )
    loss.backward()
    # per unit: min(10, 3) * 1 = 3;  -1 * 2 = -2;  1 * 0.5 = 0.5
    assert loss.item() == pytest.approx((3.0 - 2.0 + 0.5) / 3)
    # d/dlogp: dual-clipped unit 0; -A * r * w = -2 and +0.5
    want = torch.tensor([[0.0, -2.0, 0.5]], dtype=torch.float64) / 3
    assert torch.allclose(logp.grad, want)
    assert m["loss/dual_clip_frac"] == pytest.approx(1 / 3)
    assert m["loss/tis_capped_frac"] == pytest.approx(1 / 3)
    assert m["loss/tis_weight_mean"] == pytest.approx(3.5 / 3)


def test_the_tis_weight_scales_the_dual_clipped_loss():
    # pg = w * dual_clip(ppo_clip): a stale unit (ratio 10, A = -1) bounded at c = 3, then
    # weighed by w = 0.5, gives 1.5; weighing first (5) and bounding after gave 3.
    logp = torch.log(torch.tensor([[10.0]], dtype=torch.float64))
    old = torch.zeros(1, 1, dtype=torch.float64)
    behavior = torch.log(torch.tensor([[2.0]], dtype=torch.float64))
    adv, mask = -torch.ones(1, 1, dtype=torch.float64), torch.ones(1, 1, dtype=torch.float64)
    loss, _ = policy_loss(
        LossConfig(dual_clip=3.0),
        logp=logp,
        old_logp=old,
        adv=adv,
        mask=mask,
        behavior_logp=behavior,
        tis_cap=2.0,
    )
    assert loss.item() == pytest.approx(1.5)


@pytest.mark.parametrize("cap", [0.0, -2.0])
def test_a_tis_cap_must_be_positive(cap):
    logp = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="greater than 0"):
        policy_loss(
            LossConfig(),
            logp=logp,
            old_logp=logp,
            adv=logp,
            mask=logp + 1,
            behavior_logp=logp,
            tis_cap=cap,
        )
