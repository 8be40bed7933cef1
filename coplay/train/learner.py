"""The learner's update: recompute log-probs of sampled turns and take PPO steps.

Turns are recorded token-exact in the episodes; here they are scored again under
the current weights (``LMPolicy.score``), compared with the sampled log-probs, and
the composed policy loss is minimised. Gradients of micro-batches accumulate with a
shared denominator, so the micro-batch size never changes the update.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from coplay.algos.advantages import Advantages
from coplay.algos.losses.aggregation import global_denom
from coplay.algos.losses.compose import LossConfig, policy_loss
from coplay.algos.losses.signalling import (
    group_marginals,
    listening_bonus,
    mutual_information,
    signalling_bonus,
)
from coplay.policies.lm import LMPolicy
from coplay.types import Decision, Episode


@dataclass(frozen=True)
class Sample:
    """One trainable decision and its advantage."""

    decision: Decision
    advantage: float
    player: int | None = None
    """The seat that took the decision (None where unknown: every seat)."""
    target: tuple[float, ...] | None = None
    """A distribution over the decision's choices to pull the policy toward (the
    policy-iteration target at a restart position), or None."""
    replay: bool = False
    """A past target trained on again (``loss.policy_iteration_memory``): only its
    target term counts; the policy loss, entropy and bonuses skip it."""


@dataclass
class Learner:
    """A trainable policy with its optimizer and optional frozen reference."""

    policy: LMPolicy
    optimizer: torch.optim.Optimizer
    loss: LossConfig
    max_grad_norm: float
    epochs: int
    minibatch_size: int
    micro_batch_size: int
    reference: LMPolicy | None = None
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None
    """Stepped once per training iteration."""
    reference_ema: float = 0.0
    """Fraction by which the reference (magnet) moves toward the policy per iteration."""
    iterations: int = 1
    """The run's length, over which ``loss.entropy_final_frac`` anneals the entropy weight."""


def linear_schedule(
    opt: torch.optim.Optimizer, optim, iterations: int
) -> torch.optim.lr_scheduler.LRScheduler | None:
    """The configured schedule: None (constant) or a linear decay to ``final_lr_frac``."""
    if optim.lr_schedule != "linear":
        return None
    end, span = optim.final_lr_frac, max(1, iterations - 1)
    return torch.optim.lr_scheduler.LambdaLR(
        opt, lambda it: 1.0 - (1.0 - end) * min(it, span) / span
    )


def scheduled_loss(loss: LossConfig, iteration: int, iterations: int) -> LossConfig:
    """``loss`` with its entropy weight at ``iteration`` (0-based) of ``iterations``: a
    linear decay to ``entropy_coef * entropy_final_frac`` at the last iteration."""
    if loss.entropy_final_frac == 1.0 or loss.entropy_coef == 0.0:
        return loss
    span = max(1, iterations - 1)
    frac = 1.0 - (1.0 - loss.entropy_final_frac) * min(iteration, span) / span
    return loss.model_copy(update={"entropy_coef": loss.entropy_coef * frac})


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
) -> Learner:
    """AdamW over ``params`` (default: all the policy's weights); when the loss has a KL
    term or the reference moves (``reference_ema`` > 0: a magnet, which without a KL
    term is a plain average of iterates), ``reference(policy)`` builds it (default: a
    frozen copy)."""
    opt = torch.optim.AdamW(
        policy.model.parameters() if params is None else params,
        lr=optim.lr,
        weight_decay=optim.weight_decay,
    )
    return Learner(
        policy=policy,
        optimizer=opt,
        loss=loss,
        max_grad_norm=optim.max_grad_norm,
        epochs=optim.epochs,
        minibatch_size=optim.minibatch_size,
        micro_batch_size=optim.micro_batch_size,
        reference=reference(policy) if loss.kl_coef > 0 or reference_ema > 0 else None,
        scheduler=linear_schedule(opt, optim, iterations),
        reference_ema=reference_ema,
        iterations=iterations,
    )


def make_adapter_learner(view, loss: LossConfig, optim, *, iterations: int = 1) -> Learner:
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
    )


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
    out = torch.zeros(len(rows), width)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=torch.float32)
    return out


