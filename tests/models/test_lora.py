"""LoRA roles on one base: frozen base, separate adapters, exact log-probs, save/load."""

import math

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from coplay.algos.losses.compose import LossConfig
from coplay.envs.registry import make_env
from coplay.models.checkpoints import BASE
from coplay.models.lora import (
    RESERVED_ROLES,
    LoraSettings,
    attach_roles,
    base_view,
    load_roles,
    save_roles,
)
from coplay.models.tiny import TinyModelConfig, build_tiny_model
from coplay.models.tokenizer import train_tokenizer
from coplay.policies.lm import LMPolicy
from coplay.policies.text import TextConfig
from coplay.rollout.engine import play_episodes
from coplay.rollout.invalid import InvalidActionConfig
from coplay.train.config import OptimConfig
from coplay.train.learner import Sample, make_adapter_learner
from coplay.train.learner_update import update

ROLES = ("first", "second")


def _base(mode="choice", text=None):
    env = make_env("kuhn_poker")
    corpus = [env.observe(0).text, "Action: [Pass] [Bet] [Call] [Fold]"] * 20
    tok = train_tokenizer(corpus, vocab_size=320)
    cfg = TinyModelConfig(vocab_size=320, hidden_size=32, intermediate_size=64)
    model = build_tiny_model(cfg, vocab_size=len(tok), seed=0)
    return LMPolicy(model, tok, mode=mode, max_new_tokens=4, seed=0, text=text)


def _views(mode="choice", rank=4, roles=ROLES):
    return attach_roles(_base(mode), roles, LoraSettings(rank=rank), seed=0)


def _base_state(view):
    return {n: p.detach().clone() for n, p in view.model.named_parameters() if "lora_" not in n}


def _adapter_state(view):
    return [p.detach().clone() for p in view.adapter_parameters()]


