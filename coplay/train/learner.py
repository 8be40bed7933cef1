"""The learner's update: recompute log-probs of sampled turns and take PPO steps.

Turns are recorded token-exact in the episodes; here they are scored again under
the current weights (``policy.scorer``), compared with the sampled log-probs, and
the PPO objective (``policy_loss``) plus the learner's terms (``coplay.train.parts``:
KL, entropy, signalling, listening, the policy-iteration target) is minimised.
Gradients of micro-batches accumulate with a shared denominator, so the micro-batch
size never changes the update; micro-batches are cut by a token budget
(``coplay.train.micro``), automatic by default.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np
import torch

from coplay.algos.advantages import Advantages
from coplay.algos.losses.aggregation import AGGREGATIONS, global_denom
from coplay.algos.losses.compose import LossConfig, policy_loss
from coplay.models.devices import to_device
from coplay.policies.chains import conversations
from coplay.policies.lm import LMPolicy
from coplay.policies.scoring import CHECKPOINTED
from coplay.train import vocab_grads
from coplay.train.micro import auto_budget, learner_micro_batches, logit_tokens, together
from coplay.train.mismatch import rebase_on_learner
from coplay.train.parts.policy_iteration import TargetConfig
from coplay.train.parts.term import LossTerm, Metrics, Micro, Sample, Setup
from coplay.train.parts.terms import build_terms
from coplay.types import Episode

__all__ = ["Learner", "Sample", "collect_samples", "make_learner", "recall", "update"]


@dataclass
class Learner:
    """A trainable policy with its optimizer and its loss terms."""

    policy: LMPolicy
    optimizer: torch.optim.Optimizer
    loss: LossConfig
    """The objective's settings (clip, aggregation); its sections built ``terms``."""
    max_grad_norm: float
    epochs: int
    minibatch_size: int
    micro_batch_size: int
    """Most decisions per forward/backward pass."""
    micro_batch_tokens: int
    """Most padded tokens per forward/backward pass (``coplay.train.micro``)."""
    logit_weight: int = 1
    """Tokens one scored position's vocabulary rows count as in that budget."""
    checkpointing: bool = False
    """Activation checkpointing is on (``optim.activation_checkpointing``)."""
    vocab_grads_in_place: bool = False
    """The vocabulary matrices' gradients are added into ``.grad`` in place
    (``optim.vocab_grads_in_place``, ``coplay.train.vocab_grads``)."""
    terms: dict[str, LossTerm] = field(default_factory=dict)
    """The terms that are on, by config section name, in the order they are added."""
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None
    """Stepped once per update (``update``). An iteration with nothing to train on is no
    update: the weights, the schedule and the magnet stay as they were, as do the
    terms' schedules, which count updates in ``policy.version``."""
    tis_cap: float | None = None
    """Cap of the truncated IS weights policy / behaviour (exploration); None is off."""
    idle_metrics: Metrics = field(default_factory=dict)
    """Metrics of the terms that are off, logged with every update."""

    @property
    def reference(self) -> LMPolicy | None:
        """The KL term's reference (a frozen copy, or the magnet), if there is one."""
        kl = self.terms.get("kl")
        return getattr(kl, "reference", None)


FUSED_FROM = 20_000_000
"""Trainable parameters above which AdamW runs fused by default: the one-tensor-at-a-time
step makes temporaries as large as the largest tensor (a 150k-token embedding: 300 MB
at 0.1B parameters), where the fused kernel makes none and is faster. Smaller models
keep the unfused step, whose float rounding their reproduced results were taken with.
Below it the unfused step runs as one ``foreach`` call per operation over all the
parameters: the same arithmetic tensor by tensor, bit for bit, without a Python step per
parameter (torch picks it by itself on GPUs only); its temporaries, as large as all the
parameters together, stay under 80 MB there."""


def count(params: Iterable[torch.nn.Parameter]) -> int:
    return sum(p.numel() for p in params)


def linear_schedule(
    opt: torch.optim.Optimizer, optim, iterations: int
) -> torch.optim.lr_scheduler.LRScheduler | None:
    """The configured schedule: None (constant) or a linear decay to ``final_lr_frac``
    over ``iterations`` updates (a ``LambdaLR``: lr = base lr * factor(updates done))."""
    if optim.lr_schedule != "linear":
        return None
    end, span = optim.final_lr_frac, max(1, iterations - 1)
    return torch.optim.lr_scheduler.LambdaLR(
        opt, lambda it: 1.0 - (1.0 - end) * min(it, span) / span
    )