Marginals = dict[tuple, torch.Tensor]
"""Log of the mean choice distribution per action set (``signalling.group_marginals``)."""


def signals(sample: Sample, seats: Sequence[int] | None) -> bool:
    """Whether the signalling bonus covers ``sample``'s decision (``loss.signalling_seats``)."""
    return seats is None or sample.player is None or sample.player in seats


def _choice_dists(learner: Learner, decisions: Sequence[Decision]) -> list[torch.Tensor | None]:
    """Each decision's log-distribution over its choices, scored in micro-batches."""
    dists: list[torch.Tensor | None] = []
    for start in range(0, len(decisions), learner.micro_batch_size):
        dists.extend(
            learner.policy.score(decisions[start : start + learner.micro_batch_size]).dists
        )
    return dists


@torch.no_grad()
def choice_marginals(learner: Learner, samples: Sequence[Sample]) -> tuple[Marginals, float]:
    """The signalling bonus's marginals over ``samples`` under the current weights (held
    fixed for the step's micro-batches, so accumulation stays exact), and their mutual
    information, weighted by group size."""
    samples = [s for s in samples if signals(s, learner.loss.signalling_seats)]
    dists = _choice_dists(learner, [s.decision for s in samples])
    keys = [s.decision.choice_ids for s in samples]
    marginals = group_marginals(dists, keys)
    groups = [[d for d, k in zip(dists, keys, strict=True) if k == g] for g in marginals]
    total = sum(len(g) for g in groups)
    mi = sum(len(g) * mutual_information(g) for g in groups) / total if total else 0.0
    return marginals, mi


@torch.no_grad()
def listening_marginals(learner: Learner, samples: Sequence[Sample]) -> list[torch.Tensor | None]:
    """Per sample, the log of its mean choice distribution over its counterfactual
    prompts (every message it could have received) under the current weights; None for
    samples without counterfactuals. Held fixed for the step, like the signalling marginals."""
    alts = [
        (i, replace(s.decision, prompt_ids=prompt))
        for i, s in enumerate(samples)
        for prompt in s.decision.counterfactual_prompt_ids
    ]
    dists = _choice_dists(learner, [d for _, d in alts])
    members: list[list[torch.Tensor]] = [[] for _ in samples]
    for (i, _), lp in zip(alts, dists, strict=True):
        if lp is not None:
            members[i].append(lp.exp())
    return [torch.stack(ps).mean(0).clamp_min(1e-12).log() if ps else None for ps in members]


def _listening_term(
    scored_dists: Sequence[torch.Tensor | None], marginals: Sequence[torch.Tensor | None]
) -> tuple[torch.Tensor, int]:
    """Sum of ``listening_bonus`` over the decisions that have a counterfactual marginal."""
    terms = [
        listening_bonus(lp, m)
        for lp, m in zip(scored_dists, marginals, strict=True)
        if lp is not None and m is not None
    ]
    if not terms:
        return torch.zeros(()), 0
    return torch.stack(terms).sum(), len(terms)


def _signalling_term(
    scored_dists: Sequence[torch.Tensor | None],
    batch: Sequence[Sample],
    marginals: Marginals,
    cfg: LossConfig,
) -> tuple[torch.Tensor, int]:
    """Sum of the bonus over the decisions it covers that have a marginal, and their count."""
    terms = [
        signalling_bonus(lp, marginals[s.decision.choice_ids], cfg.signalling_beta)
        for lp, s in zip(scored_dists, batch, strict=True)
        if lp is not None
        and s.decision.choice_ids in marginals
        and signals(s, cfg.signalling_seats)
    ]
    if not terms:
        return torch.zeros(()), 0
    return torch.stack(terms).sum(), len(terms)


def _target_term(
    scored_dists: Sequence[torch.Tensor | None], batch: Sequence[Sample]
) -> tuple[torch.Tensor, int]:
    """Sum over the samples with a target of the cross-entropy from it to the policy."""
    terms = [
        -(torch.tensor(s.target, device=lp.device) * lp).sum()
        for lp, s in zip(scored_dists, batch, strict=True)
        if lp is not None and s.target is not None
    ]
    if not terms:
        return torch.zeros(()), 0
    return torch.stack(terms).sum(), len(terms)


