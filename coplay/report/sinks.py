"""What a run writes to its directory, one small function per file.

config.yaml        the full resolved config
metrics.jsonl      one JSON object per iteration, namespaced keys
transcripts.jsonl  sample episodes, token-exact, with the text each player saw
summary.json       the final metrics
checkpoints/       Hugging Face folders (see coplay.models.loading)
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from coplay.report.atomic import write_text
from coplay.report.runfiles import read_utf8
from coplay.types import Episode


def _clean(value: Any) -> Any:
    """``value`` as JSON can hold it, nested dicts and lists included: a numpy scalar or
    a 0-d tensor as the Python number it holds, and NaN or infinity (which JSON has no
    form for) as null rather than invalid JSON."""
    if isinstance(value, Mapping):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):  # numpy or torch scalar
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def append_metrics(path: Path, iteration: int, metrics: Mapping[str, float]) -> None:
    row = {"iteration": iteration, **{k: _clean(v) for k, v in sorted(metrics.items())}}
    with path.open("a") as f:
        f.write(json.dumps(row) + "\n")


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Every row of a metrics.jsonl file; a ValueError naming the file and line for a
    row that is not UTF-8 text, or not a JSON object with an iteration."""
    return [row for _, row in _rows(path)]


def _rows(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """Each non-blank line of a JSONL file of iteration rows, with its parsed row."""
    out = []
    for number, line in enumerate(read_utf8(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{number} is not valid JSON ({err.msg})") from None
        if not isinstance(row, dict) or not isinstance(row.get("iteration"), int):
            raise ValueError(f"{path}:{number} is not a JSON object with an iteration")
        out.append((line, row))
    return out


def keep_until(path: Path, iteration: int) -> None:
    """Drop rows of a JSONL file logged after ``iteration`` (used when resuming)."""
    if not path.is_file():
        return
    rows = _rows(path)
    kept = [line for line, row in rows if row["iteration"] <= iteration]
    if len(kept) < len(rows):
        write_text(path, "".join(line + "\n" for line in kept))


def repair_jsonl(path: Path) -> int:
    """Drop a half-written last line (a kill during an append); returns the bytes dropped.

    Appends write whole lines, so only the last line can be torn: one that does not
    parse as JSON. A complete last line that lost only its newline gets it back. A byte
    that is not UTF-8 was put there by something else (appends write ASCII JSON): a
    ValueError naming the file and line, the file left as it is.
    """
    if not path.is_file():
        return 0
    text = read_utf8(path)
    head, _, last = text.rstrip("\n").rpartition("\n")
    if not last.strip() or text.endswith("\n"):
        return 0
    try:
        json.loads(last)
    except json.JSONDecodeError:
        write_text(path, head + "\n" if head else "")
        return len(last.encode())
    write_text(path, text + "\n")
    return 0


def episode_record(episode: Episode, iteration: int) -> dict[str, Any]:
    """A JSON-able transcript: every turn's observation, answer, tokens and reward.

    ``returns`` are what the game paid each seat (``Episode.game_returns``) and
    ``shaping`` what training added to them (invalid-answer penalties, format rewards):
    a learner adds its format rewards to the episodes in place before they are written.
    A turn's ``reward`` is what training credited it, its shaping included."""
    turns = []
    for t in episode.turns:
        d = t.decision
        turns.append(
            {
                "step": t.step,
                "player": t.player,
                "observation": t.observation.text,
                "legal_actions": list(t.observation.legal_actions or ()),
                "text": d.text,
                "action": t.played_action,
                "valid": d.valid,
                "treatment": t.treatment,
                "rejected": [a.text for a in t.invalid_attempts],
                "reward": t.reward,
                "policy_id": d.policy_id,
                "policy_version": d.policy_version,
                "prompt_ids": list(d.prompt_ids),
                "response_ids": list(d.response_ids),
                "logprobs": list(d.logprobs),
            }
        )
    return {
        "iteration": iteration,
        "game": episode.game,
        "seed": episode.seed,
        "group_id": episode.group_id,
        "seats": list(episode.seats),
        "returns": list(episode.game_returns),
        "shaping": [traj.shaping for traj in episode.trajectories],
        "truncated": episode.truncated,
        "forfeited_by": episode.forfeited_by,
        "prefix": [[list(a) for a in joint] for joint in episode.prefix],
        # Which first move was assigned rather than sampled (restart exploring starts).
        "opening": None if episode.opening is None else asdict(episode.opening),
        "turns": turns,
    }


def append_transcripts(path: Path, episodes: Sequence[Episode], iteration: int) -> None:
    with path.open("a") as f:
        for ep in episodes:
            f.write(json.dumps(episode_record(ep, iteration)) + "\n")


def write_summary(path: Path, summary: Mapping[str, Any]) -> None:
    """Replace ``summary.json`` atomically: a kill leaves the previous summary whole."""
    write_text(path, json.dumps(_clean(summary), indent=2) + "\n")


def as_metrics(prefix: str, record: Any) -> dict[str, float]:
    """Flatten a typed result record's numeric fields under ``prefix/``."""
    out = {}
    for k, v in asdict(record).items():
        if isinstance(v, int | float):
            out[f"{prefix}/{k}"] = float(v)
    return out


def write_metagame(path: Path, members: Sequence[str], payoffs: Sequence[Any] | None) -> None:
    """The population's meta-game (``metagame.json``), replaced atomically: member ids and
    ``payoffs[p][i][j]`` as the caller built them. PSRO's exact meta-game: player p's
    expected return with member i in seat 0 and member j in seat 1. PSRO's sampled one:
    ``payoffs[0][i][j]`` member i's mean return against j over both seats, and
    ``payoffs[1]`` its transpose. A league's single matrix: member i's mean return
    against j over both seats."""
    matrices = [[[_clean(float(x)) for x in row] for row in p] for p in (payoffs or [])]
    write_text(path, json.dumps({"members": list(members), "payoffs": matrices}) + "\n")
