"""Reading a run directory back: its config, metric rows, transcripts and meta-game.

What ``coplay report`` and ``coplay show`` read, as one typed record per run. A run of
``coplay train`` (or a roster, or a league) logs ``metrics.jsonl``; a PSRO run logs its
outer loop to ``psro.jsonl`` and each best response is a run of its own under
``responses/``. Problems are one line naming the file (and line) and what is wrong.
"""

from __future__ import annotations

import json
import math
import re
import reprlib
import warnings
from collections.abc import Callable, Iterator
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
    transcripts_path: Path | None = None
    """The file ``transcripts`` were read from: a PSRO run's latest best response's."""
    settings: dict[str, Any] = field(default_factory=dict)
    """The kind's own settings file (``settings_file``) as written; empty when absent."""
    summary: dict[str, Any] = field(default_factory=dict)
    metagame: Metagame | None = None

    @property
    def name(self) -> str:
        return self.path.resolve().name

    @property
    def games_from(self) -> Path | None:
        """Where the games come from when not the run's own folder (a PSRO run logs none:
        its latest best response's), relative to the run; None for the run's own."""
        source = self.transcripts_path.parent if self.transcripts_path else self.path
        return None if source == self.path else source.relative_to(self.path)

    @property
    def settings_file(self) -> str | None:
        """roster.yaml, league.yaml or psro.yaml; None for a train run."""
        return RUN_KINDS[self.kind][0] if self.kind in RUN_KINDS else None


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every object of a JSONL file. A last line without its newline is a row still
    being written by a live run, and is skipped; any other line that is not a JSON
    object is an error naming the file and line."""
    return [row for _, row in _numbered_rows(path)]


def _numbered_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    # Decoded line by line, so that a bad byte names its line (and a last line torn
    # inside a character is skipped as a torn row is).
    lines = path.read_bytes().split(b"\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            if number == len(lines):  # no newline after it: torn or still being written
                continue
            if isinstance(err, UnicodeDecodeError):
                raise ValueError(f"{path}:{number} is not UTF-8 text ({err.reason})") from None
            raise ValueError(f"{path}:{number} is not valid JSON ({err.msg})") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{number} is not a JSON object")
        yield number, row


def read_transcripts(path: Path) -> list[dict[str, Any]]:
    """The records of ``transcripts.jsonl``, as ``read_jsonl``; a record lacking a field
    the report and ``coplay show`` read, or holding one of another type, is an error
    naming the file and line."""
    records = []
    for number, record in _numbered_rows(path):
        if fault := _transcript_fault(record):
            raise ValueError(f"{path}:{number} is not a transcript record: {fault}")
        records.append(record)
    return records


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    """An int or float that converts to a float: JSON integers have no size limit, and a
    400-digit one would overflow wherever the report formats or sums it."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        float(value)
    except OverflowError:
        return False
    return True


def _is_numbers(value: Any) -> bool:
    return isinstance(value, list) and all(map(_is_number, value))


def _is_finite(value: Any) -> bool:
    # A return or reward is finite (the engine refuses others): NaN would reach the
    # play page's replays as JSON that the browser cannot parse.
    return _is_number(value) and math.isfinite(value)


def _is_finite_numbers(value: Any) -> bool:
    return isinstance(value, list) and all(map(_is_finite, value))


def _is_texts(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _is_logprobs(value: Any) -> bool:
    # A log-probability is <= 0 (-inf: an impossible token); a positive one is not one,
    # and exp() of a large sum overflows. NaN fails the comparison, as it should.
    return _is_numbers(value) and all(float(x) <= 0 for x in value)


def _or_null(test: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or test(v)


RECORD_FIELDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "iteration": ("an integer", _is_int),
    "seats": ("a list", lambda v: isinstance(v, list)),
    "returns": ("a list of finite numbers", _is_finite_numbers),
}
"""Optional fields of a transcript record that the report reads: (what, test). Present
means readable: a null is a fault unless the test allows it."""

TURN_FIELDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "step": ("an integer", _is_int),
    "observation": ("text", lambda v: isinstance(v, str)),
    "text": ("text", lambda v: isinstance(v, str)),
    # The writer logs null for a turn whose answer played no action.
    "action": ("text or null", _or_null(lambda v: isinstance(v, str))),
    "reward": ("a finite number or null", _or_null(_is_finite)),
    "logprobs": ("a list of numbers <= 0 (log-probabilities)", _is_logprobs),
    "response_ids": ("a list", lambda v: isinstance(v, list)),
    "rejected": ("a list", lambda v: isinstance(v, list)),
    "legal_actions": ("a list of text", _is_texts),
}
"""Optional fields of a turn that the report reads (and the play page's replay: its
legal actions): (what, test), as RECORD_FIELDS."""


def _transcript_fault(record: dict[str, Any]) -> str | None:
    """What is wrong with a transcript record, None when the report can read it."""
    turns = record.get("turns")
    if not isinstance(turns, list):
        return "'turns' must be a list of turns"
    if fault := _field_fault(record, RECORD_FIELDS, ""):
        return fault
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict):
            return f"turn {i} is not a JSON object"
        player = turn.get("player")
        if not _is_int(player) or player < 0:
            return f"turn {i}: 'player' must be a seat index >= 0, got {reprlib.repr(player)}"
        if fault := _field_fault(turn, TURN_FIELDS, f"turn {i}: "):
            return fault
    return None


