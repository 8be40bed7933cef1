"""Batched multi-game rollout: many games at once, one forward pass per policy per step.

Every round, each live game reports the players who must act; the engine gathers all
pending observations of the same policy into one ``RolloutRequest`` answered by one
``Policy.act`` call (one batched forward pass for a language model), applies the
invalid-action treatment, and steps each game once all its acting players have a legal
action (several for simultaneous moves). Episodes keep the decisions exactly as sampled.

A request names its policy by ``(policy_id, version)``, not by the Python object, so
it is plain data that could be answered in another process holding those weights.
Seated by id (``coplay.rollout.source``), one key is one policy; distinct objects built
by hand under one key are asked apart (``shared_keys``).

A game may start from a recorded position instead of the initial state (a restart,
see ``coplay.rollout.restarts``): its joint actions are replayed after ``reset`` and
play goes on from there, optionally with the first move assigned (an ``Opening``:
the policy scores it as its own, ``Steerable.act_forced``).

Given per-game ``streams``, every seat of a game draws from its own counter-based
stream of ``(stream, seat)`` (``coplay.rollout.streams``): the policy's samples (``Streamed.act_streamed``) and the
penalty moves of invalid answers alike. A game then plays the same whatever other
games share its batch, so a plan split over several engines (``coplay.distributed``)
plays what one engine plays. Without streams each policy draws from its own generator
in batch order, and penalties from ``rng``.
"""

from __future__ import annotations

import functools
import gc
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import numpy as np

from coplay.rollout.invalid import InvalidActionConfig, forfeit_returns
from coplay.rollout.streams import SeatStream
from coplay.types import (
    Decision,
    Env,
    Episode,
    HasOutcomes,
    JointAction,
    Observation,
    Opening,
    Policy,
    Steerable,
    Streamed,
    Submits,
    Trajectory,
    Turn,
)

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


@dataclass
class _Live:
    """Bookkeeping of one game in flight."""

    env: Env
    seats: tuple[Policy, ...]
    seed: int
    group_id: int
    trajectories: list[Trajectory]
    step: int = 0
    rejected: dict[int, list[Decision]] = field(default_factory=dict)
    resolved: dict[int, Turn] = field(default_factory=dict)
    env_credit: list[float] = field(default_factory=list)
    """Environment reward credited to turns so far, per player (penalties excluded)."""
    carry: list[float] = field(default_factory=list)
    """Reward earned before a player's first turn, credited to that turn."""
    penalties: list[float] = field(default_factory=list)
    forfeits: list[int] = field(default_factory=list)
    """Players who forfeited: one, or several in one round of simultaneous moves."""
    truncated: bool = False
    done: bool = False
    prefix: tuple[JointAction, ...] = ()
    prefix_reward: list[float] = field(default_factory=list)
    """Reward earned during the replayed prefix, per player: not part of the returns."""
    opening: Opening | None = None
    """The first move after the prefix, assigned rather than sampled."""
    stream: int | None = None
    """Seed of this game's per-seat random streams; None: the shared generators."""
    streams: dict[int, SeatStream] = field(default_factory=dict)
    groups: tuple = ()
    """Per seat, the request its observations join (``_gather``), fixed for the game."""
    histories: tuple[bool, ...] = ()
    """Per seat, whether its policy reads the player's history (``wants_history``)."""

    def seat_stream(self, player: int) -> SeatStream | None:
        """``player``'s own stream (made on first use), or None without streams."""
        if self.stream is None:
            return None
        if player not in self.streams:
            self.streams[player] = SeatStream(self.stream, player)
        return self.streams[player]

    def forced(self, player: int) -> int | None:
        """The legal-action index ``player`` must play now, if its move is assigned."""
        o = self.opening
        if o is None or o.player != player or self.step != len(self.prefix):
            return None
        return o.index


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
            _start(make_env(), s, seed, g, tuple(pre), op, stream, shared)
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
        return [_finish(g) for g in games]


@dataclass
class _Round:
    """One round of moves of some games: their policies' requests, each asked
    (``ask``), and the decisions read when the round is settled."""

    live: list[_Live]
    asked: list[tuple[RolloutRequest, list[tuple[_Live, int]], list, Callable]]

    @classmethod
    def ask(cls, games: Sequence[_Live]) -> _Round | None:
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
                _resolve(game, player, obs, dec, invalid, own or rng)
        for game in self.live:
            _advance(game, max_turns)


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


