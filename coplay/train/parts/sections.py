"""The parts' registries as the config and the saved state see them.

A loss term (``TERMS``) or planning part (``PLANNING``) registered under a name that
its config record (``LossConfig``, ``RolloutConfig``) has no field for brings the
model of its section as ``section``; ``open_sections`` gives that record with an
optional field per such part, so ``loss.<name>`` / ``rollout.<name>`` validate,
print and resume like the built-in sections. ``plugins`` imports the modules that
register parts, before a config naming them is validated. ``part_records`` collects
the record types the parts' states hold, which a saved state may name.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, Field, create_model

from coplay.envs.probe import cwd_on_path
from coplay.train.parts.planning import PLANNING
from coplay.train.parts.terms import TERMS


def open_sections(base: type[BaseModel], registry: Mapping[str, Any]) -> type[BaseModel]:
    """``base`` with an optional section (default None: off) for every part of
    ``registry`` that brings a ``section`` under a name ``base`` has no field for."""
    extra = tuple(
        (name, section)
        for name, part in registry.items()
        if name not in base.model_fields and (section := getattr(part, "section", None))
    )
    return _subclass(base, extra) if extra else base


@functools.cache
def _subclass(base: type[BaseModel], extra: tuple[tuple[str, type[BaseModel]], ...]):
    # Cached per set of sections: one class per registry state, so configs built
    # under the same registrations compare equal and pickle by the same class.
    fields: dict[str, Any] = {
        name: (section | None, Field(None, description=_first_line(section.__doc__)))
        for name, section in extra
    }
    return create_model(base.__name__, __base__=base, __module__=base.__module__, **fields)


def _first_line(doc: str | None) -> str:
    return (doc or "").strip().splitlines()[0] if (doc or "").strip() else ""


def open_loss(base: type[BaseModel]) -> type[BaseModel]:
    """``base`` (a ``LossConfig``) with a section per registered term it lacks."""
    return open_sections(base, TERMS)


def open_rollout(base: type[BaseModel]) -> type[BaseModel]:
    """``base`` (a ``RolloutConfig``) with a section per registered planning part."""
    return open_sections(base, PLANNING)


def import_plugins(names: Iterable[str]) -> None:
    """Import each module of ``names`` (from the current directory or the installed
    packages), which registers its parts; a module that fails is one ValueError line."""
    cwd_on_path()
    for name in names:
        if not all(part.isidentifier() for part in name.split(".")):
            raise ValueError(f"plugins: {name!r} is not a module name such as mypkg.parts")
        try:
            importlib.import_module(name)
        except Exception as err:  # noqa: BLE001 - the user's module: say why in one line
            why = (str(err).strip().splitlines() or [""])[0]
            raise ValueError(
                f"plugins: importing {name!r} failed: {type(err).__name__}: {why}"
            ) from err


def part_records() -> tuple[type, ...]:
    """Every record type a registered part's state holds."""
    parts = [*TERMS.values(), *PLANNING.values()]
    return tuple(dict.fromkeys(t for part in parts for t in getattr(part, "records", ())))
