"""A memory of policy-iteration targets, trained on again at every update.

A restart group's target (``opening_targets``) pulls the policy toward the best move
at one position for one update; the next group at that position may be many
iterations away, and meanwhile updates at other positions move the shared weights
and undo part of the pull. On tic-tac-toe, with the learning rate decayed late in a
run, a missed block drawn about once in three iterations stayed at probability 0.2
for hundreds of iterations, while eight groups there per iteration fixed it in two
(docs/results.md, "A memory of policy-iteration targets"). Keeping the latest target
of every position seen, and training toward all of them at each update, is the
dataset aggregation of classification-based policy iteration (Lazaric et al., 2010)
and of DAgger (Ross et al., 2011): the learner fits every improvement found so far,
not only this iteration's.

The memory maps a position (the decision's prompt and its choices' tokens) to the
latest sample whose decision carried a target there; a position seen again replaces
its entry, and the oldest entries go first when it is full. Pure functions of a dict;
the trainer keeps it in ``Run.targets`` and saves it with the run's state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from coplay.train.learner import Sample

TargetKey = tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]
"""A position as the policy sees it: prompt token ids and the legal choices' ids."""

TargetMemory = dict[TargetKey, Sample]


def target_key(sample: Sample) -> TargetKey:
    return sample.decision.prompt_ids, sample.decision.choice_ids


def remember_targets(
    memory: Mapping[TargetKey, Sample], samples: Sequence[Sample], capacity: int
) -> TargetMemory:
    """``memory`` with the targets of ``samples`` stored as replays (advantage 0), each
    position's latest one, and only the ``capacity`` most recently stored positions."""
    out = dict(memory)
    for s in samples:
        if s.target is None or s.replay:
            continue
        key = target_key(s)
        out.pop(key, None)  # re-inserted at the end: the newest
        out[key] = replace(s, advantage=0.0, replay=True)
    for key in list(out)[: max(0, len(out) - capacity)]:
        del out[key]
    return out


def replays(memory: Mapping[TargetKey, Sample], samples: Sequence[Sample]) -> list[Sample]:
    """The stored targets of positions that have no fresh target among ``samples``
    (a fresh one is trained on directly and supersedes the stored one)."""
    fresh = {target_key(s) for s in samples if s.target is not None}
    return [s for key, s in memory.items() if key not in fresh]
