"""One error line for a bad config: pydantic's report with each key as the file spells
it, and the values pydantic would take without a word (a bool where a number goes, an
integer beyond 64 bits). Shared by the run config, rosters, PSRO's and SFT's sections.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, ValidationError

from coplay.algos.losses.compose import moved_key
from coplay.train.config import INNER_KEY, ConfigError

LARGEST_INT = 2**63 - 1
"""The largest integer a setting may hold: torch, numpy and OpenSpiel count in 64 bits."""


def refuse_huge_numbers(data: Any, what: str = "config") -> None:
    """Refuse an integer beyond 64 bits anywhere in ``data``, before it is validated: a
    count that large failed deep inside a run, as an overflow (``rollout.games_per_iter``)
    or a game's or torch's message that named no key."""
    keys = list(_huge_numbers(data, ""))
    if keys:
        raise ConfigError(
            f"invalid {what}: "
            + "; ".join(
                f"{k}: {v} is beyond a 64-bit integer (|x| <= {LARGEST_INT})" for k, v in keys
            )
        )


def _huge_numbers(raw: Any, loc: str) -> Iterator[tuple[str, int]]:
    if isinstance(raw, int) and not isinstance(raw, bool) and abs(raw) > LARGEST_INT:
        yield loc, raw
    elif isinstance(raw, dict):
        for key, item in raw.items():
            yield from _huge_numbers(item, f"{loc}.{key}" if loc else str(key))
    elif isinstance(raw, list):
        for i, item in enumerate(raw):
            yield from _huge_numbers(item, f"{loc}[{i}]")


def refuse_bool_numbers(data: Any, cfg: BaseModel, what: str = "config") -> None:
    """Refuse a true or false given where the validated config holds a number.

    pydantic reads a bool as the number 0 or 1, so ``train.iterations=true`` would run
    one iteration: a slip of the keyboard (or of YAML, which reads ``on`` and ``no`` as
    bools) taken for a setting."""
    keys = list(_bool_numbers(data, cfg, ""))
    if keys:
        raise ConfigError(
            f"invalid {what}: "
            + "; ".join(f"{k}: expected a number, got {str(v).lower()}" for k, v in keys)
        )


def _bool_numbers(raw: Any, value: Any, loc: str) -> Iterator[tuple[str, bool]]:
    """(key, bool) wherever ``raw`` has a bool that validated into a number."""
    if isinstance(raw, bool):
        if isinstance(value, int | float) and not isinstance(value, bool):
            yield loc, raw
    elif isinstance(raw, dict):
        for key, item in raw.items():
            if isinstance(value, BaseModel):
                child = getattr(value, str(key), None)
            else:
                child = value.get(key) if isinstance(value, dict) else None
            yield from _bool_numbers(item, child, f"{loc}.{key}" if loc else str(key))
    elif isinstance(raw, list) and isinstance(value, list | tuple) and len(raw) == len(value):
        for i, (item, child) in enumerate(zip(raw, value, strict=True)):
            yield from _bool_numbers(item, child, f"{loc}[{i}]")


def format_validation_error(err: ValidationError, data: Any = None) -> str:
    """``invalid config: train.iterations: must be > 0 (got -1); ...``; with the raw
    ``data`` that failed, each key as that data spells it (see ``_key``)."""
    problems = []
    for e in err.errors():
        loc = _key(e["loc"], data)
        if e["type"] == "moved_key":  # an old flat loss key: name where it is now
            problems.append("; ".join(moved_key(loc, k) for k in e["ctx"]["keys"]))
            continue
        if e["type"] == INNER_KEY:
            problems.append(f"{loc}.{e['msg']}")
            continue
        msg = e["msg"].removeprefix("Value error, ")
        if not e["loc"]:  # a rule across sections: its message names the keys; the input
            problems.append(msg)  # would be the whole config
            continue
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        got = "" if e["type"] in ("extra_forbidden", "missing") else f" (got {e.get('input')!r})"
        problems.append(f"{loc}: {msg}{got}")
    return "invalid config: " + "; ".join(problems)


def _key(loc: tuple[int | str, ...], data: Any) -> str:
    """The dotted key of an error's location, left out the names of a union's members
    that pydantic puts there and no file holds (``policies.a.learner.optim.lr`` is
    ``policies.a.optim.lr``; ``train.exact.bool`` is ``train.exact``): a part is kept
    where ``data`` has it, or where it is the last, the key a mapping lacks."""
    if data is None:
        return ".".join(str(p) for p in loc)
    parts, node = [], data
    for i, part in enumerate(loc):
        if _holds(node, part):
            node = node[part]
        elif not (isinstance(node, dict) and i == len(loc) - 1):
            continue  # a member's name: the input here is that member's
        parts.append(str(part))
    return ".".join(parts)


def _holds(node: Any, part: int | str) -> bool:
    """Whether the raw ``node`` has the key or index ``part``."""
    if isinstance(node, dict):
        return part in node
    return isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
