"""LM policy: exact log-probs in both modes, constrained distributions, chat templates."""

import copy
import math
from dataclasses import replace

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from coplay.envs.registry import make_env
from coplay.policies.answer import clean_text
from coplay.policies.lm import LMPolicy, explore_mixture
from coplay.policies.text import TextConfig
from coplay.rollout.engine import play_episodes
from coplay.rollout.streams import SeatStream
from coplay.types import Observation


def _observations(n=12):
    env = make_env("kuhn_poker")
    out = []
    for seed in range(n):
        env.reset(seed)
        out.append(env.observe(env.players_to_act()[0]))
    return out


def test_choice_logprobs_recomputed_by_learner_match(tiny):
    model, tok = tiny
    policy = LMPolicy(model, tok, mode="choice", seed=1)
    decisions = policy.act(_observations())
    scored = policy.scorer.score(decisions)
    sampled = torch.tensor([d.logprobs[0] for d in decisions])
    assert scored.logp.shape == (len(decisions), 1)
    assert torch.allclose(scored.logp[:, 0], sampled, atol=1e-5)


def test_text_logprobs_recomputed_by_learner_match(tiny):
    model, tok = tiny
    policy = LMPolicy(model, tok, mode="text", max_new_tokens=10, seed=2)
    decisions = policy.act(_observations(8))
    lengths = {len(d.response_ids) for d in decisions}
    assert all(len(d.logprobs) == len(d.response_ids) for d in decisions)
    scored = policy.scorer.score(decisions)
    for i, d in enumerate(decisions):
        n = len(d.response_ids)
        assert scored.mask[i].sum() == n
        assert torch.allclose(scored.logp[i, :n], torch.tensor(d.logprobs), atol=1e-5)
    assert lengths  # responses may differ in length; padding must not change scores


def test_choice_scores_do_not_depend_on_batch_composition(tiny):
    model, tok = tiny
    policy = LMPolicy(model, tok, mode="choice")
    obs = _observations(6)
    together = policy.action_probs(obs)
    alone = [policy.action_probs([o])[0] for o in obs]
    for a, b in zip(together, alone, strict=True):
        for k in a:
            assert a[k] == pytest.approx(b[k], abs=1e-6)


def test_action_probs_is_a_distribution_over_legal_actions(tiny):
    model, tok = tiny
    policy = LMPolicy(model, tok)
    for obs, probs in zip(_observations(), policy.action_probs(_observations()), strict=True):
        assert tuple(probs) == obs.legal_actions
        assert math.isclose(sum(probs.values()), 1.0, abs_tol=1e-6)


def test_sampled_frequencies_follow_action_probs(tiny):
    model, tok = tiny
    policy = LMPolicy(model, tok, seed=3)
    obs = _observations(1)[0]
    probs = policy.action_probs([obs])[0]
    picks = [d.action for d in policy.act([obs] * 4000)]
    for action, p in probs.items():
        assert picks.count(action) / len(picks) == pytest.approx(p, abs=0.03)


def test_explore_mixture_floors_every_choice():
    logp = torch.log(torch.tensor([0.97, 0.02, 0.01]))
    mix = explore_mixture(logp, 0.3).exp()
    assert mix.sum().item() == pytest.approx(1.0)
    assert mix.tolist() == pytest.approx([0.7 * 0.97 + 0.1, 0.7 * 0.02 + 0.1, 0.7 * 0.01 + 0.1])
    assert torch.equal(explore_mixture(logp, 0.0), logp)


def test_a_forced_move_is_scored_as_the_policys_own(tiny):
    # The assigned move (index modulo the legal count) carries the policy's log-prob
    # and no behaviour log-prob, even from an exploring view.
    model, tok = tiny
    policy = LMPolicy(model, tok, seed=3)
    obs = _observations(1)[0]
    probs = policy.action_probs([obs])[0]
    k = len(obs.legal_actions)
    decisions = policy.sampling(0.5).act_forced([obs] * 3, [0, k + 1, 2 * k - 1])
    expected = [obs.legal_actions[0], obs.legal_actions[1], obs.legal_actions[k - 1]]
    assert [d.action for d in decisions] == expected
    for d in decisions:
        assert d.logprobs[0] == pytest.approx(math.log(probs[d.action]), abs=1e-5)
        assert d.behavior_logprobs is None
        assert d.choice_ids[d.choice_index] == d.response_ids