def load_optimizer(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """``optimizer.load_state_dict(state)``, keeping the learning rate and weight decay
    the optimizer was built with from this run's config: torch puts back the saved
    ones, and a run resumed with another ``optim.lr`` or ``optim.weight_decay`` went on
    with the old ones while its config.yaml named the new."""
    keys = ("lr", "initial_lr", "weight_decay")
    own = [{k: g[k] for k in keys if k in g} for g in optimizer.param_groups]
    optimizer.load_state_dict(state)
    for group, settings in zip(optimizer.param_groups, own, strict=True):
        group.pop("initial_lr", None)  # the saved run's schedule, which this one may lack
        group.update(settings)


def load_schedule(learner: Learner, state: dict[str, Any] | None) -> None:
    """Restore the schedule's step (None: the saved run had no schedule, and this one
    starts at the updates done) under this run's config, and set the optimizer's lr to
    the schedule's there: the saved base lr would override ``optim.lr``, and the lr
    saved at the last step would hold for one step a schedule that ``train.iterations``
    has since stretched. Call it after ``load_optimizer``."""
    scheduler = learner.scheduler
    if scheduler is None:
        return
    if state is not None:
        scheduler.load_state_dict(state)
    else:
        scheduler.last_epoch = learner.policy.version  # restored: the updates so far
    groups = learner.optimizer.param_groups
    scheduler.base_lrs = [g["initial_lr"] for g in groups]  # this run's, kept on load
    # ``linear_schedule``'s LambdaLR: its factor is this run's function (torch saves none).
    lrs = [
        base * factor(scheduler.last_epoch)
        for base, factor in zip(scheduler.base_lrs, scheduler.lr_lambdas, strict=True)
    ]
    for group, lr in zip(groups, lrs, strict=True):
        group["lr"] = lr
    scheduler._last_lr = lrs  # what get_last_lr() reports, as after a step


def frozen_copy(policy: LMPolicy) -> LMPolicy:
    """A KL reference: the policy with a frozen deep copy of its weights."""
    ref = copy.copy(policy)
    ref.model = copy.deepcopy(policy.model).eval().requires_grad_(False)
    return ref


def make_learner(
    policy: LMPolicy,
    loss: LossConfig,
    optim,
    *,
    iterations: int = 1,
    reference_ema: float = 0.0,
    params: Iterable[torch.nn.Parameter] | None = None,
    reference: Callable[[LMPolicy], LMPolicy] = frozen_copy,
    tis_cap: float | None = None,
    target: TargetConfig | None = None,
) -> Learner:
    """AdamW over ``params`` (default: all the policy's weights) and the terms that
    ``loss``'s sections and ``target`` (the policy-iteration target) turn on. When the
    loss has a KL section or the reference moves (``reference_ema`` > 0: a magnet,
    which without a KL section is a plain average of iterates), ``reference(policy)``
    builds the reference (default: a frozen copy). ``tis_cap`` reweights turns sampled
    by an exploring behaviour policy (``policy_loss``)."""
    params = list(policy.model.parameters() if params is None else params)
    small = count(params) <= FUSED_FROM
    fused = optim.fused if optim.fused is not None else not small
    checkpointing = optim.activation_checkpointing
    if checkpointing:
        enable_checkpointing(policy.model)
    step = {"fused": True} if fused else {"foreach": True if small else None}
    opt = torch.optim.AdamW(params, lr=optim.lr, weight_decay=optim.weight_decay, **step)
    sections = {name: getattr(loss, name, None) for name in type(loss).model_fields}
    setup = Setup(policy, reference, reference_ema, iterations)
    terms, idle = build_terms({**sections, "target": target}, setup)
    return Learner(
        policy=policy,
        optimizer=opt,
        loss=loss,
        max_grad_norm=optim.max_grad_norm,
        epochs=optim.epochs,
        minibatch_size=optim.minibatch_size,
        micro_batch_size=optim.micro_batch_size,
        micro_batch_tokens=optim.micro_batch_tokens or auto_budget(policy.model.config),
        logit_weight=logit_tokens(policy.model.config),
        checkpointing=checkpointing,
        vocab_grads_in_place=(
            optim.vocab_grads_in_place
            if optim.vocab_grads_in_place is not None
            else vocab_grads.worth_it(policy.model)
        ),
        terms=terms,
        scheduler=linear_schedule(opt, optim, iterations),
        tis_cap=tis_cap,
        idle_metrics=idle,
    )


def enable_checkpointing(model) -> None:
    """Turn on the model's activation checkpointing (training mode only: rollouts in
    eval mode keep their KV caches). Non-reentrant, so no input needs a gradient and
    LoRA adapters work as full weights do; the scorer stops sharing KV caches while
    it is on (``coplay.policies.scoring.caching``)."""
    if not getattr(model, "supports_gradient_checkpointing", False):
        name = type(model).__name__
        raise ValueError(f"optim.activation_checkpointing: the model ({name}) does not support it")
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # its name from transformers 5.20
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    setattr(model, CHECKPOINTED, True)


def make_adapter_learner(
    view,
    loss: LossConfig,
    optim,
    *,
    iterations: int = 1,
    tis_cap: float | None = None,
    target: TargetConfig | None = None,
) -> Learner:
    """A learner for one LoRA role view (``coplay.models.lora``): its AdamW holds only
    the view's adapter; the KL reference, when the loss has one, is the frozen base
    (what every adapter starts as)."""
    from coplay.models.lora import base_view  # peft loads only for LoRA runs

    return make_learner(
        view,
        loss,
        optim,
        iterations=iterations,
        params=view.adapter_parameters(),
        reference=base_view,
        tis_cap=tis_cap,
        target=target,
    )


def recall(learner: Learner, samples: Sequence[Sample]) -> tuple[list[Sample], Metrics]:
    """The terms' extra samples for this update (the policy-iteration memory's replayed
    targets) and their metrics. Call it with the iteration's fresh samples before any
    filter, which may drop a target whose advantage is 0: the terms remember them."""
    extra: list[Sample] = []
    metrics: Metrics = {}
    for term in learner.terms.values():
        more, m = term.recall(samples)
        extra += more
        metrics |= m
    return extra, metrics


def terms_state(learner: Learner) -> dict[str, Any]:
    """What a checkpoint saves of the learner's terms: section name -> state."""
    states = {name: term.state_dict() for name, term in learner.terms.items()}
    return {name: state for name, state in states.items() if state is not None}


def load_terms_state(learner: Learner, states: Mapping[str, Any]) -> None:
    """Restore what ``terms_state`` saved into the learner's terms."""
    for name, state in states.items():
        if name not in learner.terms:
            raise ValueError(f"the saved state has a {name!r} loss term, which this run has not")
        learner.terms[name].load_state_dict(state)


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


def _pad(rows: Sequence[Sequence[float]], width: int) -> torch.Tensor:
    """(B, width) float32, row i's values from the left, zeros after (one flat copy)."""
    if width == 1:  # one unit a row (choices): no offsets to compute
        return _column([r[0] for r in rows])
    lens = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    out = np.zeros((len(rows), width), dtype=np.float32)
    flat = np.fromiter(chain.from_iterable(rows), dtype=np.float64, count=int(lens.sum()))
    cols = np.arange(len(flat)) - np.repeat(np.cumsum(lens) - lens, lens)
    out[np.repeat(np.arange(len(rows)), lens), cols] = flat  # rounded as torch rounds
    return torch.from_numpy(out)


def _column(values: Sequence[float]) -> torch.Tensor:
    """(B, 1) float32 of ``values``, rounded as ``torch.tensor`` rounds them (one
    numpy copy instead of one Python float at a time)."""
    flat = np.fromiter(values, dtype=np.float64, count=len(values))
    return torch.from_numpy(flat.astype(np.float32)[:, None])


def _behavior(decision) -> tuple[float, ...]:
    return decision.logprobs if decision.behavior_logprobs is None else decision.behavior_logprobs


def _micro_step(
    learner: Learner,
    batch: Sequence[Sample],
    start: int,
    denom: float,
    size: int,
    contexts: Mapping[str, Any],
) -> _Part:
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
        total, per_unit, units = _own_loss(learner, micro, contexts)
    others: Metrics = {}
    for name, term in learner.terms.items():
        if not term.per_unit:
            value, term_metrics = term.loss(contexts[name], micro)
            total = total if value is None else total + value
            others |= term_metrics
    total.backward()
    return _Part(size=len(batch), units=units, per_unit=per_unit, others=others)


def _own_loss(
    learner: Learner, micro: Micro, contexts: Mapping[str, Any]
) -> tuple[torch.Tensor, Metrics, float]:
    """The objective over the micro-batch's own samples plus the per-unit terms, their
    metrics (``loss/total`` is this sum, not the per-decision terms) and the own units
    the metrics' means are over."""
    decisions = [s.decision for s in micro.own]
    width, device = micro.logp.shape[1], micro.logp.device
    total, metrics = policy_loss(
        learner.loss,
        logp=micro.logp,
        old_logp=to_device(_pad([d.logprobs for d in decisions], width), device),
        adv=to_device(_column([s.advantage for s in micro.own]), device),  # (B, 1)
        mask=micro.mask,
        denom=micro.denom,
        # The behaviour policy is the recorded one unless exploration mixed in uniform
        # choices (``rollout.explore``); then the truncated weights pi_old / mixture
        # keep the update on the policy's own distribution (read only with ``tis_cap``).
        behavior_logp=(
            to_device(_pad([_behavior(d) for d in decisions], width), device)
            if learner.tis_cap is not None
            else None
        ),
        tis_cap=learner.tis_cap,
    )
    for name, term in learner.terms.items():
        if term.per_unit:
            value, term_metrics = term.loss(contexts[name], micro)
            total = total if value is None else total + value
            metrics |= term_metrics
    metrics["loss/total"] = total.item()
    units = micro.mask.sum()
    metrics["loss/entropy"] = float((micro.entropy.detach() * micro.mask).sum() / units)
    return total, metrics, float(units)


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
    metrics = _combine(parts)
    metrics["loss/grad_norm"] = float(grad_norm)
    return metrics | prepared


@dataclass(frozen=True)
class _Part:
    """One micro-batch's metrics, with what their means are over."""

    size: int
    """Its samples, replays included."""
    units: float
    """Its own samples' units (decisions or tokens): what the objective's means are over."""
    per_unit: Metrics
    """The objective's and the per-unit terms' metrics."""
    others: Metrics
    """The other terms' metrics."""


ADDED = frozenset({"loss/policy", "loss/kl", "loss/total"})
"""Metrics that are a micro-batch's share of the minibatch's aggregate (a global
denominator): they add up."""
EXTREMA: dict[str, Callable[[Iterable[float]], float]] = {
    "loss/ratio_min": min,
    "loss/ratio_max": max,
}
"""Metrics that are an extreme over the micro-batch's units: the minibatch's is the
most extreme of its micro-batches', and the update's of its minibatches', not a mean."""


def _combine(parts: Sequence[_Part]) -> Metrics:
    """A minibatch's metrics from its micro-batches': shares added, extremes taken, and
    means weighted by what each micro-batch averaged over (the objective's by its own
    units, the other terms' by its size), over the micro-batches that report them
    (replayed targets report only their own), so that no metric depends on the cuts."""
    out: Metrics = {}
    for field_name, weight in (("per_unit", "units"), ("others", "size")):
        reports: dict[str, list[tuple[float, float]]] = {}
        for part in parts:
            for key, value in getattr(part, field_name).items():
                reports.setdefault(key, []).append((getattr(part, weight), value))
        for key, pairs in reports.items():
            if key in ADDED:
                out[key] = sum(v for _, v in pairs)
            elif key in EXTREMA:
                out[key] = EXTREMA[key](v for _, v in pairs)
            else:
                out[key] = sum(w * v for w, v in pairs) / sum(w for w, _ in pairs)
    return out


def units_per_row(policy: Any) -> float:
    """A decision's unit budget, constant_norm's constant (Dr. GRPO): the longest answer
    in text mode (``max_new_tokens``), the one chosen action in choice mode."""
    if getattr(policy, "mode", "choice") == "text":
        return float(policy.max_new_tokens)
    return 1.0
