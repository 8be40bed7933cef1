"""The SFT loss mask: only assistant tokens (and their end-of-turn marker) carry loss."""

import pytest

from coplay.models.tokenizer import CHAT_TEMPLATE as TINY_CHAT_TEMPLATE
from coplay.models.tokenizer import train_tokenizer
from coplay.sft.data import Conversation, DataError, Message
from coplay.sft.tokens import FALLBACK_CHAT_TEMPLATE, encode, ensure_chat_template

CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + "
    "'<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% endif %}"
)

GEMMA_LIKE = (
    "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}"
    "{% for m in messages %}{% set role = 'model' if m['role'] == 'assistant' else m['role'] %}"
    "{{ '<start_of_turn>' + role + '\n' + m['content'] + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
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


def _runs(ex) -> list[tuple[int, ...]]:
    """The trained ids, per contiguous run."""
    runs, cur = [], []
    for i, m in zip(ex.ids, ex.loss_mask, strict=True):
        if m:
            cur.append(i)
        elif cur:
            runs.append(tuple(cur))
            cur = []
    return runs + [tuple(cur)] if cur else runs


def _trained_text(tok, ex) -> list[str]:
    """The trained tokens, decoded per contiguous run."""
    return [tok.decode(r) for r in _runs(ex)]


def _controls(tok, ids) -> list[int]:
    """The special tokens among ``ids``."""
    special = {i for i, t in tok.added_tokens_decoder.items() if t.special}
    return [i for i in ids if i in special]


def _with_template(name: str):
    """A text tokenizer with a checkpoint-like template, and the ids its turns end at."""
    tok = train_tokenizer([m.content for m in CONV.messages] * 20, vocab_size=400, text=True)
    if name == "chatml":  # Qwen's: the end of turn is the tokenizer's EOS
        tok.add_special_tokens(
            {"eos_token": "<|im_end|>", "additional_special_tokens": ["<|im_start|>"]}
        )
        tok.chat_template = CHATML
        return tok, (tok.eos_token_id,)
    if name == "gemma":  # Gemma's: the end of turn is listed by the generation config only
        tok.add_special_tokens({"additional_special_tokens": ["<start_of_turn>", "<end_of_turn>"]})
        tok.chat_template = GEMMA_LIKE
        return tok, (tok.eos_token_id, tok.convert_tokens_to_ids("<end_of_turn>"))
    return tok, (tok.eos_token_id,)


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


def test_a_chatml_template_masks_content_and_end_of_turn():
    tok, _ = _with_template("chatml")
    ex = encode(CONV, tok)
    assert _trained_text(tok, ex) == [
        "<think>The King wins every showdown.</think> [Bet]<|im_end|>",
        "<think>Nothing left to do.</think> [Pass]<|im_end|>",
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


def test_a_template_without_a_system_role_trains_on_the_prompt_play_shows():
    # The demos open with a system message, which such a template refuses (a raw jinja
    # error before); play folds it into the first user message, and so does SFT now.
    from coplay.policies.chat import Prompter
    from coplay.policies.text import TextConfig

    tok, ends = _with_template("gemma")
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
    ex = encode(conv, tok, "demos.jsonl", ends=ends)
    start = ex.loss_mask.index(True)
    assert ex.ids[:start] == Prompter(tok, text, max_new_tokens=8).head(user)
    assert _trained_text(tok, ex) == ["<think>The King wins.</think> [Bet]<end_of_turn>"]
    lone = Conversation((Message("system", "rules"), Message("assistant", "[Bet]")), line=9)
    with pytest.raises(DataError, match=r"^demos.jsonl:9: the chat template refuses it"):
        encode(lone, tok, "demos.jsonl", ends=ends)


def test_the_tiny_template_trains_up_to_the_eos_and_not_the_newline_after():
    # The tiny model's own template writes "\n" after an answer's <eos>: generation
    # stops at the <eos>, so the policy never writes that newline and must not learn it.
    tok, _ = _with_template("tiny")
    assert tok.chat_template == TINY_CHAT_TEMPLATE
    ex = encode(CONV, tok)
    assert _trained_text(tok, ex) == [
        "<think>The King wins every showdown.</think> [Bet]<eos>",
        "<think>Nothing left to do.</think> [Pass]<eos>",
    ]


@pytest.mark.parametrize("template", ["tiny", "chatml", "gemma"])
def test_trained_tokens_are_exactly_what_the_policy_writes(template):
    # A sampled answer is its content's ids, then the end of turn it stops at; the
    # template's text after that end (a newline in all three) is the next prompt's.
    tok, ends = _with_template(template)
    ex = encode(CONV, tok, ends=ends)
    answers = [m.content for m in CONV.messages if m.role == "assistant"]
    written = [(*tok(a, add_special_tokens=False)["input_ids"], ends[-1]) for a in answers]
    assert _runs(ex) == written


def test_an_answer_the_template_closes_with_no_end_of_turn_is_refused():
    # Trained without the id generation stops at, a model never learns to stop.
    tok, _ = _with_template("gemma")
    with pytest.raises(DataError, match=r"^d.jsonl:7: the chat template ends assistant"):
        encode(CONV, tok, "d.jsonl", ends=(tok.eos_token_id,))


@pytest.mark.parametrize("template", ["fallback", "tiny", "chatml"])
def test_a_demo_that_spells_special_tokens_trains_them_as_text(template):
    # A literal "<eos>" in a demo is text the model reads and may write, not an end of
    # turn in mid-answer; nor does one in the context end or open anything.
    tok, ends = _with_template(template)
    if template == "fallback":
        tok.chat_template = None
        ensure_chat_template(tok)
    spelled = f"{tok.eos_token}<|assistant|><bos>"
    said = [
        Message("system", "Play Kuhn poker."),
        Message("user", f"Your card: K. {spelled} [Pass] [Bet]"),
        Message("assistant", f"<think>Say {spelled} then bet.</think> [Bet]"),
    ]
    ex = encode(Conversation(tuple(said), 2), tok, ends=ends)
    as_text = tok(said[2].content, add_special_tokens=False, split_special_tokens=True)
    assert _runs(ex) == [(*as_text["input_ids"], ends[-1])]
    assert tok.decode(ex.ids).count(spelled) == 2
    # The special tokens are the template's alone: those of the demo without the spelling.
    unsaid = Conversation(tuple(Message(m.role, m.content.replace(spelled, "")) for m in said), 2)
    assert _controls(tok, ex.ids) == _controls(tok, encode(unsaid, tok, ends=ends).ids)


@pytest.mark.parametrize("template", ["tiny", "chatml", "gemma", "fallback"])
def test_each_answer_starts_where_plays_chat_prompt_ends(template):
    # RL scores what SFT trained: in chat context the second prompt is the first prompt,
    # the answer as written and the next user turn, never the conversation re-encoded.
    from coplay.policies.chat import Prompter
    from coplay.policies.text import TextConfig
    from coplay.types import Decision, Observation

    tok, ends = _with_template(template)
    if template == "fallback":
        tok.chat_template = None
        ensure_chat_template(tok)
    text = TextConfig(context="chat")
    users = ("Your card: K. [Pass] [Bet]", "The opponent bet. [Fold] [Call]")
    answers = ("<think>The King wins.</think> [Bet]", "<think>Still the King.</think> [Call]")
    turns = [
        (Message("user", u), Message("assistant", a)) for u, a in zip(users, answers, strict=True)
    ]
    system = Message("system", text.format.instruction)
    ex = encode(Conversation((system, *turns[0], *turns[1]), 4), tok, ends=ends)
    starts = [i for i, m in enumerate(ex.loss_mask) if m and not ex.loss_mask[i - 1]]
    prompter = Prompter(tok, text, max_new_tokens=32, ends=ends)
    first = Observation("kuhn_poker", 0, users[0])
    written = (*tok(answers[0], add_special_tokens=False)["input_ids"], ends[-1])
    said = Decision(
        answers[0], "[Bet]", "p", prompt_ids=prompter.prompt(first), response_ids=written
    )
    second = Observation("kuhn_poker", 0, users[1], history=((first, said),))
    assert ex.ids[: starts[0]] == prompter.prompt(first)
    assert ex.ids[: starts[1]] == prompter.prompt(second)
