"""Loading an OpenSpiel game by name and parameters, once per game.

``load_openspiel_game`` is ``pyspiel.load_game`` with one-line errors that say which
name or parameter is wrong, a cache (a pyspiel game is immutable: every env of it
shares one), and the checks of ``openspiel_params`` run once per game, so that a
setting that breaks the game fails when it is loaded, not at the first reset or in the
middle of a run. Games that cannot be an ``Env`` are refused at load too: mean-field
games, and games that draw chance from their own generator rather than from the seed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import pyspiel

from coplay.envs.openspiel_params import crash_problem, play_problem, spiel_reason


class UnknownGameError(ValueError):
    """A game name that neither the registry nor OpenSpiel knows."""


_TYPES: dict[str, pyspiel.GameType] = {}
"""OpenSpiel's registered game types by short name, read once (and again after
OpenSpiel's Python games register themselves)."""


def _game_type(openspiel_name: str) -> pyspiel.GameType | None:
    """The registered type of ``openspiel_name``; its Python games are imported only
    when such a game (``python_iterated_prisoners_dilemma``) is asked for."""
    if openspiel_name not in _TYPES and openspiel_name.startswith("python_"):
        import open_spiel.python.games  # noqa: F401

        _TYPES.clear()
    if not _TYPES:
        _TYPES.update((t.short_name, t) for t in pyspiel.registered_games())
    return _TYPES.get(openspiel_name)


def _game_valued(game_type: pyspiel.GameType, params: Mapping[str, object]) -> dict[str, object]:
    """Parameters that are themselves games (``repeated_game``'s ``stage_game``) may be
    written as a game string (``"matrix_pd"``, ``"goofspiel(num_cards=3)"``)."""
    spec = game_type.parameter_specification
    out = dict(params)
    for key, val in params.items():
        if isinstance(spec.get(key), dict) and isinstance(val, str | dict):
            out[key] = pyspiel.game_parameters_from_string(val) if isinstance(val, str) else val
            # '' parses to no name and '()' to an empty one: a KeyError or an unknown
            # game '' would not say which parameter is wrong.
            name = out[key].get("name")
            if not isinstance(name, str) or not name.strip():
                raise ValueError(
                    f"parameter {key!r} of game {game_type.short_name!r} must name a game "
                    f"(such as 'matrix_pd' or 'goofspiel(num_cards=3)'), got {val!r}"
                )
            if _game_type(name) is None:
                raise UnknownGameError(
                    f"parameter {key!r} names unknown OpenSpiel game {val!r}; "
                    "see pyspiel.registered_names()"
                )
    return out


def _check_values(game_type: pyspiel.GameType, params: Mapping[str, object]) -> None:
    """One error line for a value OpenSpiel cannot take (a list, None), which it would
    refuse with a TypeError about converting a dictionary."""
    spec = game_type.parameter_specification
    for key, val in params.items():
        game_valued = isinstance(spec.get(key), dict)
        if isinstance(val, int | float | str | bool) or (game_valued and isinstance(val, dict)):
            continue
        kinds = "a game string" if game_valued else "an int, float, str or bool"
        raise ValueError(
            f"parameter {key!r} of game {game_type.short_name!r} must be {kinds}, "
            f"got {type(val).__name__} {val!r}"
        )


_LOADED: dict[tuple, pyspiel.Game] = {}
"""Games already loaded, by name and parameters: a pyspiel game is immutable, so every
env of it shares one (a training run builds one env per game played)."""


def params_key(params: Mapping[str, object]) -> tuple | None:
    """A dict key for game parameters (a game-valued one's parameters nested), None for
    values OpenSpiel cannot take. The type is part of it: 1 and 1.0 are equal keys but
    not equal parameters."""
    items = []
    for key, val in sorted(params.items()):
        if isinstance(val, Mapping):
            val = params_key(val)
            if val is None:
                return None
        elif not isinstance(val, int | float | str):
            return None
        items.append((key, type(val).__name__, val))
    return tuple(items)


