"""One game in flight: its state, its start, its players' answers resolved, its steps
and its end.

A game may start from a recorded position instead of the initial state (a restart,
see ``coplay.rollout.restarts``): its joint actions are replayed after ``reset`` and
play goes on from there, optionally with the first move assigned (an ``Opening``:
the policy scores it as its own, ``Steerable.act_forced``). Rewards are credited to
the turns as the game pays them, and fixed at the end so that each trajectory's turn
rewards sum to its return.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from coplay.rollout.invalid import InvalidActionConfig, forfeit_returns
from coplay.rollout.request import PolicyKey, policy_key
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
    Trajectory,
    Turn,
)


@dataclass
class Live:
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
    """Per seat, the request its observations join (the engine's ``_gather``), fixed
    for the game."""
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


def start(
    env: Env,
    seats: Sequence[Policy],
    seed: int,
    group_id: int,
    prefix: tuple[JointAction, ...],
    opening: Opening | None = None,
    stream: int | None = None,
    shared: frozenset[PolicyKey] = frozenset(),
) -> Live:
    n = env.spec.num_players
    if len(seats) != n:
        raise ValueError(f"game {env.spec.name!r} has {n} seats but the seating has {len(seats)}")
    env.reset(seed)
    earned = replay(env, prefix, seed)
    if opening is not None:
        _check_opening(env, seats, opening)
    trajs = [Trajectory(player=p, policy_id=seats[p].policy_id) for p in range(n)]
    game = Live(
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
    if game.done:  # over before anyone acts (decided by its deal, or a whole history)
        game.truncated = _truncated(env)
        _end(game, env.returns(), _outcomes(env))
    return game


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


def resolve(
    game: Live,
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
    elif dec.valid and dec.action not in obs.legal_actions:
        raise _unlisted(game, player, obs, dec)
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


def _unlisted(game: Live, player: int, obs: Observation, dec: Decision) -> ValueError:
    """A decision names a listed action or None (``Decision.action``); anything else is
    a broken policy, whose move the game would otherwise parse, play and record as
    written (an action no replay of the history accepts)."""
    legal = obs.legal_actions
    shown = " ".join(legal[:8]) + (f" and {len(legal) - 8} more" if len(legal) > 8 else "")
    return ValueError(
        f"policy {game.seats[player].policy_id!r} in seat {player} of {game.env.spec.name} "
        f"answered {dec.action!r}, which is not one of its legal actions ({shown}): a "
        "decision's action is a listed one or None"
    )


def advance(game: Live, max_turns: int | None) -> None:
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
    # A player out of range would be credited to another seat (-1: the last) or fail
    # deep in the crediting.
    if not rewards.keys() <= _players(len(game.trajectories)):
        raise ValueError(
            f"game {game.env.spec.name} paid step rewards to players {list(rewards)}; "
            f"its players are {list(range(len(game.trajectories)))}"
        )
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
def _players(n: int) -> frozenset[int]:
    return frozenset(range(n))


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


def _credit(game: Live, player: int, reward: float) -> None:
    """Credit environment reward to the player's latest turn (or its first, later)."""
    game.env_credit[player] += reward
    turns = game.trajectories[player].turns
    if turns:
        turns[-1].reward += reward + game.carry[player]
        game.carry[player] = 0.0
    else:
        game.carry[player] += reward


def _end(game: Live, env_returns: Sequence[float], outcomes: Sequence[float] | None = None) -> None:
    """Fix final returns so that each trajectory's turn rewards sum to its return; keep
    the game's outcomes where it gives them."""
    if len(env_returns) != len(game.trajectories):
        raise ValueError(
            f"game {game.env.spec.name} returned {len(env_returns)} returns for its "
            f"{len(game.trajectories)} players"
        )
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


def finish(game: Live) -> Episode:
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
