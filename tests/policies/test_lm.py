"""LM policy: mixed batches of choices and messages, sampling views, copies given
new weights, prompts past learned positions, queued passes."""

import math

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from coplay.envs.registry import make_env
from coplay.policies.lm import LMPolicy
from coplay.rollout.engine import play_episodes
from coplay.rollout.streams import SeatStream
from coplay.types import Observation


def kuhn_observations(n=12):
    env = make_env("kuhn_poker")
    out = []
    for seed in range(n):
        env.reset(seed)
        out.append(env.observe(env.players_to_act()[0]))
    return out


def message_turns(n=4):
    return [
        Observation(game="talk", player=i % 2, text=f"Round {i}. Send a message.") for i in range(n)
    ]


def _mixed(n=12):
    """Kuhn choices and message turns interleaved: C M C C M C ..."""
    choices, messages = iter(kuhn_observations(n)), iter(message_turns(n))
    return [next(messages) if i % 3 == 1 else next(choices) for i in range(n)]


def test_mixed_batches_keep_observation_order_and_kinds(tiny):
    model, tok = tiny
    policy = LMPolicy(model, tok, max_new_tokens=5, seed=6)
    obs = _mixed()
    decisions = policy.act(obs)
    assert len(decisions) == len(obs)
    for o, d in zip(obs, decisions, strict=True):
        if o.legal_actions is None:
            assert d.choice_ids == () and d.action == d.text
        else:
            assert d.action in o.legal_actions and len(d.logprobs) == 1
            assert d.prompt_ids[: len(policy.prompt_ids(o))] == policy.prompt_ids(o)


def test_mixed_logprobs_recomputed_by_learner_match(tiny):
    model, tok = tiny
    policy = LMPolicy(model, tok, max_new_tokens=7, seed=7)
    decisions = policy.act(_mixed())
    scored = policy.scorer.score(decisions)
    widest = max(len(d.logprobs) for d in decisions)
    assert widest > 1 and scored.logp.shape == (len(decisions), widest)
    for i, d in enumerate(decisions):
        n = len(d.logprobs)
        assert scored.mask[i].sum() == n and scored.mask[i, :n].all()
        assert torch.allclose(scored.logp[i, :n], torch.tensor(d.logprobs), atol=1e-5)
        assert not scored.logp[i, n:].any() and not scored.entropy[i, n:].any()


def test_mixed_scores_equal_scores_of_each_kind_alone(tiny):
    model, tok = tiny
    policy = LMPolicy(model, tok, max_new_tokens=7, seed=8)
    decisions = policy.act(_mixed())
    together = policy.scorer.score(decisions)
    for i, d in enumerate(decisions):
        alone = policy.scorer.score([d])
        n = len(d.logprobs)
        assert torch.allclose(together.logp[i, :n], alone.logp[0, :n], atol=1e-5)
        assert torch.allclose(together.entropy[i, :n], alone.entropy[0, :n], atol=1e-5)


def test_mixed_score_carries_gradients_to_every_row(tiny):
    model, tok = tiny
    policy = LMPolicy(model, tok, max_new_tokens=4, seed=9)
    decisions = policy.act(_mixed(6))
    scored = policy.scorer.score(decisions)
    for i in range(len(decisions)):
        model.zero_grad()
        (scored.logp[i] * scored.mask[i]).sum().backward(retain_graph=True)
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    model.zero_grad()


def test_score_refuses_an_empty_batch(tiny):
    model, tok = tiny
    with pytest.raises(ValueError, match="at least one decision"):
        LMPolicy(model, tok).scorer.score([])


def test_talk_game_episodes_mix_messages_and_choices_exactly(tiny):
    model, tok = tiny
    policy = LMPolicy(model, tok, max_new_tokens=4, seed=11)
    make = lambda: make_env("dilemma", rounds=2)  # noqa: E731
    eps = play_episodes(make, [[policy, policy]] * 3, list(range(3)))
    turns = [t for e in eps for t in e.turns]
    assert all(e.num_steps == 4 and e.forfeited_by is None for e in eps)
    messages = [t for t in turns if t.observation.legal_actions is None]
    assert len(messages) == len(turns) // 2 and all(not t.decision.choice_ids for t in messages)
    decisions = [t.decision for t in turns]
    scored = policy.scorer.score(decisions)
    for i, d in enumerate(decisions):
        n = len(d.logprobs)
        assert torch.allclose(scored.logp[i, :n], torch.tensor(d.logprobs), atol=1e-5)


def test_a_sampling_view_without_exploration_draws_what_the_policy_draws(tiny):
    model, tok = tiny
    obs = _mixed()
    alone = LMPolicy(model, tok, max_new_tokens=5, seed=12)
    first, second = alone.act(obs), alone.act(obs)
    assert first != second
    policy = LMPolicy(model, tok, max_new_tokens=5, seed=12)
    view = policy.sampling(explore=0.0)
    assert view is not policy and view.generator is policy.generator
    assert view.act(obs) == first
    assert all(d.behavior_logprobs is None for d in first)
    # The next draws continue the shared generator, on either object.
    assert policy.act(obs) == second


