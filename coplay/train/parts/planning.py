"""Rollout-planning parts: features that reshape an iteration's plan and learn from it.

A planning part is an optax-like pair over a state it owns: ``plan(state, plan, ctx)``
reshapes the iteration's ``Plan`` (which groups restart, which moves are assigned, who
explores) and ``observe(state, batch, ctx)`` reads the played batch (which games were
lost); both return the new state and metrics. The run holds the states and saves them
with its own (``coplay.train.checkpoints.state``), so a part never touches the run.

``PLANNING`` maps a config section of ``rollout`` to the part it builds: an unset
section (None) is a part that is off. Adding a feature is one config record, one
class with ``init``/``plan``/``observe`` and one registry entry (docs/architecture.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from coplay.rollout.restarts import Start, draw, lost_starts, remember
from coplay.rollout.source import Batch, Plan
from coplay.train.parts.policy_iteration import TargetConfig
from coplay.types import GameSpec, Opening


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


@dataclass(frozen=True)
class PlanContext:
    """What a planning part may read: the learners' policy ids, the game, the group
    size, and the run's generator (every draw goes through it, in the loop's order)."""

    learners: tuple[str, ...]
    spec: GameSpec
    group_size: int
    rng: np.random.Generator


class PlanFeature(Protocol):
    """A rollout-planning part (see the module docstring). Its class may also name
    ``section``, the model of its ``rollout.<name>`` section (needed when
    ``RolloutConfig`` has no field of that name, see ``open_sections``), and
    ``records``, the record types its state holds (which a saved state may then name)."""

    def init(self) -> Any: ...

    def plan(self, state: Any, plan: Plan, ctx: PlanContext) -> tuple[Plan, Any, dict]: ...

    def observe(self, state: Any, batch: Batch, ctx: PlanContext) -> tuple[Any, dict]: ...


# --- exploration ------------------------------------------------------------------------


class ExploreConfig(_Section):
    share: float = Field(gt=0.0, lt=1.0)
    """Share of uniform choices mixed into the learners' sampling during training
    rollouts (choice mode; evaluation stays on-policy), so a policy that has collapsed
    onto a losing move still tries the others."""
    tis_cap: float | None = Field(1.0, gt=0.0)
    """Cap of the truncated importance weights policy / mixture with which explored
    turns are trained (unbiased, but a move the policy gives probability p moves its
    logit by about p: a near-certain habit is never unlearned). None trains explored
    moves as if the policy had chosen them (Monte Carlo with exploring moves: biased
    toward moves better than the mixture's average, which suits games with a pure
    optimum, not mixed equilibria)."""


@dataclass(frozen=True)
class Explore:
    """Every learner samples from (1 - share) * policy + share * uniform."""

    section: ClassVar[type[BaseModel]] = ExploreConfig
    cfg: ExploreConfig

    def init(self) -> None:
        return None

    def plan(self, state: None, plan: Plan, ctx: PlanContext) -> tuple[Plan, None, dict]:
        explore = dict(plan.explore) | {name: self.cfg.share for name in ctx.learners}
        return replace(plan, explore=explore), state, {}

    def observe(self, state: None, batch: Batch, ctx: PlanContext) -> tuple[None, dict]:
        return state, {}


# --- restarts from lost positions ----------------------------------------------------


class ExploringStartsConfig(_Section):
    target: TargetConfig | None = None
    """A policy-iteration target at restart positions (the learner's term); None: off."""


class RestartsConfig(_Section):
    share: float = Field(gt=0.0, lt=1.0)
    """Share of each iteration's groups that restart, as a whole group, from a position
    of a recently lost game (the history just before one of a learner's turns there;
    ``coplay.rollout.restarts``), so rare positions where the learner goes wrong get
    groups of their own."""
    buffer: int = Field(512, gt=0)
    """How many of the latest lost-game positions restarts are drawn from."""
    sources: Literal["fresh", "all"] = "fresh"
    """Which lost games give restart positions: 'fresh' only those played from the
    initial state, 'all' restarted ones too (whose positions after an exploring move
    are often lost already and crowd the buffer; see ``lost_starts``)."""
    exploring_starts: ExploringStartsConfig | None = None
    """Assign the learner's first move in restarted games instead of sampling it: the
    copies of a group take the legal moves in turn, each trained as the policy's own
    (Monte Carlo exploring starts). Needs model.mode=choice."""


@dataclass
class RestartState:
    buffer: list[Start]
    restarted: int = 0
    """Groups restarted in the last plan (also in the plan's metrics)."""
    carry: float = 0.0
    """The fraction of a group that ``share`` asked for and the plans so far left out
    (in [0, 1)): a share below one group per plan still restarts now and then."""


@dataclass(frozen=True)
class Restarts:
    """The last groups of each iteration restart from positions of lost games."""

    section: ClassVar[type[BaseModel]] = RestartsConfig
    records: ClassVar[tuple[type, ...]] = (Start, RestartState)
    cfg: RestartsConfig

    def init(self) -> RestartState:
        return RestartState([])

    def plan(
        self, state: RestartState, plan: Plan, ctx: PlanContext
    ) -> tuple[Plan, RestartState, dict]:
        """Fresh groups first, then the restarted ones, each replaying its source game's
        seed, seats and history under a group id that follows the fresh groups'."""
        size = ctx.group_size
        wanted, carry = restart_groups(self.cfg.share, len(plan.seeds) // size, state.carry)
        starts = draw(state.buffer, wanted, ctx.rng)
        fresh = len(plan.seeds) - len(starts) * size
        first = plan.seeds[0] + -(-fresh // size) if plan.seeds else 0
        copies = [(j, st) for j, st in enumerate(starts) for _ in range(size)]
        out = replace(
            plan,
            seatings=(*plan.seatings[:fresh], *(st.seats for _, st in copies)),
            seeds=(*plan.seeds[:fresh], *(st.seed for _, st in copies)),
            group_ids=(*plan.group_ids[:fresh], *(first + j for j, _ in copies)),
            prefixes=(*plan.prefixes[:fresh], *(st.prefix for _, st in copies)),
            openings=(*plan.openings[:fresh], *self._openings(starts, size, ctx.rng)),
        )
        # Reported with the plan: a source playing ahead plays it after later plans are made.
        return (
            out,
            RestartState(state.buffer, len(starts), carry),
            {"rollout/restart_groups": float(len(starts))},
        )

    def _openings(
        self, starts: Sequence[Start], size: int, rng: np.random.Generator
    ) -> list[Opening | None]:
        """With exploring starts the copies of a group take the legal moves in turn
        from a random one (copy ``c`` plays move ``shift + c``), so a group of at least
        as many copies as moves tries each of them; without them none are assigned."""
        if self.cfg.exploring_starts is None:
            return [None] * (len(starts) * size)
        shifts = rng.integers(0, 2**31, size=len(starts))
        return [
            Opening(player=st.seat, index=int(shift) + c)
            for st, shift in zip(starts, shifts, strict=True)
            for c in range(size)
        ]

    def observe(
        self, state: RestartState, batch: Batch, ctx: PlanContext
    ) -> tuple[RestartState, dict]:
        new = lost_starts(
            batch.episodes,
            set(ctx.learners),
            ctx.spec.max_return,
            ctx.rng,
            fresh_only=self.cfg.sources == "fresh",
        )
        buffer = remember(state.buffer, new, self.cfg.buffer)
        metrics = {"rollout/restart_buffer": float(len(buffer))}
        return replace(state, buffer=buffer), metrics


WHOLE = 1e-9
"""How far below a whole number a share of groups still counts as it: 0.29 * 100 is
28.999999999999996 in floats, which is 29 groups, not 28 and a carry of 0.99..."""


def restart_groups(share: float, groups: int, carry: float) -> tuple[int, float]:
    """How many of ``groups`` restart, and the carry to the next plan: ``share`` of them
    plus what earlier plans carried, rounded down, the rest carried. A share whose
    groups are a whole number restarts that many every plan; a smaller one adds up
    across plans (0.4 of 2 groups: 0, 1, 1, 1, 1, 0, ...), where rounding down each plan
    alone would never restart a group. No draw: the counts follow from the share.

    >>> restart_groups(0.5, 16, 0.0)
    (8, 0.0)
    >>> restart_groups(0.4, 2, 0.8)
    (1, 0.6000000000000001)
    """
    due = share * groups + carry
    whole = math.floor(due + WHOLE)
    return whole, max(due - whole, 0.0)


PLANNING: dict[str, Callable[[Any], PlanFeature]] = {
    "explore": Explore,
    "restarts": Restarts,
}
"""``rollout.<section>`` -> the planning part it configures, in the order they plan."""


def planning_parts(rollout: BaseModel) -> dict[str, PlanFeature]:
    """The planning parts whose ``rollout`` sections are set, in ``PLANNING`` order."""
    return {
        name: build(section)
        for name, build in PLANNING.items()
        if (section := getattr(rollout, name, None)) is not None
    }