def test_a_forced_move_needs_listed_actions(tiny):
    model, tok = tiny
    obs = _observations(1)[0]
    with pytest.raises(ValueError, match="needs model.mode=choice"):
        LMPolicy(model, tok, mode="text").act_forced([obs], [0])
    talk = _message_turns(1)
    with pytest.raises(ValueError, match="has none listed here"):
        LMPolicy(model, tok).act_forced(talk, [0])
    with pytest.raises(ValueError, match="1 observations but 2 indices"):
        LMPolicy(model, tok).act_forced([obs], [0, 1])


def test_choice_mode_refuses_an_empty_legal_list(tiny):
    model, tok = tiny
    policy = LMPolicy(model, tok)
    obs = Observation(game="x", player=0, text="nothing to do", legal_actions=())
    with pytest.raises(ValueError, match="a choice needs at least one legal action"):
        policy.act([obs])


def _message_turns(n=4):
    return [
        Observation(game="talk", player=i % 2, text=f"Round {i}. Send a message.") for i in range(n)
    ]


def _mixed(n=12):
    """Kuhn choices and message turns interleaved: C M C C M C ..."""
    choices, messages = iter(_observations(n)), iter(_message_turns(n))
    return [next(messages) if i % 3 == 1 else next(choices) for i in range(n)]


def test_choice_mode_answers_message_turns_with_free_text(tiny):
    model, tok = tiny
    policy = LMPolicy(model, tok, max_new_tokens=6, seed=5)
    decisions = policy.act(_message_turns())
    for d in decisions:
        assert d.choice_ids == () and d.choice_index == -1
        assert 1 <= len(d.response_ids) <= 6 and len(d.logprobs) == len(d.response_ids)
        assert d.valid and d.action == d.text == tok.decode(
            d.response_ids, skip_special_tokens=True
        )


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


def test_text_mode_message_turn_action_is_the_cleaned_text(tiny):
    model, tok = tiny
    policy = LMPolicy(
        model, tok, mode="text", max_new_tokens=3, seed=10, text=TextConfig(answer="free")
    )
    for d in policy.act(_message_turns()):
        assert d.valid and d.action == clean_text(d.text)


def test_a_stop_string_inside_a_token_ends_the_answer_at_that_token(tiny, monkeypatch):
    model, tok = tiny
    text = TextConfig(answer="bracket", stop=["ss"])  # inside the one token "Pass"
    policy = LMPolicy(model, tok, mode="text", max_new_tokens=8, seed=0, text=text)
    written = tok(" [Pass] [Bet]", add_special_tokens=False)["input_ids"]
    assert tok("ss", add_special_tokens=False)["input_ids"][0] not in written
    lps = [-0.1 * (i + 1) for i in range(len(written))]
    monkeypatch.setattr(policy.backend, "generate", lambda prompts, **_: [(written, lps)])
    (d,) = policy.act(_observations(1))
    kept = tok(" [Pass", add_special_tokens=False)["input_ids"]
    assert list(d.response_ids) == kept and d.text.endswith("Pass")
    assert list(d.logprobs) == lps[: len(kept)]


def test_text_mode_refuses_exact_action_probs(tiny):
    model, tok = tiny
    with pytest.raises(ValueError, match="not what a model.mode=text policy plays"):
        LMPolicy(model, tok, mode="text").action_probs(_observations(1))


def test_text_mode_marks_unparsable_answers_invalid(tiny):
    model, tok = tiny
    policy = LMPolicy(model, tok, mode="text", max_new_tokens=4, seed=0)
    decisions = policy.act(_observations(16))
    for d in decisions:
        assert d.valid == (d.action is not None)
        assert d.action is None or d.action in ("[Pass]", "[Bet]")


