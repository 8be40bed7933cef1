"""Learner: its optimizer, schedule, activation checkpointing, magnet and terms as
make_learner builds them; the terms' saved state."""

import copy

import numpy as np
import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, OPTConfig, OPTForCausalLM

from coplay.algos.losses.compose import LossConfig
from coplay.algos.losses.regularizers import EntropyConfig, KLConfig
from coplay.policies.lm import LMPolicy
from coplay.train.config import OptimConfig
from coplay.train.learner import (
    load_schedule,
    load_terms_state,
    make_learner,
    recall,
    terms_state,
)
from coplay.train.learner_update import update
from coplay.train.parts.policy_iteration import TargetConfig
from coplay.train.settings import build_config
from coplay.train.trainer import train
from tests.train.learners import kuhn_policy, kuhn_samples, last_grad, targeted
from tests.train.runs import TINY, rows


def _first_step(model_class, config, tok, mode, **optim) -> dict[str, float]:
    """The metrics of one on-policy update, with a KL pull, of a model built from
    ``config`` with seeded weights."""
    config.bos_token_id = config.eos_token_id = config.pad_token_id = 0
    with torch.random.fork_rng():
        torch.manual_seed(0)
        policy = LMPolicy(model_class(config), tok, mode=mode, max_new_tokens=6, seed=0)
    samples = kuhn_samples(policy)
    learner = make_learner(
        policy, LossConfig(kl=KLConfig(coef=0.1)), OptimConfig(lr=1e-3, minibatch_size=8, **optim)
    )
    return update(learner, samples, np.random.default_rng(0))


@pytest.mark.parametrize("mode", ["choice", "text"])
def test_a_checkpoint_with_dropout_takes_an_on_policy_step_at_ratio_one(mode):
    # GPT-2's config drops 10% of its units; rollouts ran without (eval mode), the update
    # with (training mode): the first step's ratios spread 0.94..1.03 and the KL to a
    # reference with the very same weights was not 0.
    tok = kuhn_policy().tokenizer
    config = GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=2, n_head=2, n_positions=256)
    metrics = _first_step(GPT2LMHeadModel, config, tok, mode, activation_checkpointing=True)
    assert metrics["loss/ratio_min"] == pytest.approx(1.0, abs=1e-5)
    assert metrics["loss/ratio_max"] == pytest.approx(1.0, abs=1e-5)
    assert metrics["loss/kl"] == pytest.approx(0.0, abs=1e-7)


@pytest.mark.parametrize("mode", ["choice", "text"])
def test_a_checkpoint_whose_dropout_is_a_setting_takes_an_on_policy_step_at_ratio_one(mode):
    # OPT's layers read their dropout (0.1 in its config) and layer drop as plain
    # numbers, not from a Dropout module: both stayed on in training mode, and the first
    # on-policy step's ratios went down to 0.96 (choice) and 0.93 (text).
    tok = kuhn_policy().tokenizer
    config = OPTConfig(
        vocab_size=len(tok),
        hidden_size=32,
        word_embed_proj_dim=32,
        ffn_dim=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=256,
        layerdrop=0.1,
    )
    metrics = _first_step(OPTForCausalLM, config, tok, mode)
    assert metrics["loss/ratio_min"] == pytest.approx(1.0, abs=1e-5)
    assert metrics["loss/ratio_max"] == pytest.approx(1.0, abs=1e-5)
    assert metrics["loss/kl"] == pytest.approx(0.0, abs=1e-7)


@pytest.mark.parametrize("mode", ["choice", "text"])
def test_activation_checkpointing_leaves_the_gradient_unchanged(mode):
    base = kuhn_policy(mode)
    samples = kuhn_samples(base)
    grads, flags = [], []
    for on in (False, True):
        policy = copy.deepcopy(base)
        optim = OptimConfig(lr=1e-2, minibatch_size=8, activation_checkpointing=on)
        loss = LossConfig(entropy=EntropyConfig(coef=0.01), kl=KLConfig(coef=0.1))
        learner = make_learner(policy, loss, optim)
        update(learner, samples, np.random.default_rng(0))
        grads.append(last_grad(learner))
        flags.append(policy.model.is_activation_checkpointing)
    assert flags == [False, True]
    assert grads[0].abs().max() > 0
    assert torch.allclose(grads[0], grads[1], atol=1e-7, rtol=1e-4)


