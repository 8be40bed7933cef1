"""Learner update: micro-batching leaves the step unchanged; advantages reach the right
turns; the terms, replayed targets and conversations in the steps."""

import copy
from dataclasses import replace

import numpy as np
import pytest
import torch

from coplay.algos.losses.compose import LossConfig
from coplay.algos.losses.regularizers import EntropyConfig, KLConfig
from coplay.algos.losses.signalling import ListeningConfig, SignallingConfig
from coplay.envs.registry import make_env
from coplay.models.tiny import TinyModelConfig, build_tiny_model
from coplay.models.tokenizer import train_tokenizer
from coplay.policies.lm import LMPolicy
from coplay.rollout.engine import play_episodes
from coplay.train import vocab_grads
from coplay.train.config import OptimConfig
from coplay.train.learner import Sample, make_learner
from coplay.train.learner_update import collect_samples, update
from coplay.train.parts.listening import listening_marginals
from coplay.train.parts.policy_iteration import TargetConfig
from coplay.train.parts.signalling import choice_marginals
from tests.train.learners import kuhn_policy, kuhn_samples, last_grad, targeted


def test_the_gradient_is_clipped_to_max_grad_norm_and_a_spike_is_counted():
    # The step's gradient is left on the parameters: its norm is the clipped one, while
    # loss/grad_norm reports the norm before clipping (nothing tested either before).
    policy = kuhn_policy()
    samples = kuhn_samples(policy)
    clip = 1e-4
    learner = make_learner(policy, LossConfig(), OptimConfig(minibatch_size=8, max_grad_norm=clip))
    m = update(learner, samples, np.random.default_rng(0))
    left = torch.cat([p.grad.flatten() for p in policy.model.parameters() if p.grad is not None])
    assert m["loss/grad_norm"] > 10 * clip  # far above the threshold: a spike
    assert float(left.norm()) == pytest.approx(clip, rel=1e-3)
    assert m["loss/grad_spikes"] == m["loss/steps"] == 1.0
    loose = make_learner(
        kuhn_policy(), LossConfig(), OptimConfig(minibatch_size=8, max_grad_norm=1e6)
    )
    assert (
        update(loose, kuhn_samples(loose.policy), np.random.default_rng(0))["loss/grad_spikes"] == 0
    )


@pytest.mark.parametrize("mode", ["choice", "text"])
# constant_norm was accepted by the config and failed at the first update.
@pytest.mark.parametrize("aggregation", ["token_mean", "sequence_mean", "constant_norm"])
@pytest.mark.parametrize("signalling", [0.0, 0.5])
def test_micro_batch_1x8_equals_8x1(mode, aggregation, signalling):
    base = kuhn_policy(mode)
    samples = kuhn_samples(base)
    params = []
    for micro in (8, 1):
        policy = copy.deepcopy(base)
        optim = OptimConfig(lr=1e-2, minibatch_size=8, micro_batch_size=micro)
        loss = LossConfig(
            entropy=EntropyConfig(coef=0.01),
            kl=KLConfig(coef=0.1),
            aggregation=aggregation,
            signalling=SignallingConfig(coef=signalling, beta=0.3) if signalling else None,
        )
        learner = make_learner(policy, loss, optim)
        update(learner, samples, np.random.default_rng(0))
        # Adam's first step is sign(grad) * lr, which would amplify float noise in
        # near-zero entries; the accumulated gradient is the exact quantity to compare.
        params.append(torch.cat([p.grad.flatten() for p in policy.model.parameters()]))
    assert params[0].abs().max() > 0
    assert torch.allclose(params[0], params[1], atol=1e-7, rtol=1e-4)


def test_signalling_bonus_alone_makes_choices_depend_on_the_observation():
    policy = kuhn_policy()
    samples = [Sample(s.decision, 0.0) for s in kuhn_samples(policy)]
    learner = make_learner(
        policy,
        LossConfig(signalling=SignallingConfig(coef=1.0)),
        OptimConfig(lr=1e-3, minibatch_size=8),
    )
    # A fresh tiny model answers every information state alike (MI about 1e-6 nats).
    before = choice_marginals(learner, samples)[1]
    after = []
    for _ in range(10):
        metrics = update(learner, samples, np.random.default_rng(0))
        after.append(choice_marginals(learner, samples)[1])
    assert metrics["loss/signalling_mi"] > 0 and "loss/signalling" in metrics
    # At lr 1e-3 the information oscillates from step to step (1e-3 to 0.1 here), so
    # the claim is about the best of the ten, not the last.
    assert max(after) > 0.05 > 1000 * before


