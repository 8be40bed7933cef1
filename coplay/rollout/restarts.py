"""Restart distributions: replay a lost game up to one of the learner's turns and play
on from there, so rare positions where the learner goes wrong get whole groups of games.

A position the learner reaches once in a few hundred games (a block it has to find,
say) lands in a group baseline about once per iteration, and a step group never holds
two different moves from it. Restarting ``group_size`` games from that position gives
the estimator a group of its own there: the moves the learner tries are compared with
each other on equal terms. The start states come from games the learner lost, and each
start is the history just before one of its turns, picked uniformly (the losing move is
often but not always the last one). The idea is the restart distribution of Kakade and
Langford (2002) and "reverse curriculum" starts (Florensa et al., 2017); an OpenSpiel
state or any seeded ``Env`` is rebuilt by replaying the recorded joint actions.

With ``rollout.restarts.exploring_starts`` the copies of a group each play a different
assigned first move, so the group also estimates the moves at the restart position
(every legal one when it has as many copies); ``opening_targets`` turns those
estimates into a policy-iteration target (the best of the moves tried, an untried
move keeping the policy's probability), which the learner's policy-iteration term
(``rollout.restarts.exploring_starts.target``) trains toward.

Everything here is a pure function of episodes, a buffer and a generator; the engine
replays a ``Start`` (``play_episodes(prefixes=...)``) and the restarts planning part
(``coplay.train.parts.planning``) decides how many groups restart
(``rollout.restarts.share``).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

from coplay.types import Episode, JointAction, Turn


@dataclass(frozen=True)
class Start:
    """A position to restart from: the game's seed, the learner's seat there, the
    joint actions that lead to it from ``reset(seed)``, and who sat where (policy ids),
    so the restarted games seat the same players."""

    seed: int
    seat: int
    prefix: tuple[JointAction, ...]
    seats: tuple[str, ...] = ()


def history(episode: Episode, step: int) -> tuple[JointAction, ...]:
    """The joint actions played at steps ``0 .. step - 1`` of ``episode``.

    A turn whose move was never applied (a forfeit) ends the game, so it is never
    part of a history that leads to a later turn.
    """
    by_step: dict[int, list[tuple[int, str]]] = {}
    for traj in episode.trajectories:
        for turn in traj.turns:
            if turn.step < step and turn.played_action is not None:
                by_step.setdefault(turn.step, []).append((turn.player, turn.played_action))
    if sorted(by_step) != list(range(episode.start_step, step)):
        raise ValueError(f"episode {episode.seed} has no complete history up to step {step}")
    return episode.prefix[:step] + tuple(
        tuple(sorted(by_step[s])) for s in range(episode.start_step, step)
    )


def lost(episode: Episode, seat: int, best: float) -> bool:
    """Whether the player in ``seat`` lost: another seat scored strictly more, or, in a
    single-player game, it fell short of the game's best return ``best``."""
    mine = episode.returns[seat]
    if len(episode.returns) == 1:
        return mine < best
    return any(r > mine for s, r in enumerate(episode.returns) if s != seat)


def lost_starts(
    episodes: Sequence[Episode],
    learners: Collection[str],
    best: float,
    rng: np.random.Generator,
    *,
    fresh_only: bool = True,
) -> list[Start]:
    """One start per (episode, seat) a learner (a policy id in ``learners``) lost (see
    ``lost``): the history before one of its turns in that seat, picked uniformly.

    With ``fresh_only`` only games played from the initial state count. A restarted
    game that is lost again mostly lost at its start position or, with exploring
    starts, after an assigned move the policy would not have played; its later
    positions are often already lost whatever the learner does. Fed back, they crowd
    the buffer out: on tic-tac-toe they became most of it within a few hundred
    iterations, and a block the policy missed in one game of sixty was drawn once in
    twenty iterations (docs/results.md, "Restarts from fresh games only").
    """
    starts = []
    for ep in episodes:
        # A restart from the initial state replays no prefix but has an assigned move.
        if fresh_only and (ep.prefix or ep.opening is not None):
            continue
        for seat, traj in enumerate(ep.trajectories):
            if traj.policy_id not in learners or not traj.turns or not lost(ep, seat, best):
                continue
            turn = traj.turns[int(rng.integers(len(traj.turns)))]
            prefix = history(ep, turn.step)
            starts.append(Start(seed=ep.seed, seat=seat, prefix=prefix, seats=ep.seats))
    return starts


