"""Settings of the free-text path: answer format, sampling, context and format reward.

``TextConfig`` is the ``model.text`` section of a run config. It is read only in text
mode (``model.mode=text``); choice mode decides by scoring the legal actions and
ignores it. Temperature and ``max_new_tokens`` stay in ``model`` itself, where
choice mode reads the temperature too.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from coplay.backends.base import Sampling
from coplay.policies.answer import ANSWER_FORMATS, AnswerFormat, check_format

Context = Literal["turn", "chat"]


class TextConfig(BaseModel):
    """How a free-text policy writes its answers and what it sees of its past turns."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    answer: str = "think"
    """Answer format, a name in ``coplay.policies.answer.ANSWER_FORMATS``: think,
    think-boxed (a reasoning block, then the action bracketed or boxed), bracket, boxed
    (reasoning optional), action (the bracketed action alone, no reasoning) or free
    (the lenient reading: last bracketed legal action)."""
    context: Context = "turn"
    """'turn': each prompt is the current observation alone; 'chat': the player's whole
    conversation so far (rules as system message, observations as user messages, its
    own answers as assistant messages, token for token as sampled)."""
    drop_reasoning: bool = False
    """Chat context: leave earlier answers' reasoning blocks out of the prompt (the
    training sequence then starts anew at each turn that had one)."""
    max_context_tokens: int | None = Field(None, gt=0)
    """Chat context: the longest prompt plus answer; the oldest turns are dropped, with a
    visible marker, to stay within it. None: no limit."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling: draw from the smallest set of tokens with this much mass."""
    top_k: int = Field(0, ge=0)
    """Draw from the k likeliest tokens only; 0 is off."""
    stop: list[str] = Field(default_factory=list)
    """Strings that end an answer (kept in it), besides the end-of-sequence token. One
    that ends inside a token (``\n`` of a ``\n\n`` token) ends the answer with that
    token, whole: an answer is always whole tokens (``cut_at_stop_text``)."""
    # Both finite: they join the returns after the engine has checked the game's, so a
    # NaN or inf here would reach every advantage of the batch, and the weights.
    format_reward: float = Field(0.0, allow_inf_nan=False)
    """Added to the return of a trajectory for each well-formed answer (logged as
    rollout/format_reward, apart from the game's return)."""
    format_penalty: float = Field(0.0, le=0.0, allow_inf_nan=False)
    """Added for each answer that is not well formed (invalid ones included)."""
    tis_cap: float | None = Field(None, gt=0.0)
    """Cap of the truncated importance weights min(pi_old / behaviour, cap) on answers
    whose recorded log-probs are an inference engine's, not the learner's
    (``model.backend=vllm``; ``coplay.train.mismatch``); e.g. 2.0. None: uncorrected.
    Choices have their own: ``rollout.explore.tis_cap``."""

    @field_validator("answer")
    @classmethod
    def _known_answer(cls, name: str) -> str:
        return check_format(name)

    @field_validator("stop")
    @classmethod
    def _no_empty_stop(cls, stop: list[str]) -> list[str]:
        if "" in stop:
            raise ValueError("an empty stop string would end every answer at once; remove it")
        return stop

    @model_validator(mode="after")
    def _chat_settings_need_chat(self) -> TextConfig:
        # A turn prompt holds no earlier answer: nothing to drop, no history to cut.
        if self.context == "chat":
            return self
        if self.drop_reasoning:
            raise ValueError(
                "model.text.drop_reasoning=true leaves earlier answers' reasoning out of a "
                "chat context: it needs model.text.context=chat"
            )
        if self.max_context_tokens is not None:
            raise ValueError(
                f"model.text.max_context_tokens={self.max_context_tokens} drops the oldest "
                "turns of a chat context: it needs model.text.context=chat"
            )
        return self

    @property
    def format(self) -> AnswerFormat:
        """The answer format as configured; a policy reads its answers through its
        prompts' builder (``Prompter.format``), which knows whether the prompts open
        the reasoning block."""
        return ANSWER_FORMATS[self.answer]

    def sampling(self, tokenizer) -> Sampling:
        """The sampling parameters ``sample_text`` takes, stop strings as token ids."""
        stop = tuple(tuple(tokenizer(s, add_special_tokens=False)["input_ids"]) for s in self.stop)
        return Sampling(top_p=self.top_p, top_k=self.top_k, stop=stop)


def answer_text(tokenizer, ids: Sequence[int], ends: Collection[int]) -> str:
    """The text of an answer's ``ids`` without the tokens that end or pad it: ``ends``
    (``coplay.policies.chat.turn_ends``), the tokenizer's EOS and pad. Every other
    token is read as written: a checkpoint's tokenizer may register the reasoning tags
    (``<think>``) as special tokens, and the answer format reads them."""
    dropped = {*ends, tokenizer.eos_token_id, tokenizer.pad_token_id}
    return tokenizer.decode([i for i in ids if i not in dropped])


def cut_at_stop(
    ids: Sequence[int], logprobs: Sequence[float], stop: Sequence[Sequence[int]]
) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """The answer up to and including the first stop sequence in it: what sampling with
    that stop would have drawn (the same tokens, the same log-probs), so a sampler
    without stop sequences wastes only the tokens past it.

    >>> cut_at_stop([5, 7, 8, 9], [-1.0, -2.0, -3.0, -4.0], [(7, 8)])
    ((5, 7, 8), (-1.0, -2.0, -3.0))
    """
    ends = [
        i + len(s)
        for s in stop
        if s
        for i in range(len(ids) - len(s) + 1)
        if tuple(ids[i : i + len(s)]) == tuple(s)
    ]
    end = min(ends, default=len(ids))
    return tuple(ids[:end]), tuple(logprobs[:end])


def cut_at_stop_text(
    ids: Sequence[int],
    logprobs: Sequence[float],
    stop: Sequence[str],
    decode: Callable[[Sequence[int]], str],
) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """The answer up to the first token whose text completes a stop string.

    Sampling stops at a stop string's own tokens (``cut_at_stop``), which miss one a
    tokenizer merges with what follows: ``\n`` inside a ``\n\n`` token, ``.`` inside
    ``.\n``. Found in the decoded text, the answer ends with the token that completes
    it, whole; the tokens and log-probs before are what was drawn, as with
    ``cut_at_stop``. The fewest tokens are found by bisection over decoded prefixes."""
    ids, logprobs = tuple(ids), tuple(logprobs)
    stop = [s for s in stop if s]

    def stops_in(n: int) -> bool:
        text = decode(ids[:n])
        return any(s in text for s in stop)

    if not stop or not stops_in(len(ids)):
        return ids, logprobs
    lo, hi = 1, len(ids)  # the shortest prefix holding a stop string: stops_in(hi)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if stops_in(mid) else (mid + 1, hi)
    return ids[:hi], logprobs[:hi]
