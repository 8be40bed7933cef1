"""A game named by config: registry name plus parameters, buildable in any process.

A ``GameRef`` is plain data (a name and a mapping), so it pickles; a worker in another
process rebuilds the same game from it with ``make()``. The name is anything
``coplay.envs.probe.resolve_factory`` builds: a registered game (``kuhn_poker``), a
family member (``openspiel:liars_dice``) or a user's ``package.module:factory``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from coplay.envs.probe import resolve_factory
from coplay.types import Env, GameSpec


@dataclass(frozen=True)
class GameRef:
    """A game by name and parameters; ``make()`` builds a fresh ``Env``."""

    name: str
    params: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Our own plain dict: a caller's mapping may change later or not pickle.
        object.__setattr__(self, "params", dict(self.params))

    def __reduce__(self) -> tuple:
        # Only the name and parameters cross a process boundary, never the resolved
        # factory or the cached spec: the other process resolves the name itself.
        return (GameRef, (self.name, dict(self.params)))

    @cached_property
    def _factory(self) -> Callable[[], Env]:
        """Resolved once: unknown names and bad parameters fail here, in one line."""
        return resolve_factory(self.name, self.params)

    def make(self) -> Env:
        """A fresh environment of this game."""
        return self._factory()

    @cached_property
    def spec(self) -> GameSpec:
        """The game's static facts (number of players, kind, turn limit)."""
        return self.make().spec
