"""Game registry: names to environment factories, plus name prefixes for whole families.

``make_env("kuhn_poker", players=3)`` builds a registered game; a prefix such as
``openspiel:`` makes any member of a family (``openspiel:liars_dice``) without listing it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from coplay.envs.dilemma import DilemmaEnv
from coplay.envs.dilemma import episode_metrics as dilemma_metrics
from coplay.envs.frozen_lake import episode_metrics as frozen_lake_metrics
from coplay.envs.frozen_lake import make_frozen_lake
from coplay.envs.negotiation import NegotiationEnv
from coplay.envs.negotiation import episode_metrics as negotiation_metrics
from coplay.envs.openspiel_env import OpenSpielEnv
from coplay.envs.openspiel_games import UnknownGameError, params_key
from coplay.envs.signalling import SignallingEnv
from coplay.envs.signalling import episode_metrics as signalling_metrics
from coplay.envs.sokoban import episode_metrics as sokoban_metrics
from coplay.envs.sokoban import make_sokoban
from coplay.envs.textarena_env import INSTALL_HINT, textarena_factory
from coplay.types import Env, Episode, GameKind

EnvFactory = Callable[..., Env]
"""Builds an env from game parameters (keyword arguments)."""
EpisodeMetrics = Callable[[Sequence[Episode]], dict[str, float]]
"""A game's own scores over a batch of finished episodes."""


@dataclass(frozen=True)
class GameInfo:
    """One registered game as ``list_games`` describes it (default parameters)."""

    name: str
    description: str
    num_players: int
    kind: GameKind


@dataclass(frozen=True)
class _Entry:
    factory: EnvFactory
    description: str
    metrics: EpisodeMetrics | None = None


@dataclass(frozen=True)
class _Family:
    factory: Callable[[str], EnvFactory]
    """Given the name after the prefix, the factory for that game."""
    description: str
    form: str
    """How a member is named, e.g. ``openspiel:<name>``."""


_GAMES: dict[str, _Entry] = {}
_FAMILIES: dict[str, _Family] = {}


def register_game(
    name: str, factory: EnvFactory, description: str, *, metrics: EpisodeMetrics | None = None
) -> None:
    """Make ``make_env(name, **params)`` call ``factory(**params)``.

    ``metrics`` maps a batch of finished episodes to the game's own scores (deal rate,
    success rate); evaluation logs them next to the generic ones.
    """
    if ":" in name:
        raise ValueError(f"game name {name!r} must not contain ':' (reserved for families)")
    _GAMES[name] = _Entry(factory, description, metrics)


def game_metrics(name: str) -> EpisodeMetrics | None:
    """The episode-metrics function registered with game ``name`` (None if it has none)."""
    entry = _GAMES.get(name)
    return entry.metrics if entry else None


def register_family(
    prefix: str, factory: Callable[[str], EnvFactory], description: str, *, form: str = ""
) -> None:
    """Make ``make_env(f"{prefix}:{x}")`` build ``factory(x)``; ``description`` names the
    form, ``form`` shows it (default ``<prefix>:<name>``)."""
    _FAMILIES[prefix] = _Family(factory, description, form or f"{prefix}:<name>")


def is_family(prefix: str) -> bool:
    """Whether ``prefix:`` names a registered family (``openspiel``, ``textarena``)."""
    return prefix in _FAMILIES


def list_families() -> list[tuple[str, str]]:
    """``(form, description)`` of every registered family, e.g. ``openspiel:<name>``."""
    return [(f.form, f.description) for f in _FAMILIES.values()]


def _unknown(name: str) -> UnknownGameError:
    families = "".join(f" (or {f.description})" for f in _FAMILIES.values())
    return UnknownGameError(f"unknown game {name!r}; known games: {', '.join(_GAMES)}{families}")


def make_env(name: str, **params: object) -> Env:
    """Build the game called ``name``; ``params`` are the game's own parameters."""
    prefix, sep, rest = name.partition(":")
    if sep:
        if prefix not in _FAMILIES:
            raise _unknown(name)
        return _FAMILIES[prefix].factory(rest)(**params)
    if name not in _GAMES:
        raise _unknown(name)
    return _GAMES[name].factory(**params)


def same_game(a: str, b: str) -> bool:
    """Whether two game names build one game: a registered OpenSpiel game is also a
    member of the ``openspiel:`` family (``kuhn_poker``, ``openspiel:kuhn_poker``)."""
    if a == b:
        return True
    built = _openspiel_game(a)
    return built is not None and built == _openspiel_game(b)


