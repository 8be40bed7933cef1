"""Gated reward accumulation (G-RA; Sun et al., 2025, arXiv 2508.10548).

"Stabilizing Long-term Multi-turn Reinforcement Learning with Gated Rewards"
accumulates immediate (per-step) rewards only when the long-term outcome reward
reaches a threshold (r_high >= Delta in the paper), so that a policy cannot collect step rewards on episodes that
fail. What this module implements, for seat s of episode e with turn rewards
r(e, s, 0..T-1) (``Turn.reward``) and outcome reward O(e, s) = ``Trajectory.outcome``
(the part of the return that pays what the episode achieved: 1 for a solved Sokoban
room or a reached FrozenLake goal, whose dense returns add step rewards to it, or a
signalling receiver's pick of the target, apart from invalid-answer penalties;
``HasOutcomes``), or the return ``Trajectory.ret`` where the game gives no outcome or
a forfeit ended the episode:

    open(e, s) = O(e, s) >= gate
    G(e, s, t) = sum_{k >= t} gamma^(k - t) r(e, s, k)           if open
               = gamma^(T - 1 - t) * (O(e, s) + S(e, s))          otherwise
    A(e, s, t) = G(e, s, t) - b(game, s, policy)

When the gate is closed only the outcome counts, arriving at the last turn: no turn
gets credit for the step rewards. S(e, s) is the trajectory's shaping
(``Trajectory.shaping``: invalid-answer penalties and format rewards, which the
outcome leaves out and the turn rewards hold): training signal outside the game's
value, which counts whether the gate is open or not (0 where O is the return, which
holds it already); without it a failed episode's invalid answers went unpunished. Without an outcome (O is the return) the two cases
differ, with gamma = 1, only in how the return is split over turns. Gating on the
return where the game gives an outcome opened the gate for a failed episode whose
step rewards outweighed its failure. The default gate, 1, is what success pays in the
bundled games with outcomes (the goal, a solved room, the target picked): a failure's
0 stays closed. In a game whose only reward is its outcome, open and closed give the
same G at any gamma, so the gate only matters where step rewards are dense.
b(game, s, policy) is the mean of G over all turns of seat s, held by that policy, in
the batch's episodes of that game (a per-role batch-mean baseline, as in
``reinforce``; where all those G are equal, exactly their value: ``baseline_mean``).
``adv/gate_open_frac`` is the share of trajectories with at least one turn whose gate is open.
"""

from __future__ import annotations

from collections.abc import Sequence

from coplay.algos.advantages.base import (
    Advantages,
    EmptyState,
    Estimate,
    Estimator,
    baseline_mean,
    check_gamma,
    mean,
    register,
    reward_to_go,
    role_key,
    summary_metrics,
)
from coplay.algos.advantages.mars import role_baselines, role_values
from coplay.types import Episode, Trajectory


def outcome(traj: Trajectory) -> float:
    """O: the game's outcome reward where it gives one, else the return."""
    return traj.ret if traj.outcome is None else traj.outcome


def gated_returns(traj: Trajectory, *, gate: float, gamma: float) -> tuple[float, ...]:
    """G per turn: reward-to-go if the outcome reaches ``gate``, else the outcome and the
    shaping, at the last turn."""
    o = outcome(traj)
    if o >= gate:
        return reward_to_go([t.reward for t in traj.turns], gamma)
    # The gate reads what the game paid; penalties and format rewards count either way.
    closed = o if traj.outcome is None else o + traj.shaping
    last = len(traj.turns) - 1
    return tuple(gamma ** (last - t) * closed for t in range(len(traj.turns)))


@register("gra")
def gra(*, gate: float = 1.0, gamma: float = 1.0) -> Estimator[EmptyState]:
    """Gated per-turn returns minus a per-role (game, seat, policy) batch-mean baseline."""
    check_gamma(gamma)

    def estimate(episodes: Sequence[Episode], state: EmptyState) -> Estimate[EmptyState]:
        returns: Advantages = tuple(
            tuple(gated_returns(traj, gate=gate, gamma=gamma) for traj in ep.trajectories)
            for ep in episodes
        )
        means = {key: baseline_mean(gs) for key, gs in role_values(episodes, returns).items()}
        advantages = tuple(
            tuple(
                tuple(g - means[role_key(ep, seat)] for g in seat_g)
                for seat, seat_g in enumerate(ep_g)
            )
            for ep, ep_g in zip(episodes, returns, strict=True)
        )
        baselines = role_baselines(episodes, means)
        metrics = summary_metrics(advantages, baselines)
        metrics["adv/gate_open_frac"] = mean(
            1.0 if outcome(traj) >= gate else 0.0
            for ep in episodes
            for traj in ep.trajectories
            if traj.turns
        )
        return Estimate(advantages, state, metrics, baselines=baselines)

    return Estimator(EmptyState, estimate)