def load_openspiel_game(openspiel_name: str, params: Mapping[str, object]) -> pyspiel.Game:
    """``pyspiel.load_game`` with errors that say which name or parameter is wrong,
    checked once per name and parameters (``openspiel_params``) so that a setting that
    breaks the game fails here, not at the first reset or in the middle of a run."""
    kept = params_key(params)
    if kept is None:
        return _load(openspiel_name, params)
    key = (openspiel_name, kept)
    if key not in _LOADED:
        _LOADED[key] = _load(openspiel_name, params)
    return _LOADED[key]


def _load(openspiel_name: str, params: Mapping[str, object]) -> pyspiel.Game:
    game_type = _game_type(openspiel_name)
    if game_type is None:
        raise UnknownGameError(
            f"unknown OpenSpiel game {openspiel_name!r}; see pyspiel.registered_names()"
        )
    allowed = sorted(game_type.parameter_specification)
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(
            f"unknown parameter(s) {', '.join(unknown)} for game {openspiel_name!r}; "
            f"available: {', '.join(allowed) or 'none'}"
        )
    _check_values(game_type, params)
    why = crash_problem(game_type, params)
    if why:
        raise _bad_parameters(game_type, params, why)
    valued = None
    try:
        valued = _game_valued(game_type, params)
        with c_stderr_silenced():
            game = pyspiel.load_game(openspiel_name, valued)
    except Exception as err:  # noqa: BLE001 - C++ errors arrive as ValueError, MemoryError...
        if valued is None and not isinstance(err, pyspiel.SpielError):
            raise  # _game_valued's own one-line error
        raise ValueError(
            f"bad parameters for game {openspiel_name!r}: {spiel_reason(err)}"
        ) from err
    # The loaded game's type, not the registered one: a wrapper (misere, zerosum) is
    # registered as sampled-chance and takes the chance mode of the game it wraps.
    why = _unplayable(game.get_type())
    if why:
        raise ValueError(f"OpenSpiel game {openspiel_name!r} cannot be played here: {why}")
    if params:
        with c_stderr_silenced():
            why = play_problem(game)
        if why and not _fails_by_default(openspiel_name):
            raise _bad_parameters(game_type, params, why)
    return game


def _unplayable(game_type: pyspiel.GameType) -> str | None:
    """Why coplay cannot play a game of ``game_type`` as its envs promise, or None."""
    if game_type.dynamics == pyspiel.GameType.Dynamics.MEAN_FIELD:
        # Its decision nodes alternate with nodes where a population's distribution,
        # not a seat, moves (player -5).
        return "a mean-field game is played against a population's distribution, not by n players"
    if game_type.chance_mode == pyspiel.GameType.ChanceMode.SAMPLED_STOCHASTIC:
        # Its chance nodes list one outcome of probability 1 and deal from a generator
        # inside the game object, which every env shares (negotiation, tarok): a seed
        # cannot fix what they deal, and exact evaluation would take one deal as certain.
        # Loading a game per reset with rng_seed=seed is cheap, but wrappers bury that
        # parameter in the game they wrap, and the lone outcome would stay.
        return (
            "its chance outcomes come from the game's own generator, not from reset(seed), "
            "so a seed cannot fix what it deals"
        )
    return None


def _bad_parameters(
    game_type: pyspiel.GameType, params: Mapping[str, object], why: str
) -> ValueError:
    """One line naming the game, each parameter given with its default, and ``why``."""
    spec = game_type.parameter_specification
    given = ", ".join(
        f"{k}={v!r}"
        + ("" if v == spec[k] or isinstance(spec[k], dict) else f" (default {spec[k]!r})")
        for k, v in params.items()
    )
    return ValueError(f"bad parameters for game {game_type.short_name!r}, {given}: {why}")


def _fails_by_default(openspiel_name: str) -> bool:
    """Whether the game with its default parameters breaks at its start as well: then
    the fault is OpenSpiel's (``coplay check-env`` reports it), not the parameters'."""
    try:
        game = load_openspiel_game(openspiel_name, {})
    except ValueError:
        return False
    with c_stderr_silenced():
        return play_problem(game) is not None


@contextmanager
def c_stderr_silenced() -> Iterator[None]:
    """The process's stderr closed to C++ code for a moment: OpenSpiel prints every
    error it raises there first (``OpenSpiel exception: ...``), above the one line the
    command line gives for it; the exception carries the same text."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
