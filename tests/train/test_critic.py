"""Value model: zero start, clipped loss, regression fits targets, values on turns."""

import numpy as np
import pytest
import torch

from coplay.envs.registry import make_env
from coplay.models.lora import LoraSettings, attach_roles
from coplay.policies.scripted import RandomPolicy
from coplay.rollout.engine import play_episodes
from coplay.train.critic import CriticConfig, critic_update, fill_values, make_critic, value_loss


@pytest.fixture
def episodes():
    bot = RandomPolicy(seed=0)
    return play_episodes(lambda: make_env("kuhn_poker"), [[bot, bot]] * 16, range(16))


def test_starts_at_zero_and_fills_every_turn(tiny_policy, episodes):
    critic = make_critic(tiny_policy, CriticConfig())
    fill_values(critic, episodes)
    values = [t.value for e in episodes for t in e.turns]
    assert values and all(v == 0.0 for v in values)


def test_a_lora_role_gets_a_plain_copy_of_the_shared_base(tiny_policy, episodes):
    # A role's model is the peft model all roles share: its ``base_model`` runs the
    # whole causal model, which has no hidden states to read (it raised).
    views = attach_roles(tiny_policy, ("first", "second"), LoraSettings(rank=2), seed=0)
    critic = make_critic(views["first"], CriticConfig(lr=1e-1))
    trunk = critic.model.trunk.state_dict()
    base = views["first"].model.get_base_model().state_dict()
    assert trunk and not any("lora_" in n for n in trunk)
    assert all(
        torch.equal(v, base[f"model.{n}".replace("proj.", "proj.base_layer.")])
        for n, v in trunk.items()
    )
    fill_values(critic, episodes)
    assert all(t.value == 0.0 for e in episodes for t in e.turns)
    shared = {n: p.detach().clone() for n, p in views["first"].model.named_parameters()}
    turns = [t for e in episodes for t in e.turns]
    critic_update(critic, turns, [1.0] * len(turns), np.random.default_rng(0))
    fill_values(critic, episodes)
    assert all(t.value != 0.0 for t in turns)
    moved = dict(views["first"].model.named_parameters())
    assert all(torch.equal(v, moved[n]) for n, v in shared.items())


def test_value_loss_unclipped_and_clipped():
    v, old, r = torch.tensor([2.0, 0.0]), torch.tensor([0.0, 0.0]), torch.tensor([1.0, 1.0])
    assert float(value_loss(v, old, r, None)) == pytest.approx(0.5 * (1 + 1) / 2)
    # clip 0.5: first clipped value 0.5 -> (0.5-1)^2 = 0.25 < 1, keeps 1; second 0 -> 1
    assert float(value_loss(v, old, r, 0.5)) == pytest.approx(0.5)
    v2 = torch.tensor([0.1, 0.0])  # moves toward target: clipped form never smaller
    assert float(value_loss(v2, old, r, 0.05)) >= float(value_loss(v2, old, r, None))


def test_regression_learns_the_targets(tiny_policy, episodes):
    critic = make_critic(tiny_policy, CriticConfig(lr=1e-2, batch_size=64))
    turns = [t for e in episodes for t in e.turns]
    # Target: +1 for the first player's turns, -1 for the second's (the text says who).
    targets = [1.0 if t.player == 0 else -1.0 for t in turns]
    rng = np.random.default_rng(0)
    fill_values(critic, episodes)
    first = critic_update(critic, turns, targets, rng)["critic/loss"]
    for _ in range(30):
        fill_values(critic, episodes)
        last = critic_update(critic, turns, targets, rng)["critic/loss"]
    assert last < 0.2 * first


def test_policy_weights_are_not_shared(tiny_policy, episodes):
    critic = make_critic(tiny_policy, CriticConfig(lr=1e-1))
    before = [p.clone() for p in tiny_policy.model.parameters()]
    fill_values(critic, episodes)
    turns = [t for e in episodes for t in e.turns]
    critic_update(critic, turns, [1.0] * len(turns), np.random.default_rng(0))
    assert all(
        torch.equal(a, b) for a, b in zip(before, tiny_policy.model.parameters(), strict=True)
    )


def test_mismatched_targets_are_an_error(tiny_policy, episodes):
    critic = make_critic(tiny_policy, CriticConfig())
    fill_values(critic, episodes)
    turns = [t for e in episodes for t in e.turns]
    with pytest.raises(ValueError, match="value targets"):
        critic_update(critic, turns, [0.0], np.random.default_rng(0))


