"""Answer formats of free-text policies: how an answer is written, and how it is read.

An answer is a reasoning block (``<think>…</think>``), then the action in the game's
format: bracketed as the observation lists it (``[Bet]``) or boxed as SPIRAL writes
it (``\\boxed{Bet}``). Formats are registered by name in ``ANSWER_FORMATS`` and chosen
in the run config (``model.text.answer``).

Reading is strict about structure so that malformed answers get the game's invalid
treatment rather than a lucky parse: an empty answer, one with only reasoning, one
whose reasoning block never closes (truncated), one that names two actions, or one
with no action (garbage) all parse to None, as does one whose action marker is
nested or unbalanced (``[[Bet]]``, ``\\boxed{[Bet}``, ``\\boxed{\\boxed{Bet}}``): no
bracket or box of the format may stand outside the one marker. Text around the single
action is tolerated but makes the answer not *well formed*, which the format reward
reads (``coplay.train.format_reward``). Case and whitespace inside the delimiters do
not matter, as the game's own matching ignores them (``[ bet ]`` and ``\\boxed{ bet }``
are well formed). A message turn (no legal list) answers with its
message after the reasoning block, cleaned of control bytes; the game then applies
its own limits (``Env.parse_action``); one with only reasoning is silence, which the
game reads as it reads any message, and is not well formed.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from coplay.envs.actions import parse_action

__all__ = [
    "ANSWER_FORMATS",
    "AnswerFormat",
    "Parsed",
    "check_format",
    "clean_text",
    "render_answer",
]

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"

_INSTRUCTION = (
    "give exactly one of your legal actions, written as {example}. "
    "When no actions are listed, write your message instead."
)


@dataclass(frozen=True)
class Parsed:
    """What an answer says: its action (or message), its reasoning, and whether it is
    written exactly in the format."""

    action: str | None
    """The canonical legal action, the cleaned message on a message turn, or None."""
    reasoning: str | None
    """The reasoning block's text, None where the answer has none."""
    well_formed: bool
    """Reasoning block as the format asks, then the action and nothing else."""


@dataclass(frozen=True)
class AnswerFormat:
    """How an answer is written: an optional reasoning block, then one action.

    ``action_open``/``action_close`` wrap the action's name (``[`` ``]`` or
    ``\\boxed{`` ``}``); ``reasoning`` says whether the ``<think>`` block must open the
    answer, may, or is not read at all (``"none"``: the whole text is the answer)."""

    action_open: str = "["
    action_close: str = "]"
    reasoning: Literal["required", "optional", "none"] = "required"
    strict: bool = True
    """False: today's lenient reading, the last bracketed legal action anywhere."""
    opened: bool = False
    """The prompt opened the reasoning block: a reasoning model's chat template
    (DeepSeek-R1-Distill's, QwQ's) ends its generation prompt with ``<think>``, so the
    answer is read as if it began with the tag (``reasoning</think> [Bet]``). Formats
    that read no reasoning block, or read leniently, are unaffected."""

    @property
    def instruction(self) -> str:
        """What the system message tells the model about the format."""
        think = {
            "required": f"First reason inside {THINK_OPEN} {THINK_CLOSE}. Then ",
            "optional": f"You may first reason inside {THINK_OPEN} {THINK_CLOSE}. Then ",
            "none": "",
        }[self.reasoning]
        text = _INSTRUCTION.format(example=f"{self.action_open}Action{self.action_close}")
        return think + text if think else text[0].upper() + text[1:]

    def render(self, reasoning: str, action: str) -> str:
        """The answer text for ``reasoning`` and ``action``: a bracketed legal action
        (``"[Bet]"``) is written in the format, anything else is a message as is.

        >>> ANSWER_FORMATS["think"].render("I hold K.", "[Bet]")
        '<think>I hold K.</think> [Bet]'
        >>> ANSWER_FORMATS["think-boxed"].render("Weak card.", "[Pass]")
        '<think>Weak card.</think> \\\\boxed{Pass}'
        >>> ANSWER_FORMATS["bracket"].render("", "hello")
        'hello'
        """
        if action.startswith("[") and action.endswith("]"):
            action = f"{self.action_open}{action[1:-1]}{self.action_close}"
        if self.reasoning == "none" or (self.reasoning == "optional" and not reasoning):
            return action
        return f"{THINK_OPEN}{reasoning}{THINK_CLOSE} {action}"

    def parse(self, text: str, legal: Sequence[str] | None) -> Parsed:
        """Read ``text`` against the ``legal`` bracketed actions (None: a message turn).

        >>> f = ANSWER_FORMATS["think"]
        >>> f.parse("<think>K is best</think> [Bet]", ["[Pass]", "[Bet]"]).action
        '[Bet]'
        >>> [f.parse(t, ["[Pass]", "[Bet]"]).action for t in
        ...  ["", "<think>hm</think>", "<think>hm [Bet]", "<think></think>[Bet] [Pass]"]]
        [None, None, None, None]
        """
        if not self.strict:
            action = clean_text(text) if legal is None else parse_action(text, legal)
            # silence (an empty message) is no more well formed here than in strict formats
            return Parsed(action, None, bool(action))
        if self.opened and self.reasoning != "none":
            text = THINK_OPEN + text
        split = self._split(text)
        if split is None:
            return Parsed(None, None, False)
        reasoning, rest = split
        if legal is None:  # silence is the game's to read, but no well-formed message
            message = clean_text(rest)
            return Parsed(message, reasoning, bool(message))
        markers = self._markers(rest)
        if markers is None:
            return Parsed(None, reasoning, False)
        by_key = {_key(a[1:-1]): a for a in legal}
        action = by_key.get(_key(markers[0]["name"])) if len(markers) == 1 else None
        # the marker alone, and the name itself in it: a box holds the bare name
        exact = (
            action is not None
            and markers[0][0] == rest.strip()
            and not markers[0].groupdict().get("bracket")
        )
        return Parsed(action, reasoning, exact)

    def _split(self, text: str) -> tuple[str | None, str] | None:
        """(reasoning, the rest), or None where the reasoning block is malformed: missing
        where required, present where the format has none, never closed, or a tag left
        over after it."""
        if self.reasoning == "none":  # a reasoning block is no part of such an answer
            return None if THINK_OPEN in text or THINK_CLOSE in text else (None, text)
        body = text.lstrip()
        if not body.startswith(THINK_OPEN):
            if self.reasoning == "required" or THINK_OPEN in text or THINK_CLOSE in text:
                return None
            return None, text
        reasoning, closed, rest = body[len(THINK_OPEN) :].partition(THINK_CLOSE)
        if not closed or THINK_OPEN in reasoning or THINK_OPEN in rest or THINK_CLOSE in rest:
            return None
        return reasoning.strip(), rest

    def _markers(self, text: str) -> list[re.Match[str]] | None:
        """Every action marker of ``text`` (its ``name`` group the action's name), or
        None where a delimiter of the format is left outside them: a nested or
        unbalanced marker is malformed, not text around an action."""
        pattern = self._marker()
        left = pattern.sub(" ", text)
        if self.action_open in left or self.action_close in left:
            return None
        return list(pattern.finditer(text))

    def _marker(self) -> re.Pattern[str]:
        """One action marker, whitespace inside its delimiters tolerated; a box may
        hold the name bracketed, balanced (``\\boxed{[Bet]}`` names ``Bet``)."""
        if self.action_open == "[":
            inner = r"\s*(?P<name>[^\[\]]*?)\s*"
        else:  # the conditional group closes the bracket only where one opened
            inner = r"\s*(?P<bracket>\[\s*)?(?P<name>[^\[\]{}]*?)\s*(?(bracket)\]\s*)"
        return re.compile(re.escape(self.action_open) + inner + re.escape(self.action_close))