def _updated(base, samples, losses, **kw):
    """One learner per loss config, each on a copy of ``base`` after one update."""
    learners = []
    for loss in losses:
        optim = OptimConfig(lr=1e-3, minibatch_size=8)
        learner = make_learner(copy.deepcopy(base), loss, optim, **kw)
        update(learner, samples, np.random.default_rng(0))
        learners.append(learner)
    return learners


def test_signalling_bonus_covers_only_the_listed_seats():
    base = kuhn_policy()
    samples = [Sample(s.decision, s.advantage, player=1) for s in kuhn_samples(base)]
    losses = (
        LossConfig(),
        LossConfig(signalling=SignallingConfig(coef=1.0, seats=[0])),
        LossConfig(signalling=SignallingConfig(coef=1.0, seats=[1])),
    )
    grads = [last_grad(learner) for learner in _updated(base, samples, losses)]
    assert torch.equal(grads[0], grads[1])  # seat 1's decisions are not covered
    assert not torch.allclose(grads[0], grads[2])


def _receiver_samples(n=8):
    """A fresh policy that plays both seats of the signalling game, and its receiver's
    decisions (whose observations list the 16 messages it could have received)."""
    make = lambda: make_env("signalling", candidates=2)  # noqa: E731
    texts = [make().observe(0).text, "Candidates: red circle, blue star. The sender says: "]
    tok = train_tokenizer(texts * 10 + ["[Say A] [Say B] [Pick red circle]"] * 10, vocab_size=300)
    model = build_tiny_model(TinyModelConfig(vocab_size=300), vocab_size=len(tok), seed=0)
    policy = LMPolicy(model, tok, mode="choice", seed=0)
    eps = play_episodes(make, [[policy, policy]] * n, list(range(n)))
    decs = [t.decision for e in eps for t in e.trajectories[1].turns]
    rng = np.random.default_rng(0)
    return policy, [Sample(d, float(a), 1) for d, a in zip(decs, rng.normal(size=n), strict=True)]


def _listening(learner, samples):
    """Mean L1 distance from each decision's choice distribution to its counterfactual mean."""
    marginals = listening_marginals(learner, samples)
    with torch.no_grad():
        dists = learner.policy.scorer.score([s.decision for s in samples]).dists
    gaps = [(d.exp() - m.exp()).abs().sum() for d, m in zip(dists, marginals, strict=True)]
    return float(torch.stack(gaps).mean())


def test_receiver_decisions_carry_one_prompt_per_possible_message():
    policy, samples = _receiver_samples()
    for s in samples:
        assert len(s.decision.counterfactual_prompt_ids) == 16
        assert s.decision.prompt_ids in s.decision.counterfactual_prompt_ids


@pytest.mark.parametrize("micro", [1, 3])
def test_listening_bonus_micro_batches_equal_one_batch(micro):
    base, samples = _receiver_samples()
    grads = []
    for size in (8, micro):
        policy = copy.deepcopy(base)
        optim = OptimConfig(lr=1e-2, minibatch_size=8, micro_batch_size=size)
        learner = make_learner(policy, LossConfig(listening=ListeningConfig(coef=0.7)), optim)
        metrics = update(learner, samples, np.random.default_rng(0))
        grads.append(torch.cat([p.grad.flatten() for p in policy.model.parameters()]))
        assert "loss/listening" in metrics
    assert torch.allclose(grads[0], grads[1], atol=1e-7, rtol=1e-4)


def test_listening_bonus_changes_the_receivers_update():
    base, samples = _receiver_samples()
    plain, listening = _updated(
        base, samples, (LossConfig(), LossConfig(listening=ListeningConfig(coef=1.0)))
    )
    assert not torch.allclose(last_grad(plain), last_grad(listening))
    assert _listening(listening, samples) > 0


