"""``RaySource``: the episodes of a plan played by Ray actors.

Whole groups go to one worker (their baselines see every game of the group), each
worker plays its share with the batched engine, and the episodes come back in the
plan's order. Every game draws from its own streams (``Plan.streams``), so with
``max_staleness: 0`` the batch is the one the local engine plays, whatever the number
of workers.

With ``max_staleness: k >= 1`` the source plays ahead: the loop hands it the next
``k`` plans (``submit``) before the learner updates, and the workers play them with
the weights they have meanwhile. A group with a decision more than ``k`` updates
stale when its batch is taken is dropped and counted (``coplay.distributed.staleness``). A saved
state keeps the games played ahead (``settle`` waits for them), and a resumed run hands
them back (``restore``): they were started at older weights than it resumes with.

A worker that dies is restarted by Ray (``max_restarts``); the driver plays its
unfinished task again, from the same shipments and streams, and counts the groups
it replayed (``rollout/replayed_groups``).

The same workers sample a text policy's answers for its sampled evaluation
(``tally``, a ``coplay.eval.sampled.Sampler``): the local calls' chunks of states in
one share per worker, the policy shipped as for play.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import ray
from ray.exceptions import RayActorError, RayTaskError

from coplay.distributed.config import RayConfig, check_reachable, check_room
from coplay.distributed.staleness import keep_fresh
from coplay.distributed.worker import RolloutWorker, Shipment, cpu_weights, for_workers
from coplay.envs.gameref import GameRef
from coplay.eval.sampled import Tally, per_call
from coplay.rollout.invalid import InvalidActionConfig
from coplay.rollout.source import Batch, Plan, Played, decision_versions
from coplay.types import Episode, Observation, Policy

RESTART_TIMEOUT_S = 300
"""How long a dead worker may take to come back (it imports coplay and torch anew)."""
MAX_ATTEMPTS = 5
"""Plays of one task before the run gives up on it (a worker that keeps dying)."""


class WorkerLost(ConnectionError):
    """A rollout worker is gone for good: an error of the cluster, not of the code, so
    the command line prints it as one line."""


def _result(future: Any) -> Any:
    """``ray.get(future)``, an error raised inside the worker raised as itself: Ray
    wraps it in a ``RayTaskError`` whose text opens with a banner of the worker's
    process, which a one-line error would print instead of the message."""
    try:
        return ray.get(future)
    except RayTaskError as err:
        if isinstance(err.cause, Exception):
            raise err.cause from None
        raise


def start_ray(cfg: RayConfig, workers: int) -> None:
    """Join ``cfg.address``, or start a private local Ray sized for ``workers``, quiet
    (no dashboard, worker logs not forwarded); nothing when Ray is already running."""
    if ray.is_initialized():
        return
    quiet: dict[str, Any] = {
        "include_dashboard": False,
        "log_to_driver": False,
        "logging_level": logging.WARNING,
    }
    if cfg.address is not None:
        check_reachable(cfg.address)
        ray.init(address=cfg.address, **quiet)
    else:
        # address="local": a Ray of our own even where another runs on this machine
        # (plain ray.init() would join that one, and refuse num_cpus).
        ray.init(address="local", num_cpus=local_cpus(cfg, workers), **quiet)


def local_cpus(cfg: RayConfig, workers: int) -> int:
    """CPUs of a private local Ray: ``ray.num_cpus``, else enough for every worker's
    share (rounded up: one short, the last worker would never start, and wait forever);
    a ``ray.num_cpus`` too small for them is refused (``check_room``)."""
    check_room(cfg, workers)
    return cfg.num_cpus or max(1, math.ceil(workers * cfg.worker_cpus))


def start_workers(
    game: GameRef,
    workers: int,
    cfg: RayConfig,
    invalid: InvalidActionConfig | None = None,
    max_turns: int | None = None,
) -> list[Any]:
    """``workers`` rollout actors for ``game``, spread over the cluster's nodes and
    restarted by Ray when they die (``cfg.max_restarts``)."""
    if workers < 1:
        raise ValueError(f"a Ray source needs at least one worker, got {workers}")
    start_ray(cfg, workers)
    actor = ray.remote(RolloutWorker).options(
        num_cpus=cfg.worker_cpus,
        max_restarts=cfg.max_restarts,
        max_task_retries=0,  # the driver replays a dead worker's task itself, counted
        scheduling_strategy="SPREAD",
    )
    return [actor.remote(game, invalid, max_turns) for _ in range(workers)]


def version_of(policy: Policy) -> int:
    return getattr(policy, "version", 0)


@dataclass
class _Sent:
    policy: Policy
    token: int
    base: int
    """The version the policy was shipped at."""
    ref: Any


class Shipping:
    """Every policy id's shipment: the object once (again only when the id names a
    new object), then its weights once per version, shared by every worker."""

    def __init__(self) -> None:
        self.sent: dict[str, _Sent] = {}
        self.weights: dict[str, tuple[int, Any]] = {}

    def moved(self, current: Mapping[str, int]) -> set[str]:
        """Ids now at another version than they were first shipped at: the learners."""
        return {pid for pid, sent in self.sent.items() if current.get(pid, sent.base) != sent.base}

    def ship(self, ids: Sequence[str], policies: Mapping[str, Policy]) -> dict[str, Shipment]:
        out = {}
        for pid in ids:
            policy, version = policies[pid], version_of(policies[pid])
            sent = self.sent.get(pid)
            # A policy without a model cannot take weights: a new version is a new object.
            movable = hasattr(policy, "model") and hasattr(policy, "backend")
            if sent is None or sent.policy is not policy or (version != sent.base and not movable):
                ref = ray.put(for_workers(policy))
                sent = self.sent[pid] = _Sent(policy, uuid.uuid4().int, version, ref)
                self.weights.pop(pid, None)  # the old object's: not this one's at any version
            out[pid] = Shipment(sent.token, version, sent.ref, self._weights(pid, sent, version))
        return out

    def _weights(self, pid: str, sent: _Sent, version: int) -> Any | None:
        if version == sent.base:
            return None
        have = self.weights.get(pid)
        if have is None or have[0] != version:
            weights = cpu_weights(sent.policy.model.state_dict())
            have = self.weights[pid] = (version, ray.put(weights))
        return have[1]


def split(plan: Plan, parts: int) -> list[list[int]]:
    """Game indices in at most ``parts`` shares of whole groups, in plan order, about
    equal in games."""
    groups: dict[int, list[int]] = {}
    for i, g in enumerate(plan.group_ids):
        groups.setdefault(g, []).append(i)
    total, shares, done = len(plan.seeds), [[] for _ in range(parts)], 0
    for games in groups.values():
        # by the group's middle game, so a large group goes where most of it falls
        shares[min(parts - 1, (2 * done + len(games)) * parts // (2 * total))].extend(games)
        done += len(games)
    return [s for s in shares if s]


def shares(n: int, parts: int) -> list[tuple[int, int]]:
    """``range(n)`` in at most ``parts`` contiguous (start, stop) shares, about equal.

    >>> shares(5, 2), shares(1, 3)
    ([(0, 2), (2, 5)], [(0, 1)])
    """
    bounds = [n * i // parts for i in range(parts + 1)]
    return [(a, b) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


@dataclass
class _Task:
    worker: int
    games: list[int]
    plan: Plan
    shipments: dict[str, Shipment]
    future: Any
    attempts: int = 1


@dataclass
class _Flight:
    """A plan's tasks in flight."""

    tasks: list[_Task]
    broadcast_s: float
    started: float = field(default_factory=time.perf_counter)
    played: Played | None = None
    """Its games, once waited for (``settle``) or handed back (``restore``)."""


