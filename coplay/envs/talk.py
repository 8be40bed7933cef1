"""Message turns of the games with talk: how a message is written, checked and shown.

A message turn is a turn whose answer is a message to the other players rather
than a move. A game writes its messages in one of two forms:

* ``free``: any text. The observation lists no legal actions
  (``legal_actions is None``), so a language-model policy writes freely; the
  action of the turn is the text itself. ``parse`` keeps its printable ASCII, turns
  square brackets into parentheses (a message can never look like an action),
  double quotes into single ones (messages are shown in double quotes), collapses
  whitespace and cuts it to ``max_chars``. Every text is a valid message, the empty
  one (silence) included.
* ``symbols``: one of a fixed set of messages, offered as legal actions
  ``[Say <symbol>]``, so constrained choice (and random play) can talk. A tiny model
  learns a code over a handful of symbols far sooner than over free text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from coplay.envs import actions

MESSAGE_FORMS = ("free", "symbols")
_SPACES = re.compile(r"\s+")
_SAY = "Say "


def clean_message(text: str, max_chars: int) -> str:
    """Printable ASCII with no brackets or double quotes, whitespace collapsed, cut.

    >>> clean_message('  hi [Accept]\\n "ok"  ', 40)
    "hi (Accept) 'ok'"
    >>> clean_message("caf\\u00e9 au lait", 6)
    'caf au'
    """
    kept = "".join(c for c in text if " " <= c <= "~" or c.isspace())
    kept = kept.translate(str.maketrans({"[": "(", "]": ")", '"': "'"}))
    return _SPACES.sub(" ", kept).strip()[:max_chars].strip()


@dataclass(frozen=True)
class Talk:
    """How a game's messages are written: ``free`` text or one of ``symbols``."""

    form: str
    symbols: tuple[str, ...]
    """The messages offered in the ``symbols`` form."""
    max_chars: int
    """Longest free-text message kept, in characters."""

    def __post_init__(self) -> None:
        if self.form not in MESSAGE_FORMS:
            raise ValueError(
                f"message form must be one of {', '.join(MESSAGE_FORMS)}, got {self.form!r}"
            )
        if self.max_chars < 1:
            raise ValueError(f"max_message_chars must be >= 1, got {self.max_chars}")
        if self.form == "symbols" and len(set(self.symbols)) < 2:
            raise ValueError(
                f"symbol messages need at least 2 distinct symbols, got {self.symbols}"
            )

    def legal_actions(self) -> tuple[str, ...] | None:
        """What an observation of a message turn lists: None for free text."""
        if self.form == "free":
            return None
        return tuple(actions.bracket(_SAY + s) for s in self.symbols)

    def parse(self, text: str) -> str | None:
        """The canonical action of a message turn, or None for an unknown symbol."""
        if self.form == "free":
            return clean_message(text, self.max_chars)
        return actions.parse_action(text, self.legal_actions() or ())

    def content(self, action: str) -> str:
        """The message as the other players read it, from a canonical action."""
        if self.form == "free":
            return action
        return action.removeprefix("[" + _SAY).removesuffix("]")
