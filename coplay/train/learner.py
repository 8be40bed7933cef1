"""A learner: a trainable policy with its optimizer, its lr schedule and its loss terms.

``make_learner`` builds one from the run's loss and optimizer settings (the terms
from the loss sections, ``coplay.train.parts``); the helpers here restore its
optimizer, schedule and terms on resume. Its update is ``coplay.train.learner_update``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from coplay.algos.losses.compose import LossConfig
from coplay.policies.lm import LMPolicy
from coplay.policies.scoring import CHECKPOINTED
from coplay.train import vocab_grads
from coplay.train.micro import auto_budget, logit_tokens
from coplay.train.parts.policy_iteration import TargetConfig
from coplay.train.parts.term import LossTerm, Metrics, Sample, Setup
from coplay.train.parts.terms import build_terms
from coplay.train.schedules import lr_factor

__all__ = ["Learner", "Sample", "make_learner", "recall"]


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


def lr_scheduler(
    opt: torch.optim.Optimizer, optim, iterations: int
) -> torch.optim.lr_scheduler.LRScheduler | None:
    """The configured schedule over ``iterations`` updates, its warm-up first
    (``coplay.train.schedules.lr_factor``), as a ``LambdaLR``: lr = base lr *
    factor(updates done); None where the lr stays as set."""
    factor = lr_factor(optim, iterations)
    return None if factor is None else torch.optim.lr_scheduler.LambdaLR(opt, factor)


def lr_scale(learner: Learner) -> float:
    """The schedule's factor on ``optim.lr`` at the learner's next update (1 without a
    schedule): the value model's rate follows it, as one scheduler drives the policy and
    the value head in TRL's PPO."""
    scheduler = learner.scheduler
    if scheduler is None:
        return 1.0
    return scheduler.lr_lambdas[0](scheduler.last_epoch)


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
    # ``lr_scheduler``'s LambdaLR: its factor is this run's function (torch saves none).
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
    disable_dropout(policy.model)
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
        scheduler=lr_scheduler(opt, optim, iterations),
        tis_cap=tis_cap,
        idle_metrics=idle,
    )


def disable_dropout(model: torch.nn.Module) -> None:
    """Set the model's own dropout to 0 (a checkpoint's config may ask for some: GPT-2's
    0.1). Rollouts sample in eval mode, without it; the update runs in training mode
    (activation checkpointing needs it), where a dropped unit made the recomputed
    log-probs differ from the sampled ones: PPO's ratio off 1 on an on-policy first
    step, and a KL to the reference without any update. A LoRA adapter's dropout is
    the run's own ``lora.dropout`` and stays."""
    for name, module in model.named_modules():
        if "lora_dropout" in name.split("."):
            continue
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        # Many layers keep a rate as a plain number, read in training mode: Llama's
        # attention_dropout, OPT's dropout and layerdrop, Falcon's hidden_dropout.
        for key, value in list(vars(module).items()):
            if "drop" in key and isinstance(value, float):
                setattr(module, key, 0.0)


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