def test_a_sampling_view_explores_and_records_the_mixture(tiny):
    model, tok = tiny
    policy = LMPolicy(model, tok, seed=3)
    obs = kuhn_observations(1)[0]
    probs = policy.action_probs([obs])[0]
    view = policy.sampling(explore=0.6)
    decisions = view.act([obs] * 2000)
    assert (view.explore, policy.explore) == (0.6, 0.0)
    for action, p in probs.items():
        mixed = 0.4 * p + 0.6 / len(probs)
        picks = [d for d in decisions if d.action == action]
        assert len(picks) / len(decisions) == pytest.approx(mixed, abs=0.04)
        assert picks[0].behavior_logprobs[0] == pytest.approx(math.log(mixed), abs=1e-5)
        assert picks[0].logprobs[0] == pytest.approx(math.log(p), abs=1e-5)
    assert policy.act([obs])[0].behavior_logprobs is None
    policy.version = 4  # the learner's update is the view's too
    assert view.act([obs])[0].policy_version == 4


def test_a_sampling_view_refuses_a_bad_share(tiny):
    model, tok = tiny
    with pytest.raises(ValueError, match=r"in \[0, 1\)"):
        LMPolicy(model, tok).sampling(explore=1.0)
    with pytest.raises(ValueError, match="needs model.mode=choice"):
        LMPolicy(model, tok, mode="text").sampling(explore=0.1)
    assert LMPolicy(model, tok, mode="text").sampling().explore == 0.0


def test_new_weights_on_a_copy_leave_the_original_alone(tiny):
    # A KL reference is ``copy.copy(policy)`` given a frozen copy of the weights: the
    # two shared a backend until then, and must not after.
    import copy

    model, tok = tiny
    policy = LMPolicy(model, tok, temperature=0.8, max_new_tokens=3)
    policy.version = 2
    ref = copy.copy(policy)
    ref.model = copy.deepcopy(model)
    assert policy.model is model and ref.model is not model
    assert (ref.temperature, ref.max_new_tokens, ref.version) == (0.8, 3, 2)
    policy.version = 3
    assert ref.version == 2


def _gpt2(tok, positions):
    config = GPT2Config(
        vocab_size=len(tok),
        n_embd=16,
        n_layer=1,
        n_head=2,
        n_positions=positions,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    return GPT2LMHeadModel(config).eval()


@pytest.mark.parametrize("mode", ["choice", "text"])
def test_a_prompt_past_learned_positions_is_one_error_line(tiny, mode):
    # GPT-2's positions are a table of n_positions rows: a longer prompt (and answer)
    # was an IndexError from deep in torch.
    _, tok = tiny
    policy = LMPolicy(_gpt2(tok, 20), tok, mode=mode, max_new_tokens=4)
    obs = kuhn_observations(1)[0]
    answer = 4 if mode == "text" else max(len(policy.action_ids(a)) for a in obs.legal_actions)
    length = len(policy.prompt_ids(obs)) + answer
    with pytest.raises(ValueError) as err:
        policy.act([obs])
    message = str(err.value)
    assert message.startswith(f"the prompt of player {obs.player} in 'kuhn_poker' with its ")
    assert f"takes {length} tokens, but the model has 20 positions" in message
    policy.model = _gpt2(tok, length)
    assert policy.act([obs])[0].policy_id == "learner"  # exactly as long fits


@pytest.mark.parametrize("explore", [0.0, 0.4])
def test_submit_reads_what_act_returns(tiny, explore):
    # The pass queued, then read: the same decisions, and the same generator after.
    model, tok = tiny
    obs, mixed = kuhn_observations(), _mixed()
    policy = LMPolicy(model, tok, max_new_tokens=5, seed=7).sampling(explore)
    acted = [policy.act(obs), policy.act(mixed)]
    acted.append(policy.act_streamed(obs, [SeatStream(s, 0) for s in range(len(obs))]))
    again = LMPolicy(model, tok, max_new_tokens=5, seed=7).sampling(explore)
    plain = again.submit(obs)
    assert plain() == acted[0]
    text = again.submit(mixed)  # free text among the choices: written when read
    streamed = again.submit(obs, [SeatStream(s, 0) for s in range(len(obs))])
    assert [text(), streamed()] == acted[1:]
    assert again.submit([])() == []
    assert torch.equal(again.sampler_state(), policy.sampler_state())
    with pytest.raises(ValueError, match="got 12 observations but 1 streams"):
        again.submit(obs, [SeatStream(0, 0)])