def test_listening_bonus_leaves_decisions_without_counterfactuals_alone():
    base = kuhn_policy()
    samples = kuhn_samples(base)  # Kuhn: no messages, no counterfactuals
    plain, listening = _updated(
        base, samples, (LossConfig(), LossConfig(listening=ListeningConfig(coef=1.0)))
    )
    assert torch.equal(last_grad(plain), last_grad(listening))


def test_policy_iteration_target_is_the_cross_entropy_to_the_policy():
    base = kuhn_policy()
    samples = targeted(base)
    with torch.no_grad():
        dists = base.scorer.score([s.decision for s in samples[:2]]).dists
    expected = -float(sum(lp[-1] for lp in dists)) / 2
    optim = OptimConfig(lr=1e-2, minibatch_size=8, epochs=1)
    learner = make_learner(base, LossConfig(), optim, target=TargetConfig(coef=1.0))
    metrics = update(learner, samples, np.random.default_rng(0))
    assert metrics["loss/policy_iteration"] == pytest.approx(expected, rel=1e-5)
    with torch.no_grad():
        after = base.scorer.score([s.decision for s in samples[:2]]).dists
    assert all(a[-1] > b[-1] for a, b in zip(after, dists, strict=True))  # toward the target


@pytest.mark.parametrize("micro", [1, 3])
def test_policy_iteration_target_micro_batches_equal_one_batch(micro):
    base = kuhn_policy()
    samples = targeted(base)
    grads = []
    for size in (8, micro):
        optim = OptimConfig(lr=1e-3, minibatch_size=8, micro_batch_size=size)
        learner = make_learner(
            copy.deepcopy(base), LossConfig(), optim, target=TargetConfig(coef=0.5)
        )
        update(learner, samples, np.random.default_rng(0))
        grads.append(last_grad(learner))
    assert grads[0].abs().max() > 0
    assert torch.allclose(grads[0], grads[1], atol=1e-8, rtol=1e-4)


def test_policy_iteration_target_is_off_at_zero_weight():
    base = kuhn_policy()
    (learner,) = _updated(base, targeted(base), [LossConfig()])
    # zero advantages, no target term: nothing to learn from
    assert last_grad(learner).abs().max() == 0


def test_positive_advantage_raises_probability_of_the_action():
    policy = kuhn_policy()
    samples = kuhn_samples(policy)
    target = samples[0]
    before = policy.scorer.score([target.decision]).logp.item()
    learner = make_learner(policy, LossConfig(), OptimConfig(lr=1e-2))
    update(learner, [Sample(target.decision, 1.0)], np.random.default_rng(0))
    assert policy.scorer.score([target.decision]).logp.item() > before
    assert policy.version == 1


def test_collect_samples_pairs_each_turn_with_its_advantage():
    policy = kuhn_policy()
    eps = play_episodes(lambda: make_env("kuhn_poker"), [[policy, policy]] * 3, [0, 1, 2])
    advs = tuple(
        tuple(
            tuple(float(100 * e + 10 * s + t) for t in range(len(tr.turns)))
            for s, tr in enumerate(ep.trajectories)
        )
        for e, ep in enumerate(eps)
    )
    samples = collect_samples(eps, advs, policy.policy_id)
    expected = [
        (tr.turns[t].decision, 100 * e + 10 * s + t)
        for e, ep in enumerate(eps)
        for s, tr in enumerate(ep.trajectories)
        for t in range(len(tr.turns))
    ]
    assert [(s.decision, s.advantage) for s in samples] == expected
    assert collect_samples(eps, advs, "someone-else") == []
    # A target goes to the first turn of its (episode, seat) only.
    target = (0.5, 0.5)
    marked = collect_samples(eps, advs, policy.policy_id, targets={(1, 0): target})
    hit = [s for s in marked if s.target is not None]
    assert [s.decision for s in hit] == [eps[1].trajectories[0].turns[0].decision]
    assert hit[0].target == target


