"""Rollout requests: what one policy at one weight version must answer in a round.

A request names its policy by ``(policy_id, version)``, not by the Python object, so
it is plain data that could be answered in another process holding those weights.
Seated by id (``coplay.rollout.source``), one key is one policy; distinct objects built
by hand under one key are asked apart (``shared_keys``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from coplay.rollout.streams import SeatStream
from coplay.types import Decision, Observation, Policy, Streamed, Submits

PolicyKey = tuple[str, int]
"""``(policy_id, version)``: which policy, at which weights, must answer."""


@dataclass(frozen=True)
class RolloutRequest:
    """What one policy at one weight version must answer in a round, in order.

    ``forced[i]`` is the legal-action index observation ``i`` is told to play (an
    assigned first move, ``Steerable.act_forced``) or None to sample.
    """

    policy_id: str
    version: int
    observations: tuple[Observation, ...]
    forced: tuple[int | None, ...]

    def __post_init__(self) -> None:
        if len(self.forced) != len(self.observations):
            raise ValueError(
                f"a request of {self.policy_id!r} has {len(self.observations)} observations "
                f"but {len(self.forced)} forced entries"
            )

    @property
    def key(self) -> PolicyKey:
        return (self.policy_id, self.version)


def policy_key(policy: Policy) -> PolicyKey:
    """The key a policy's requests go under (a policy without a version is at 0)."""
    return (policy.policy_id, getattr(policy, "version", 0))


def shared_keys(seatings: Sequence[Sequence[Policy]]) -> frozenset[PolicyKey]:
    """Keys under which more than one distinct policy object sits in ``seatings``.

    A seating by policy id (``coplay.rollout.source``) never has any. Objects built by
    hand may: scripted bots with different seeds are all ``'random'``, and two
    checkpoints from folders of the same name load under one id. The engine keeps
    those apart by object, the last resort that only a local engine can take.
    """
    seen: dict[PolicyKey, Policy] = {}
    shared = set()
    for seats in seatings:
        for policy in seats:
            key = policy_key(policy)
            if seen.setdefault(key, policy) is not policy:
                shared.add(key)
    return frozenset(shared)


def answer(
    policy: Policy,
    request: RolloutRequest,
    streams: Sequence[SeatStream | None] = (),
) -> list[Decision]:
    """``policy``'s decisions for ``request`` in order: assigned first moves through
    ``act_forced``, the rest sampled in one batch, each from its seat's stream in
    ``streams`` where the games have streams and the policy can draw from them."""
    return ask(policy, request, streams)()


def ask(
    policy: Policy,
    request: RolloutRequest,
    streams: Sequence[SeatStream | None] = (),
) -> Callable[[], list[Decision]]:
    """``answer`` in two steps: a ``Submits`` policy's pass is queued now, and
    everything else (its draws, any other policy's ``act``, the told moves) happens
    when the returned function is called. So the draws come in the order the requests
    are read, as ``answer`` after ``answer`` would take them."""
    forced = request.forced
    free = [i for i, f in enumerate(forced) if f is None]
    told = [i for i, f in enumerate(forced) if f is not None]
    obs = [request.observations[i] for i in free]
    own = [streams[i] for i in free] if streams else []
    streamed = bool(own) and all(r is not None for r in own)
    queued = None
    if free and isinstance(policy, Submits):
        queued = policy.submit(obs, own if streamed else None)

    def decisions() -> list[Decision]:
        out: list[Decision | None] = [None] * len(forced)
        if queued is not None:
            sampled = queued()
        elif not free:
            sampled = []
        elif streamed and isinstance(policy, Streamed):
            sampled = policy.act_streamed(obs, own)
        else:
            sampled = policy.act(obs)
        for i, dec in zip(free, _counted(policy, sampled, len(free)), strict=True):
            out[i] = dec
        if told:
            moves = [forced[i] for i in told]
            picked = policy.act_forced([request.observations[i] for i in told], moves)
            for i, dec in zip(told, _counted(policy, picked, len(told)), strict=True):
                out[i] = dec
        return out

    return decisions


def _counted(policy: Policy, decisions: Sequence[Decision], asked: int) -> Sequence[Decision]:
    """``decisions``, one per observation ``policy`` was asked, or one line naming it:
    a short answer would otherwise fail deep in the engine as a bare ``zip`` error."""
    decisions = list(decisions)
    if len(decisions) != asked:
        raise ValueError(
            f"policy {policy.policy_id!r} gave {len(decisions)} decisions where it was "
            f"asked for {asked}: one per observation, in order"
        )
    return decisions
