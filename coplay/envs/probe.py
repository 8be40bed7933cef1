"""Build any ``Env`` by name and play it at random, step by step, for the environment checker.

``play`` drives an env the way the rollout engine does (reset, ask who acts, observe,
step, stop at the end or at ``spec.max_turns``) and records a ``Trace``. A state the
engine could not handle, or an exception from the env, stops play with a ``Defect``
that says where (seed, step) and how to fix it. ``resolve_factory`` builds a game
from its registry name or from a user's ``package.module:function``.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from coplay.envs.registry import UnknownGameError, is_family, make_env
from coplay.types import Env, GameSpec, Observation


class Defect(Exception):
    """A broken promise met while playing; ``check`` names the check it belongs to
    (None: the check that was playing)."""

    def __init__(self, check: str | None, message: str, fix: str) -> None:
        super().__init__(message)
        self.check, self.message, self.fix = check, message, fix


class Skip(Exception):
    """The game cannot be played at random (it lists no legal actions)."""


@dataclass(frozen=True)
class Step:
    """One step of a played episode."""

    acting: tuple[int, ...]
    observations: dict[int, Observation]
    """Of the acting players."""
    actions: dict[int, str]
    rewards: dict[int, float]


@dataclass(frozen=True)
class Trace:
    """A played episode, as the env reported it."""

    seed: int
    spec: GameSpec
    steps: tuple[Step, ...]
    terminal: bool
    """False when play stopped at the step limit (truncation)."""
    returns: tuple[float, ...]
    last: dict[int, Observation] = field(default_factory=dict)
    """Observations at the state where ``choose`` stopped the play (empty otherwise)."""

    def views(self) -> list[dict[int, Observation]]:
        """Observations of the acting players at every state played or stopped at."""
        return [s.observations for s in self.steps] + ([self.last] if self.last else [])


Chooser = Callable[[Env, str, Mapping[int, Observation]], dict[int, str] | None]
"""(env, where, observations of the acting players) -> actions, or None to stop."""
Visit = Callable[[Env, str, Mapping[int, Observation]], None]
"""(env, where, observations of the acting players), before the move."""

LEGAL = "legal_actions"
"""The check that owns crashes of ``step`` and ``parse_action``: legal moves must play."""
FREE_TEXTS = ("Hello.", "I will cooperate.", "Let us split it evenly.", "ok")
"""What random play writes where an observation lists no legal actions (free text)."""


def random_actions(seed: int) -> Chooser:
    """Uniform over each acting player's listed legal actions (or sample texts), seeded."""
    rng = np.random.default_rng(seed)

    def choose(env: Env, where: str, observations: Mapping[int, Observation]) -> dict[int, str]:
        actions = {}
        for p, obs in observations.items():
            if obs.legal_actions is None:
                actions[p] = _free_text(env, p, FREE_TEXTS[int(rng.integers(len(FREE_TEXTS)))])
            elif not obs.legal_actions:
                raise Defect(
                    "legal_actions",
                    f"{where}: player {p} is to act but its observation lists no legal action",
                    "list the legal actions of a player to act, or None for free text",
                )
            else:
                actions[p] = obs.legal_actions[int(rng.integers(len(obs.legal_actions)))]
        return actions

    return choose


def _free_text(env: Env, player: int, text: str) -> str:
    """The action a free-text answer parses to; Skip when the game accepts none."""
    action = env.parse_action(player, text)
    if action is None:
        raise Skip(f"the game lists no legal actions and parses none of {list(FREE_TEXTS)}")
    return action


def replay(trace: Trace, *, stop: int | None = None) -> Chooser:
    """The actions of ``trace`` (up to step ``stop``), while the play looks the same."""
    steps = iter(trace.steps[:stop])

    def choose(
        env: Env, where: str, observations: Mapping[int, Observation]
    ) -> dict[int, str] | None:
        step = next(steps, None)
        if step is None or dict(observations) != step.observations:
            return None  # the plays have parted; the caller compares them
        return step.actions

    return choose


def _call(where: str, what: str, fn: Callable, *args: object, owner: str | None = None):
    """``fn(*args)``; an exception becomes a Defect of the check that ``owner`` names
    (None: whichever check is playing)."""
    try:
        return fn(*args)
    except (Defect, Skip):
        raise
    except Exception as err:  # noqa: BLE001 - a crashing env is what is being reported
        raise Defect(
            owner,
            f"{where}: {what} raised {type(err).__name__}: {err}",
            "the env must handle every state reached by legal play",
        ) from err


def _step(env: Env, actions: dict[int, str]) -> dict[int, float]:
    """``env.step`` whose answer must be a mapping of rewards by player."""
    rewards = env.step(actions)
    if not isinstance(rewards, Mapping):
        raise TypeError(f"step() must return {{player: reward}}, got {rewards!r}")
    return dict(rewards)


def _acting(env: Env, where: str) -> tuple[int, ...] | None:
    """The players to act, None at the end; Defects for states the engine cannot play."""
    terminal = _call(where, "is_terminal()", env.is_terminal, owner="episode_length")
    acting = list(_call(where, "players_to_act()", env.players_to_act, owner="episode_length"))
    fix = "players_to_act() lists who must move now: [] once is_terminal(), else 1+ players"
    if terminal:
        if acting:
            raise Defect(
                "episode_length", f"{where}: the game is over but {acting} are to act", fix
            )
        return None
    if not acting:
        raise Defect("episode_length", f"{where}: the game is not over but nobody is to act", fix)
    n = env.spec.num_players
    if len(set(acting)) != len(acting) or not all(p in range(n) for p in acting):
        raise Defect("episode_length", f"{where}: players_to_act() is {acting} ({n} players)", fix)
    if len(acting) > 1 and not env.spec.simultaneous:
        raise Defect(
            "episode_length",
            f"{where}: players {acting} act at once but spec.simultaneous is False",
            "set simultaneous=True in the GameSpec or let one player act at a time",
        )
    return tuple(acting)


