"""A text player whose every answer names no move, for the forfeit tests."""

from __future__ import annotations

from coplay.types import Decision


class Garbage:
    """Writes ``said`` and the answer's number, naming no move: the table's retries
    run out and it forfeits."""

    policy_id, version, mode = "garbage", 0, "text"

    def __init__(self, said: str):
        self.said, self.asked = said, 0

    def act(self, observations):
        self.asked += 1
        return [Decision(text=f"{self.said} ({self.asked})", action=None, policy_id="garbage")]