class RaySource:
    """Plays plans on ``workers`` Ray actors (``RolloutWorker``)."""

    def __init__(
        self,
        game: GameRef,
        *,
        workers: int,
        max_staleness: int = 0,
        ray_config: RayConfig | None = None,
        invalid: InvalidActionConfig | None = None,
        max_turns: int | None = None,
        actors: Sequence[Any] | None = None,
    ) -> None:
        """``actors``: rollout workers already started (``start_workers``) for this
        game, to play on instead of starting ``workers`` new ones."""
        self.game, self.invalid, self.max_turns = game, invalid, max_turns
        self._owns_workers = actors is None
        if actors is None:
            actors = start_workers(game, workers, ray_config or RayConfig(), invalid, max_turns)
        if not actors:
            raise ValueError(f"a Ray source needs at least one worker, got {len(actors)}")
        self.workers = list(actors)
        self.max_restarts = (ray_config or RayConfig()).max_restarts if self._owns_workers else None
        """Ray's restarts of a dead worker: of workers this source started; None when
        given its workers."""
        self.max_staleness = max_staleness
        self.lookahead = max_staleness
        """Plans the loop may hand over (``submit``) before the one it plays next."""
        self.shipping = Shipping()
        self._pending: dict[int, tuple[Plan, _Flight]] = {}

    def submit(self, plan: Plan, policies: Mapping[str, Policy]) -> None:
        """Start playing ``plan`` now, with the policies' current weights; ``play(plan)``
        takes its batch later."""
        self._pending[id(plan)] = (plan, self._launch(plan, policies))

    def settle(self, plan: Plan) -> Played:
        """The games of ``plan``, submitted before, waited for and kept for ``play``."""
        held = self._pending.get(id(plan))
        if held is None:
            raise ValueError("settle takes a plan handed over by submit and not yet played")
        return self._settled(held[1])

    def restore(self, plan: Plan, played: Played) -> None:
        """Hold ``played``, a resumed run's games of ``plan`` from before its stop, for
        ``play``: they were started at older weights than the run resumes with."""
        self._pending[id(plan)] = (plan, _Flight([], 0.0, played=played))

    def play(self, plan: Plan, policies: Mapping[str, Policy]) -> Batch:
        """The plan's batch (of fresh enough groups), waiting for its tasks."""
        start = time.perf_counter()
        held = self._pending.pop(id(plan), None)
        flight = held[1] if held is not None else self._launch(plan, policies)
        played = self._settled(flight)
        episodes, replayed = list(played.episodes), played.replayed
        current = {pid: version_of(p) for pid, p in policies.items()}
        # The plan names its learners; a version seen moving marks one too (a plan made
        # without them). Not by moves alone: a resumed run's first plan, shipped at the
        # saved version, would count none and log other metrics than the uninterrupted run.
        learning = set(plan.learners) | self.shipping.moved(current)
        kept, metrics = keep_fresh(episodes, current, learning, self.max_staleness)
        metrics["rollout/replayed_groups"] = float(replayed)
        metrics["perf/broadcast_s"] = flight.broadcast_s
        return Batch(tuple(kept), decision_versions(kept), time.perf_counter() - start, metrics)

    def _launch(self, plan: Plan, policies: Mapping[str, Policy]) -> _Flight:
        self._check_open()
        t0 = time.perf_counter()
        shipments = self.shipping.ship(plan.policy_ids, policies)
        broadcast_s = time.perf_counter() - t0
        tasks = []
        for w, games in enumerate(split(plan, len(self.workers))):
            sub = plan.subset(games)
            future = self.workers[w].play.remote(sub, shipments)
            tasks.append(_Task(w, games, sub, shipments, future))
        return _Flight(tasks, broadcast_s)

    def _settled(self, flight: _Flight) -> Played:
        if flight.played is None:
            episodes, replayed = self._collect(flight)
            flight.played = Played(tuple(episodes), replayed)
        return flight.played

    def _collect(self, flight: _Flight) -> tuple[list[Episode], int]:
        """Every task's episodes in plan order; a task whose worker died is played
        again on the restarted worker. Returns the episodes and the groups replayed."""
        played: dict[int, Episode] = {}
        replayed = 0
        todo = list(flight.tasks)
        while todo:
            task = todo.pop(0)
            try:
                episodes = _result(task.future)
            except RayActorError:
                self._check_restarts(task.worker)
                if task.attempts >= MAX_ATTEMPTS:
                    raise WorkerLost(
                        f"rollout worker {task.worker} died {task.attempts} times playing "
                        f"the same {len(task.games)} games; giving up"
                    ) from None
                replayed += len(set(task.plan.group_ids))
                self._await_restart(task.worker)
                task.future = self.workers[task.worker].play.remote(task.plan, task.shipments)
                task.attempts += 1
                todo.append(task)
                continue
            played |= dict(zip(task.games, episodes, strict=True))
        return [played[i] for i in sorted(played)], replayed

    def tally(
        self, policy: Policy, observations: Sequence[Observation], *, k: int, seed: int
    ) -> list[Tally]:
        """``coplay.eval.sampled.sample_tallies`` of ``policy`` at ``observations``, in
        order, each worker holding its copy of the policy (``_eval_shipment``) and
        asking one contiguous share of the local calls' chunks (``per_call``), so the
        tallies are the local ones whatever the number of workers."""
        self._check_open()
        pid, shipment = self._eval_shipment(policy)
        step, n = per_call(k), len(observations)
        cuts = [(a * step, min(b * step, n)) for a, b in shares(-(-n // step), len(self.workers))]
        asks = [
            partial(self.workers[w].tally.remote, pid, shipment, observations[a:b], k, seed)
            for w, (a, b) in enumerate(cuts)
        ]
        futures = [ask() for ask in asks]  # all started before any is awaited
        return [t for w, ask in enumerate(asks) for t in self._get(w, futures[w], ask)]

    def _eval_shipment(self, policy: Policy) -> tuple[str, Shipment]:
        """A policy these workers play (the run's learner) goes as for play: the workers
        hold it and fetch only a newer version's weights. Any other goes whole, under an
        id of its own, at every call: its weights may have moved in place without a new
        version (a magnet's do, ``coplay/train/parts/kl.py``)."""
        pid = policy.policy_id
        sent = self.shipping.sent.get(pid)
        if sent is None or sent.policy is not policy:
            pid = f"eval:{pid}"
            self.shipping.sent.pop(pid, None)  # a new token: the workers fetch it anew
        return pid, self.shipping.ship([pid], {pid: policy})[pid]

    def _get(self, worker: int, future: Any, again: Callable[[], Any]) -> Any:
        """``ray.get(future)``; where the worker died, ``again()`` on it once Ray has
        restarted it, up to ``MAX_ATTEMPTS`` calls."""
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                return _result(future)
            except RayActorError:
                self._check_restarts(worker)
                if attempt == MAX_ATTEMPTS:
                    break
                self._await_restart(worker)
                future = again()
        raise WorkerLost(f"rollout worker {worker} died {MAX_ATTEMPTS} times on one task")

    def _check_restarts(self, worker: int) -> None:
        """A dead worker that Ray will not restart ends the run at once, in one line
        (rather than after ``RESTART_TIMEOUT_S`` of waiting for it)."""
        if self.max_restarts == 0:
            raise WorkerLost(
                f"rollout worker {worker} died and ray.max_restarts is 0: not restarted"
            )

    def _await_restart(self, worker: int) -> None:
        """Wait until Ray has the dead worker running again (calls made while it
        restarts fail at once rather than wait)."""
        deadline = time.monotonic() + RESTART_TIMEOUT_S
        while True:
            try:
                ray.get(self.workers[worker].pid.remote())
                return
            except RayActorError:
                if time.monotonic() > deadline:
                    raise WorkerLost(
                        f"rollout worker {worker} died and was not back within "
                        f"{RESTART_TIMEOUT_S} s (ray.max_restarts used up?)"
                    ) from None
                time.sleep(0.2)

    def close(self) -> None:
        """Stop the workers this source started (not ones it was given), so that their
        CPUs are free at once for the workers of what runs next."""
        if self._owns_workers:
            for worker in self.workers:
                ray.kill(worker)
        self.workers, self._pending = [], {}

    def _check_open(self) -> None:
        # After close the source has no workers: split them into nothing was an IndexError.
        if not self.workers:
            raise RuntimeError("this Ray source is closed: its workers were stopped by close()")

    def worker_pids(self) -> list[int]:
        return ray.get([w.pid.remote() for w in self.workers])

    def worker_nodes(self) -> list[str]:
        return ray.get([w.node_id.remote() for w in self.workers])