def test_an_update_without_samples_leaves_the_weights_schedule_and_magnet():
    # The schedule and the magnet count updates (as the terms' schedules do, by
    # policy.version): an iteration with nothing to train on is none.
    policy = kuhn_policy()
    optim = OptimConfig(lr=1e-2, lr_schedule="linear", final_lr_frac=0.1)
    loss = LossConfig(kl=KLConfig(coef=0.1))
    learner = make_learner(policy, loss, optim, iterations=3, reference_ema=0.5)
    rng = np.random.default_rng(0)
    update(learner, kuhn_samples(policy), rng)  # the magnet now trails the learner
    magnet = _weights(learner.reference.model)
    weights, lr = _weights(policy.model), learner.optimizer.param_groups[0]["lr"]
    assert update(learner, [], rng) == {"loss/steps": 0.0}
    assert learner.scheduler.last_epoch == 1 and policy.version == 1
    assert learner.optimizer.param_groups[0]["lr"] == lr == pytest.approx(5.5e-3)
    assert all(map(torch.equal, magnet, _weights(learner.reference.model)))
    assert all(map(torch.equal, weights, _weights(policy.model)))
    assert not all(map(torch.equal, magnet, weights))


def _weights(model):
    return [p.detach().clone() for p in model.parameters()]


def _replaying(base, samples, micro=16, coef=0.5):
    """A learner after one single-step update on ``samples`` (replays included)."""
    optim = OptimConfig(lr=1e-3, epochs=1, minibatch_size=16, micro_batch_size=micro)
    optim = optim.model_copy(update={"max_grad_norm": 1e6})  # compare raw gradients
    learner = make_learner(copy.deepcopy(base), LossConfig(), optim, target=TargetConfig(coef=coef))
    update(learner, samples, np.random.default_rng(0))
    return learner


def _replay_of(sample):
    width = len(sample.decision.choice_ids)
    target = (0.0,) * (width - 1) + (1.0,)
    # A large advantage and stale log-probs: the policy loss must not see either.
    stale = replace(sample.decision, logprobs=(-30.0,))
    return Sample(stale, 1e3, sample.player, target, replay=True)


def test_a_replayed_target_adds_its_cross_entropy_and_nothing_else():
    base = kuhn_policy()
    samples = kuhn_samples(base)
    replay = _replay_of(samples[0])
    plain = last_grad(_replaying(base, samples))
    both = last_grad(_replaying(base, [*samples, replay]))
    # Expected: 0.5 * cross-entropy to the target, over the minibatch's own 8 samples.
    ref = copy.deepcopy(base)
    ref.model.train()
    lp = ref.scorer.score([replay.decision]).dists[0]
    (0.5 * -(torch.tensor(replay.target) * lp).sum() / 8).backward()
    expected = torch.cat([p.grad.flatten() for p in ref.model.parameters()])
    assert expected.abs().max() > 0
    assert torch.allclose(both - plain, expected, atol=1e-6, rtol=1e-3)


@pytest.mark.parametrize("micro", [1, 3])
def test_replayed_targets_micro_batches_equal_one_batch(micro):
    base = kuhn_policy()
    samples = kuhn_samples(base)
    mixed = [*samples, _replay_of(samples[1]), _replay_of(samples[2])]
    whole, split = _replaying(base, mixed), _replaying(base, mixed, micro=micro)
    # A batch scores a repeated decision once and adds its copies' gradients there:
    # float32 rounding of other sums, about 1e-7 on entries up to 0.4.
    assert torch.allclose(last_grad(whole), last_grad(split), atol=1e-6, rtol=1e-4)


def test_a_minibatch_of_replays_alone_trains_toward_their_targets():
    base = kuhn_policy()
    replays = [_replay_of(s) for s in kuhn_samples(base)[:3]]
    with torch.no_grad():
        before = base.scorer.score([r.decision for r in replays]).dists
    learner = _replaying(base, replays, coef=1.0)
    with torch.no_grad():
        after = learner.policy.scorer.score([r.decision for r in replays]).dists
    assert all(a[-1] > b[-1] for a, b in zip(after, before, strict=True))


def test_chat_conversations_stay_together_in_turn_order_when_shuffled():
    from coplay.train.learner_update import shuffled
    from coplay.types import Decision

    def d(prompt, response):
        return Decision("", None, "x", prompt_ids=prompt, response_ids=response)

    convo = [d((1,), (2,)), d((1, 2, 3), (4,)), d((1, 2, 3, 4, 5), (6,))]
    other = [d((9,), (8,)), d((9, 8, 7), (6,))]
    samples = [Sample(x, 0.0) for x in (convo[2], other[1], convo[0], other[0], convo[1])]
    for seed in range(5):
        order = list(shuffled(samples, np.random.default_rng(seed), by_conversation=True))
        assert sorted(order) == list(range(5))
        assert order in ([2, 4, 0, 3, 1], [3, 1, 2, 4, 0])
    plain = shuffled(samples, np.random.default_rng(0), by_conversation=False)
    assert list(plain) == list(np.random.default_rng(0).permutation(5))


