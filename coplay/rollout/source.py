"""Where episodes come from: a plan of games in, a batch of episodes out.

A ``Plan`` names every seat by POLICY ID, not by object, and the game by a ``GameRef``
held by the source, so a plan is plain data that can cross a process boundary; the
``policies`` handed to ``EpisodeSource.play`` turn ids into players. A ``Batch`` says
which weight version of each policy played, read from the decisions themselves, so a
learner can tell fresh episodes from stale ones when sources run ahead of it.

``LocalSource`` is the batched engine of this process (``play_episodes``); a source
that plays in other processes or machines implements the same ``play``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from coplay.envs.gameref import GameRef
from coplay.rollout.engine import play_episodes
from coplay.rollout.invalid import InvalidActionConfig
from coplay.types import Episode, JointAction, Opening, Policy


@dataclass(frozen=True)
class Plan:
    """One iteration's games, game ``i`` seating ``seatings[i]`` (a policy id per seat).

    Lists are accepted and kept as tuples. ``group_ids`` empty: each game's seed;
    ``prefixes`` empty: every game from its initial state; ``openings`` empty: no first
    move assigned.
    """

    seatings: tuple[tuple[str, ...], ...]
    seeds: tuple[int, ...]
    group_ids: tuple[int, ...] = ()
    prefixes: tuple[tuple[JointAction, ...], ...] = ()
    """Per game, the joint actions replayed after ``reset(seed)`` before play."""
    openings: tuple[Opening | None, ...] = ()
    """Per game, the first move after the prefix assigned to one player, or None."""
    explore: Mapping[str, float] = field(default_factory=dict)
    """Per policy id, the share of uniform choices mixed into its sampling in these
    games (``LMPolicy.sampling``); an id not listed samples its own distribution."""
    streams: tuple[int, ...] = ()
    """Per game, the seed of its seats' own random streams (``play_episodes``); empty:
    derived from each game's seed and index. A game's draws are then its own, so any
    split of the plan into whole games plays the same episodes."""
    learners: tuple[str, ...] = ()
    """The ids that learn during the run (their versions move with each update), so
    that a source playing ahead of the learner knows whose decisions age from the first
    plan on, also the first after a resume (``coplay.distributed.staleness``)."""

    def __post_init__(self) -> None:
        n = len(self.seeds)
        set_ = object.__setattr__  # frozen: normalise once, here
        set_(self, "seatings", tuple(tuple(s) for s in self.seatings))
        set_(self, "seeds", tuple(self.seeds))
        set_(self, "group_ids", tuple(self.group_ids) or self.seeds)
        set_(self, "prefixes", tuple(tuple(p) for p in self.prefixes) or ((),) * n)
        set_(self, "openings", tuple(self.openings) or (None,) * n)
        set_(self, "explore", dict(self.explore))
        set_(self, "streams", tuple(self.streams) or default_streams(self.seeds))
        set_(self, "learners", tuple(self.learners))
        for name in ("seatings", "group_ids", "prefixes", "openings", "streams"):
            if len(getattr(self, name)) != n:
                raise ValueError(
                    f"a plan of {n} games (seeds) has {len(getattr(self, name))} {name}"
                )
        for i, seats in enumerate(self.seatings):
            if not all(isinstance(pid, str) for pid in seats):
                kinds = [type(pid).__name__ for pid in seats]
                raise ValueError(f"a plan seats policy ids (str), but game {i} seats {kinds}")
        for pid, share in self.explore.items():
            if not 0.0 <= share < 1.0:
                raise ValueError(f"plan.explore[{pid!r}] must be in [0, 1), got {share}")

    def subset(self, games: Sequence[int]) -> Plan:
        """The plan of games ``games`` (indices, in that order), each keeping its seed,
        group, start and stream."""
        return Plan(
            seatings=tuple(self.seatings[i] for i in games),
            seeds=tuple(self.seeds[i] for i in games),
            group_ids=tuple(self.group_ids[i] for i in games),
            prefixes=tuple(self.prefixes[i] for i in games),
            openings=tuple(self.openings[i] for i in games),
            explore=self.explore,
            streams=tuple(self.streams[i] for i in games),
            learners=self.learners,
        )

    @property
    def policy_ids(self) -> tuple[str, ...]:
        """Every id the plan seats or explores, in order of first mention."""
        seated = (pid for seats in self.seatings for pid in seats)
        return tuple(dict.fromkeys([*seated, *self.explore]))


@dataclass(frozen=True)
class Batch:
    """The episodes of one plan, in the plan's order, and how they were played."""

    episodes: tuple[Episode, ...]
    versions: Mapping[str, int]
    """Per policy id that decided in the episodes, the weight version of its decisions
    (``Decision.policy_version``); where one id decided at several versions (a source
    that ran ahead of the learner), the newest."""
    seconds: float
    """Wall time of the play."""
    metrics: Mapping[str, float] = field(default_factory=dict)
    """What the source reports of the play beyond the episodes (a distributed source:
    staleness, dropped and replayed groups, broadcast time)."""


