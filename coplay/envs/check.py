"""Check that an environment keeps the promises the rest of coplay relies on.

``check_env(factory, episodes=20, seed=0)`` plays random episodes (uniform over the
listed legal actions, seeded) and runs every check of ``CHECKS`` on them:

- ``determinism``: the same seed and actions give the same observations, rewards and
  returns, in a fresh env and in the same env after ``reset``;
- ``private_info``: no observation shows another player's private facts (envs that
  have a ``private_facts(player)`` method, see ``HasPrivateFacts``), and a player's
  text is a function of its ``info_key``: two states with equal keys must render
  equal text, or the text shows something the player's information does not hold;
- ``legal_actions``: lists are non-empty, bracketed and unique; each action parses
  to itself and a nonsense one to None; every legal action at the first
  ``BRANCH_STEPS`` decisions of each episode steps without raising;
- ``returns``: one finite return per player within ``[spec.min_return,
  spec.max_return]``, summing to 0 in zero-sum games; step rewards, when a game pays
  any, sum to the returns;
- ``episode_length``: a sane spec, no episode that starts over or gets stuck, valid
  players to act; random play ends or is truncated at ``spec.max_turns``.

Every finding says which check, what is wrong and where (seed, step), and how to fix
it. A game without legal-action lists cannot be played at random: its checks are
skipped, not failed.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from coplay.envs.chance import check_seed
from coplay.envs.check_registry import CHECKS, CheckReport, Finding, Probe, register, run_check
from coplay.envs.probe import Defect, Trace, play, random_actions, replay, require_env
from coplay.types import Env, GameKind, Observation

TOLERANCE = 1e-6
NONSENSE_ACTION = "[no such action zq9]"
BRANCH_STEPS = 3
"""Decisions per episode at which every legal action is stepped, each on a replayed env."""


@runtime_checkable
class HasPrivateFacts(Protocol):
    """An env that can list what only ``player`` may know at the current state.

    Facts are strings exactly as the env would write them (``"Your card: K"`` is a
    poor fact, since every player's text says "Your card"; ``"card K"`` is better):
    the checker fails a game whose other players' observations contain one.
    """

    def private_facts(self, player: int) -> Sequence[str]: ...


# --- determinism --------------------------------------------------------------------


def _same(x: object, y: object) -> bool:
    """Equal, NaN counted equal to NaN: a game that pays NaN every time is deterministic
    (the ``returns`` check reports the NaN)."""
    return x == y or (x != x and y != y)


def _same_payoffs(x: Mapping[int, float], y: Mapping[int, float]) -> bool:
    return x.keys() == y.keys() and all(_same(x[p], y[p]) for p in x)


def first_difference(a: Trace, b: Trace) -> str | None:
    """Where two plays of the same seed and actions part, or None if they never do."""
    for k, (x, y) in enumerate(zip(a.views(), b.views(), strict=False)):
        if x.keys() != y.keys():
            return f"step {k}: players to act {sorted(x)} vs {sorted(y)}"
        for p in x:
            if x[p] != y[p]:
                return f"step {k}: player {p}'s observation differs"
        steps = min(len(a.steps), len(b.steps))
        if k < steps and not _same_payoffs(a.steps[k].rewards, b.steps[k].rewards):
            return f"step {k}: rewards {a.steps[k].rewards} vs {b.steps[k].rewards}"
    if len(a.steps) != len(b.steps) or a.terminal != b.terminal:
        return f"the episode lasts {len(a.steps)} vs {len(b.steps)} steps"
    if not _same_payoffs(dict(enumerate(a.returns)), dict(enumerate(b.returns))):
        return f"returns {list(a.returns)} vs {list(b.returns)}"
    return None


@register("determinism", "same seed and actions give the same play")
def determinism(probe: Probe) -> Iterator[Finding]:
    for seed in probe.seeds:
        env = probe.make()
        first = play(env, seed, random_actions(seed))
        for again, how in ((probe.make(), "a fresh env"), (env, "the same env after reset")):
            diff = first_difference(first, play(again, seed, replay(first)))
            if diff:
                yield Finding(
                    "determinism",
                    f"seed {seed}, {diff} between two plays with the same actions in {how}",
                    "draw all randomness from reset(seed) (e.g. numpy.random.default_rng(seed))"
                    " and reset every piece of game state in reset()",
                )


# --- private information -------------------------------------------------------------


def _leaks(env: Env, where: str, observations: Mapping[int, Observation]) -> Iterator[Finding]:
    """Another player's private fact in a player's text, chat messages or info key."""
    n = env.spec.num_players
    facts = {p: [f for f in env.private_facts(p) if f] for p in range(n)}
    for q in range(n):
        try:
            obs = observations[q] if q in observations else env.observe(q)
        except Exception:  # noqa: BLE001 - observing a waiting player is optional
            continue
        shown = " ".join([obs.text, obs.info_key or "", *(c for _, c in obs.messages or ())])
        for p in range(n):
            # A fact q holds itself (both players value the prize at 4) is no leak.
            for fact in sorted(set(facts[p]) - set(facts[q])) if p != q else ():
                if fact in shown:
                    yield Finding(
                        "private_info",
                        f"{where}: player {q}'s observation shows player {p}'s private "
                        f"fact {fact!r}",
                        f"render only player {q}'s own private facts in observe({q})",
                    )


@register("private_info", "no player sees another's private information")
def private_info(probe: Probe) -> Iterator[Finding]:
    seen: dict[tuple[int, str], tuple[str, str]] = {}
    reported: set[tuple[int, str]] = set()
    leaks: list[Finding] = []
    for seed in probe.seeds:
        env = probe.make()
        visit = None
        if isinstance(env, HasPrivateFacts):
            visit = lambda e, where, obs: leaks.extend(_leaks(e, where, obs))  # noqa: E731
        trace = play(env, seed, random_actions(seed), visit=visit)
        for k, step in enumerate(trace.steps):
            for p, obs in step.observations.items():
                if obs.info_key is None:
                    continue
                where = f"seed {seed}, step {k}"
                text, first = seen.setdefault((p, obs.info_key), (obs.text, where))
                if text != obs.text and (p, obs.info_key) not in reported:
                    reported.add((p, obs.info_key))
                    yield Finding(
                        "private_info",
                        f"player {p}'s text differs between {first} and {where} although "
                        f"its info_key is the same ({obs.info_key[:60]!r})",
                        "the text must depend only on what the player may know: drop other "
                        "players' secrets from it, or add what it shows to info_key",
                    )
    yield from leaks


# --- legal actions -----------------------------------------------------------------------


def _list_problems(actions: tuple[str, ...]) -> str | None:
    """What is wrong with a legal-action list as such, or None."""
    if not actions:
        return "is empty"
    bad = [a for a in actions if not (a.startswith("[") and a.endswith("]") and len(a) > 2)]
    if bad:
        return f"has entries that are not bracketed names: {bad[:3]}"
    if len({a.casefold() for a in actions}) != len(actions):
        return f"names an action twice (ignoring case): {list(actions)}"
    return None


def _parse_problems(env: Env, player: int, actions: tuple[str, ...]) -> str | None:
    for action in actions:
        parsed = env.parse_action(player, action)
        if parsed != action:
            return f"parse_action({player}, {action!r}) returned {parsed!r}"
    parsed = env.parse_action(player, NONSENSE_ACTION)
    if parsed is not None:
        return f"parse_action({player}, {NONSENSE_ACTION!r}) returned {parsed!r}, not None"
    return None


@register("legal_actions", "legal actions are listed, parse to themselves and can be played")
def legal_actions(probe: Probe) -> Iterator[Finding]:
    fix = "list every legal action as a unique '[Name]' and parse with coplay.envs.parse_action"
    problems: list[str] = []

    def inspect(env: Env, where: str, observations: Mapping[int, Observation]) -> None:
        for p, obs in observations.items():
            if obs.legal_actions is not None:
                why = _list_problems(obs.legal_actions)
                why = why and f"player {p}'s legal-action list {why}"
                why = why or _parse_problems(env, p, obs.legal_actions)
                if why:
                    problems.append(f"{where}: {why}")

    for seed in probe.seeds:
        try:
            trace = probe.play(seed, visit=inspect)
        except Defect:  # what was seen before a crash is worth reporting with it
            yield from (Finding("legal_actions", m, fix) for m in problems)
            raise
        yield from (Finding("legal_actions", m, fix) for m in problems)
        problems.clear()
        yield from _branches(probe, trace)


def _branches(probe: Probe, trace: Trace) -> Iterator[Finding]:
    """Step every legal action of the first decisions, each on a replayed env."""
    for k, step in enumerate(trace.steps[:BRANCH_STEPS]):
        for p in step.acting:
            for action in step.observations[p].legal_actions or ():
                env = probe.make()
                if len(play(env, trace.seed, replay(trace, stop=k), limit=k).steps) < k:
                    return  # the replay parted from the trace: a determinism finding
                try:
                    env.step({**step.actions, p: action})
                except Exception as err:  # noqa: BLE001 - any crash is the finding
                    yield Finding(
                        "legal_actions",
                        f"seed {trace.seed}, step {k}: step({{{p}: {action!r}}}) raised "
                        f"{type(err).__name__}: {err}",
                        "every action listed as legal must be playable",
                    )
                    return


# --- returns ------------------------------------------------------------------------------


def _return_problems(trace: Trace, env_returns: Sequence[float]) -> str | None:
    spec = trace.spec
    n = spec.num_players
    if len(env_returns) != n:
        return f"returns() has {len(env_returns)} entries for {n} players"
    if not all(math.isfinite(r) for r in env_returns):
        return f"returns() {list(env_returns)} are not all finite"
    if not spec.holds(env_returns):
        return (
            f"returns() {list(env_returns)} leave [spec.min_return, spec.max_return] = "
            f"[{spec.min_return}, {spec.max_return}]"
        )
    if spec.kind is GameKind.ZERO_SUM and trace.terminal and abs(sum(env_returns)) > TOLERANCE:
        return f"returns() {list(env_returns)} of a zero-sum game sum to {sum(env_returns)}"
    return None


def _finite(value: object) -> bool:
    """A finite real number (numpy's included); a string is none, not a crash."""
    return isinstance(value, numbers.Real) and math.isfinite(value)


def _reward_problems(trace: Trace) -> str | None:
    n = trace.spec.num_players
    paid = np.zeros(n)
    for k, step in enumerate(trace.steps):
        if any(p not in range(n) or not _finite(r) for p, r in step.rewards.items()):
            return f"step {k}: step() returned rewards {step.rewards}, not finite per player"
        for p, r in step.rewards.items():
            paid[p] += r
    if trace.terminal:
        off = [p for p in range(n) if paid[p] != 0.0 and abs(paid[p] - trace.returns[p]) > 1e-6]
        if off:
            p = off[0]
            return (
                f"player {p}'s step rewards sum to {paid[p]} but returns() says {trace.returns[p]}"
            )
    return None


@register("returns", "returns are finite, in the spec's range and match the rewards")
def returns(probe: Probe) -> Iterator[Finding]:
    for seed in probe.seeds:
        trace = probe.play(seed)
        why = _return_problems(trace, trace.returns) or _reward_problems(trace)
        if why:
            end = "at the end" if trace.terminal else f"truncated after {len(trace.steps)} steps"
            yield Finding(
                "returns",
                f"seed {seed}, {end}: {why}",
                "make returns() the total of the rewards paid (valid also before the end), "
                "within the spec's bounds and summing to 0 when kind is zero_sum",
            )


# --- episode length -----------------------------------------------------------------------


def _spec_problems(env: Env) -> str | None:
    spec = env.spec
    if spec.num_players < 1:
        return f"spec.num_players is {spec.num_players}"
    if spec.max_turns < 1:
        return f"spec.max_turns is {spec.max_turns}"
    if not spec.min_return <= spec.max_return:
        return f"spec.min_return {spec.min_return} > spec.max_return {spec.max_return}"
    return None


@register("episode_length", "episodes start, progress and end within spec.max_turns")
def episode_length(probe: Probe) -> Iterator[Finding]:
    why = _spec_problems(probe.make())
    if why:
        yield Finding("episode_length", why, "fix the GameSpec the env builds")
        return
    for seed in probe.seeds:
        env = probe.make()
        env.reset(seed)
        if env.is_terminal():
            yield Finding(
                "episode_length",
                f"seed {seed}: the episode is over right after reset()",
                "reset() must start a game in which someone has a move",
            )
            return
        probe.play(seed)  # stuck games and bad players_to_act raise Defects


# --- running ----------------------------------------------------------------------------


def check_env(
    factory: Callable[[], Env],
    *,
    episodes: int = 20,
    seed: int = 0,
    checks: Sequence[str] | None = None,
) -> CheckReport:
    """Run ``checks`` (default: all of ``CHECKS``) on ``episodes`` random episodes.

    Episode i uses env seed ``seed + i`` and picks actions with a Generator seeded the
    same way, so a finding's seed and step replay it.
    """
    if not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"episodes must be a positive integer, got {episodes!r}")
    seed = check_seed(seed)
    names = list(checks) if checks is not None else list(CHECKS)
    unknown = [c for c in names if c not in CHECKS]
    if unknown:
        raise ValueError(f"unknown check(s) {', '.join(unknown)}; known: {', '.join(CHECKS)}")
    env = require_env(factory(), "the factory")
    probe = Probe(factory, tuple(range(seed, seed + episodes)))
    results = tuple(run_check(name, probe) for name in names)
    return CheckReport(env.spec.name, episodes, seed, results)