def _behavior(decision) -> tuple[float, ...]:
    return decision.logprobs if decision.behavior_logprobs is None else decision.behavior_logprobs


def _micro_step(
    learner: Learner,
    batch: Sequence[Sample],
    denom: float,
    cfg: LossConfig,
    marginals: Marginals,
    minibatch_size: int,
    listening: Sequence[torch.Tensor | None] = (),
) -> dict[str, float]:
    """Forward and backward of one micro-batch; gradients accumulate on the weights.

    Replayed targets (``Sample.replay``) are scored in the same forward pass but count
    only in the target term. ``listening`` is aligned with ``batch``
    (``listening_marginals``), empty when off."""
    scored = learner.policy.score([s.decision for s in batch])  # (B, T) each
    rows = [i for i, s in enumerate(batch) if not s.replay]
    own = [batch[i] for i in rows]
    dists = [scored.dists[i] for i in rows]
    device = scored.logp.device
    total, metrics = torch.zeros((), device=device), {}
    if own:
        total, metrics = _own_loss(learner, own, scored, rows, denom, cfg)
    if marginals:
        bonus, n = _signalling_term(dists, own, marginals, cfg)
        # Divided by the minibatch's size, not the micro-batch's: accumulation stays exact.
        total = total - cfg.signalling_coef * bonus.to(device) / minibatch_size
        if n:
            metrics["loss/signalling"] = float(bonus.detach()) / n
    if cfg.policy_iteration_coef > 0:
        ce, n = _target_term(dists, own)
        replays = [s for s in batch if s.replay]
        ce_replay, n_replay = _target_term(
            [d for d, s in zip(scored.dists, batch, strict=True) if s.replay], replays
        )
        total = total + cfg.policy_iteration_coef * (ce + ce_replay).to(device) / minibatch_size
        if n:
            metrics["loss/policy_iteration"] = float(ce.detach()) / n
        if n_replay:
            metrics["loss/policy_iteration_replay"] = float(ce_replay.detach()) / n_replay
    if listening:
        bonus, n = _listening_term(scored.dists, listening)
        total = total - cfg.listening_coef * bonus.to(device) / minibatch_size
        if n:
            metrics["loss/listening"] = float(bonus.detach()) / n
    total.backward()
    return metrics


