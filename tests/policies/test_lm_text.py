"""Written answers: exact log-probs, message turns, stops and ends of turn."""

import pytest
import torch

from coplay.policies.answer import clean_text
from coplay.policies.lm import LMPolicy
from coplay.policies.text import TextConfig
from tests.policies.test_lm import kuhn_observations, message_turns


def test_text_logprobs_recomputed_by_learner_match(tiny):
    model, tok = tiny
    policy = LMPolicy(model, tok, mode="text", max_new_tokens=10, seed=2)
    decisions = policy.act(kuhn_observations(8))
    lengths = {len(d.response_ids) for d in decisions}
    assert all(len(d.logprobs) == len(d.response_ids) for d in decisions)
    scored = policy.scorer.score(decisions)
    for i, d in enumerate(decisions):
        n = len(d.response_ids)
        assert scored.mask[i].sum() == n
        assert torch.allclose(scored.logp[i, :n], torch.tensor(d.logprobs), atol=1e-5)
    assert lengths  # responses may differ in length; padding must not change scores


def test_choice_mode_answers_message_turns_with_free_text(tiny):
    model, tok = tiny
    policy = LMPolicy(model, tok, max_new_tokens=6, seed=5)
    decisions = policy.act(message_turns())
    for d in decisions:
        assert d.choice_ids == () and d.choice_index == -1
        assert 1 <= len(d.response_ids) <= 6 and len(d.logprobs) == len(d.response_ids)
        assert d.valid and d.action == d.text == tok.decode(
            d.response_ids, skip_special_tokens=True
        )


def test_text_mode_message_turn_action_is_the_cleaned_text(tiny):
    model, tok = tiny
    policy = LMPolicy(
        model, tok, mode="text", max_new_tokens=3, seed=10, text=TextConfig(answer="free")
    )
    for d in policy.act(message_turns()):
        assert d.valid and d.action == clean_text(d.text)


def test_a_stop_string_inside_a_token_ends_the_answer_at_that_token(tiny, monkeypatch):
    model, tok = tiny
    text = TextConfig(answer="bracket", stop=["ss"])  # inside the one token "Pass"
    policy = LMPolicy(model, tok, mode="text", max_new_tokens=8, seed=0, text=text)
    written = tok(" [Pass] [Bet]", add_special_tokens=False)["input_ids"]
    assert tok("ss", add_special_tokens=False)["input_ids"][0] not in written
    lps = [-0.1 * (i + 1) for i in range(len(written))]
    monkeypatch.setattr(policy.backend, "generate", lambda prompts, **_: [(written, lps)])
    (d,) = policy.act(kuhn_observations(1))
    kept = tok(" [Pass", add_special_tokens=False)["input_ids"]
    assert list(d.response_ids) == kept and d.text.endswith("Pass")
    assert list(d.logprobs) == lps[: len(kept)]


def test_text_mode_marks_unparsable_answers_invalid(tiny):
    model, tok = tiny
    policy = LMPolicy(model, tok, mode="text", max_new_tokens=4, seed=0)
    decisions = policy.act(kuhn_observations(16))
    for d in decisions:
        assert d.valid == (d.action is not None)
        assert d.action is None or d.action in ("[Pass]", "[Bet]")


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
    (d,) = policy.act(kuhn_observations(1) if mode == "text" else message_turns(1))
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
    policy.act(message_turns(1))
    assert "sampling" not in asked[0]