def _start(
    env: Env,
    seats: Sequence[Policy],
    seed: int,
    group_id: int,
    prefix: tuple[JointAction, ...],
    opening: Opening | None = None,
    stream: int | None = None,
    shared: frozenset[PolicyKey] = frozenset(),
) -> _Live:
    n = env.spec.num_players
    if len(seats) != n:
        raise ValueError(f"game {env.spec.name!r} has {n} seats but the seating has {len(seats)}")
    env.reset(seed)
    earned = replay(env, prefix, seed)
    if opening is not None:
        _check_opening(env, seats, opening)
    trajs = [Trajectory(player=p, policy_id=seats[p].policy_id) for p in range(n)]
    return _Live(
        env=env,
        seats=tuple(seats),
        seed=seed,
        group_id=group_id,
        trajectories=trajs,
        step=len(prefix),
        env_credit=list(earned),
        carry=[0.0] * n,
        penalties=[0.0] * n,
        done=env.is_terminal(),
        prefix=prefix,
        prefix_reward=earned,
        opening=opening,
        stream=stream,
        groups=tuple(_group(policy, shared) for policy in seats),
        histories=tuple(bool(getattr(policy, "wants_history", False)) for policy in seats),
    )


def _group(policy: Policy, shared: frozenset[PolicyKey]) -> object:
    """The request ``policy``'s observations join: its key, or, where several objects
    share the key (``shared_keys``), the key and the object."""
    key = policy_key(policy)
    return (key, id(policy)) if key in shared else key


def _check_opening(env: Env, seats: Sequence[Policy], opening: Opening) -> None:
    """An assigned first move must be for a player to act there whose policy can be told."""
    acting = sorted(env.players_to_act())
    if env.is_terminal() or opening.player not in acting:
        raise ValueError(
            f"the assigned first move is player {opening.player}'s, but players {acting} "
            f"are to act where the {env.spec.name} history ends"
        )
    if not isinstance(seats[opening.player], Steerable):
        raise ValueError(
            f"an assigned first move needs a policy that can be told its move, but "
            f"{seats[opening.player].policy_id!r} in seat {opening.player} cannot"
        )


def replay(env: Env, prefix: Sequence[JointAction], seed: int) -> list[float]:
    """Apply recorded joint actions to a freshly reset ``env``; the reward each player
    earned on the way. A prefix that does not fit the game raises a ValueError naming
    the step, before any play."""
    earned = [0.0] * env.spec.num_players
    for i, joint in enumerate(prefix):
        acting = sorted(env.players_to_act())
        if env.is_terminal() or acting != [p for p, _ in joint]:
            raise ValueError(
                f"cannot replay step {i} of a {env.spec.name} history (seed {seed}): "
                f"players {acting} are to act but the history has {[p for p, _ in joint]}"
            )
        for p, action in joint:
            legal = env.observe(p).legal_actions
            if legal is not None and action not in legal:
                raise ValueError(
                    f"cannot replay step {i} of a {env.spec.name} history (seed {seed}): "
                    f"{action!r} is not a legal action of player {p} there"
                )
        for p, r in env.step(dict(joint)).items():
            earned[p] += r
    return earned


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
        for i, dec in zip(free, sampled, strict=True):
            out[i] = dec
        if told:
            moves = [forced[i] for i in told]
            picked = policy.act_forced([request.observations[i] for i in told], moves)
            for i, dec in zip(told, picked, strict=True):
                out[i] = dec
        return out

    return decisions


def _gather(live: Sequence[_Live]) -> list[tuple[Policy, RolloutRequest, list[tuple[_Live, int]]]]:
    """This round's requests, one per policy key in order of first appearance (the order
    the policies are asked in, so their random draws keep their order), each with the
    policy that answers it and the (game, player) of each observation. Distinct objects
    under one shared key are asked separately (``_Live.groups``, see ``shared_keys``)."""
    pending: dict[object, tuple[Policy, list[tuple[_Live, int]], list[Observation], list]] = {}
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


def _history(game: _Live, player: int, obs: Observation) -> tuple:
    """``player``'s decisions so far in ``game`` with what it saw at each, rejected
    answers included, oldest first (``Observation.history``)."""
    pairs = []
    for turn in game.trajectories[player].turns:
        pairs += [(turn.observation, d) for d in turn.invalid_attempts]
        pairs.append((turn.observation, turn.decision))
    pairs += [(obs, d) for d in game.rejected.get(player, ())]
    return tuple(pairs)


