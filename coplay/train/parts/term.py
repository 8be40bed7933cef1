"""What a learner-side loss term is: the protocol, the records it sees, no-op defaults.

A term is built from its config section (``coplay.train.parts.terms.TERMS``) and, as
an optax transformation, owns its state; the learner calls it at fixed points of
each update and adds what ``loss`` returns to the policy objective:

    begin_update(learner, samples, iteration) -> metrics      per update, no grad
    prepare(learner, own, iteration) -> (context, metrics)   per minibatch, no grad
    loss(context, micro) -> (tensor or None, metrics)         per micro-batch
    after_update(learner, iteration) -> metrics               per update
    recall(samples) -> (extra samples, metrics)                per update, before filters

``per_unit`` terms (KL, entropy) are aggregated over units like the objective, with
its denominator, see only the minibatch's own samples and count in ``loss/total``;
the others (signalling, listening, the policy-iteration target) are per-decision sums
divided by the minibatch's own sample count. Either way the micro-batches of a step
add up to the whole minibatch's loss, so micro-batching leaves the step unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, Protocol

from pydantic import BaseModel
from torch import Tensor

from coplay.policies.lm import LMPolicy
from coplay.policies.scorer import Scored
from coplay.train.micro import learner_passes
from coplay.types import Decision

Metrics = dict[str, float]


class Mean(NamedTuple):
    """A ``loss`` metric that is a mean over ``count`` of its micro-batch's decisions
    (those a term covers: its targets, its seats), not over all of them. The update
    weighs each micro-batch's mean by its count, so the logged mean is over every such
    decision of the step, wherever the micro-batches are cut."""

    value: float
    count: int


LossMetrics = dict[str, float | Mean]
"""What ``loss`` returns besides its tensor. A plain float is a mean over the
micro-batch's samples (its own units, for a ``per_unit`` term) or a share that adds
up (``coplay.train.learner_metrics.ADDED``); a ``Mean`` says what else it is over."""


@dataclass(frozen=True)
class Sample:
    """One trainable decision and its advantage."""

    decision: Decision
    advantage: float
    player: int | None = None
    """The seat that took the decision (None where unknown: every seat)."""
    target: tuple[float, ...] | None = None
    """A distribution over the decision's choices to pull the policy toward (the
    policy-iteration target at a restart position), or None. NaN at a move its restart
    group did not try: the policy's own probability stays there
    (``policy_iteration.improved_target``)."""
    replay: bool = False
    """A past target trained on again (the policy-iteration memory): only the target
    term counts it; the objective and the other terms skip it."""


class Owner(Protocol):
    """What a term sees of its learner."""

    policy: LMPolicy
    micro_batch_size: int
    """Most decisions per forward pass."""
    micro_batch_tokens: int
    """Most padded tokens per forward pass (``coplay.train.micro``)."""
    logit_weight: int
    """Tokens one scored position's vocabulary rows count as."""
    checkpointing: bool
    """Activation checkpointing is on: the scorer runs sequences whole (no KV cache)."""


@dataclass(frozen=True)
class Setup:
    """What a term's builder may need besides its config section."""

    policy: LMPolicy
    reference: Callable[[LMPolicy], LMPolicy]
    """Builds a KL reference of the policy (default: a frozen copy)."""
    reference_ema: float
    """Fraction by which the reference (magnet) moves toward the policy per update."""
    iterations: int
    """The run's length, over which schedules anneal."""