def _openspiel_game(name: str) -> tuple | None:
    """The OpenSpiel game and renderer that ``name`` builds with its defaults; None for
    other games, and for a user's ``module:function``, which is not imported for this."""
    try:
        env = make_env(name)
    except ValueError:  # UnknownGameError too: the name's own error comes when it is built
        return None
    if not isinstance(env, OpenSpielEnv):
        return None
    return env.game.get_type().short_name, env.renderer


def list_games() -> list[GameInfo]:
    """Every registered game with its default number of players and payoff kind."""
    infos = []
    for name, entry in _GAMES.items():
        spec = entry.factory().spec
        infos.append(GameInfo(name, entry.description, spec.num_players, spec.kind))
    return infos


def _openspiel_factory(openspiel_name: str, *, name: str | None = None) -> EnvFactory:
    return partial(_make_openspiel, openspiel_name, name or f"openspiel:{openspiel_name}")


_FIRST: dict[tuple, OpenSpielEnv] = {}
"""The first env built of each OpenSpiel game by name and parameters; later ones are
its siblings (``OpenSpielEnv.sibling``)."""


def _make_openspiel(openspiel_name: str, name: str, **params: object) -> Env:
    kept = params_key(params)
    if kept is None:
        return OpenSpielEnv(openspiel_name, name=name, params=params)
    key = (openspiel_name, name, kept)
    first = _FIRST.get(key)
    if first is None:
        first = _FIRST[key] = OpenSpielEnv(openspiel_name, name=name, params=params)
    return first.sibling()


def _native_factory(name: str, cls: Callable[..., Env]) -> EnvFactory:
    """A factory for a game written in coplay whose parameters are keyword-only
    arguments with defaults; unknown names and wrong types are one-line errors."""
    defaults = {k: p.default for k, p in inspect.signature(cls).parameters.items()}

    def make(**params: object) -> Env:
        for key, val in params.items():
            if key not in defaults:
                raise ValueError(
                    f"unknown parameter {key!r} for game {name!r}; available: {', '.join(defaults)}"
                )
            if not _same_kind(val, defaults[key]):
                raise ValueError(
                    f"parameter {key!r} of game {name!r} must be "
                    f"{type(defaults[key]).__name__}, got {val!r}"
                )
        return cls(**params)

    return make


def _same_kind(value: object, default: object) -> bool:
    """``value`` has the type of ``default``; an int may stand for a float, not a bool."""
    if isinstance(value, bool) or isinstance(default, bool):
        return isinstance(value, bool) and isinstance(default, bool)
    if isinstance(default, float):
        return isinstance(value, int | float)
    return isinstance(value, type(default))


register_game(
    "kuhn_poker",
    _openspiel_factory("kuhn_poker", name="kuhn_poker"),
    "Kuhn poker: one private card from J<Q<K, one betting round (players=2..10)",
)
register_game(
    "leduc_poker",
    _openspiel_factory("leduc_poker", name="leduc_poker"),
    "Leduc poker: private card, public card, two betting rounds",
)
register_game(
    "tic_tac_toe",
    _openspiel_factory("tic_tac_toe", name="tic_tac_toe"),
    "Tic-tac-toe on a numbered 3x3 board",
)
register_game(
    "negotiation",
    _native_factory("negotiation", NegotiationEnv),
    "Split books, hats and balls with private values; talk, propose, accept or walk",
    metrics=negotiation_metrics,
)
register_game(
    "signalling",
    _native_factory("signalling", SignallingEnv),
    "Cooperative referential game: the sender names a target, the receiver picks it",
    metrics=signalling_metrics,
)
register_game(
    "dilemma",
    _native_factory("dilemma", DilemmaEnv),
    "Iterated prisoner's dilemma with a message before every round (simultaneous moves)",
    metrics=dilemma_metrics,
)
register_game(
    "frozen_lake",
    make_frozen_lake,
    "Single-player FrozenLake: reach the goal on a seeded random map without falling in a hole",
    metrics=frozen_lake_metrics,
)
register_game(
    "sokoban",
    make_sokoban,
    "Single-player Sokoban: push every box onto a target in a seeded, solvable random room",
    metrics=sokoban_metrics,
)
register_family(
    "openspiel",
    _openspiel_factory,
    "any OpenSpiel game as 'openspiel:<name>'",
)
register_family(
    "textarena",
    textarena_factory,
    f"any TextArena game as 'textarena:<id>', after {INSTALL_HINT}",
    form="textarena:<id>",
)