def _perturb(view, scale=0.5, seed=1):
    """Give a role's adapter non-zero B so that the roles really differ."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in view.adapter_parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale)


def _play(views, n=16):
    seating = [[views["first"], views["second"]]] * n
    # A penalty (random legal move) keeps untrained text-mode games going to both seats.
    penalty = InvalidActionConfig(on_fail="penalty")
    return play_episodes(lambda: make_env("kuhn_poker"), seating, list(range(n)), invalid=penalty)


def _decisions(episodes, role):
    return [
        d
        for e in episodes
        for t in e.turns
        for d in (*t.invalid_attempts, t.decision)
        if d.policy_id == role
    ]


def _samples(episodes, role, sign=1.0):
    return [
        Sample(t.decision, sign * (1.0 if e.returns[t.player] > 0 else -1.0))
        for e in episodes
        for t in e.turns
        if t.decision.policy_id == role
    ]


def test_only_adapters_are_trainable_and_each_role_has_its_own():
    views = _views()
    model = views["first"].model
    for name, p in model.named_parameters():
        if "lora_" not in name:
            assert not p.requires_grad, name
    a, b = views["first"].adapter_parameters(), views["second"].adapter_parameters()
    assert len(a) == len(b) > 0
    assert not {id(p) for p in a} & {id(p) for p in b}
    # 2 layers x 7 projections x (A, B)
    assert len(a) == 2 * 7 * 2


def test_adapters_start_as_the_base_and_diverge_with_training_while_the_base_stays():
    views = _views()
    probe = _play(views, n=4)[0].turns[0].observation
    base_probs = base_view(views["first"]).action_probs([probe])[0]
    assert views["second"].action_probs([probe])[0] == pytest.approx(base_probs, abs=1e-6)
    before = _base_state(views["first"])
    optim = OptimConfig(lr=0.05, epochs=2)
    learners = {r: make_adapter_learner(v, LossConfig(), optim) for r, v in views.items()}
    rng = np.random.default_rng(0)
    for _ in range(3):
        eps = _play(views)
        update(learners["first"], _samples(eps, "first"), rng)
        update(learners["second"], _samples(eps, "second", sign=-1.0), rng)
    after = _base_state(views["first"])
    assert all(torch.equal(before[n], after[n]) for n in before)
    a = torch.cat([p.flatten() for p in views["first"].adapter_parameters()])
    b = torch.cat([p.flatten() for p in views["second"].adapter_parameters()])
    assert (a - b).abs().max() > 1e-3
    pa, pb = (views[r].action_probs([probe])[0] for r in ROLES)
    assert max(abs(pa[k] - pb[k]) for k in pa) > 1e-4


@pytest.mark.parametrize("roles", [("proj", "lay"), ("odel", "first")])
def test_a_roles_parameters_are_its_adapter_alone_whatever_its_name(roles):
    # Each name is inside the base's parameter names ("q_proj", "layers", "model").
    views = _views(roles=roles)
    a, b = (views[r].adapter_parameters() for r in roles)
    assert len(a) == len(b) == 2 * 7 * 2
    assert not {id(p) for p in a} & {id(p) for p in b}


def test_one_roles_update_leaves_the_other_adapter_untouched():
    views = _views()
    learner = make_adapter_learner(views["first"], LossConfig(), OptimConfig(lr=0.05))
    param_ids = {id(p) for g in learner.optimizer.param_groups for p in g["params"]}
    assert param_ids == {id(p) for p in views["first"].adapter_parameters()}
    other = _adapter_state(views["second"])
    mine = _adapter_state(views["first"])
    eps = _play(views)
    update(learner, _samples(eps, "first"), np.random.default_rng(0))
    assert all(
        torch.equal(x, y) for x, y in zip(other, _adapter_state(views["second"]), strict=True)
    )
    assert any(
        not torch.equal(x, y) for x, y in zip(mine, _adapter_state(views["first"]), strict=True)
    )


@pytest.mark.parametrize("mode", ["choice", "text"])
def test_each_roles_recomputed_logprobs_equal_the_sampled_ones(mode):
    views = _views(mode)
    _perturb(views["second"])
    eps = _play(views, n=12)
    for role, view in views.items():
        decisions = _decisions(eps, role)
        assert decisions
        scored = view.scorer.score(decisions)
        for row, dec in enumerate(decisions):
            n = len(dec.logprobs)
            got = scored.logp[row, :n].detach()
            assert torch.allclose(got, torch.tensor(dec.logprobs), atol=1e-5)
    # Scoring the second role's decisions with the first role's adapter gives other numbers,
    # so the equality above depends on the right adapter being active.
    decisions = _decisions(eps, "second")
    wrong = views["first"].scorer.score(decisions).logp[:, 0].detach()
    right = torch.tensor([d.logprobs[0] for d in decisions])
    assert (wrong - right).abs().max() > 1e-3


def test_save_then_load_restores_every_role_and_a_plain_base(tmp_path):
    views = _views()
    _perturb(views["first"], seed=3)
    _perturb(views["second"], seed=4)
    probe = _play(views, n=4)[0].turns[0].observation
    want = {r: v.action_probs([probe])[0] for r, v in views.items()}
    want_base = base_view(views["first"]).action_probs([probe])[0]
    save_roles(views, tmp_path)
    assert (tmp_path / "first" / "adapter_model.safetensors").is_file()
    loaded = load_roles(tmp_path, ROLES)
    for role in ROLES:
        assert loaded[role].action_probs([probe])[0] == pytest.approx(want[role], abs=1e-6)
    plain = AutoModelForCausalLM.from_pretrained(tmp_path / "base")
    tok = views["first"].tokenizer
    got_base = LMPolicy(plain.eval(), tok).action_probs([probe])[0]
    assert got_base == pytest.approx(want_base, abs=1e-6)
    assert not any(p.requires_grad for p in loaded["first"].model.parameters())
    trainable = load_roles(tmp_path, ROLES, trainable=True)
    assert all(p.requires_grad for p in trainable["first"].adapter_parameters())


def test_each_saved_role_keeps_its_own_update_count(tmp_path):
    views = _views()
    views["first"].version, views["second"].version = 7, 3
    save_roles(views, tmp_path)
    loaded = load_roles(tmp_path, ROLES)
    assert (loaded["first"].version, loaded["second"].version) == (7, 3)  # were 0 and 0


def test_roles_and_reloaded_roles_keep_the_runs_text_settings(tmp_path):
    text = TextConfig(answer="bracket", top_k=5, stop=["\n"])
    views = attach_roles(_base("text", text=text), ROLES, LoraSettings(rank=2), seed=0)
    assert all(v.text == text for v in views.values())
    assert base_view(views["first"]).text == text
    save_roles(views, tmp_path)
    assert all(v.text == text for v in load_roles(tmp_path, ROLES).values())


def test_kl_reference_is_the_base_with_adapters_disabled():
    views = _views()
    _perturb(views["second"])
    learner = make_adapter_learner(views["second"], LossConfig(kl={"coef": 0.1}), OptimConfig())
    ref = learner.reference
    assert ref is not None and ref.model is views["second"].model
    decisions = _decisions(_play(views, n=8), "second")
    views["second"].activate()  # the reference's scorer must not score with it
    with torch.no_grad():
        base = ref.scorer.score(decisions).logp[:, 0]
        untouched = views["first"].scorer.score(decisions).logp[:, 0]  # lora_B = 0: the base
        own = views["second"].scorer.score(decisions).logp[:, 0]
    assert torch.allclose(base, untouched, atol=1e-6)
    assert (base - own).abs().max() > 1e-3


@pytest.mark.parametrize(
    ("roles", "match"),
    [
        ((), "at least one role"),
        (("x", "x"), "distinct"),
        (("a", "b"), "part of 'lora_'"),
        (("a.b",), "a dot"),
        (("a/b",), "slash"),
        (("first", "default"), "'default' is reserved"),
        (("base",), "'base' is reserved"),
        # Parts of the parameter names: saving one role, peft drops every key with
        # another role's name as a part (a layer's, every MLP's weights).
        (("0", "1"), "'0' is also a part of the model's parameter names"),
        (("bob", "mlp"), "'mlp' is also a part"),
        (("weight",), "'weight' is also a part"),
        (("lora_A",), "'lora_A' is also a part"),
    ],
)
def test_bad_role_names_are_one_line_errors(roles, match):
    with pytest.raises(ValueError, match=match):
        attach_roles(_base(), roles, LoraSettings())


def test_the_base_folder_name_is_reserved_for_the_base():
    assert BASE in RESERVED_ROLES


def test_attaching_twice_and_loading_a_missing_role_are_errors(tmp_path):
    views = _views()
    with pytest.raises(ValueError, match="already carries adapters"):
        attach_roles(views["first"], ("third",), LoraSettings())
    save_roles(views, tmp_path)
    with pytest.raises(FileNotFoundError, match="'third'"):
        load_roles(tmp_path, ("first", "third"))


def test_bad_lora_settings_are_rejected():
    with pytest.raises(ValueError, match="rank"):
        LoraSettings(rank=0)


def test_a_told_move_is_scored_by_the_views_own_adapter():
    # Exploring starts tell a role its first move (``act_forced``); its log-prob must
    # be the role's, whichever adapter was active before.
    views = _views()
    _perturb(views["second"])
    env = make_env("kuhn_poker")
    env.reset(0)
    probe = env.observe(env.players_to_act()[0])
    for view in (views["second"], base_view(views["first"])):
        views["first"].act([probe])  # the first role's adapter active
        told = view.act_forced([probe], [1])[0]
        want = math.log(view.action_probs([probe])[0][probe.legal_actions[1]])
        assert told.logprobs[0] == pytest.approx(want, abs=1e-5)
