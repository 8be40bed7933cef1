"""Metrics of a played batch: each learner's returns per seat, lengths, invalid
answers, throughput, and the spread of returns within groups (``rollout/*``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from coplay.rollout.restarts import is_fresh
from coplay.train.format_reward import well_formed_rate
from coplay.types import Episode


def rollout_metrics(
    episodes: Sequence[Episode], learner_id: str, seconds: float
) -> dict[str, float]:
    """Returns per seat, lengths, invalid-action rate and throughput of the learner's play."""
    if not episodes:  # every group dropped as stale
        return {"perf/rollout_s": seconds}
    turns = [
        t for e in episodes for tr in e.trajectories if tr.policy_id == learner_id for t in tr.turns
    ]
    decisions = sum(1 + len(t.invalid_attempts) for t in turns)
    invalid = sum(len(t.invalid_attempts) + (not t.decision.valid) for t in turns)
    m = {
        "rollout/episode_len": float(np.mean([e.num_steps for e in episodes])),
        "rollout/decisions": float(decisions),
        "rollout/invalid_rate": invalid / max(1, decisions),
        "rollout/response_len": float(
            np.mean([len(t.decision.response_ids) for t in turns] or [0])
        ),
        "rollout/truncated": float(np.mean([e.truncated for e in episodes])),
        "perf/rollout_s": seconds,
        "perf/decisions_per_s": decisions / max(seconds, 1e-9),
    }
    fresh = [e for e in episodes if is_fresh(e)]
    for seat in range(len(episodes[0].returns)):
        # Restarted games replay lost deals, most from part way: they would bias the returns.
        rets = [e.returns[seat] for e in fresh if e.seats[seat] == learner_id]
        if rets:
            m[f"rollout/return_seat{seat}"] = float(np.mean(rets))
    return m | group_metrics(episodes, learner_id) | well_formed_rate(episodes, learner_id)


def group_metrics(episodes: Sequence[Episode], learner_id: str) -> dict[str, float]:
    """Spread of the learner's returns within groups (same seed, same seat).

    ``rollout/group_return_std`` is the mean over groups of the population standard
    deviation of their returns; ``rollout/flat_group_frac`` the share of groups whose
    returns are all equal (no signal for a group baseline). Groups of one are skipped.
    """
    groups: dict[tuple[str, int, int], list[float]] = {}
    for e in episodes:
        for seat, ret in enumerate(e.returns):
            if e.seats[seat] == learner_id:
                groups.setdefault((e.game, e.group_id, seat), []).append(ret)
    sizable = [np.asarray(r) for r in groups.values() if len(r) > 1]
    if not sizable:
        return {}
    return {
        "rollout/group_return_std": float(np.mean([r.std() for r in sizable])),
        "rollout/flat_group_frac": float(np.mean([r.min() == r.max() for r in sizable])),
    }


def scoped(metrics: dict[str, float], name: str) -> dict[str, float]:
    """``{"loss/kl": x}`` -> ``{"loss/<name>/kl": x}``: per-member metric names."""
    out = {}
    for key, value in metrics.items():
        ns, _, rest = key.partition("/")
        out[f"{ns}/{name}/{rest}" if rest else f"{name}/{ns}"] = value
    return out