def _field_fault(
    data: dict[str, Any], fields: dict[str, tuple[str, Callable[[Any], bool]]], where: str
) -> str | None:
    for key, (what, test) in fields.items():
        if key in data and not test(data[key]):
            return f"{where}{key!r} must be {what}, got {reprlib.repr(data[key])}"
    return None


def load_run(path: str | Path) -> RunFiles:
    """The files of the run in ``path``; one-line errors for a missing directory, a run
    with neither metric rows nor games, a corrupt line and a transcript record it cannot
    read. A run with games but no metric row yet is read, with a warning that says so."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such run directory")
    metrics_file = next((path / n for n in METRIC_FILES if (path / n).is_file()), None)
    if metrics_file is None:
        raise FileNotFoundError(f"{path} holds no run: it has no {' or '.join(METRIC_FILES)}")
    metrics = read_jsonl(metrics_file)
    for number, row in enumerate(metrics, 1):
        if not isinstance(row.get("iteration"), int):
            raise ValueError(f"{metrics_file}: row {number} has no integer 'iteration'")
    games_file = transcripts_file(path)
    games = read_transcripts(games_file) if games_file else []
    if not metrics and not games:
        raise ValueError(f"{metrics_file} is empty: the run has logged no iteration yet")
    if not metrics:
        # A PSRO run during its first response, or a kill between an evaluation's games
        # and its row: the games are worth showing.
        warnings.warn(
            f"{metrics_file} is empty: the run has logged no metrics yet, only games ({games_file})",
            stacklevel=2,
        )
    kind = run_kind(path)
    return RunFiles(
        path=path,
        kind=kind,
        config=read_yaml(path / "config.yaml"),
        metrics=metrics,
        transcripts=games,
        transcripts_path=games_file,
        settings=read_yaml(path / RUN_KINDS[kind][0]) if kind in RUN_KINDS else {},
        summary=_json(path / "summary.json"),
        metagame=_metagame(path / "metagame.json"),
    )


RUN_KINDS = {
    "psro": ("psro.yaml", "psro.jsonl", "members", "responses"),
    "league": ("league.yaml", "snapshots"),
    "roster": ("roster.yaml",),
}
"""The kinds of run besides train, each with what only it writes: its settings file
first, then its logs and folders, which still tell the kind when the settings are lost."""


def run_kind(path: Path) -> str:
    """train, roster, league or psro: the kind of the run in ``path``."""
    for kind, names in RUN_KINDS.items():
        if any((path / name).exists() for name in names):
            return kind
    return "train"


def transcripts_file(path: Path) -> Path | None:
    """The run's transcripts; a PSRO run's are its latest best response's."""
    own = path / "transcripts.jsonl"
    if own.is_file():
        return own
    # By number: the folders are 00, 01, ... (05-r1 with restarts), and 100 follows 99.
    responses = sorted(
        (path / "responses").glob("*/transcripts.jsonl"),
        key=lambda f: [int(n) for n in re.findall(r"\d+", f.parent.name)],
    )
    return responses[-1] if responses else None


def read_yaml(path: Path) -> dict[str, Any]:
    """The mapping a YAML file holds ({} when there is no file or it is empty); one-line
    errors naming the file for one that is not YAML or holds no mapping."""
    if not path.is_file():
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise ValueError(f"{path} is not valid YAML: {' '.join(str(err).split())}") from None
    except UnicodeDecodeError as err:
        raise ValueError(f"{path} is not UTF-8 text ({err.reason})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a YAML mapping")
    return data


def read_utf8(path: Path) -> str:
    """The text of ``path``; a ValueError naming the file and the line of the first
    byte that is not UTF-8."""
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise ValueError(f"{path}:{line} is not UTF-8 text ({err.reason})") from None


def _json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    text = read_utf8(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON ({err.msg})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a JSON object")
    return data


def _metagame(path: Path) -> Metagame | None:
    """``metagame.json``, its cells checked: the heatmap scales and formats each one."""
    data = _json(path)
    if not data:
        return None
    members, payoffs = data.get("members"), data.get("payoffs")
    if not isinstance(members, list) or not isinstance(payoffs, list):
        raise ValueError(f"{path} lacks members or payoffs (each a JSON list)")
    for p, matrix in enumerate(payoffs):
        if not isinstance(matrix, list) or not all(isinstance(row, list) for row in matrix):
            raise ValueError(f"{path}: payoffs[{p}] is not a matrix (a list of lists)")
        for i, row in enumerate(matrix):
            for j, cell in enumerate(row):
                if cell is not None and not _is_number(cell):
                    raise ValueError(
                        f"{path}: payoffs[{p}][{i}][{j}] must be a number or null, "
                        f"got {reprlib.repr(cell)}"
                    )
    return Metagame(
        tuple(str(m) for m in members),
        tuple(tuple(tuple(row) for row in matrix) for matrix in payoffs),
    )
