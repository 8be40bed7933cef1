"""How cross-play's matches are played: in this process, or as plans on an episode source.

Either way a match is a ``Match``: it is given the match's seatings (member indices
per seat) and plays one game per seed. ``in_process`` seats the policy objects and
draws from each policy's own generator; ``by_plan`` plays by policy id on an
``EpisodeSource``, every game on its own random stream (``Plan.streams``), so any
source with any number of workers plays the same games.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence

from coplay.envs.gameref import GameRef
from coplay.rollout.engine import play_episodes
from coplay.rollout.invalid import InvalidActionConfig
from coplay.rollout.source import EpisodeSource, Plan, default_streams
from coplay.types import Episode, Policy

MAX_GAMES_PER_CALL = 4096
"""Games played at once; bounds memory when many matches meet a language model."""


Progress = Callable[[int, int], None] | None
Match = Callable[[list[list[int]], Progress], list[Episode]]
"""Plays one match's seatings (member indices per seat), one game per seed."""


def in_process(make, pool: Sequence[Policy], seeds: Sequence[int], invalid, max_turns) -> Match:
    """Each match played here by the policy objects, in calls of at most
    ``MAX_GAMES_PER_CALL`` games."""

    def play(seatings: list[list[int]], told: Progress) -> list[Episode]:
        by_object = [[pool[k] for k in seats] for seats in seatings]
        return _play(make, by_object, seeds, invalid, max_turns, told)

    return play


def _play(make, seatings, seeds, invalid, max_turns, on_progress=None) -> list[Episode]:
    episodes: list[Episode] = []
    total = len(seatings)
    for start in range(0, total, MAX_GAMES_PER_CALL):
        stop = start + MAX_GAMES_PER_CALL
        told = None
        if on_progress is not None:
            told = lambda done, start=start: on_progress(start + done, total)  # noqa: E731
        episodes += play_episodes(
            make,
            seatings[start:stop],
            seeds[start:stop],
            invalid=invalid,
            max_turns=max_turns,
            on_progress=told,
        )
    return episodes


def by_plan(
    source: EpisodeSource, names: Sequence[str], pool: Sequence[Policy], seeds: Sequence[int]
) -> Match:
    """Each match as plans of at most ``MAX_GAMES_PER_CALL`` games played by ``source``,
    game ``e`` on stream ``e`` of the match's seeds in every match."""
    ids, policies = _plan_ids(names, pool)
    streams = default_streams(seeds)

    def play(seatings: list[list[int]], told: Progress) -> list[Episode]:
        plan = Plan([[ids[k] for k in seats] for seats in seatings], seeds, streams=streams)
        episodes: list[Episode] = []
        for start in range(0, len(seeds), MAX_GAMES_PER_CALL):
            part = plan.subset(range(start, min(start + MAX_GAMES_PER_CALL, len(seeds))))
            batch = source.play(part, policies)
            if len(batch.episodes) != len(part.seeds):  # a source that drops stale groups
                raise RuntimeError(
                    f"the episode source returned {len(batch.episodes)} of {len(part.seeds)} "
                    "games; evaluate with rollout.max_staleness=0"
                )
            episodes += batch.episodes
            if told is not None:
                told(len(episodes), len(seeds))
        return episodes

    return play


def _plan_ids(names: Sequence[str], pool: Sequence[Policy]) -> tuple[list[str], dict[str, Policy]]:
    """Each member's id in the plans, and the policies by those ids.

    A member plays under its own ``policy_id``, unless another policy of the population
    has that id too (two checkpoints saved as ``learner``, two seeded ``random`` bots):
    then under its cross-play name, as a shallow copy (weights shared) renamed so.
    """
    owners: dict[str, set[int]] = {}
    for policy in pool:
        owners.setdefault(policy.policy_id, set()).add(id(policy))
    ids = [
        p.policy_id if len(owners[p.policy_id]) == 1 else name
        for name, p in zip(names, pool, strict=True)
    ]
    policies: dict[str, Policy] = {}
    origin: dict[str, tuple[str, Policy]] = {}
    for name, pid, policy in zip(names, ids, pool, strict=True):
        first, held = origin.setdefault(pid, (name, policy))
        if held is not policy:
            raise ValueError(
                f"cross-play players {first!r} and {name!r} would both play as policy id "
                f"{pid!r}; rename one of them"
            )
        policies[pid] = policy if pid == policy.policy_id else _renamed(policy, pid)
    return ids, policies


def _renamed(policy: Policy, policy_id: str) -> Policy:
    twin = copy.copy(policy)
    try:
        twin.policy_id = policy_id
    except AttributeError:
        raise ValueError(
            f"cross-play needs to play a {type(policy).__name__} under the id {policy_id!r} "
            f"(another player is {policy.policy_id!r} too), but its id cannot be set"
        ) from None
    return twin


def check_source(
    source: EpisodeSource,
    game: str,
    params: Mapping[str, object] | None,
    invalid: InvalidActionConfig | None,
    max_turns: int | None,
) -> None:
    """A source that names its game, invalid-action treatment and turn limit must play ours."""
    ref = getattr(source, "game", None)
    if isinstance(ref, GameRef) and (ref.name, dict(ref.params)) != (game, dict(params or {})):
        raise ValueError(
            f"cross-play of {game!r} {dict(params or {})} was given a source that plays "
            f"{ref.name!r} {dict(ref.params)}"
        )
    if hasattr(source, "invalid"):
        theirs, ours = source.invalid or InvalidActionConfig(), invalid or InvalidActionConfig()
        if theirs != ours:
            raise ValueError(
                f"cross-play's invalid-action treatment ({ours}) differs from its episode "
                f"source's ({theirs}); build the source with the same"
            )
    if hasattr(source, "max_turns") and source.max_turns != max_turns:
        raise ValueError(
            f"cross-play truncates games at max_turns={max_turns}, its episode source at "
            f"{source.max_turns}; build the source with the same"
        )
