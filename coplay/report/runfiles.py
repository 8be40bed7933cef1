"""Reading a run directory back: its config, metric rows, transcripts and meta-game.

What ``coplay report`` and ``coplay show`` read, as one typed record per run. A run of
``coplay train`` (or a roster, or a league) logs ``metrics.jsonl``; a PSRO run logs its
outer loop to ``psro.jsonl`` and each best response is a run of its own under
``responses/``. Problems are one line naming the file (and line) and what is wrong.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

METRIC_FILES = ("metrics.jsonl", "psro.jsonl")
"""Where a run's rows are, in the order looked for."""


@dataclass(frozen=True)
class Metagame:
    """A population's meta-game (``metagame.json``): ``payoffs[p][i][j]`` is player p's
    expected return with member i in seat 0 and member j in seat 1."""

    members: tuple[str, ...]
    payoffs: tuple[tuple[tuple[float | None, ...], ...], ...]


@dataclass(frozen=True)
class RunFiles:
    """What one run directory holds, as plain data."""

    path: Path
    kind: str
    """train, roster, league or psro."""
    config: dict[str, Any]
    """config.yaml as written (the full resolved config); empty when absent."""
    metrics: list[dict[str, Any]]
    """One row per logged iteration, ``iteration`` plus namespaced keys."""
    transcripts: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    metagame: Metagame | None = None

    @property
    def name(self) -> str:
        return self.path.resolve().name


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every object of a JSONL file. A last line without its newline is a row still
    being written by a live run, and is skipped; any other line that is not a JSON
    object is an error naming the file and line."""
    text = path.read_text()
    lines = text.split("\n")
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            if number == len(lines):  # no newline after it: torn or still being written
                continue
            raise ValueError(f"{path}:{number} is not valid JSON ({err.msg})") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{number} is not a JSON object")
        rows.append(row)
    return rows


def load_run(path: str | Path) -> RunFiles:
    """The files of the run in ``path``; one-line errors for a missing directory, a run
    without metric rows and a corrupt line."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such run directory")
    metrics_file = next((path / n for n in METRIC_FILES if (path / n).is_file()), None)
    if metrics_file is None:
        raise FileNotFoundError(f"{path} holds no run: it has no {' or '.join(METRIC_FILES)}")
    metrics = read_jsonl(metrics_file)
    if not metrics:
        raise ValueError(f"{metrics_file} is empty: the run has logged no iteration yet")
    for number, row in enumerate(metrics, 1):
        if not isinstance(row.get("iteration"), int):
            raise ValueError(f"{metrics_file}: row {number} has no integer 'iteration'")
    return RunFiles(
        path=path,
        kind=_kind(path),
        config=_yaml(path / "config.yaml"),
        metrics=metrics,
        transcripts=read_jsonl(t) if (t := transcripts_file(path)) else [],
        summary=_json(path / "summary.json"),
        metagame=_metagame(path / "metagame.json"),
    )


def _kind(path: Path) -> str:
    for name, kind in (("psro.yaml", "psro"), ("league.yaml", "league"), ("roster.yaml", "roster")):
        if (path / name).is_file():
            return kind
    return "train"


def transcripts_file(path: Path) -> Path | None:
    """The run's transcripts; a PSRO run's are its latest best response's."""
    own = path / "transcripts.jsonl"
    if own.is_file():
        return own
    responses = sorted((path / "responses").glob("*/transcripts.jsonl"))
    return responses[-1] if responses else None


def _yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ValueError(f"{path} is not valid YAML: {' '.join(str(err).split())}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a YAML mapping")
    return data


def _json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON ({err.msg})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a JSON object")
    return data


def _metagame(path: Path) -> Metagame | None:
    data = _json(path)
    if not data:
        return None
    try:
        members = tuple(str(m) for m in data["members"])
        payoffs = tuple(tuple(tuple(row) for row in p) for p in data["payoffs"])
    except (KeyError, TypeError) as err:
        raise ValueError(f"{path} lacks members or payoffs ({err})") from None
    return Metagame(members, payoffs)
