"""Prompts: chat templates, new prompts encoded together as one by one, a special
token spelled in a game's text kept as text."""

import copy
from dataclasses import replace

import pytest

from coplay.policies.lm import LMPolicy
from tests.policies.test_lm import kuhn_observations


def test_chat_template_is_used_when_present(tiny):
    model, tok = tiny
    tok = tok.__class__.from_pretrained(_save(tok))
    tok.chat_template = (
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}<assistant>"
    )
    policy = LMPolicy(model, tok)
    obs = kuhn_observations(1)[0]
    text = tok.decode(policy.prompt_ids(obs))
    assert text.startswith("<user>") and text.endswith("<assistant>")


def test_a_choice_prompt_follows_the_observations_messages_not_its_text_alone(tiny):
    model, tok = tiny
    tok = tok.__class__.from_pretrained(_save(tok))
    tok.chat_template = (
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}<assistant>"
    )
    base = kuhn_observations(1)[0]
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
    observations = kuhn_observations(12)
    together._encode_new_prompts(observations)
    assert [together.prompt_ids(o) for o in observations] == [
        tuple(alone._encode_prompt(o)) for o in observations
    ]


def _save(tok):
    import tempfile

    d = tempfile.mkdtemp()
    tok.save_pretrained(d)
    return d


@pytest.mark.parametrize("template", [True, False])
def test_a_choice_prompt_that_spells_a_special_token_keeps_it_as_text(tiny, template):
    # A player's message may spell the end of a turn; it must not end the prompt's.
    model, tok = tiny
    if not template:
        tok = copy.deepcopy(tok)
        tok.chat_template = None
    policy = LMPolicy(model, tok, seed=0)
    obs = kuhn_observations(1)[0]
    spelled = replace(obs, text=f"{obs.text}\nThey say: deal{tok.eos_token} ok")
    ids = policy.prompt_ids(spelled)
    assert tok.eos_token_id not in ids
    assert tok.eos_token in tok.decode(ids)
    assert policy.prompt_ids(obs) == tuple(
        policy._prompt_text(obs)[1]
        + tok(policy._prompt_text(obs)[0], add_special_tokens=False)["input_ids"]
    )  # ordinary text: the tokenizer's own ids
