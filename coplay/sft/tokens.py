"""Token ids of a conversation and the mask of the tokens that carry the loss.

The ids are those of the whole conversation rendered with the tokenizer's chat
template, exactly as a text policy's prompt is rendered (``coplay.policies.chat``:
render to text with the contents' spellings of special tokens masked, then encode, so
that only the template makes special tokens). Assistant turn ``i`` owns the tokens
from the end of the rendering of the messages before it with the generation prompt
(where the model starts writing) to its end of turn (one of the ids generation stops
at, ``turn_ends``), that included, so the model learns to stop. Every other token
(system, user, the template's role headers, its text after an end of turn) is context
only: the policy never writes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from jinja2 import TemplateError
from transformers import PreTrainedTokenizerBase

from coplay.policies.chat import fold_system, turn_ends
from coplay.policies.encoding import encode_rendered, hide_specials
from coplay.sft.data import Conversation, DataError

FALLBACK_CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{{ '<|' + m['role'] + '|>\n' + m['content'] }}"
    "{% if m['role'] == 'assistant' %}{{ eos_token }}{% else %}{{ '\n' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)
"""A plain-text chat template for checkpoints whose tokenizer has none (base models;
the tiny default model in text mode brings its own): role headers as text, an EOS
right after every assistant message's content, a newline after every other message.
So an answer is trained as its content and the EOS, where generation stops, and
nothing after it. It is saved with the SFT checkpoint, so ``coplay train
model.path=...`` renders prompts with the very template the model was fine-tuned on."""


def ensure_chat_template(tokenizer: PreTrainedTokenizerBase) -> bool:
    """Give ``tokenizer`` the fallback template if it has none; True when it did."""
    if getattr(tokenizer, "chat_template", None):
        return False
    tokenizer.chat_template = FALLBACK_CHAT_TEMPLATE
    return True


@dataclass(frozen=True)
class Example:
    """One conversation as a training sequence."""

    ids: tuple[int, ...]
    loss_mask: tuple[bool, ...]
    """True where the token is an assistant token (predicted, carries loss)."""
    line: int

    @property
    def trained_tokens(self) -> int:
        return sum(self.loss_mask)


def encode(
    conv: Conversation,
    tokenizer: PreTrainedTokenizerBase,
    source: str = "",
    *,
    ends: Sequence[int] | None = None,
) -> Example:
    """The ids of ``conv`` and its assistant-only loss mask; ``ends`` are the ids the
    policy's answers stop at (``LMPolicy.ends``; default: the tokenizer's EOS).

    Raises ``DataError`` (naming ``source:line``) when the template does not render a
    conversation as the extension of its own prefix, the property the mask relies on,
    or closes an answer with none of ``ends``.
    """
    ends = turn_ends(tokenizer) if ends is None else tuple(ends)
    messages = [{**m, "content": hide_specials(tokenizer, m["content"])} for m in conv.as_dicts()]
    try:
        return _encoded(conv, messages, tokenizer, source, ends)
    except TemplateError as err:
        folded = fold_system(messages)
        if folded is None:
            raise DataError(f"{source}:{conv.line}: the chat template refuses it: {err}") from None
    try:
        return _encoded(conv, folded, tokenizer, source, ends)
    except TemplateError as err:
        raise DataError(f"{source}:{conv.line}: the chat template refuses it: {err}") from None


def _encoded(
    conv: Conversation,
    messages: list,
    tokenizer: PreTrainedTokenizerBase,
    source: str,
    ends: tuple[int, ...],
) -> Example:
    ids = _ids(tokenizer, messages, generation_prompt=False)
    mask = [False] * len(ids)
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        prompt = _ids(tokenizer, messages[:i], generation_prompt=True)
        upto = _ids(tokenizer, messages[: i + 1], generation_prompt=False)
        start = len(prompt)
        # Both renderings must be prefixes of the whole: a generation prompt that ends
        # in a space the answer's first token absorbs would shift the mask by a token.
        if ids[: len(upto)] != upto or start > len(upto) or upto[:start] != prompt:
            raise DataError(
                f"{source}:{conv.line}: the chat template does not render message {i} as an "
                "extension of the messages before it; cannot tell its tokens apart"
            )
        # The first end is the answer's own: its content is text (``hide_specials``).
        # What the template writes after it (a newline) is the next prompt's.
        stop = next((k + 1 for k in range(start, len(upto)) if ids[k] in ends), None)
        if stop is None:
            raise DataError(
                f"{source}:{conv.line}: the chat template ends assistant message {i} with "
                f"none of the ids generation stops at {list(ends)}: the model would never "
                "learn to stop (pass the policy's ends, LMPolicy.ends)"
            )
        mask[start:stop] = [True] * (stop - start)
    return Example(tuple(ids), tuple(mask), conv.line)


def _ids(tokenizer: PreTrainedTokenizerBase, messages: list, *, generation_prompt: bool) -> list:
    if not messages and not generation_prompt:
        return []
    text = tokenizer.apply_chat_template(
        messages, add_generation_prompt=generation_prompt, tokenize=False
    )
    return encode_rendered(tokenizer, text)