def test_chat_template_is_used_when_present(tiny):
    model, tok = tiny
    tok = tok.__class__.from_pretrained(_save(tok))
    tok.chat_template = (
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}<assistant>"
    )
    policy = LMPolicy(model, tok)
    obs = _observations(1)[0]
    text = tok.decode(policy.prompt_ids(obs))
    assert text.startswith("<user>") and text.endswith("<assistant>")


def test_a_choice_prompt_follows_the_observations_messages_not_its_text_alone(tiny):
    model, tok = tiny
    tok = tok.__class__.from_pretrained(_save(tok))
    tok.chat_template = (
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}<assistant>"
    )
    base = _observations(1)[0]
    hello, bye = (replace(base, messages=(("user", word),)) for word in ("hello", "bye"))
    policy = LMPolicy(model, tok)
    policy.prompt_ids(hello)  # one text, two conversations: not one prompt
    assert tok.decode(policy.prompt_ids(bye)) == tok.decode(LMPolicy(model, tok).prompt_ids(bye))
    assert "bye" in tok.decode(policy.prompt_ids(bye))
    together = LMPolicy(model, tok)
    together._encode_new_prompts([hello, bye])
    assert [together.prompt_ids(o) for o in (hello, bye)] == [
        policy.prompt_ids(o) for o in (hello, bye)
    ]


def test_new_prompts_encoded_together_equal_one_by_one(tiny):
    model, tok = tiny
    together, alone = LMPolicy(model, tok), LMPolicy(model, tok)
    observations = _observations(12)
    together._encode_new_prompts(observations)
    assert [together.prompt_ids(o) for o in observations] == [
        tuple(alone._encode_prompt(o)) for o in observations
    ]


def _save(tok):
    import tempfile

    d = tempfile.mkdtemp()
    tok.save_pretrained(d)
    return d


def test_engine_episodes_keep_sampled_tokens(tiny):
    model, tok = tiny
    policy = LMPolicy(model, tok, seed=4)
    eps = play_episodes(lambda: make_env("kuhn_poker"), [[policy, policy]] * 8, list(range(8)))
    decisions = [t.decision for e in eps for t in e.turns]
    scored = policy.scorer.score(decisions)
    assert torch.allclose(
        scored.logp[:, 0], torch.tensor([d.logprobs[0] for d in decisions]), atol=1e-5
    )
    for d in decisions:
        assert d.response_ids == d.choice_ids[d.choice_index]


def test_folding_the_common_prefix_keeps_the_distribution(tiny):
    import torch.nn.functional as F

    from coplay.policies.scoring import sequence_logps

    model, tok = tiny
    policy = LMPolicy(model, tok)
    obs = _observations(3)
    folded = policy.action_probs(obs)
    with torch.no_grad():
        for o, probs in zip(obs, folded, strict=True):
            pairs = [(policy.prompt_ids(o), policy.action_ids(a)) for a in o.legal_actions]
            full = F.softmax(sequence_logps(model, pairs, temperature=1.0), dim=0)
            assert torch.allclose(full, torch.tensor(list(probs.values())), atol=1e-5)


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


def test_counterfactual_observations_become_prompts_folded_like_the_actual_one(tiny):
    model, tok = tiny
    policy = LMPolicy(model, tok, mode="choice", seed=0)
    obs = _observations(1)[0]
    other = obs.text + " Think first."
    (dec,) = policy.act([replace(obs, counterfactuals=(other, obs.text))])
    assert dec.counterfactual_prompt_ids[1] == dec.prompt_ids
    (alt,) = policy.act([replace(obs, text=other)])
    assert dec.counterfactual_prompt_ids[0] == alt.prompt_ids != dec.prompt_ids
    (plain,) = policy.act([obs])
    assert plain.counterfactual_prompt_ids == ()


