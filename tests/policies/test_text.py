"""Text settings: validation, sampling parameters, stop sequences."""

import pytest
from pydantic import ValidationError

from coplay.models.tokenizer import train_tokenizer
from coplay.policies.answer import ANSWER_FORMATS, THINK_CLOSE, THINK_OPEN, Parsed
from coplay.policies.text import TextConfig, answer_text, cut_at_stop, cut_at_stop_text


def test_defaults_are_the_think_format_in_turn_context():
    cfg = TextConfig()
    assert (cfg.answer, cfg.context, cfg.format.reasoning) == ("think", "turn", "required")


@pytest.mark.parametrize(
    "bad", [{"answer": "xml"}, {"top_p": 0.0}, {"top_k": -1}, {"format_penalty": 0.5}]
)
def test_bad_settings_are_refused(bad):
    with pytest.raises(ValidationError):
        TextConfig(**bad)


@pytest.mark.parametrize(
    "bad",
    [
        {"format_reward": float("nan")},
        {"format_reward": float("inf")},
        {"format_reward": float("-inf")},
        {"format_penalty": float("-inf")},
    ],
)
def test_a_format_reward_that_is_not_a_number_is_refused(bad):
    # Added to the returns after the engine checked the game's: every return of the
    # policy, and every advantage, became NaN or infinite.
    (name,) = bad
    with pytest.raises(ValidationError, match=f"{name}\n  Input should be a finite number"):
        TextConfig(**bad)


def test_an_empty_stop_string_is_refused_when_the_config_is_built():
    # It would end every answer at once: sampling refused it only after the model was built.
    with pytest.raises(ValidationError, match="empty stop string would end every answer"):
        TextConfig(stop=["\n", ""])


def test_dropping_reasoning_needs_the_chat_context():
    # In turn context no earlier answer is in the prompt: the setting would do nothing.
    with pytest.raises(
        ValidationError, match="drop_reasoning=true .* needs model.text.context=chat"
    ):
        TextConfig(drop_reasoning=True)
    assert TextConfig(context="chat", drop_reasoning=True).drop_reasoning


def test_a_context_budget_needs_the_chat_context():
    with pytest.raises(ValidationError, match="max_context_tokens=512 .* needs model.text.context"):
        TextConfig(max_context_tokens=512)
    assert TextConfig(context="chat", max_context_tokens=512).max_context_tokens == 512


def test_sampling_keeps_only_what_differs_from_plain_sampling(tiny):
    _, tok = tiny
    assert TextConfig().sampling(tok).kwargs() == {}
    sampling = TextConfig(top_p=0.9, top_k=5, stop=["Pass"]).sampling(tok)
    assert sampling.kwargs() == {
        "top_p": 0.9,
        "top_k": 5,
        "stop": (tuple(tok("Pass", add_special_tokens=False)["input_ids"]),),
    }


def test_cut_at_stop_keeps_the_first_stop_and_its_logprobs():
    ids, lps = cut_at_stop([4, 1, 2, 1, 2], [-1.0, -2.0, -3.0, -4.0, -5.0], [(9,), (1, 2)])
    assert (ids, lps) == ((4, 1, 2), (-1.0, -2.0, -3.0))
    assert cut_at_stop([4, 5], [-1.0, -2.0], [(9,)]) == ((4, 5), (-1.0, -2.0))


VOCAB = {1: "I", 2: " pass", 3: ".\n", 4: " ok", 5: "a\n", 6: "\nb", 7: "."}


def decode(ids):
    return "".join(VOCAB[i] for i in ids)


@pytest.mark.parametrize(
    ("ids", "stop", "kept"),
    [
        ([1, 2, 3, 4], ["."], 3),  # "." inside the ".\n" token: that token ends the answer
        ([1, 5, 6, 4], ["\n\n"], 3),  # a stop string across two tokens
        ([1, 2, 7, 3], [".", "pass"], 2),  # the first to complete
        ([1, 2, 4], ["."], 3),  # none: the whole answer
        ([1, 2, 3], [], 3),
    ],
)
def test_a_stop_string_inside_a_token_ends_the_answer_with_that_token(ids, stop, kept):
    # As token ids, "." is token 7, which the answer [1, 2, 3, 4] never draws.
    lps = [-0.5 * (i + 1) for i in range(len(ids))]
    assert cut_at_stop_text(ids, lps, stop, decode) == (tuple(ids[:kept]), tuple(lps[:kept]))


def test_an_answer_keeps_every_special_token_but_those_that_end_or_pad_it():
    # Decoded with skip_special_tokens=True, an answer lost the reasoning tags that a
    # checkpoint's tokenizer registers as special, and the think format read no action.
    tok = train_tokenizer(
        ["Your card: K.\nYour legal actions: [Pass] [Bet]\n"] * 20,
        vocab_size=400,
        actions=["[Pass]", "[Bet]"],
        text=True,
    )
    tok.add_special_tokens({"additional_special_tokens": [THINK_OPEN, THINK_CLOSE, "<eot>"]})
    eot = tok.convert_tokens_to_ids("<eot>")
    written = "<think>I hold K.</think> [Bet]"
    for end in ("<eos>", "<eot>", "<eos><pad><pad>"):
        ids = tok(written + end, add_special_tokens=False)["input_ids"]
        assert tok.convert_tokens_to_ids(THINK_OPEN) in ids
        text = answer_text(tok, ids, ends=(tok.eos_token_id, eot))
        assert text == written
        parsed = ANSWER_FORMATS["think"].parse(text, ["[Pass]", "[Bet]"])
        assert parsed == Parsed("[Bet]", "I hold K.", True)
    # A special token that ends no turn is part of what the model wrote.
    ids = tok("[Bet]<|user|>", add_special_tokens=False)["input_ids"]
    assert answer_text(tok, ids, ends=(tok.eos_token_id,)) == "[Bet]<|user|>"
