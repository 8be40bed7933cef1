"""Prompts of the free-text path, token-exact across a player's turns.

``context: turn`` prompts with the current observation alone; ``context: chat`` with
the player's whole conversation so far, rendered with the tokenizer's chat template:
the answer format's instruction as the system message, each observation a user
message, each of the player's own answers an assistant message.

Token in, token out: turn t+1's prompt is turn t's prompt, then turn t's answer as
sampled (its ids, never re-tokenised), then the ids of the template's text between
that answer and the next generation (the end of the assistant message, the new user
message, the generation prompt). That text is read off the template once per
observation text, by rendering a conversation whose last answer is a sentinel and
taking what follows it. So the learner can score a whole conversation as one sequence
(``coplay.policies.chains``).

Two options break the chain on purpose: ``drop_reasoning`` leaves earlier answers'
reasoning blocks out (the answer's ids from its closing tag on are kept), and
``max_context_tokens`` drops the oldest turns, starting the conversation again at a
user message that says how many turns were left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from jinja2 import TemplateError

from coplay.policies.answer import THINK_CLOSE, THINK_OPEN
from coplay.policies.encoding import encode_rendered, hide_specials
from coplay.policies.text import TextConfig, answer_text
from coplay.types import Decision, Observation

_SENTINEL = "\x00coplay-answer\x00"
ANSWER_CUE = "Answer:"
"""Ends a text-mode prompt without a chat template; the answer follows."""


def omitted_marker(count: int) -> str:
    """The line that opens a conversation whose oldest ``count`` turns were dropped."""
    return f"({count} earlier turn{'s' if count != 1 else ''} left out of this conversation)\n"


def fold_system(messages: list[dict[str, str]]) -> list[dict[str, str]] | None:
    """The conversation with its system message put at the head of the first user
    message, for a template that refuses a system role (Gemma's): a text policy's
    prompt (``Prompter._render``) and supervised fine-tuning (``coplay.sft.tokens``)
    fold it alike. None where the conversation opens otherwise."""
    if len(messages) < 2 or [m["role"] for m in messages[:2]] != ["system", "user"]:
        return None
    system, user = messages[0]["content"], messages[1]["content"]
    return [{"role": "user", "content": f"{system}\n\n{user}"}, *messages[2:]]


def turn_ends(tokenizer, generation_config=None) -> tuple[int, ...]:
    """The ids that end a model's turn: the tokenizer's EOS, then every other end the
    checkpoint's generation config lists (an instruct model's end of turn, such as
    Gemma's ``<end_of_turn>`` or Llama 3's ``<|eot_id|>``, is often not the tokenizer's
    EOS): an answer stops at any of them, as ``generate`` stops.

    >>> from types import SimpleNamespace as NS
    >>> turn_ends(NS(eos_token_id=1), NS(eos_token_id=[1, 107]))
    (1, 107)
    """
    listed = getattr(generation_config, "eos_token_id", None)
    more = list(listed) if isinstance(listed, list | tuple) else [listed]
    return tuple(dict.fromkeys(i for i in [tokenizer.eos_token_id, *more] if i is not None))


class Prompter:
    """Builds text-mode prompts from an observation and, in chat context, the player's
    earlier decisions in the episode (``Observation.history``)."""

    def __init__(
        self,
        tokenizer,
        text: TextConfig,
        max_new_tokens: int,
        ends: Sequence[int] | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.text = text
        self.max_new_tokens = max_new_tokens
        self.ends = turn_ends(tokenizer) if ends is None else tuple(ends)
        """The ids an answer ends its turn with (``turn_ends``)."""
        self.templated = bool(getattr(tokenizer, "chat_template", None))
        if text.context == "chat" and not self.templated:
            raise ValueError(
                "model.text.context=chat needs a tokenizer with a chat template; this "
                "checkpoint's tokenizer has none (use context: turn)"
            )
        self._heads: dict[str, tuple[int, ...]] = {}
        self._turns: dict[tuple[str, int | None], tuple[int, ...]] = {}
        close = tokenizer(THINK_CLOSE, add_special_tokens=False)["input_ids"]
        self._close_ids = tuple(close)
        # A reasoning model's template (DeepSeek-R1-Distill's, QwQ's) opens the reasoning
        # block in the generation prompt: its answers start inside it.
        self.opens_reasoning = self.templated and self._render("-").rstrip().endswith(THINK_OPEN)
        self.format = replace(text.format, opened=True) if self.opens_reasoning else text.format
        """The answer format the policy reads its answers with: where the prompts open
        the reasoning block, one that reads each answer as its continuation."""

    # ---------------------------------------------------------------- pieces
    def _render(self, user: str, *later: dict[str, str]) -> str:
        """The template's text of the system message, ``user`` and ``later`` messages,
        with the generation prompt. A template that refuses a system role (Gemma's)
        gets the instruction at the head of the first user message instead. The
        contents' spellings of special tokens are masked (``hide_specials``): read
        back by ``encode_rendered`` as text."""
        instruction = self.text.format.instruction
        messages = [
            {"role": "system", "content": instruction},
            {"role": "user", "content": user},
            *later,
        ]
        messages = [{**m, "content": hide_specials(self.tokenizer, m["content"])} for m in messages]
        render = self.tokenizer.apply_chat_template
        try:
            return render(messages, add_generation_prompt=True, tokenize=False)
        except TemplateError:
            return render(fold_system(messages), add_generation_prompt=True, tokenize=False)

    def head(self, user: str) -> tuple[int, ...]:
        """Ids of a conversation's start: the system message, ``user``, the generation
        prompt (without a chat template: the instruction, ``user`` and ``Answer:``).
        Whatever ``user`` spells, its ids are text: only the template makes special
        tokens."""
        if user not in self._heads:
            tok = self.tokenizer
            if self.templated:
                ids = encode_rendered(tok, self._render(user))
            else:
                plain = f"{self.text.format.instruction}\n\n{user.rstrip()}\n{ANSWER_CUE}"
                bos = [tok.bos_token_id] if tok.bos_token_id is not None else []
                ids = bos + encode_rendered(tok, hide_specials(tok, plain))
            self._heads[user] = tuple(ids)
        return self._heads[user]

    def user_turn(self, user: str, ended: int | None) -> tuple[int, ...]:
        """Ids that follow an answer to open the next turn with ``user``: the end of the
        assistant message (less the end of turn the answer already ``ended`` with, and
        any whitespace the template writes before it), the user message and the
        generation prompt."""
        key = (user, ended)
        if key not in self._turns:
            tok = self.tokenizer
            text = self._render(
                "-", {"role": "assistant", "content": _SENTINEL}, {"role": "user", "content": user}
            )
            after = text[text.index(_SENTINEL) + len(_SENTINEL) :]
            end = tok.decode([ended]) if ended is not None else ""
            # A template may write whitespace between the content and its end (coplay
            # sft's fallback template did: "\n<eos>"); a model fine-tuned on it writes
            # that whitespace as part of its answer, so all of it is already there.
            if end and after.lstrip().startswith(end):
                after = after.lstrip()[len(end) :]
            self._turns[key] = tuple(encode_rendered(tok, after))
        return self._turns[key]

    def kept(self, response: Sequence[int]) -> tuple[int, ...]:
        """The part of an earlier answer that stays in the context: all of it, or with
        ``drop_reasoning`` what follows its reasoning block (a complete one that opens
        the answer, or that the prompt opened; anything else is kept whole). Where the
        prompt opened the block, its closing tag stays too: the context holds an empty
        block, not one left open."""
        response = tuple(response)
        if not self.text.drop_reasoning:
            return response
        tok = self.tokenizer
        opened = self.format.opened and self.format.reasoning != "none"
        text = answer_text(tok, response, self.ends)
        if not (opened or text.lstrip().startswith(THINK_OPEN)):
            return response
        end = _find(response, self._close_ids)
        if end is None:  # the closing tag is split across tokens: find it by decoding
            end = next(
                (k for k in range(1, len(response) + 1) if THINK_CLOSE in tok.decode(response[:k])),
                None,
            )
        if end is None:
            return response
        return self._close_ids + response[end:] if opened else response[end:]

    # ---------------------------------------------------------------- prompts
    def prompt(self, obs: Observation) -> tuple[int, ...]:
        """Token ids of the prompt for ``obs`` in this context."""
        if self.text.context == "turn" or not obs.history:
            return self._fit(self.head(obs.text), obs, ())
        last_obs, last = obs.history[-1]
        answer = self.kept(last.response_ids)
        ids = last.prompt_ids + answer + self.user_turn(obs.text, self._ended(answer))
        return self._fit(ids, obs, obs.history)

    def _ended(self, answer: Sequence[int]) -> int | None:
        """The end of turn ``answer`` closes with (``ends``), None where it was cut."""
        return answer[-1] if answer and answer[-1] in self.ends else None

    def _fit(
        self,
        ids: tuple[int, ...],
        obs: Observation,
        history: Sequence[tuple[Observation, Decision]],
    ) -> tuple[int, ...]:
        """``ids`` when they leave room for an answer within ``max_context_tokens``,
        else the conversation from its most recent turns that do, after a marker."""
        budget = self.text.max_context_tokens
        if budget is None or len(ids) + self.max_new_tokens <= budget:
            return ids
        turns = [o.text for o, _ in history] + [obs.text]
        answers = [self.kept(d.response_ids) for _, d in history]
        for start in range(1, len(turns)):
            trimmed = self.head(omitted_marker(start) + turns[start])
            for answer, user in zip(answers[start:], turns[start + 1 :], strict=True):
                trimmed += answer + self.user_turn(user, self._ended(answer))
            if len(trimmed) + self.max_new_tokens <= budget:
                return trimmed
        raise ValueError(
            f"model.text.max_context_tokens={budget} cannot hold one turn of player "
            f"{obs.player} in {obs.game!r}: its prompt alone is {len(self.head(obs.text))} "
            f"tokens, plus max_new_tokens={self.max_new_tokens}"
        )


def _find(seq: Sequence[int], sub: Sequence[int]) -> int | None:
    """The index just past the first occurrence of ``sub`` in ``seq``, or None."""
    n = len(sub)
    if not n:
        return None
    for i in range(len(seq) - n + 1):
        if tuple(seq[i : i + n]) == tuple(sub):
            return i + n
    return None