def _key(name: str) -> str:
    return name.strip().casefold()


ANSWER_FORMATS: dict[str, AnswerFormat] = {
    "think": AnswerFormat(),
    "think-boxed": AnswerFormat(action_open="\\boxed{", action_close="}"),
    "bracket": AnswerFormat(reasoning="optional"),
    "action": AnswerFormat(reasoning="none"),
    "boxed": AnswerFormat(action_open="\\boxed{", action_close="}", reasoning="optional"),
    "free": AnswerFormat(reasoning="none", strict=False),
}
"""Answer formats by name: a reasoning block required (``think``, ``think-boxed``) or
optional (``bracket``, ``boxed``), then one action; ``action``: the bracketed action
alone, nothing before or after it (no reasoning is read or written: what a small model
learns fastest where a move needs no words); ``free`` is the lenient reading
(the last bracketed legal action anywhere, the whole text as a message). Register your
own under a new name."""


def check_format(name: str) -> str:
    """``name`` if it names a registered answer format, else a ValueError listing them."""
    if name not in ANSWER_FORMATS:
        raise ValueError(
            f"unknown answer format {name!r}; registered: {', '.join(sorted(ANSWER_FORMATS))}"
        )
    return name


def render_answer(reasoning: str, action: str, *, answer: str = "think") -> str:
    """``ANSWER_FORMATS[answer].render``: the function narrated demonstrations write
    their answers with.

    >>> render_answer("Q beats J.", "[Bet]")
    '<think>Q beats J.</think> [Bet]'
    """
    return ANSWER_FORMATS[check_format(answer)].render(reasoning, action)


def clean_text(text: str) -> str:
    """``text`` without control, format or unassigned characters and without the
    replacement character a cut multi-byte sequence decodes to; whitespace runs
    become one space.

    >>> clean_text(" hi\\x11 there\\ufffd\\n ok ")
    'hi there ok'
    """
    kept = "".join(
        " " if c.isspace() else c
        for c in text
        if c.isspace() or (c != "\ufffd" and not unicodedata.category(c).startswith("C"))
    )
    return " ".join(kept.split())