@dataclass(frozen=True)
class Micro:
    """One micro-batch as the terms see it: its samples and their scoring."""

    batch: Sequence[Sample]
    """The minibatch's own samples first, then its replays (``Sample.replay``)."""
    start: int
    """Index of ``batch[0]`` in that order, to align per-minibatch contexts."""
    scored: Scored
    """The current policy's scoring of every row of ``batch``, with gradients."""
    rows: Sequence[int]
    """Rows of ``batch`` that are the minibatch's own samples (not replays)."""
    logp: Tensor
    """(B, T) log-probs of the own rows (the objective's; shared, so gradients add up
    in one place)."""
    mask: Tensor
    """(B, T) 1 on the own rows' real units."""
    entropy: Tensor
    """(B, T) entropies of the own rows."""
    aggregate: Callable[..., Tensor]
    """The objective's aggregation, ``fn(x, mask, *, denom)``."""
    denom: float
    """The objective's denominator over the whole minibatch."""
    size: int
    """The minibatch's own sample count, which per-decision terms divide by."""

    @property
    def own(self) -> list[Sample]:
        return [self.batch[i] for i in self.rows]


class LossTerm(Protocol):
    """A term of the learner's loss, built from its config section."""

    per_unit: bool
    """Aggregated over units like the objective (see the module's docstring)."""

    def begin_update(self, learner: Owner, samples: Sequence[Sample], iteration: int) -> Metrics:
        """Once per update, under no grad, before its first step: every sample the
        update will train on (work done here for all of them is not done per minibatch)."""
        ...

    def prepare(self, learner: Owner, own: Sequence[Sample], iteration: int) -> tuple[Any, Metrics]:
        """Per minibatch, under no grad: the context ``loss`` reads (e.g. marginals
        under this step's weights), and minibatch metrics."""
        ...

    def loss(self, context: Any, micro: Micro) -> tuple[Tensor | None, LossMetrics]:
        """The term's addition to the loss of one micro-batch (None: nothing)."""
        ...

    def after_update(self, learner: Owner, iteration: int) -> Metrics:
        """After the update's last step (``iteration`` counts the updates before it)."""
        ...

    def recall(self, samples: Sequence[Sample]) -> tuple[list[Sample], Metrics]:
        """Extra samples for this update, from its fresh samples before any filter."""
        ...

    def state_dict(self) -> Any:
        """What a checkpoint saves of the term (None: nothing)."""
        ...

    def load_state_dict(self, state: Any) -> None: ...


class Term:
    """No-op defaults of ``LossTerm``: a term overrides the steps it needs."""

    per_unit: ClassVar[bool] = False
    idle_metrics: ClassVar[Metrics] = {}
    """Logged by a learner without this term, so every run's log has the columns."""
    section: ClassVar[type[BaseModel] | None] = None
    """The model of its ``loss.<name>`` section. A term registered under a name that
    ``LossConfig`` has no field for gets that section from it (``open_sections``);
    None: configured elsewhere (the policy-iteration target, under ``rollout``)."""
    records: ClassVar[tuple[type, ...]] = ()
    """Record types (dataclasses, NamedTuples) its ``state_dict`` holds, which a saved
    state may then name."""

    @classmethod
    def build(cls, section: Any, setup: Setup) -> Term | None:
        """The term configured by ``section``; None when the section is off (None)."""
        return None if section is None else cls(section)  # type: ignore[call-arg]

    def begin_update(self, learner: Owner, samples: Sequence[Sample], iteration: int) -> Metrics:
        return {}

    def prepare(self, learner: Owner, own: Sequence[Sample], iteration: int) -> tuple[Any, Metrics]:
        return None, {}

    def loss(self, context: Any, micro: Micro) -> tuple[Tensor | None, LossMetrics]:
        return None, {}

    def after_update(self, learner: Owner, iteration: int) -> Metrics:
        return {}

    def recall(self, samples: Sequence[Sample]) -> tuple[list[Sample], Metrics]:
        return [], {}

    def state_dict(self) -> Any:
        return None

    def load_state_dict(self, state: Any) -> None:
        pass


def choice_dists(learner: Owner, decisions: Sequence[Decision]) -> list[Tensor | None]:
    """Each decision's log-distribution over its choices, scored in micro-batches."""
    dists: list[Tensor | None] = [None] * len(decisions)
    for rows in learner_passes(learner, decisions):
        scored = learner.policy.scorer.score([decisions[i] for i in rows]).dists
        for i, dist in zip(rows, scored, strict=True):
            dists[i] = dist
    return dists