def play(
    env: Env,
    seed: int,
    choose: Chooser,
    *,
    limit: int | None = None,
    visit: Visit | None = None,
) -> Trace:
    """Reset ``env`` to ``seed`` and play until the end, ``limit`` steps (default:
    ``spec.max_turns``, where the engine truncates) or ``choose`` stops; ``visit`` sees
    every state before its move."""
    spec = env.spec
    limit = spec.max_turns if limit is None else limit
    where = f"seed {seed}"
    _call(where, f"reset({seed})", env.reset, seed, owner="episode_length")
    steps: list[Step] = []
    last: dict[int, Observation] = {}
    while len(steps) < limit:
        where = f"seed {seed}, step {len(steps)}"
        acting = _acting(env, where)
        if acting is None:
            break
        observations = {p: _call(where, f"observe({p})", env.observe, p) for p in acting}
        if visit:
            _call(where, "inspecting the state", visit, env, where, observations)
        actions = _call(where, "parse_action()", choose, env, where, observations, owner=LEGAL)
        if actions is None:
            last = observations
            break
        rewards = _call(where, f"step({actions})", _step, env, actions, owner=LEGAL)
        steps.append(Step(acting, observations, dict(actions), rewards))
    terminal = bool(_call(where, "is_terminal()", env.is_terminal, owner="episode_length"))
    returns = _call(
        where, "returns()", lambda: tuple(float(r) for r in env.returns()), owner="returns"
    )
    return Trace(seed, spec, tuple(steps), terminal, returns, last)


# --- building the env -------------------------------------------------------------------

ENV_MEMBERS = (
    "spec",
    "reset",
    "players_to_act",
    "observe",
    "parse_action",
    "step",
    "is_terminal",
    "returns",
)


def require_env(obj: object, source: str) -> Env:
    """``obj`` if it has every member of the ``Env`` protocol, else a one-line error."""
    missing = [m for m in ENV_MEMBERS if not hasattr(obj, m)]
    if missing:
        raise ValueError(f"{source} built a {type(obj).__name__}, not an Env (missing {missing})")
    return obj  # type: ignore[return-value]


def names_user_factory(game: str) -> bool:
    """Whether ``game`` is a user's ``package.module:function`` (its prefix before ``:``
    is no registered family such as ``openspiel``)."""
    prefix, sep, _ = game.partition(":")
    return bool(sep) and not is_family(prefix)


def check_game(game: str, params: Mapping[str, object]) -> None:
    """Validate a game without running anyone's code: a registered name or family
    member is built once; a ``package.module:function`` is checked for its form and for
    its top-level package, which is looked up but not imported. Its module is imported
    only when a game is built (``resolve_factory``), since importing runs its code."""
    if not names_user_factory(game):
        make_env(game, **params)
        return
    module_name, _, attr = game.partition(":")
    if not all(p.isidentifier() for p in module_name.split(".")) or not attr.isidentifier():
        raise ValueError(
            f"game {game!r} must be a registered name, a family member such as "
            "openspiel:<name>, or package.module:function"
        )
    top = module_name.split(".")[0]
    if _find_module(top) is None:
        raise ValueError(
            f"unknown game {game!r}: no module {top!r} to import from the current "
            "directory or the installed packages"
        )


def resolve_factory(game: str, params: Mapping[str, object]) -> Callable[[], Env]:
    """A factory for ``game``: a registered name, a family (``openspiel:<name>``), or a
    user's ``package.module:function`` importable from the current directory.

    The env is built once here, so unknown games and bad parameters fail now with a
    one-line ValueError (or TypeError) instead of inside a check.
    """
    try:
        make_env(game, **params)
        return partial(make_env, game, **params)
    except UnknownGameError:
        # A family's unknown member is the family's error: its prefix may also be an
        # importable module (textarena), whose attributes are no user's game function.
        if not names_user_factory(game):
            raise
        module_name, _, attr = game.partition(":")
        if "." not in module_name and _find_module(module_name) is None:
            raise
        factory = partial(_import_factory(game, module_name, attr), **params)
    try:
        built = factory()
    except Exception as err:  # noqa: BLE001 - the user's function: say why in one line
        # check-env's exit 1 means "the game has a defect": a crash must not read so.
        raise ValueError(f"{game}: building the game failed: {type(err).__name__}: {err}") from err
    require_env(built, game)
    return factory


def cwd_on_path() -> None:
    """Put the current directory on ``sys.path``, as ``python -m`` does, so a user's
    module beside the run (a game, a plugin) imports."""
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


def _find_module(name: str) -> object | None:
    """The module spec of ``name``, looked up from the current directory too."""
    cwd_on_path()
    importlib.invalidate_caches()  # a module written since the last import is found
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


def _import_factory(game: str, module_name: str, attr: str) -> Callable[..., Env]:
    if _find_module(module_name) is None:
        raise ValueError(
            f"unknown game {game!r}: no module {module_name!r} to import from the current "
            "directory or the installed packages"
        )
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # noqa: BLE001 - the user's module: say why in one line
        raise ValueError(f"importing {module_name!r} failed: {type(err).__name__}: {err}") from err
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ValueError(f"module {module_name!r} has no function {attr!r} to build the game")
    return factory
