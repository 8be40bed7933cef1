"""Whether a checkpoint can write the answers it is fine-tuned on (``coplay sft``).

A text-mode checkpoint records the answer format it plays in (``model.text.answer``)
and how long an answer may be (``model.max_new_tokens``). Data in another format, or
with longer answers, would train answers that play then reads as invalid or cuts off:
``check_answer_format`` and ``check_answer_lengths`` refuse it before a run starts.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from itertools import groupby
from pathlib import Path

from coplay.policies.answer import ANSWER_FORMATS, AnswerFormat, Parsed
from coplay.sft.data import Conversation, DataError
from coplay.sft.tokens import Example

_MARKED = re.compile(r"\[([^\[\]]*)\]|\\boxed\{\s*\[?([^\[\]{}]*?)\]?\s*\}")
"""An action named in an answer, bracketed or boxed (``coplay.policies.answer``)."""


def _read(fmt: AnswerFormat, text: str) -> Parsed:
    """``text`` read by ``fmt`` as play reads it, the legal actions being those the
    answer names itself (none: it is read as a message turn's answer)."""
    legal = [f"[{a or b}]" for a, b in _MARKED.findall(text)] or None
    return fmt.parse(text, legal)


def check_answer_format(conversations: Sequence[Conversation], answer: str, source: Path) -> None:
    """Refuse data whose answers the checkpoint, which plays in format ``answer``
    (``model.text.answer``), would not read: a system message that is another format's
    instruction (how ``coplay demos`` records its format), or an answer from which the
    format reads no action. Only certain faults: what it reads, it reads in play too."""
    fmt = ANSWER_FORMATS[answer]
    for conv in conversations:
        said = _recorded(conv)
        if said is not None and ANSWER_FORMATS[said].instruction != fmt.instruction:
            raise DataError(
                f"{source}:{conv.line}: the data's answers are in the {said!r} format (its "
                f"system message is that format's instruction) but model.text.answer is "
                f"{answer!r}, the format the checkpoint plays in; pass model.text.answer={said}"
            )
        if any(
            m.role == "assistant" and _read(fmt, m.content).action is None for m in conv.messages
        ):
            raise DataError(_unread(conversations, answer, f"{source}:{conv.line}"))


def _recorded(conv: Conversation) -> str | None:
    """The format whose instruction is the system message (the first registered of
    those sharing it: action and free), None where there is no such message."""
    first = conv.messages[0]
    if first.role != "system":
        return None
    return next((n for n, f in ANSWER_FORMATS.items() if f.instruction == first.content), None)


def _unread(conversations: Sequence[Conversation], answer: str, where: str) -> str:
    """The refusal of an answer ``answer`` does not read, naming the format the data is
    in: the most specific (strict; reasoning required or none) that reads every answer
    well formed."""
    texts = [m.content for c in conversations for m in c.messages if m.role == "assistant"]
    ranked = sorted(ANSWER_FORMATS, key=lambda n: _looseness(ANSWER_FORMATS[n]))
    fits = [n for n in ranked if all(_read(ANSWER_FORMATS[n], t).well_formed for t in texts)]
    if not fits:
        return (
            f"{where}: model.text.answer {answer!r}, the format the checkpoint plays in, reads "
            "no action in this answer, and no registered format reads every answer of the data"
        )
    return (
        f"{where}: the data's answers are in the {fits[0]!r} format but model.text.answer is "
        f"{answer!r}, the format the checkpoint plays in, which reads no action in this "
        f"one; pass model.text.answer={fits[0]}"
    )


def _looseness(fmt: AnswerFormat) -> tuple[bool, bool]:
    return not fmt.strict, fmt.reasoning == "optional"


def answer_lengths(ex: Example, ends: Collection[int]) -> list[int]:
    """Tokens of each assistant turn of ``ex`` (a run of trained tokens) before its end
    of turn (one of ``ends``): what play must let the model write."""
    runs = [
        [t for t, _ in run]
        for kept, run in groupby(zip(ex.ids, ex.loss_mask, strict=True), lambda p: p[1])
        if kept
    ]
    return [next((i for i, t in enumerate(run) if t in ends), len(run)) for run in runs]


def check_answer_lengths(
    examples: Sequence[Example], ends: Collection[int], limit: int, source: Path
) -> None:
    """Refuse answers longer than ``model.max_new_tokens`` (``limit``): play would cut
    them off before their action."""
    lengths = [(n, ex.line) for ex in examples for n in answer_lengths(ex, ends)]
    longest, line = max(lengths, key=lambda pair: pair[0], default=(0, 0))
    if longest > limit:
        raise DataError(
            f"{source}:{line}: the longest answer is {longest} tokens but model.max_new_tokens "
            f"is {limit}, where play cuts an answer off; pass model.max_new_tokens={longest} "
            "or more"
        )