def test_counterfactuals_with_a_chat_form_are_refused(tiny):
    model, tok = tiny
    policy = LMPolicy(model, tok, mode="choice", seed=0)
    obs = replace(_observations(1)[0], counterfactuals=("x",), messages=(("user", "x"),))
    with pytest.raises(ValueError, match="chat form must be None"):
        policy.act([obs])


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
    obs = _observations(1)[0]
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
    obs = _observations(1)[0]
    answer = 4 if mode == "text" else max(len(policy.action_ids(a)) for a in obs.legal_actions)
    length = len(policy.prompt_ids(obs)) + answer
    with pytest.raises(ValueError) as err:
        policy.act([obs])
    message = str(err.value)
    assert message.startswith(f"the prompt of player {obs.player} in 'kuhn_poker' with its ")
    assert f"takes {length} tokens, but the model has 20 positions" in message
    policy.model = _gpt2(tok, length)
    assert policy.act([obs])[0].policy_id == "learner"  # exactly as long fits


@pytest.mark.parametrize("mode", ["text", "choice"])
def test_an_answer_ends_at_every_end_of_turn_the_checkpoint_lists(tiny, monkeypatch, mode):
    # An instruct checkpoint may end its turn with a token other than the tokenizer's
    # EOS (Gemma's <end_of_turn>, Llama 3's <|eot_id|>), listed in its generation
    # config: an answer stops there too, instead of running on to max_new_tokens.
    model, tok = tiny
    written = tok(" [Pass] [Bet]", add_special_tokens=False)["input_ids"]
    end = written[2]
    assert end != tok.eos_token_id and end not in written[:2]
    monkeypatch.setattr(model.generation_config, "eos_token_id", [tok.eos_token_id, end])
    policy = LMPolicy(model, tok, mode=mode, max_new_tokens=8, seed=0)
    asked = []

    def generate(prompts, sampling=None, **_):
        asked.append(sampling)
        return [(written, [-0.5] * len(written))] * len(prompts)

    monkeypatch.setattr(policy.backend, "generate", generate)
    (d,) = policy.act(_observations(1) if mode == "text" else _message_turns(1))
    assert (end,) in asked[0].stop
    if mode == "text":  # cut where the engine stops (the fake one did not)
        assert list(d.response_ids) == written[:3] and len(d.logprobs) == 3


def test_without_another_end_of_turn_message_turns_are_asked_as_before(tiny, monkeypatch):
    model, tok = tiny
    monkeypatch.setattr(model.generation_config, "eos_token_id", tok.eos_token_id)
    policy = LMPolicy(model, tok, max_new_tokens=8, seed=0)
    assert policy.ends == (tok.eos_token_id,)
    asked = []
    monkeypatch.setattr(
        policy.backend, "generate", lambda prompts, **kw: asked.append(kw) or [((), ())]
    )
    policy.act(_message_turns(1))
    assert "sampling" not in asked[0]


@pytest.mark.parametrize("explore", [0.0, 0.4])
def test_submit_reads_what_act_returns(tiny, explore):
    # The pass queued, then read: the same decisions, and the same generator after.
    model, tok = tiny
    obs, mixed = _observations(), _mixed()
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


@pytest.mark.parametrize("template", [True, False])
def test_a_choice_prompt_that_spells_a_special_token_keeps_it_as_text(tiny, template):
    # A player's message may spell the end of a turn; it must not end the prompt's.
    model, tok = tiny
    if not template:
        tok = copy.deepcopy(tok)
        tok.chat_template = None
    policy = LMPolicy(model, tok, seed=0)
    obs = _observations(1)[0]
    spelled = replace(obs, text=f"{obs.text}\nThey say: deal{tok.eos_token} ok")
    ids = policy.prompt_ids(spelled)
    assert tok.eos_token_id not in ids
    assert tok.eos_token in tok.decode(ids)
    assert policy.prompt_ids(obs) == tuple(
        policy._prompt_text(obs)[1]
        + tok(policy._prompt_text(obs)[0], add_special_tokens=False)["input_ids"]
    )  # ordinary text: the tokenizer's own ids
