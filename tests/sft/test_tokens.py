"""The SFT loss mask: only assistant tokens (and their end-of-turn marker) carry loss."""

import pytest

from coplay.models.tokenizer import train_tokenizer
from coplay.sft.data import Conversation, DataError, Message
from coplay.sft.tokens import FALLBACK_CHAT_TEMPLATE, encode, ensure_chat_template

CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + "
    "'<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% endif %}"
)

CONV = Conversation(
    (
        Message("system", "Play Kuhn poker."),
        Message("user", "Your card: K. [Pass] [Bet]"),
        Message("assistant", "<think>The King wins every showdown.</think> [Bet]"),
        Message("user", "The opponent passed."),
        Message("assistant", "<think>Nothing left to do.</think> [Pass]"),
    ),
    line=7,
)


@pytest.fixture(scope="module")
def tokenizer():
    texts = [m.content for m in CONV.messages] * 20
    return train_tokenizer(texts, vocab_size=400)


def _trained_text(tok, ex) -> list[str]:
    """The masked tokens, decoded per contiguous run."""
    runs, cur = [], []
    for i, m in zip(ex.ids, ex.loss_mask, strict=True):
        if m:
            cur.append(i)
        elif cur:
            runs.append(cur)
            cur = []
    if cur:
        runs.append(cur)
    return [tok.decode(r) for r in runs]


def test_fallback_template_masks_exactly_the_assistant_answers(tokenizer):
    tok = tokenizer
    assert ensure_chat_template(tok) is True
    assert tok.chat_template == FALLBACK_CHAT_TEMPLATE
    assert ensure_chat_template(tok) is False  # kept once set
    ex = encode(CONV, tok)
    assert _trained_text(tok, ex) == [
        "<think>The King wins every showdown.</think> [Bet]<eos>",
        "<think>Nothing left to do.</think> [Pass]<eos>",
    ]
    # Everything else (system, user, role headers) is context: present but untrained.
    untrained = tok.decode([i for i, m in zip(ex.ids, ex.loss_mask, strict=True) if not m])
    assert "Play Kuhn poker." in untrained and "The opponent passed." in untrained
    assert "showdown" not in untrained and "Nothing left" not in untrained


def test_a_chatml_template_masks_content_and_end_marker(tokenizer):
    tok = tokenizer
    tok.chat_template = CHATML
    ex = encode(CONV, tok)
    assert _trained_text(tok, ex) == [
        "<think>The King wins every showdown.</think> [Bet]<|im_end|>\n",
        "<think>Nothing left to do.</think> [Pass]<|im_end|>\n",
    ]
    assert len(ex.ids) == len(ex.loss_mask)


def test_a_template_that_is_not_prefix_stable_is_refused(tokenizer):
    tok = tokenizer
    # Puts the newest message first: earlier renderings are no prefix of later ones.
    tok.chat_template = (
        "{% for m in messages|reverse %}{{ m['role'] + ': ' + m['content'] + '\n' }}{% endfor %}"
    )
    with pytest.raises(DataError, match=r"^data.jsonl:7: the chat template does not render"):
        encode(CONV, tok, "data.jsonl")


def test_a_generation_prompt_the_answer_absorbs_is_refused():
    # The generation prompt ends in a space, which BPE merges into the answer's first
    # token (" Bet"): counting the prompt's tokens would start the mask one token late.
    conv = Conversation(
        (
            Message("user", "Your card: King. Pass or Bet?"),
            Message("assistant", "Bet because King wins."),
            Message("user", "They passed."),
            Message("assistant", "Pass now."),
        ),
        3,
    )
    texts = [m.content for m in conv.messages] * 20 + ["User: Assistant: "] * 20
    tok = train_tokenizer(texts, vocab_size=400)
    tok.chat_template = (
        "{% for m in messages %}{{ m['role'] + ': ' + m['content'] + '\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}"
    )
    with pytest.raises(DataError, match=r"^data.jsonl:3: the chat template does not render"):
        encode(conv, tok, "data.jsonl")


GEMMA_LIKE = (
    "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}"
    "{% for m in messages %}{% set role = 'model' if m['role'] == 'assistant' else m['role'] %}"
    "{{ '<start_of_turn>' + role + '\n' + m['content'] + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)


def test_a_template_without_a_system_role_trains_on_the_prompt_play_shows(tokenizer):
    # The demos open with a system message, which such a template refuses (a raw jinja
    # error before); play folds it into the first user message, and so does SFT now.
    from coplay.policies.chat import Prompter
    from coplay.policies.text import TextConfig

    tok = tokenizer
    tok.chat_template = GEMMA_LIKE
    text = TextConfig()
    user = "Your card: K. [Pass] [Bet]"
    conv = Conversation(
        (
            Message("system", text.format.instruction),
            Message("user", user),
            Message("assistant", "<think>The King wins.</think> [Bet]"),
        ),
        line=3,
    )
    ex = encode(conv, tok, "demos.jsonl")
    start = ex.loss_mask.index(True)
    assert ex.ids[:start] == Prompter(tok, text, max_new_tokens=8).head(user)
    assert _trained_text(tok, ex) == ["<think>The King wins.</think> [Bet]<end_of_turn>\n"]
    lone = Conversation((Message("system", "rules"), Message("assistant", "[Bet]")), line=9)
    with pytest.raises(DataError, match=r"^demos.jsonl:9: the chat template refuses it"):
        encode(lone, tok, "demos.jsonl")
