"""The policy-iteration target at restart positions, and a memory of past targets.

A restarted group with exploring starts (``coplay.rollout.restarts``) tries the first
moves at one position, every legal one when it has as many copies; ``opening_targets``
turns the best-scoring ones into a target distribution there, carried by the first
turn's ``Sample.target``, with NaN at any move the group did not try. This term adds
``coef`` times the cross-entropy from each target to the policy, summed and divided
by the minibatch's own sample count; an untried move's target is the policy's own
probability (``improved_target``). Unlike the policy gradient, its push does not fade
as the policy grows sure of the wrong move.

The memory. A target pulls the policy toward the best move at one position for one
update; the next group at that position may be many iterations away, and meanwhile
updates at other positions move the shared weights and undo part of the pull. On
tic-tac-toe, with the learning rate decayed late in a run, a missed block drawn about
once in three iterations stayed at probability 0.2 for hundreds of iterations, while
eight groups there per iteration fixed it in two (docs/results.md, "A memory of
policy-iteration targets"). Keeping the latest target of every position seen, and
training toward all of them at each update, is the dataset aggregation of
classification-based policy iteration (Lazaric et al., 2010) and of DAgger (Ross et
al., 2011): the learner fits every improvement found so far, not only this
iteration's. The memory maps a position (the decision's prompt and its choices'
tokens) to the latest sample whose decision carried a target there; a position seen
again replaces its entry, and the oldest entries go first when it is full.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor

from coplay.train.parts.term import LossMetrics, Mean, Metrics, Micro, Sample, Term

TargetKey = tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]
"""A position as the policy sees it: prompt token ids and the legal choices' ids."""

TargetMemory = dict[TargetKey, Sample]


class TargetConfig(BaseModel):
    """The policy-iteration target: its weight and how many positions it remembers."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    coef: float = Field(gt=0.0, allow_inf_nan=False)
    """Weight of the cross-entropy from each restarted group's best first moves to the
    policy there."""
    memory: int = Field(0, ge=0)
    """How many positions' latest targets are kept and trained toward again at every
    update, so a target found once keeps its pull until a newer one at the same
    position replaces it; 0 keeps none."""


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


def improved_target(target: Sequence[float], logp: Tensor) -> Tensor:
    """The distribution to pull the policy toward at one decision, (C,), from its
    greedy target over the tried moves (``greedy_over_tried``, NaN where untried) and
    the policy's log-probs there, (C,), on their device.

    Policy iteration with partial evaluation: the tried moves' probability mass is
    shared among them as the greedy target says, and an untried move keeps the
    policy's probability. On the logits the cross-entropy's gradient is
    pi - target, so an untried move's is 0: nothing was learned about it, so nothing
    pushes it. Its probability is read now, detached, not at rollout: by the time a
    target is trained on (later epochs, or replayed from the memory many updates
    later) the policy has moved, and a stale copy would pull it back. A target with
    every move tried is returned as it is.
    """
    full = torch.tensor(target, device=logp.device)
    if not any(map(math.isnan, target)):  # read on the host: no device sync
        return full
    probs, untried = logp.detach().exp(), full.isnan()
    tried_mass = probs.masked_fill(untried, 0.0).sum()  # a boolean index would sync a GPU
    return torch.where(untried, probs, tried_mass * full.nan_to_num())


def cross_entropy(dists: Sequence[Tensor | None], samples: Sequence[Sample]) -> tuple[Tensor, int]:
    """Sum over the samples with a target of the cross-entropy from it to the policy."""
    terms = [
        -(improved_target(s.target, lp) * lp).sum()
        for lp, s in zip(dists, samples, strict=True)
        if lp is not None and s.target is not None
    ]
    if not terms:
        return torch.zeros(()), 0
    return torch.stack(terms).sum(), len(terms)


class PolicyIteration(Term):
    """The target term; its state is the memory of targets."""

    def __init__(self, cfg: TargetConfig):
        self.cfg = cfg
        self.memory: TargetMemory = {}

    def recall(self, samples: Sequence[Sample]) -> tuple[list[Sample], Metrics]:
        if not self.cfg.memory:
            return [], {}
        replayed = replays(self.memory, samples)
        self.memory = remember_targets(self.memory, samples, self.cfg.memory)
        return replayed, {"loss/replayed_targets": float(len(replayed))}

    def loss(self, context: Any, micro: Micro) -> tuple[Tensor | None, LossMetrics]:
        dists = micro.scored.dists
        ce, n = cross_entropy([dists[i] for i in micro.rows], micro.own)
        old = [i for i, s in enumerate(micro.batch) if s.replay]
        ce_replay, n_replay = cross_entropy([dists[i] for i in old], [micro.batch[i] for i in old])
        both = (ce + ce_replay).to(micro.scored.logp.device)
        # Means over the targets, which a micro-batch holds a share of.
        metrics: LossMetrics = {}
        if n:
            metrics["loss/policy_iteration"] = Mean(float(ce.detach()) / n, n)
        if n_replay:
            metrics["loss/policy_iteration_replay"] = Mean(
                float(ce_replay.detach()) / n_replay, n_replay
            )
        return self.cfg.coef * both / micro.size, metrics

    def state_dict(self) -> dict[str, Any]:
        return {"memory": self.memory}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.memory = dict(state["memory"])