@pytest.mark.parametrize("mode", ["choice", "text"])
@pytest.mark.parametrize("tokens", [1, 60])
def test_token_budget_micro_batches_equal_one_batch(mode, tokens):
    # A budget of 1 token puts every decision alone; 60 cuts the minibatch unevenly.
    base = kuhn_policy(mode)
    samples = kuhn_samples(base)
    grads = []
    for budget in (10**9, tokens):
        policy = copy.deepcopy(base)
        optim = OptimConfig(lr=1e-2, minibatch_size=8, micro_batch_tokens=budget)
        loss = LossConfig(entropy=EntropyConfig(coef=0.01), kl=KLConfig(coef=0.1))
        learner = make_learner(policy, loss, optim)
        metrics = update(learner, samples, np.random.default_rng(0))
        grads.append(torch.cat([p.grad.flatten() for p in policy.model.parameters()]))
        assert metrics["loss/kl"] >= 0
    assert grads[0].abs().max() > 0
    assert torch.allclose(grads[0], grads[1], atol=1e-7, rtol=1e-4)


@pytest.mark.parametrize(
    ("mode", "checkpointing"), [("choice", False), ("text", False), ("choice", True)]
)
def test_vocabulary_gradients_in_place_leave_the_update_unchanged(mode, checkpointing, monkeypatch):
    base = kuhn_policy(mode)
    samples = kuhn_samples(base)
    grads, added = [], []
    add = vocab_grads._add_to_grad
    monkeypatch.setattr(vocab_grads, "_add_to_grad", lambda *a: added.append(1) or add(*a))
    for in_place in (False, True):
        policy = copy.deepcopy(base)
        optim = OptimConfig(
            lr=1e-2,
            minibatch_size=8,
            micro_batch_tokens=60,
            activation_checkpointing=checkpointing,
            vocab_grads_in_place=in_place,
        )
        learner = make_learner(policy, LossConfig(kl=KLConfig(coef=0.1)), optim)
        assert learner.vocab_grads_in_place is in_place
        update(learner, samples, np.random.default_rng(0))
        grads.append(last_grad(learner))
        assert all("forward" not in vars(m) for m in policy.model.modules())
        # Added in place by both tied modules' backward, every micro-batch; never when off.
        assert (len(added) > 2) is in_place
        added.clear()
    assert grads[0].abs().max() > 0
    assert torch.allclose(grads[0], grads[1], atol=1e-7, rtol=1e-4)


@pytest.mark.parametrize("kl", [None, KLConfig(coef=0.1)])
def test_a_minibatch_in_several_passes_scores_each_state_in_one(kl, monkeypatch):
    from coplay.policies import scorer as scorer_module
    from coplay.train.micro import cost

    policy = kuhn_policy()
    eps = play_episodes(lambda: make_env("kuhn_poker"), [[policy, policy]] * 24, list(range(24)))
    decisions = [t.decision for e in eps for t in e.turns]
    samples = [Sample(d, float(i % 3 - 1)) for i, d in enumerate(decisions)]
    states = {(d.prompt_ids, d.choice_ids) for d in decisions}
    assert len(states) < len(decisions) / 3  # Kuhn: a dozen states, many copies
    scored = []
    real = scorer_module.distinct_choice_table
    monkeypatch.setattr(
        scorer_module,
        "distinct_choice_table",
        lambda model, items, **kw: scored.append(set(items)) or real(model, items, **kw),
    )
    # Room for about three states a pass.
    budget = 3 * max(sum(cost(d)) for d in decisions)
    optim = OptimConfig(lr=1e-2, epochs=1, minibatch_size=len(samples), micro_batch_tokens=budget)
    update(make_learner(policy, LossConfig(kl=kl), optim), samples, np.random.default_rng(0))
    assert len(scored) > 2
    # No state scored in two passes: the policy's, and the reference's where a KL has one.
    assert sum(map(len, scored)) == len(states) * (2 if kl else 1)