def is_fresh(episode: Episode) -> bool:
    """Whether ``episode`` was played as its plan seated it, not restarted: no replayed
    prefix, no assigned first move, and its own seed as its group id. The last tells
    a restart from a player's first turn at the initial state, which replays nothing,
    apart: restarted groups take ids after the fresh groups' seeds (``Restarts.plan``)
    and replay the seed of an earlier iteration's lost game, so they are a biased
    sample of deals."""
    return not episode.prefix and episode.opening is None and episode.group_id == episode.seed


def opening_turn(episode: Episode) -> Turn | None:
    """The turn that played ``episode``'s assigned first move, if it has one."""
    o = episode.opening
    if o is None:
        return None
    turns = episode.trajectories[o.player].turns
    return turns[0] if turns and turns[0].step == episode.start_step else None


def opening_targets(
    episodes: Sequence[Episode],
) -> dict[tuple[int, int], tuple[float, ...]]:
    """Policy-iteration targets at restart positions, keyed by (episode index, seat).

    The copies of a restarted group all start from one position and each plays an
    assigned first move (``Opening``), so the group is a rollout estimate of every
    move tried there: the mean return of the copies that played it. The target is
    the greedy improvement over those moves (``greedy_over_tried``), as in
    classification-based policy iteration (Lagoudakis and Parr, 2003; Lazaric et
    al., 2010). A group whose moves all did equally well has no target.
    """
    groups: dict[tuple[str, int], list[tuple[int, Turn]]] = {}
    for i, ep in enumerate(episodes):
        turn = opening_turn(ep)
        if turn is not None and turn.decision.choice_ids:
            groups.setdefault((ep.game, ep.group_id), []).append((i, turn))
    out = {}
    for members in groups.values():
        by_move: dict[int, list[float]] = {}
        for i, turn in members:
            by_move.setdefault(turn.decision.choice_index, []).append(
                episodes[i].returns[turn.player]
            )
        means = {a: float(np.mean(r)) for a, r in by_move.items()}
        if max(means.values()) == min(means.values()):
            continue
        target = greedy_over_tried(means, len(members[0][1].decision.choice_ids))
        for i, turn in members:
            out[(i, turn.player)] = target
    return out


def greedy_over_tried(means: dict[int, float], width: int) -> tuple[float, ...]:
    """The greedy target over ``width`` moves from the mean returns of the tried ones:
    uniform over the best tried moves, 0 on the other tried ones, NaN on untried ones.

    A group of fewer copies than legal moves measures only the moves it tried, and
    policy iteration with partial evaluation improves the policy only where it
    evaluated: the tried moves' probability goes to the best of them, and an untried
    move keeps the policy's own. Its probability is the learner's at update time, so
    the target marks it NaN and the policy-iteration term fills it in
    (``coplay.train.parts.policy_iteration.improved_target``); a 0 there would push
    down a move nothing was learned about. A group that tried every move gets no NaN.
    """
    best = max(means.values())
    top = [a for a, m in means.items() if m == best]
    return tuple(
        math.nan if a not in means else 1.0 / len(top) if a in top else 0.0 for a in range(width)
    )


def remember(buffer: Sequence[Start], new: Sequence[Start], capacity: int) -> list[Start]:
    """The buffer with ``new`` appended, keeping only the latest ``capacity`` starts."""
    return [*buffer, *new][-capacity:]


def draw(buffer: Sequence[Start], k: int, rng: np.random.Generator) -> list[Start]:
    """``k`` starts drawn uniformly from the buffer (without replacement when it holds
    enough); none when it is empty."""
    if not buffer or k <= 0:
        return []
    picks = rng.choice(len(buffer), size=k, replace=len(buffer) < k)
    return [buffer[int(i)] for i in picks]
