"""A run's sample games, read back for replay move by move.

``transcripts.jsonl`` is written by ``coplay.report.sinks.append_transcripts``: one
episode per line with every turn's observation, answer and log-probs. Replay needs
the readable part only (no token ids), so this reader keeps that; lines are read as
the report reads them (``read_jsonl``: a line a kill left half written is skipped).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from coplay.report.runfiles import read_jsonl

TRANSCRIPTS = "transcripts.jsonl"


@dataclass(frozen=True)
class ReplayTurn:
    """One decision of a recorded game, as the acting seat saw and answered it."""

    step: int
    player: int
    observation: str
    legal_actions: tuple[str, ...]
    text: str
    action: str | None
    reward: float
    policy_id: str
    probability: float | None
    """The probability of the answer under the policy (choice mode: of the chosen
    action; free text: of the whole answer); None when the turn recorded no log-probs."""


@dataclass(frozen=True)
class ReplayGame:
    """One recorded game: where it came from, who sat where, its turns and returns."""

    iteration: int
    game: str
    seed: int
    seats: tuple[str, ...]
    returns: tuple[float, ...]
    turns: tuple[ReplayTurn, ...]


def read_transcripts(path: Path) -> list[ReplayGame]:
    """Every game of a ``transcripts.jsonl`` file (none when the file is missing)."""
    if not path.is_file():
        return []
    # the report's reader: a torn last line is skipped, any other bad line is an error
    return [_game(record) for record in read_jsonl(path)]


def _game(record: dict) -> ReplayGame:
    turns = tuple(
        ReplayTurn(
            step=t["step"],
            player=t["player"],
            observation=t["observation"],
            legal_actions=tuple(t.get("legal_actions") or ()),
            text=t["text"],
            action=t.get("action"),
            reward=float(t.get("reward") or 0.0),
            policy_id=t.get("policy_id", ""),
            probability=math.exp(sum(t["logprobs"])) if t.get("logprobs") else None,
        )
        for t in record["turns"]
    )
    return ReplayGame(
        iteration=record["iteration"],
        game=record["game"],
        seed=record["seed"],
        seats=tuple(record["seats"]),
        returns=tuple(float(r) for r in record["returns"]),
        turns=turns,
    )