class EpisodeSource(Protocol):
    """Plays a plan's games with the policies named by its ids."""

    def play(self, plan: Plan, policies: Mapping[str, Policy]) -> Batch: ...


@dataclass(frozen=True)
class Played:
    """A plan's games played ahead of their iteration, not yet taken by ``play``."""

    episodes: tuple[Episode, ...]
    replayed: int = 0
    """Groups played again because a worker died meanwhile."""


class PlaysAhead(EpisodeSource, Protocol):
    """A source that plays plans before the loop asks for their batch (Ray workers with
    ``rollout.max_staleness`` k > 0): the loop hands it up to ``lookahead`` plans
    (``submit``), which it starts now with the policies' current weights. ``settle``
    waits for a submitted plan's games and keeps them for its ``play`` (a saved state
    holds them); ``restore`` hands a resumed run's games back, as played before the stop."""

    lookahead: int

    def submit(self, plan: Plan, policies: Mapping[str, Policy]) -> None: ...

    def settle(self, plan: Plan) -> Played: ...

    def restore(self, plan: Plan, played: Played) -> None: ...


def default_streams(seeds: Sequence[int]) -> tuple[int, ...]:
    """Game ``i``'s stream seed from its seed and index: distinct for every game of a
    plan (groups share seeds) and across plans whose seeds differ."""
    return tuple(
        int(np.random.SeedSequence([seed % 2**63, i]).generate_state(1, np.uint64)[0])
        for i, seed in enumerate(seeds)
    )


def decision_versions(episodes: Iterable[Episode]) -> dict[str, int]:
    """Per policy id, the newest ``policy_version`` among its decisions in ``episodes``
    (rejected attempts included: they were sampled by those weights too)."""
    versions: dict[str, int] = {}
    for episode in episodes:
        for traj in episode.trajectories:
            for turn in traj.turns:
                for dec in (*turn.invalid_attempts, turn.decision):
                    seen = versions.get(dec.policy_id, dec.policy_version)
                    versions[dec.policy_id] = max(seen, dec.policy_version)
    return versions


def seat_policies(plan: Plan, policies: Mapping[str, Policy]) -> list[list[Policy]]:
    """The plan's seatings with ids replaced by the policies they name; an id with no
    policy, or a policy under another id than its own, is one ValueError."""
    for pid in plan.policy_ids:
        if pid not in policies:
            known = ", ".join(map(repr, policies)) or "none"
            raise ValueError(f"the plan names policy {pid!r}, but the policies are {known}")
        if policies[pid].policy_id != pid:
            raise ValueError(
                f"policies[{pid!r}] plays as {policies[pid].policy_id!r}; key each policy by "
                "its own policy_id"
            )
    return [[policies[pid] for pid in seats] for seats in plan.seatings]


class LocalSource:
    """The batched engine of this process behind the ``EpisodeSource`` protocol.

    Every game draws from its plan's streams (``Plan.streams``): its policies' samples
    and its penalty moves, so one engine and several (``coplay.distributed``) play the
    same episodes. ``rng`` draws only for policies that cannot take a stream.
    ``waves`` splits the games into parts that take turns at the model
    (``play_episodes``).
    """

    def __init__(
        self,
        game: GameRef,
        *,
        invalid: InvalidActionConfig | None = None,
        max_turns: int | None = None,
        rng: np.random.Generator | None = None,
        waves: int = 1,
    ) -> None:
        self.game = game
        self.invalid = invalid
        self.max_turns = max_turns
        self.waves = waves
        self.rng = rng if rng is not None else np.random.default_rng(0)

    def play(self, plan: Plan, policies: Mapping[str, Policy]) -> Batch:
        seatings = seat_policies(plan, sampling_views(plan, policies))
        start = time.perf_counter()
        episodes = play_episodes(
            self.game.make,
            seatings,
            plan.seeds,
            group_ids=plan.group_ids,
            invalid=self.invalid,
            max_turns=self.max_turns,
            rng=self.rng,
            prefixes=plan.prefixes,
            openings=plan.openings,
            streams=plan.streams,
            waves=self.waves,
        )
        return Batch(tuple(episodes), decision_versions(episodes), time.perf_counter() - start)


def sampling_views(plan: Plan, policies: Mapping[str, Policy]) -> dict[str, Policy]:
    """``policies`` with each id of ``plan.explore`` (share > 0) replaced by its
    ``sampling(share)`` view, which shares the policy's weights, generator and id, so it
    draws what the policy would, mixed with uniform choices; the policies themselves
    stay on-policy. A policy that cannot explore (no ``sampling``, a scripted bot) is a
    ValueError; an id with no policy is left to ``seat_policies`` to name."""
    out = dict(policies)
    for pid, share in plan.explore.items():
        if share <= 0 or pid not in policies:
            continue
        sampling = getattr(policies[pid], "sampling", None)
        if sampling is None:
            raise ValueError(f"plan.explore names {pid!r}, but that policy cannot explore")
        out[pid] = sampling(share)
    return out
