"""Batched multi-game rollout: many games at once, one forward pass per policy per step.

Every round, each live game reports the players who must act; the engine gathers all
pending observations of the same policy into one ``RolloutRequest`` answered by one
``Policy.act`` call (one batched forward pass for a language model), applies the
invalid-action treatment, and steps each game once all its acting players have a legal
action (several for simultaneous moves). Episodes keep the decisions exactly as sampled.
The requests are plain data (``coplay.rollout.request``); each game's state, the
treatment of its answers and its steps are ``coplay.rollout.live``'s.

Given per-game ``streams``, every seat of a game draws from its own counter-based
stream of ``(stream, seat)`` (``coplay.rollout.streams``): the policy's samples (``Streamed.act_streamed``) and the
penalty moves of invalid answers alike. A game then plays the same whatever other
games share its batch, so a plan split over several engines (``coplay.distributed``)
plays what one engine plays. Without streams each policy draws from its own generator
in batch order, and penalties from ``rng``.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace

import numpy as np

from coplay.rollout.invalid import InvalidActionConfig
from coplay.rollout.live import Live, advance, finish, resolve, start
from coplay.rollout.request import RolloutRequest, ask, policy_key, shared_keys
from coplay.types import Env, Episode, JointAction, Observation, Opening, Policy


def play_episodes(
    make_env: Callable[[], Env],
    seatings: Sequence[Sequence[Policy]],
    seeds: Sequence[int],
    *,
    group_ids: Sequence[int] | None = None,
    invalid: InvalidActionConfig | None = None,
    max_turns: int | None = None,
    rng: np.random.Generator | None = None,
    prefixes: Sequence[Sequence[JointAction]] | None = None,
    openings: Sequence[Opening | None] | None = None,
    on_progress: Callable[[int], None] | None = None,
    streams: Sequence[int] | None = None,
    waves: int = 1,
) -> list[Episode]:
    """Play one episode per seating (seat -> policy) and seed, all at once.

    Args:
      make_env: builds a fresh environment.
      seatings: for each episode, the policy in each seat.
      seeds: environment seed per episode; equal seeds give equal chance outcomes.
      group_ids: group label per episode (defaults to the seed) for group baselines.
      invalid: invalid-action treatment; defaults to forfeit with no retries.
      max_turns: truncate episodes after this many steps (defaults to the game's).
      rng: randomness for penalty moves.
      prefixes: per episode, joint actions to replay after ``reset(seed)`` before play
        starts (empty: the initial state).
      openings: per episode, the first move after the prefix assigned to one player
        (None: sampled); that player's policy must be ``Steerable``.
      on_progress: told the number of finished games after every round of moves.
      streams: per episode, the seed of its seats' own random streams (policy samples
        of ``Streamed`` policies and penalty moves); None: shared generators.
      waves: the games split into this many parts that take turns: while one part's
        model passes run (queued by ``Submits`` policies), the others' games step.
        With ``streams`` every episode is the same whatever ``waves`` is. Without
        them each policy still draws its choices in batch order, but written answers
        (drawn as one block per call) and draws that several requests share (a policy
        and its ``sampling`` view, penalty moves from ``rng``) differ. It pays only where
        a pass's device time exceeds the host's work to launch it by more than the
        games' own time, since each part launches passes of its own: on an H200 with
        models up to 128M parameters the launches dominate and 2 waves were slower
        (docs/results.md); on a CPU nothing overlaps. Hence 1.
    """
    if waves < 1:
        raise ValueError(f"waves must be at least 1, got {waves}")
    if len(seatings) != len(seeds):
        raise ValueError(f"got {len(seatings)} seatings but {len(seeds)} seeds")
    invalid = invalid or InvalidActionConfig()
    rng = rng or np.random.default_rng(0)
    group_ids = list(seeds) if group_ids is None else list(group_ids)
    prefixes = [()] * len(seeds) if prefixes is None else list(prefixes)
    openings = [None] * len(seeds) if openings is None else list(openings)
    streams = [None] * len(seeds) if streams is None else list(streams)
    shared = shared_keys(seatings)
    with collector_paused():
        games = [
            start(make_env(), s, seed, g, tuple(pre), op, stream, shared)
            for s, seed, g, pre, op, stream in zip(
                seatings, seeds, group_ids, prefixes, openings, streams, strict=True
            )
        ]
        # Contiguous parts, asked in turn: each policy meets the games in batch order.
        size = max(1, -(-len(games) // waves))
        parts = [games[i : i + size] for i in range(0, len(games), size)]
        rounds = [_Round.ask(part) for part in parts]
        while any(rounds):
            for w, part in enumerate(parts):
                if rounds[w] is not None:
                    rounds[w].settle(invalid, rng, max_turns)
                    rounds[w] = _Round.ask(part)
            if on_progress:
                on_progress(sum(g.done for g in games))
        return [finish(g) for g in games]


@dataclass
class _Round:
    """One round of moves of some games: their policies' requests, each asked
    (``ask``), and the decisions read when the round is settled."""

    live: list[Live]
    asked: list[tuple[RolloutRequest, list[tuple[Live, int]], list, Callable]]

    @classmethod
    def ask(cls, games: Sequence[Live]) -> _Round | None:
        """The next round of ``games`` with every request asked; None when all are over."""
        live = [g for g in games if not g.done]
        if not live:
            return None
        asked = []
        for policy, request, slots in _gather(live):
            streams = [game.seat_stream(player) for game, player in slots]
            asked.append((request, slots, streams, ask(policy, request, streams)))
        return cls(live, asked)

    def settle(self, invalid: InvalidActionConfig, rng, max_turns: int | None) -> None:
        """Read the decisions, apply the invalid-action treatment, step the games."""
        for request, slots, streams, decisions in self.asked:
            for (game, player), obs, dec, own in zip(
                slots, request.observations, decisions(), streams, strict=True
            ):
                resolve(game, player, obs, dec, invalid, own or rng)
        for game in self.live:
            advance(game, max_turns)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while inside: while games are played,
    and while a learner updates (``coplay.train.trainee``).

    A rollout allocates many small records (turns, decisions, observations), an update
    its samples, metrics and autograd's Python objects, none of them in reference
    cycles, and each allocation burst sets off collector passes over the whole heap,
    model and libraries included: 10-15% of a Kuhn rollout, about 4% of its update.
    Reference counting still frees everything (an activation as soon as its backward
    pass is done); a cycle made meanwhile is collected at the next pass after."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def _gather(live: Sequence[Live]) -> list[tuple[Policy, RolloutRequest, list[tuple[Live, int]]]]:
    """This round's requests, one per policy key in order of first appearance (the order
    the policies are asked in, so their random draws keep their order), each with the
    policy that answers it and the (game, player) of each observation. Distinct objects
    under one shared key are asked separately (``Live.groups``, see ``shared_keys``)."""
    pending: dict[object, tuple[Policy, list[tuple[Live, int]], list[Observation], list]] = {}
    for game in live:
        for player in game.env.players_to_act():
            if player in game.resolved:
                continue
            group = game.groups[player]
            entry = pending.get(group)
            if entry is None:
                entry = pending[group] = (game.seats[player], [], [], [])
            _, slots, observations, forced = entry
            slots.append((game, player))
            obs = game.env.observe(player)
            if game.histories[player]:
                obs = replace(obs, history=_history(game, player, obs))
            observations.append(obs)
            forced.append(None if game.opening is None else game.forced(player))
    return [
        (policy, RolloutRequest(*policy_key(policy), tuple(obs), tuple(forced)), slots)
        for policy, slots, obs, forced in pending.values()
    ]


def _history(game: Live, player: int, obs: Observation) -> tuple:
    """``player``'s decisions so far in ``game`` with what it saw at each, rejected
    answers included, oldest first (``Observation.history``)."""
    pairs = []
    for turn in game.trajectories[player].turns:
        pairs += [(turn.observation, d) for d in turn.invalid_attempts]
        pairs.append((turn.observation, turn.decision))
    pairs += [(obs, d) for d in game.rejected.get(player, ())]
    return tuple(pairs)