def _trained_copy(policy, episodes, tokens, rows_seen=None):
    """A critic after one update at a token budget, with filled values; the distinct
    rows each forward pass ran, if asked."""
    torch.manual_seed(0)
    critic = make_critic(policy, CriticConfig(lr=1e-2, batch_size=64, micro_batch_tokens=tokens))
    if rows_seen is not None:
        run = critic.model.forward
        critic.model.forward = lambda ids, attn, pos: (
            rows_seen.append(len(ids)) or run(ids, attn, pos)
        )
    turns = [t for e in episodes for t in e.turns]
    targets = [1.0 if t.player == 0 else -1.0 for t in turns]
    fill_values(critic, episodes)
    critic_update(critic, turns, targets, np.random.default_rng(0))
    grads = torch.cat([p.grad.flatten() for p in critic.model.parameters() if p.grad is not None])
    fill_values(critic, episodes)
    return grads, [t.value for t in turns]


def test_a_token_budget_splits_steps_into_passes_and_changes_no_number(tiny_policy, episodes):
    whole_grads, whole_values = _trained_copy(tiny_policy, episodes, 10**9)
    rows = []
    cut_grads, cut_values = _trained_copy(tiny_policy, episodes, 60, rows)
    assert len(rows) > 6  # a pass or two of each step at a budget of 60 tokens
    assert whole_grads.abs().max() > 0
    assert torch.allclose(whole_grads, cut_grads, atol=1e-7, rtol=1e-4)
    assert cut_values == pytest.approx(whole_values, abs=1e-6)


def test_each_distinct_prompt_runs_once_a_pass(tiny_policy, episodes):
    rows = []
    _trained_copy(tiny_policy, episodes, 10**9, rows)
    turns = [t for e in episodes for t in e.turns]
    distinct = len({tiny_policy.prompt_ids(t.observation) for t in turns})
    assert distinct < len(turns)  # Kuhn: a dozen states
    # fill, one step (all 16 games' turns are within one batch of 64), fill again
    assert rows[0] == distinct and rows[-1] == distinct and max(rows) == distinct


def test_the_default_budget_follows_the_model(tiny_policy):
    from coplay.train.micro import auto_budget

    critic = make_critic(tiny_policy, CriticConfig())
    assert critic.tokens == auto_budget(tiny_policy.model.config)
    assert make_critic(tiny_policy, CriticConfig(micro_batch_tokens=7)).tokens == 7
    with pytest.raises(ValueError):
        CriticConfig(micro_batch_tokens=0)


def test_a_lora_roles_critic_regresses_without_the_checkpoints_dropout():
    # A LoRA role's trunk is rebuilt from the config, GPT-2's dropout of 0.1 back on:
    # the critic regressed in training mode on values read in eval mode.
    from transformers import GPT2Config, GPT2LMHeadModel

    from coplay.policies.lm import LMPolicy
    from tests.train.test_learner import kuhn_policy

    tok = kuhn_policy().tokenizer
    config = GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=1, n_head=2, n_positions=128)
    config.bos_token_id = config.eos_token_id = config.pad_token_id = 0
    policy = LMPolicy(GPT2LMHeadModel(config), tok, mode="choice", seed=0)
    settings = LoraSettings(rank=2, targets=("c_attn",))
    views = attach_roles(policy, ("first", "second"), settings, seed=0)
    critic = make_critic(views["first"], CriticConfig())
    drops = [m.p for m in critic.model.modules() if isinstance(m, torch.nn.Dropout)]
    assert drops and all(p == 0.0 for p in drops)


def test_the_rate_is_the_configured_one_times_the_scale(tiny_policy, episodes):
    critic = make_critic(tiny_policy, CriticConfig(lr=0.02))
    turns = [t for e in episodes for t in e.turns]
    fill_values(critic, episodes)
    head = critic.model.head.weight.detach().clone()
    still = critic_update(critic, turns, [1.0] * len(turns), np.random.default_rng(0), lr_scale=0)
    assert still["critic/lr"] == 0.0 and torch.equal(critic.model.head.weight, head)
    half = critic_update(critic, turns, [1.0] * len(turns), np.random.default_rng(0), lr_scale=0.5)
    assert half["critic/lr"] == critic.optimizer.param_groups[0]["lr"] == 0.01
