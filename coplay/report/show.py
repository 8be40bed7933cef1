"""Sample games of a run in the terminal (``coplay show``): each game as a conversation.

Every turn is a panel in its seat's colour: what that seat saw (its own observation,
so its private information only), then what it answered, with the answer's
probability under the policy that sampled it. ``rich`` draws it; piped output is
plain text. What a model, a game or a person wrote is printed with its control
characters shown as escapes (``printable``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.rule import Rule
from rich.text import Text

from coplay.report.transcripts import select_games

SEAT_STYLES = ("cyan", "magenta", "green", "yellow", "blue", "red")
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""Control characters but tab and newline (C0, DEL, C1)."""


def printable(text: str) -> str:
    r"""``text`` with its control characters written as escapes (tab and newline kept):
    an answer holding ``ESC [2J`` would otherwise clear the reader's terminal, and one
    holding a carriage return would print over the line it is on (rich strips only a
    few of these).

    >>> printable("[Bet]\x1b[2J\rgame over"), printable("a\tb\n")
    ('[Bet]\\x1b[2J\\rgame over', 'a\tb\n')
    """
    return CONTROL.sub(lambda m: repr(m[0])[1:-1], text)


def _printable(value: Any) -> Any:
    """A transcript record, every text in it ``printable``."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, list):
        return [_printable(v) for v in value]
    if isinstance(value, dict):
        return {k: _printable(v) for k, v in value.items()}
    return value


def answer_line(turn: dict[str, Any]) -> Text:
    """``answered [Bet]  (p = 0.50)``, with rejected attempts, ``(invalid)`` for an
    answer that was not a legal move, and the reward."""
    line = Text()
    for rejected in turn.get("rejected") or ():
        line.append(f"rejected: {rejected}\n", style="red strike")
    line.append("answered ", style="dim")
    valid = turn.get("valid", True)
    line.append(turn.get("text") or "", style="bold" if valid else "bold red")
    if not valid:  # in words too: piped output has no colour
        line.append("  (invalid)", style="red")
    action = turn.get("action")
    if action and action != (turn.get("text") or "").strip():
        line.append(f"  -> {action}")
    if logps := turn.get("logprobs"):
        line.append(f"  (p = {math.exp(sum(logps)):.3f})", style="dim")
    if reward := turn.get("reward"):
        line.append(f"  reward {reward:g}", style="dim")
    return line


def game_view(record: dict[str, Any]) -> Group:
    """One game: a header, a panel per turn, the returns."""
    record = _printable(record)
    seats = list(record.get("seats") or [])
    # Titles are Text, not markup strings: a policy id such as "nash[v2]" is data.
    parts: list[Any] = [
        Rule(
            Text(
                f"iteration {record.get('iteration')} · {record.get('game')} · "
                f"seed {record.get('seed')}"
            )
        )
    ]
    for turn in record["turns"]:
        seat = int(turn["player"])
        style = SEAT_STYLES[seat % len(SEAT_STYLES)]
        who = seats[seat] if seat < len(seats) else turn.get("policy_id", "?")
        saw = Text((turn.get("observation") or "").rstrip())
        parts.append(
            Panel(
                Group(saw, answer_line(turn)),
                title=Text(f"seat {seat} · {who}"),
                title_align="left",
                border_style=style,
            )
        )
    returns = "  ".join(f"seat {i}: {r:g}" for i, r in enumerate(record.get("returns") or ()))
    if record.get("forfeited_by") is not None:
        returns += f"  (forfeited by seat {record['forfeited_by']})"
    parts.append(Text(f"returns  {returns}", style="bold"))
    return Group(*parts)


def show_games(
    records: Sequence[dict[str, Any]],
    console: Console,
    *,
    games: int,
    iteration: int | None = None,
) -> int:
    """Print the chosen games; returns how many were printed."""
    chosen = select_games(records, games, iteration)
    for record in chosen:
        console.print(game_view(record))
    return len(chosen)