@pytest.mark.parametrize("ema", [0.0, 0.5, 1.0])
def test_magnet_moves_toward_the_policy_by_ema(ema):
    policy = kuhn_policy()
    samples = kuhn_samples(policy)
    loss = LossConfig(kl=KLConfig(coef=0.1))
    learner = make_learner(policy, loss, OptimConfig(lr=1e-2), reference_ema=ema)
    ref0 = [p.detach().clone() for p in learner.reference.model.parameters()]
    update(learner, samples, np.random.default_rng(0))
    for r0, r1, p in zip(
        ref0, learner.reference.model.parameters(), policy.model.parameters(), strict=True
    ):
        assert torch.allclose(r1, r0 + ema * (p.detach() - r0), atol=1e-6)
        assert not r1.requires_grad


def test_a_magnet_without_kl_only_averages_and_leaves_the_update_alone():
    base = kuhn_policy()
    samples = kuhn_samples(base)
    plain = make_learner(copy.deepcopy(base), LossConfig(), OptimConfig(lr=1e-2))
    averaged = make_learner(
        copy.deepcopy(base), LossConfig(), OptimConfig(lr=1e-2), reference_ema=0.25
    )
    assert plain.reference is None and averaged.reference is not None
    ref0 = [p.detach().clone() for p in averaged.reference.model.parameters()]
    m_plain = update(plain, samples, np.random.default_rng(0))
    m_avg = update(averaged, samples, np.random.default_rng(0))
    assert "loss/kl" not in m_avg and m_avg["loss/policy"] == m_plain["loss/policy"]
    for p0, p1 in zip(
        plain.policy.model.parameters(), averaged.policy.model.parameters(), strict=True
    ):
        assert torch.equal(p0, p1)  # the average never pulls the learner
    for r0, r1, p in zip(
        ref0, averaged.reference.model.parameters(), averaged.policy.model.parameters(), strict=True
    ):
        assert torch.allclose(r1, r0 + 0.25 * (p.detach() - r0), atol=1e-6)


def test_entropy_weight_anneals_linearly_and_follows_the_update_count():
    policy = kuhn_policy()
    loss = LossConfig(entropy=EntropyConfig(coef=0.1, final_frac=0.2))
    learner = make_learner(policy, loss, OptimConfig(lr=1e-3), iterations=3)
    samples = kuhn_samples(policy)
    coefs = [update(learner, samples, np.random.default_rng(0))["loss/entropy_coef"] for _ in "abc"]
    assert coefs == pytest.approx([0.1, 0.06, 0.02])
    # Without the bonus the weight is logged as 0, so every run's log has the column.
    plain = make_learner(policy, LossConfig(), OptimConfig(lr=1e-3))
    assert update(plain, samples, np.random.default_rng(0))["loss/entropy_coef"] == 0.0


def test_lr_schedule_decays_linearly_to_final_fraction():
    policy = kuhn_policy()
    optim = OptimConfig(lr=1e-2, lr_schedule="linear", final_lr_frac=0.1)
    learner = make_learner(policy, LossConfig(), optim, iterations=3)
    samples = kuhn_samples(policy)
    lrs = [update(learner, samples, np.random.default_rng(0))["loss/lr"] for _ in range(3)]
    assert lrs == pytest.approx([1e-2, 5.5e-3, 1e-3])


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        ("constant", [0.0, 5e-3, 1e-2, 1e-2, 1e-2]),
        ("linear", [0.0, 5e-3, 1e-2, 5.5e-3, 1e-3]),
        ("cosine", [0.0, 5e-3, 1e-2, 5.5e-3, 1e-3]),
    ],
)
def test_the_lr_warms_up_from_zero_then_follows_its_schedule(schedule, expected):
    policy = kuhn_policy()
    optim = OptimConfig(lr=1e-2, lr_schedule=schedule, final_lr_frac=0.1, warmup_updates=2)
    learner = make_learner(policy, LossConfig(), optim, iterations=5)
    samples = kuhn_samples(policy)
    lrs = [update(learner, samples, np.random.default_rng(0))["loss/lr"] for _ in range(5)]
    assert lrs == pytest.approx(expected, abs=1e-12)


