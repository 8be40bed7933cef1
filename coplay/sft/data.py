"""Chat-format JSONL for supervised fine-tuning: one conversation per line.

A line is ``{"messages": [{"role": "system"|"user"|"assistant", "content": "..."}]}``,
the shape coplay's narrated demonstrations (``coplay.sft.demos``) write and most chat
datasets use, in the order play gives the roles: a system message, if any, first, and
every assistant message right after a user message. Reading checks every line and
stops at the first fault with one line naming the file, the line number and what is
wrong.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Literal

Role = Literal["system", "user", "assistant"]
ROLES: tuple[Role, ...] = ("system", "user", "assistant")


class DataError(ValueError):
    """A dataset line that cannot be trained on; the message names file and line."""


@dataclass(frozen=True)
class Message:
    role: Role
    content: str


@dataclass(frozen=True)
class Conversation:
    """One line of the dataset; ``line`` is its 1-based line number (for errors)."""

    messages: tuple[Message, ...]
    line: int

    def as_dicts(self) -> list[dict[str, str]]:
        """The form chat templates take."""
        return [{"role": m.role, "content": m.content} for m in self.messages]


def read_conversations(path: str | Path) -> list[Conversation]:
    """Every conversation of a JSONL file; blank lines are skipped."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no dataset at {path} (expected a chat-format JSONL file)")
    out = []
    with path.open("rb") as f:  # decoded line by line, so a bad byte names its line
        for number, line in enumerate(f, start=1):
            try:
                raw = line.decode("utf-8")
            except UnicodeDecodeError as err:
                raise DataError(f"{path}:{number}: not UTF-8 text ({err.reason})") from None
            if raw.strip():
                out.append(parse_line(raw, path, number))
    if not out:
        raise DataError(f"{path} holds no conversations (one JSON object per line expected)")
    return out


def parse_line(raw: str, path: Path, number: int) -> Conversation:
    """One conversation from one line; a ``DataError`` naming ``path:number`` if malformed."""
    where = f"{path}:{number}"
    try:
        record = json.loads(raw)
    except json.JSONDecodeError as err:
        # json ends some messages with "at" ("Unterminated string starting at"): one is enough
        reason = err.msg.removesuffix(" at")
        raise DataError(f"{where}: not valid JSON ({reason} at column {err.colno})") from None
    except RecursionError:
        raise DataError(f"{where}: JSON nested too deeply to read") from None
    messages = record.get("messages") if isinstance(record, dict) else None
    if not isinstance(messages, list) or not messages:
        raise DataError(f'{where}: expected an object with a non-empty "messages" list')
    parsed = tuple(_message(m, where, i) for i, m in enumerate(messages))
    if not any(m.role == "assistant" for m in parsed):
        raise DataError(f"{where}: no assistant message (nothing to learn from)")
    if parsed[0].role == "assistant":
        # A template renders no prompt before it: there is nothing the turn answers.
        raise DataError(f"{where}: the conversation opens with an assistant message")
    _check_order(parsed, where)
    return Conversation(parsed, number)


def _check_order(messages: tuple[Message, ...], where: str) -> None:
    """Roles in the order play gives them: a system message opens a conversation
    (play's instruction; a template without a system role folds only that one into
    the first user message) and every answer follows the user message it answers."""
    for i, (before, m) in enumerate(pairwise(messages), start=1):
        if m.role == "system":
            raise DataError(
                f"{where}: message {i} is a system message inside the conversation; "
                "only its first may be one"
            )
        if m.role == "assistant" and before.role != "user":
            article = "an" if before.role == "assistant" else "a"
            raise DataError(
                f"{where}: message {i} is an assistant message after {article} {before.role} "
                "message, not a user's: there is nothing it answers"
            )


def _message(item: object, where: str, index: int) -> Message:
    if not isinstance(item, dict):
        raise DataError(f"{where}: message {index} is not an object")
    role, content = item.get("role"), item.get("content")
    if role is None:
        raise DataError(f'{where}: message {index} has no "role"')
    if role not in ROLES:
        raise DataError(f"{where}: message {index} has role {role!r}; roles: {', '.join(ROLES)}")
    if not isinstance(content, str):
        raise DataError(f'{where}: message {index} ({role}) has no "content" string')
    if role == "assistant" and not content.strip():
        raise DataError(f"{where}: message {index} is an empty assistant turn")
    try:  # JSON may escape half a surrogate pair ("\ud800"), which no text holds
        content.encode("utf-8")
    except UnicodeEncodeError as err:
        char = ord(content[err.start])
        raise DataError(
            f"{where}: message {index} ({role}) holds a lone surrogate \\u{char:04x}, not text"
        ) from None
    return Message(role, content)