def _resolve(
    game: _Live,
    player: int,
    obs: Observation,
    dec: Decision,
    invalid: InvalidActionConfig,
    rng: np.random.Generator | SeatStream,
) -> None:
    """Accept a legal decision, or apply the retry / penalty / forfeit treatment."""
    earlier = game.rejected.get(player, ())
    if obs.history:  # the turn keeps what the env showed; the decisions hold the rest
        obs = replace(obs, history=())
    message = None
    if dec.valid and obs.legal_actions is None:
        # A message is free text, so only the game can say whether it is one (an
        # empty or unknown message is invalid): the same treatment as a bad action.
        # A message with a format is played as the game reads it (its own limits).
        message = game.env.parse_action(player, dec.action)
        if message is None:
            # Rejected text is not well formed either (the format reward reads it);
            # None stays None: no format applies.
            formed = None if dec.well_formed is None else False
            dec = replace(dec, action=None, well_formed=formed)
        elif dec.well_formed is not None:
            dec = replace(dec, action=message)
    if dec.valid:
        game.resolved[player] = Turn(
            player=player,
            observation=obs,
            decision=dec,
            step=game.step,
            # A message is played, and recorded, as the game reads it: what the others
            # are shown (cleaned, cut), never the raw text, which may read as a move.
            played_action=dec.action if message is None else message,
            invalid_attempts=tuple(earlier),
            treatment="retry" if earlier else None,
        )
        return
    if len(earlier) < invalid.retries:
        game.rejected.setdefault(player, []).append(dec)  # asked again next round
        return
    turn = Turn(
        player=player,
        observation=obs,
        decision=dec,
        step=game.step,
        invalid_attempts=tuple(earlier),
        treatment=invalid.on_fail,
    )
    if invalid.on_fail == "penalty" and obs.legal_actions:
        n = len(obs.legal_actions)
        pick = rng.below(n) if isinstance(rng, SeatStream) else int(rng.integers(n))
        turn.played_action = obs.legal_actions[pick]
        turn.reward += invalid.penalty
        game.penalties[player] += invalid.penalty
        game.resolved[player] = turn
        return
    # Forfeit (also the only option when the game lists no legal actions to pick from).
    turn.treatment = "forfeit"
    game.trajectories[player].turns.append(turn)
    game.forfeits.append(player)


def _advance(game: _Live, max_turns: int | None) -> None:
    """Step the game once every acting player has a resolved turn; handle the end."""
    if game.forfeits:
        # The other players of a simultaneous round chose too: their turns are kept,
        # a penalty's reward with its turn, though the game applies none of the moves.
        for p in sorted(game.resolved):
            game.trajectories[p].turns.append(game.resolved[p])
        _end(game, forfeit_returns(game.env.spec, *game.forfeits))
        return
    acting = game.env.players_to_act()
    if any(p not in game.resolved for p in acting):
        return
    rewards = game.env.step({p: game.resolved[p].played_action for p in acting})
    for p in acting:
        game.trajectories[p].turns.append(game.resolved[p])
    game.resolved.clear()
    game.rejected.clear()
    game.step += 1
    for p, r in rewards.items():
        if r or game.carry[p]:  # crediting 0.0 changes nothing (most games pay at the end)
            _credit(game, p, r)
    if game.env.is_terminal():
        game.truncated = _truncated(game.env)
        _end(game, game.env.returns(), _outcomes(game.env))
    elif game.step >= (max_turns or game.env.spec.max_turns):
        game.truncated = True
        _end(game, game.env.returns(), _outcomes(game.env))


@functools.cache
def _gives_outcomes(kind: type) -> bool:
    # ``isinstance`` against a runtime protocol takes 10-14 µs, a fifth of a Kuhn
    # game's own time when paid at every game's end: checked once per env class.
    return issubclass(kind, HasOutcomes)


def _outcomes(env: Env) -> list[float] | None:
    return env.outcomes() if _gives_outcomes(type(env)) else None


def _truncated(env: Env) -> bool:
    """Whether a game the env ended was truncated by the env's own limit (``Truncates``:
    an attribute, read directly rather than through the protocol's slow ``isinstance``)."""
    return bool(getattr(env, "truncated", False))


def _credit(game: _Live, player: int, reward: float) -> None:
    """Credit environment reward to the player's latest turn (or its first, later)."""
    game.env_credit[player] += reward
    turns = game.trajectories[player].turns
    if turns:
        turns[-1].reward += reward + game.carry[player]
        game.carry[player] = 0.0
    else:
        game.carry[player] += reward


def _end(
    game: _Live, env_returns: Sequence[float], outcomes: Sequence[float] | None = None
) -> None:
    """Fix final returns so that each trajectory's turn rewards sum to its return; keep
    the game's outcomes where it gives them."""
    for p, traj in enumerate(game.trajectories):
        residual = float(env_returns[p]) - game.env_credit[p]
        if not math.isfinite(residual):  # a NaN would reach every advantage of the batch
            raise ValueError(
                f"game {game.env.spec.name} paid player {p} a return of {env_returns[p]} "
                f"after step rewards of {game.env_credit[p]}: rewards must be finite"
            )
        # A reward held for a player's first turn (``carry``) lands with the residual;
        # a forfeit may end the game with nothing left over to carry it.
        if abs(residual) > 0.0 or game.carry[p]:
            _credit(game, p, residual)
        traj.ret = float(env_returns[p]) - game.prefix_reward[p] + game.penalties[p]
        traj.shaping = game.penalties[p]
        traj.outcome = None if outcomes is None else float(outcomes[p])
    game.done = True


def _finish(game: _Live) -> Episode:
    return Episode(
        game=game.env.spec.name,
        seed=game.seed,
        group_id=game.group_id,
        seats=tuple(p.policy_id for p in game.seats),
        trajectories=tuple(game.trajectories),
        returns=tuple(t.ret for t in game.trajectories),
        truncated=game.truncated,
        forfeited_by=min(game.forfeits) if game.forfeits else None,
        num_steps=game.step,
        prefix=game.prefix,
        opening=game.opening,
    )