def test_a_run_stopped_mid_warm_up_resumes_at_the_uninterrupted_learning_rates(tmp_path):
    over = [
        *TINY,
        "train.iterations=5",
        "train.save_every=0",
        "optim.lr=0.01",
        "optim.lr_schedule=cosine",
        "optim.final_lr_frac=0.2",
        "optim.warmup_updates=2",
    ]
    cfg = build_config(overrides=over)
    train(cfg, tmp_path / "whole")
    train(cfg, tmp_path / "split", stop_after=1)  # one of the two warm-up updates done
    train(cfg, tmp_path / "split", resume=True)
    whole, split = (rows(tmp_path / run / "metrics.jsonl") for run in ("whole", "split"))
    lrs = [r["loss/lr"] for r in split[1:]]  # row 0: the evaluation before training
    assert lrs == pytest.approx([0.0, 5e-3, 1e-2, 6e-3, 2e-3], abs=1e-12)
    assert split == whole


def test_a_warm_up_added_on_resume_starts_at_the_updates_done():
    # The saved run had no schedule (constant): the warm-up counts the policy's updates.
    policy = kuhn_policy()
    policy.publish(3)
    optim = OptimConfig(lr=1e-2, warmup_updates=4)
    learner = make_learner(policy, LossConfig(), optim, iterations=6)
    load_schedule(learner, None)
    assert learner.optimizer.param_groups[0]["lr"] == pytest.approx(0.75e-2)
    assert learner.scheduler.get_last_lr() == [learner.optimizer.param_groups[0]["lr"]]


def test_a_warm_up_as_long_as_the_learners_updates_is_refused():
    with pytest.raises(ValueError, match="optim.warmup_updates=3 would take all of"):
        make_learner(kuhn_policy(), LossConfig(), OptimConfig(warmup_updates=3), iterations=3)


def test_the_learner_recalls_and_saves_its_memory_of_targets():
    base = kuhn_policy()
    samples = targeted(base)
    optim = OptimConfig(lr=1e-3, minibatch_size=8)
    learner = make_learner(base, LossConfig(), optim, target=TargetConfig(coef=1.0, memory=4))
    assert recall(learner, samples) == ([], {"loss/replayed_targets": 0.0})
    replayed, metrics = recall(learner, samples[2:])  # no fresh target at those positions
    assert [r.decision for r in replayed] == [s.decision for s in samples[:2]]
    assert metrics == {"loss/replayed_targets": 2.0}
    state = terms_state(learner)
    assert list(state) == ["target"]  # no other term is on
    fresh = make_learner(base, LossConfig(), optim, target=TargetConfig(coef=1.0, memory=4))
    load_terms_state(fresh, state)
    assert recall(fresh, samples[2:])[0] == replayed
    with pytest.raises(ValueError, match="'target' loss term, which this run has not"):
        load_terms_state(make_learner(base, LossConfig(), optim), state)


def test_the_default_token_budget_follows_the_model_size():
    tiny = make_learner(kuhn_policy(), LossConfig(), OptimConfig())
    wide = kuhn_policy()
    wide.model.config.hidden_size, wide.model.config.num_hidden_layers = 1024, 24
    big = make_learner(wide, LossConfig(), OptimConfig())
    assert tiny.micro_batch_tokens > 16 * big.micro_batch_tokens
    assert (
        make_learner(
            kuhn_policy(), LossConfig(), OptimConfig(micro_batch_tokens=7)
        ).micro_batch_tokens
        == 7
    )


def test_vocabulary_gradients_go_in_place_by_default_from_a_large_vocabulary():
    assert not make_learner(kuhn_policy(), LossConfig(), OptimConfig()).vocab_grads_in_place
    wide = kuhn_policy()
    wide.model.resize_token_embeddings(2**17)  # 131072 x 64 floats: 32 MiB
    assert make_learner(wide, LossConfig(), OptimConfig()).vocab_grads_in_place


def test_the_small_model_step_runs_foreach_and_equals_the_per_parameter_step_bit_for_bit():
    policy = kuhn_policy()
    optim = OptimConfig(lr=1e-2, lr_schedule="linear", weight_decay=0.1, epochs=2, minibatch_size=4)
    learners = [
        make_learner(copy.deepcopy(policy), LossConfig(), optim, iterations=3) for _ in "ab"
    ]
    assert learners[0].optimizer.defaults["foreach"] is True
    learners[1].optimizer.param_groups[0]["foreach"] = False  # the one-tensor-at-a-time step
    samples = kuhn_samples(policy)
    for learner in learners:
        for _ in range(3):
            update(learner, samples, np.random.default_rng(0))
    for a, b in zip(*(lr.policy.model.parameters() for lr in learners), strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(
        next(policy.model.parameters()), next(learners[0].policy.model.parameters())
    )
