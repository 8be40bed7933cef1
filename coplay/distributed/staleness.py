"""How stale a played batch is, per seat, and the bound a learner trains under.

A decision's staleness is the number of updates its policy has taken since the
weights that made it: ``current[policy_id] - decision.policy_version``. It is read per
seat, since in self-play one episode can mix versions (each seat's decisions are the
learner's, made whenever that seat was asked), and only for policies that learn
(their version moves); frozen snapshots and bots are never stale. Under a bound
``k`` (``rollout.max_staleness``) a group with any decision staler than ``k`` is
dropped whole, so the group baselines of what is kept stay exact.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence

from coplay.types import Episode


def seat_staleness(
    episode: Episode, current: Mapping[str, int], learning: Collection[str]
) -> list[list[int]]:
    """Per seat, the staleness of each decision of a learning policy (rejected
    attempts included), in turn order."""
    out = []
    for traj in episode.trajectories:
        out.append(
            [
                current[d.policy_id] - d.policy_version
                for turn in traj.turns
                for d in (*turn.invalid_attempts, turn.decision)
                if d.policy_id in learning
            ]
        )
    return out


def keep_fresh(
    episodes: Sequence[Episode],
    current: Mapping[str, int],
    learning: Collection[str],
    bound: int,
) -> tuple[list[Episode], dict[str, float]]:
    """The episodes of every group whose decisions are all at most ``bound`` updates
    stale, in order, and the metrics of the whole batch: per seat, the share of
    learning decisions at each staleness (``rollout/staleness/seat<s>/<d>``), the
    largest, and the share of episodes dropped (``rollout/stale_dropped_frac``)."""
    per_episode = [seat_staleness(e, current, learning) for e in episodes]
    stale_groups = {
        (e.game, e.group_id)
        for e, seats in zip(episodes, per_episode, strict=True)
        if any(d > bound for seat in seats for d in seat)
    }
    kept = [e for e in episodes if (e.game, e.group_id) not in stale_groups]
    metrics = histogram(per_episode)
    metrics["rollout/stale_dropped_frac"] = 1.0 - len(kept) / max(1, len(episodes))
    return kept, metrics


def histogram(per_episode: Sequence[Sequence[Sequence[int]]]) -> dict[str, float]:
    """Per seat, the share of its decisions at each staleness, and the largest seen."""
    seats: dict[int, Counter] = {}
    for episode in per_episode:
        for s, values in enumerate(episode):
            seats.setdefault(s, Counter()).update(values)
    metrics: dict[str, float] = {}
    for s, counts in sorted(seats.items()):
        total = sum(counts.values())
        for d, n in sorted(counts.items()):
            metrics[f"rollout/staleness/seat{s}/{d}"] = n / total
    seen = [d for counts in seats.values() for d in counts]
    metrics["rollout/staleness_max"] = float(max(seen, default=0))
    return metrics
