"""The learner's update: recompute log-probs of sampled turns and take PPO steps.

Turns are recorded token-exact in the episodes; here they are scored again under
the current weights (``policy.scorer``), compared with the sampled log-probs, and
the PPO objective (``policy_loss``) plus the learner's terms (``coplay.train.parts``:
KL, entropy, signalling, listening, the policy-iteration target) is minimised.
Gradients of micro-batches accumulate with a shared denominator, so the micro-batch
size never changes the update; micro-batches are cut by a token budget
(``coplay.train.micro``), automatic by default. A micro-batch's objective is
``coplay.train.learner_objective``'s; its metrics combine in ``coplay.train.learner_metrics``.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from contextlib import nullcontext
from typing import Any

import numpy as np
import torch

from coplay.algos.advantages import Advantages
from coplay.algos.losses.aggregation import AGGREGATIONS, global_denom
from coplay.policies.chains import conversations
from coplay.train import vocab_grads
from coplay.train.learner import Learner
from coplay.train.learner_metrics import EXTREMA, Part, combine
from coplay.train.learner_objective import own_loss, units_per_row
from coplay.train.micro import learner_micro_batches, together
from coplay.train.mismatch import rebase_on_learner
from coplay.train.parts.term import LossMetrics, Metrics, Micro, Sample
from coplay.types import Episode


def collect_samples(
    episodes: Sequence[Episode],
    advantages: Advantages,
    policy_id: str,
    *,
    keep: Collection[tuple[int, int]] | None = None,
    targets: Mapping[tuple[int, int], tuple[float, ...]] | None = None,
) -> list[Sample]:
    """Trainable decisions of ``policy_id`` (rejected retries included) with advantages.

    A rejected answer shares its turn's advantage, so an invalid answer that led to a
    penalty or forfeit is pushed down with it. ``keep``, when given, lists the
    (episode index, seat) trajectories to take; the others are skipped. ``targets``
    (``opening_targets``) gives the first turn of those trajectories a target.
    """
    out = []
    targets = targets or {}
    for e, (ep, per_seat) in enumerate(zip(episodes, advantages, strict=True)):
        for s, (traj, advs) in enumerate(zip(ep.trajectories, per_seat, strict=True)):
            if keep is not None and (e, s) not in keep:
                continue
            for k, (turn, adv) in enumerate(zip(traj.turns, advs, strict=True)):
                target = targets.get((e, s)) if k == 0 else None
                for dec in turn.invalid_attempts:
                    if dec.policy_id == policy_id and dec.trainable:
                        out.append(Sample(dec, float(adv), s))
                if turn.decision.policy_id == policy_id and turn.decision.trainable:
                    out.append(Sample(turn.decision, float(adv), s, target))
    return out


def _micro_step(
    learner: Learner,
    batch: Sequence[Sample],
    start: int,
    denom: float,
    size: int,
    contexts: Mapping[str, Any],
) -> Part:
    """Forward and backward of one micro-batch; gradients accumulate on the weights.

    Replayed targets (``Sample.replay``) are scored in the same forward pass, but only
    the terms that read them (the policy-iteration target) count them."""
    scored = learner.policy.scorer.score([s.decision for s in batch])  # (B, T) each
    rows = [i for i, s in enumerate(batch) if not s.replay]
    # Without replays every row is the objective's: no copy (and backward node) to take.
    logp, mask, entropy = (
        t if len(rows) == len(batch) else t[rows]
        for t in (scored.logp, scored.mask, scored.entropy)
    )
    micro = Micro(
        batch=batch,
        start=start,
        scored=scored,
        rows=rows,
        logp=logp,
        mask=mask,
        entropy=entropy,
        aggregate=AGGREGATIONS[learner.loss.aggregation],
        denom=denom,
        size=size,
    )
    total, per_unit, units = torch.zeros((), device=scored.logp.device), {}, 0.0
    if rows:
        total, per_unit, units = own_loss(learner, micro, contexts)
    others: LossMetrics = {}
    for name, term in learner.terms.items():
        if not term.per_unit:
            value, term_metrics = term.loss(contexts[name], micro)
            total = total if value is None else total + value
            others |= term_metrics
    total.backward()
    return Part(size=len(batch), units=units, per_unit=per_unit, others=others)


def update(
    learner: Learner, samples: Sequence[Sample], rng: np.random.Generator
) -> dict[str, float]:
    """PPO epochs over shuffled minibatches; returns ``loss/*`` metrics: each a mean
    over the optimizer steps (every step counts once, a short last minibatch too), but
    ``EXTREMA``, which are the extreme over all of them.

    No samples, no update: the weights, the lr schedule and the magnet stay as they
    were (they count updates, not iterations)."""
    if not samples:
        return {"loss/steps": 0.0}
    lr = learner.optimizer.param_groups[0]["lr"]
    # policy.version counts the updates so far and is restored on resume
    iteration = learner.policy.version
    # An engine's text log-probs become the behaviour ones; pi_old is the learner's own.
    samples, mismatch = rebase_on_learner(learner, samples)
    begun: Metrics = {}
    with torch.no_grad():
        for term in learner.terms.values():
            begun |= term.begin_update(learner, samples, iteration)
    learner.policy.model.train()
    history: list[dict[str, float]] = []
    chat = getattr(learner.policy, "wants_history", False)  # conversations stay together
    for _ in range(learner.epochs):
        order = shuffled(samples, rng, by_conversation=chat)
        for start in range(0, len(samples), learner.minibatch_size):
            minibatch = [samples[i] for i in order[start : start + learner.minibatch_size]]
            history.append(_minibatch_step(learner, minibatch, iteration))
    learner.policy.model.eval()
    # The trained weights become the backend's next version (the one rollouts record).
    synced = time.perf_counter()
    learner.policy.publish()
    synced = time.perf_counter() - synced
    if learner.scheduler is not None:
        learner.scheduler.step()
    after: Metrics = {}
    for term in learner.terms.values():
        after |= term.after_update(learner, iteration)
    keys = {k for h in history for k in h}
    out = {k: float(EXTREMA.get(k, np.mean)([h[k] for h in history if k in h])) for k in keys}
    out["loss/steps"] = float(len(history))
    if mismatch is not None:
        out |= mismatch.metrics() | {"perf/weight_sync_s": synced}
    out["loss/lr"] = lr
    out |= learner.idle_metrics | begun | after
    out["loss/grad_spikes"] = float(
        sum(h["loss/grad_norm"] > 10 * learner.max_grad_norm for h in history)
    )
    return out


def shuffled(
    samples: Sequence[Sample], rng: np.random.Generator, *, by_conversation: bool
) -> Sequence[int]:
    """Sample indices in a random order. In chat context the turns of a conversation
    stay together, in turn order, so a micro-batch scores each conversation with one
    forward pass (``coplay.policies.chains``); a conversation cut by a minibatch or
    micro-batch boundary costs one more pass, never a different number."""
    if not by_conversation:
        return rng.permutation(len(samples))
    groups = conversations([s.decision for s in samples])
    return [i for g in rng.permutation(len(groups)) for i in groups[g]]


def _minibatch_step(learner: Learner, minibatch: Sequence[Sample], iteration: int) -> Metrics:
    own = [s for s in minibatch if not s.replay]
    replays = [s for s in minibatch if s.replay]
    ordered = [*own, *replays]  # replays share the micro-batches' forward passes
    cuts = learner_micro_batches(learner, [s.decision for s in ordered])
    if len(cuts) > 1:
        # Several passes: each state's copies in one of them, so it is scored once
        # (``together``). The sum over the minibatch is the same in any order.
        own = [own[i] for i in together([s.decision for s in own])]
        ordered = [*own, *replays]
        cuts = learner_micro_batches(learner, [s.decision for s in ordered])
    # Per-sample terms are divided by the minibatch's own samples, replays not counted,
    # so a memory adds target pulls without diluting the other terms.
    size = len(own) or len(replays)
    # One (B, T) mask of every own sample's units: the denominators count the same
    # units and rows as one mask per sample would, without a tensor per sample.
    units = torch.tensor([max(1, len(s.decision.logprobs)) for s in own])
    masks = [(torch.arange(int(units.max()))[None, :] < units[:, None]).float()] if own else []
    budget = units_per_row(learner.policy)
    denom = global_denom(learner.loss.aggregation, masks, units_per_row=budget) if masks else 1.0
    # Each term's context under the weights of this very step (e.g. the signalling
    # marginals), held fixed for its micro-batches.
    contexts: dict[str, Any] = {}
    prepared: Metrics = {}
    with torch.no_grad():
        for name, term in learner.terms.items():
            contexts[name], term_metrics = term.prepare(learner, own, iteration)
            prepared |= term_metrics
    learner.optimizer.zero_grad(set_to_none=True)
    parts = []
    model = learner.policy.model
    in_place = vocab_grads.grads_in_place(model) if learner.vocab_grads_in_place else nullcontext()
    with in_place:
        for start, end in cuts:
            micro = ordered[start:end]
            parts.append(_micro_step(learner, micro, start, denom, size, contexts))
    # The optimizer's own parameters: LoRA roles share one model, and another role's
    # leftover gradients must not count toward (or be clipped with) this one's norm.
    params = [p for group in learner.optimizer.param_groups for p in group["params"]]
    grad_norm = torch.nn.utils.clip_grad_norm_(params, learner.max_grad_norm)
    learner.optimizer.step()
    metrics = combine(parts)
    metrics["loss/grad_norm"] = float(grad_norm)
    return metrics | prepared
