"""Group-in-Group Policy Optimization (GiGPO; Feng et al., 2025, arXiv 2505.10978).

"Group-in-Group Policy Optimization for LLM Agent Training" adds to GRPO's
episode-level advantage a step-level one computed among the decisions, across the
episodes of a group, that were taken from the same environment state (an "anchor
state"). Per turn t of seat s in episode e of group g = (game, group_id):

    A_E(e, s)    = GRPO advantage of R(e, s) within (g, s)   (see ``grpo``)
    G(e, s, t)   = sum_{k >= t} gamma^(k - t) r(e, s, k)      (seat s's own turns)
    A_S(e, s, t) = (G(e, s, t) - mean_U G) / (std_U G + eps)  if scale_by_std
                 =  G(e, s, t) - mean_U G                      otherwise
    A(e, s, t)   = A_E(e, s) + omega * A_S(e, s, t)

The step group U of a turn holds every turn of seat s in group g whose anchor key
is the same: with ``anchor="info"`` (default) ``Observation.info_key`` when the game
has one, else the observation text itself (exact, so no hash collisions); with
``anchor="text"`` always the text, i.e. what the player sees. In a perfect-information
game whose info key is the move history (tic-tac-toe), "text" groups the same board
reached by different move orders, the paper's notion of one environment state. A state visited twice in one episode
contributes both turns, as in the paper. mean and std are the mean and sample std
(ddof=1); both levels use the same ``scale_by_std`` (the paper's F_norm: std or 1).
A step group of size one, or whose returns are all equal, gives A_S = 0.
A_E's statistics are taken once per episode (each trajectory one sample of its group),
where the authors' code averages them over step rows, so that a long episode weighs
as many times as it has steps: here a group's episodes weigh alike, as GRPO's do.
r(e, s, k) is ``Turn.reward``, which the engine credits so that the rewards sum to
``Trajectory.ret``. ``gamma`` defaults to the paper's 0.95. With ``scale_by_std``, a
step group whose games all end the same way but at different lengths (every game
lost, some later) has a small spread of discounted returns, which the std scales up
to unit advantages for losing slowly; in games scored only at the end, ``gamma=1``
makes such groups exactly flat (measured on tic-tac-toe in docs/results.md).

``adv/step_group_frac`` is the share of turns whose step group has size >= 2.
"""

from __future__ import annotations

from collections.abc import Sequence

from coplay.algos.advantages.base import (
    EmptyState,
    Estimate,
    Estimator,
    check_eps,
    check_gamma,
    mean,
    register,
    std,
    summary_metrics,
    turn_returns,
)
from coplay.algos.advantages.grpo import grpo
from coplay.types import Episode, Observation

AnchorKey = tuple[str, int, int, str, str]
"""(game, group_id, seat, "info" or "text", key)."""


ANCHORS = ("info", "text")


def anchor_state(obs: Observation, anchor: str = "info") -> tuple[str, str]:
    """The key that identifies an environment state to group decisions by."""
    if anchor == "info" and obs.info_key is not None:
        return ("info", obs.info_key)
    return ("text", obs.text)


def anchor_keys(episodes: Sequence[Episode], anchor: str = "info") -> list[list[list[AnchorKey]]]:
    """Every turn's step-group key, indexed ``[episode][seat][turn]``."""
    return [
        [
            [(ep.game, ep.group_id, seat, *anchor_state(t.observation, anchor)) for t in traj.turns]
            for seat, traj in enumerate(ep.trajectories)
        ]
        for ep in episodes
    ]


@register("gigpo")
def gigpo(
    *,
    gamma: float = 0.95,
    omega: float = 1.0,
    scale_by_std: bool = True,
    eps: float = 1e-6,
    anchor: str = "info",
) -> Estimator[EmptyState]:
    """Episode-level GRPO advantage plus ``omega`` times the anchor-state step advantage."""
    check_gamma(gamma)
    check_eps(eps)
    if anchor not in ANCHORS:
        raise ValueError(f"gigpo anchor must be one of {ANCHORS}, got {anchor!r}")
    episode_level = grpo(scale_by_std=scale_by_std, eps=eps)

    def estimate(episodes: Sequence[Episode], state: EmptyState) -> Estimate[EmptyState]:
        a_episode = episode_level.estimate(episodes, EmptyState()).advantages
        returns, keys = turn_returns(episodes, gamma), anchor_keys(episodes, anchor)
        groups: dict[AnchorKey, list[float]] = {}
        for ep_keys, ep_returns in zip(keys, returns, strict=True):
            for seat_keys, seat_returns in zip(ep_keys, ep_returns, strict=True):
                for key, g in zip(seat_keys, seat_returns, strict=True):
                    groups.setdefault(key, []).append(g)
        stats = {key: (mean(gs), std(gs, ddof=1)) for key, gs in groups.items()}
        # equal returns carry no signal; test equality, not std == 0, which rounding can miss
        silent = {key for key, gs in groups.items() if len(gs) < 2 or min(gs) == max(gs)}

        def step(key: AnchorKey, g: float) -> float:
            if key in silent:
                return 0.0
            m, s = stats[key]
            return (g - m) / (s + eps) if scale_by_std else g - m

        advantages = tuple(
            tuple(
                tuple(
                    a + omega * step(key, g)
                    for a, key, g in zip(seat_a, seat_keys, seat_g, strict=True)
                )
                for seat_a, seat_keys, seat_g in zip(ep_a, ep_keys, ep_g, strict=True)
            )
            for ep_a, ep_keys, ep_g in zip(a_episode, keys, returns, strict=True)
        )
        metrics = summary_metrics(advantages)
        metrics["adv/step_group_frac"] = mean(
            1.0 if len(groups[key]) >= 2 else 0.0
            for ep_keys in keys
            for seat_keys in ep_keys
            for key in seat_keys
        )
        metrics["adv/num_step_groups"] = float(len(groups))
        return Estimate(advantages, state, metrics)

    return Estimator(EmptyState, estimate, needs_groups=True)