def _own_loss(
    learner: Learner,
    batch: Sequence[Sample],
    scored,
    rows: Sequence[int],
    denom: float,
    cfg: LossConfig,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The composed policy loss of ``batch`` (``scored``'s ``rows``) and its metrics."""
    decisions = [s.decision for s in batch]
    logp, mask, entropy = scored.logp[rows], scored.mask[rows], scored.entropy[rows]
    width, device = logp.shape[1], logp.device
    ref_logp = None
    if learner.reference is not None and cfg.kl_coef > 0:
        with torch.no_grad():
            ref = learner.reference.score(decisions).logp
        # Replays in the micro-batch may have widened the scored rows (padding).
        ref_logp = torch.nn.functional.pad(ref, (0, width - ref.shape[1]))
    total, metrics = policy_loss(
        cfg,
        logp=logp,
        old_logp=_pad([d.logprobs for d in decisions], width).to(device),
        adv=torch.tensor([s.advantage for s in batch], device=device)[:, None],  # (B, 1)
        mask=mask,
        ref_logp=ref_logp,
        entropy=entropy,
        denom=denom,
        # The behaviour policy is the recorded one unless exploration mixed in uniform
        # choices (``rollout.explore``); then the truncated weights pi_old / mixture
        # keep the update on the policy's own distribution.
        behavior_logp=_pad([_behavior(d) for d in decisions], width).to(device),
    )
    metrics["loss/entropy"] = float((entropy.detach() * mask).sum() / mask.sum())
    return total, metrics


def update(
    learner: Learner, samples: Sequence[Sample], rng: np.random.Generator
) -> dict[str, float]:
    """PPO epochs over shuffled minibatches; returns averaged ``loss/*`` metrics."""
    if not samples:
        return {"loss/steps": 0.0}
    lr = learner.optimizer.param_groups[0]["lr"]
    # policy.version counts the updates so far and is restored on resume
    loss = scheduled_loss(learner.loss, learner.policy.version, learner.iterations)
    learner.policy.model.train()
    history: list[dict[str, float]] = []
    for _ in range(learner.epochs):
        order = rng.permutation(len(samples))
        for start in range(0, len(samples), learner.minibatch_size):
            minibatch = [samples[i] for i in order[start : start + learner.minibatch_size]]
            history.append(_minibatch_step(learner, minibatch, loss))
    learner.policy.model.eval()
    learner.policy.version += 1
    if learner.scheduler is not None:
        learner.scheduler.step()
    if learner.reference is not None and learner.reference_ema > 0:
        move_magnet(learner.reference.model, learner.policy.model, learner.reference_ema)
    keys = {k for h in history for k in h}
    out = {k: float(np.mean([h[k] for h in history if k in h])) for k in keys}
    out["loss/steps"] = float(len(history))
    out["loss/lr"] = lr
    out["loss/entropy_coef"] = loss.entropy_coef
    out["loss/grad_spikes"] = float(
        sum(h["loss/grad_norm"] > 10 * learner.max_grad_norm for h in history)
    )
    return out


@torch.no_grad()
def move_magnet(magnet: torch.nn.Module, policy: torch.nn.Module, ema: float) -> None:
    """magnet <- magnet + ema * (policy - magnet), parameter by parameter."""
    for m, p in zip(magnet.parameters(), policy.parameters(), strict=True):
        m.lerp_(p, ema)


def _minibatch_step(
    learner: Learner, minibatch: Sequence[Sample], loss: LossConfig
) -> dict[str, float]:
    own = [s for s in minibatch if not s.replay]
    replays = [s for s in minibatch if s.replay]
    # Per-sample terms are divided by the minibatch's own samples, replays not counted,
    # so a memory adds target pulls without diluting the other terms.
    size = len(own) or len(replays)
    masks = [torch.ones(1, max(1, len(s.decision.logprobs))) for s in own]
    denom = global_denom(loss.aggregation, masks) if masks else 1.0
    # The signalling bonus's marginals under the weights of this very step: held over
    # several steps, a stale marginal would reward every choice moving away from it
    # together (a collapse onto one symbol) instead of moving apart.
    marginals, mi = choice_marginals(learner, own) if loss.signalling_coef > 0 else ({}, 0)
    listening = listening_marginals(learner, own) if loss.listening_coef > 0 else []
    listening = [*listening, *[None] * len(replays)] if listening else []
    ordered = [*own, *replays]  # replays share the micro-batches' forward passes
    learner.optimizer.zero_grad(set_to_none=True)
    parts = []
    for start in range(0, len(ordered), learner.micro_batch_size):
        end = start + learner.micro_batch_size
        micro = ordered[start:end]
        step = _micro_step(learner, micro, denom, loss, marginals, size, listening[start:end])
        parts.append((len(micro), step))
    # The optimizer's own parameters: LoRA roles share one model, and another role's
    # leftover gradients must not count toward (or be clipped with) this one's norm.
    params = [p for group in learner.optimizer.param_groups for p in group["params"]]
    grad_norm = torch.nn.utils.clip_grad_norm_(params, learner.max_grad_norm)
    learner.optimizer.step()
    metrics = _combine(parts)
    metrics["loss/grad_norm"] = float(grad_norm)
    if loss.signalling_coef > 0:
        metrics["loss/signalling_mi"] = mi
    return metrics


def _combine(parts: list[tuple[int, dict[str, float]]]) -> dict[str, float]:
    """Aggregated loss terms add up over micro-batches; means are weighted by size,
    over the micro-batches that report them (replayed targets report only their own)."""
    additive = {"loss/policy", "loss/kl", "loss/total"}
    keys = {k for _, m in parts for k in m}
    return {
        k: sum(m.get(k, 0.0) for _, m in parts)
        if k in additive
        else sum(n * m[k] for n, m in parts if k in m) / sum(n for n, m in parts if k in m)
        for k in keys
    }
