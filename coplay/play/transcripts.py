"""A run's sample games, read back for replay move by move.

``transcripts.jsonl`` is written by ``coplay.report.sinks.append_transcripts``: one
episode per line with every turn's observation, answer and log-probs. Replay needs
the readable part only (no token ids), so this reader keeps that; records are read
as the report reads them (``coplay.report.runfiles.read_transcripts``: a line a kill
left half written is skipped, a record with a field of the wrong type is an error
naming its file and line, and a field it lacks is read as None).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from coplay.report import runfiles

TRANSCRIPTS = "transcripts.jsonl"


@dataclass(frozen=True)
class ReplayTurn:
    """One decision of a recorded game, as the acting seat saw and answered it."""

    step: int | None
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

    iteration: int | None
    game: str | None
    seed: int | None
    seats: tuple[str, ...]
    returns: tuple[float, ...]
    turns: tuple[ReplayTurn, ...]


def read_transcripts(path: Path) -> list[ReplayGame]:
    """Every game of a ``transcripts.jsonl`` file (none when the file is missing)."""
    if not path.is_file():
        return []
    return [_game(record) for record in runfiles.read_transcripts(path)]


def _game(record: dict) -> ReplayGame:
    return ReplayGame(
        iteration=record.get("iteration"),
        game=record.get("game"),
        seed=record.get("seed"),
        seats=tuple(record.get("seats") or ()),
        returns=tuple(float(r) for r in record.get("returns") or ()),
        turns=tuple(_turn(t) for t in record["turns"]),
    )


def _turn(turn: dict) -> ReplayTurn:
    logprobs = turn.get("logprobs")
    return ReplayTurn(
        step=turn.get("step"),
        player=turn["player"],
        observation=turn.get("observation", ""),
        legal_actions=tuple(turn.get("legal_actions") or ()),
        text=turn.get("text", ""),
        action=turn.get("action"),
        reward=float(turn.get("reward") or 0.0),
        policy_id=turn.get("policy_id", ""),
        probability=math.exp(sum(logprobs)) if logprobs else None,
    )
