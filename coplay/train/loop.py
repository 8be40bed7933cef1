"""The one training loop: plan -> rollout -> advantages -> update -> hooks.

Every scheme runs this loop. Self-play, a fixed opponent and a roster differ only in
their seating and in how many learners the run holds; a league changes the opponent
pool between iterations from a hook; evaluation, the metric log and the checkpoints
are hooks too. Parts own their state (planning states in ``Run.plan_states``, each
learner's in its ``Trainee``, hooks their own), which ``checkpoints.state`` saves by
walking them, so every scheme saves and resumes alike.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from coplay.envs.gameref import GameRef
from coplay.rollout.source import Batch, EpisodeSource, Plan, Played
from coplay.train.metrics import rollout_metrics, scoped
from coplay.train.parts.planning import PlanContext, PlanFeature
from coplay.train.parts.seating import Seating, tally_after
from coplay.train.trainee import Trainee
from coplay.types import GameSpec, Policy


@dataclass
class Run:
    """Everything a run holds between iterations: its parts and their states."""

    cfg: Any
    """The ``RunConfig`` the parts were built from."""
    out: Path
    game: GameRef
    spec: GameSpec
    source: EpisodeSource
    seating: Seating
    trainees: list[Trainee]
    """The learners; a roster has several, each with its own policy id."""
    policies: dict[str, Policy]
    """Every policy that may be seated, by id: learners, opponents, pool members."""
    rng: np.random.Generator
    planning: dict[str, PlanFeature] = field(default_factory=dict)
    plan_states: dict[str, Any] = field(default_factory=dict)
    eval_opponents: dict[str, Policy] = field(default_factory=dict)
    exact: bool = False
    """Whether evaluations compute exact exploitability (``train.exact``)."""
    exact_matches: tuple[str, ...] = ()
    """Evaluation opponents also matched exactly (``train.exact_matches``)."""
    scope: bool = False
    """Name each learner's metrics (``loss/<name>/kl``): a roster's several learners."""
    ahead: dict[int, tuple[Plan, dict[str, float]]] = field(default_factory=dict)
    """Plans made before their iteration, by iteration, with their planning metrics
    (``PlansAhead``). Saved with the run: making them moved the planning states and
    the generator, so a resume must play these, not plan those iterations again."""
    played_ahead: dict[int, Played] = field(default_factory=dict)
    """A resumed run's games of ``ahead`` as its source had played them before the stop
    (``checkpoints.state.played_ahead``), handed back to the source when the loop starts."""

    @property
    def learner_ids(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.trainees)


class Hook(Protocol):
    """Runs around each iteration: before the plan, and after the update with the
    batch and the metrics so far; returns metrics to add. A hook with state has
    ``state()`` / ``load(tree, run)`` and a ``name`` (``checkpoints.state`` walks them)."""

    def before(self, run: Run, it: int) -> dict[str, float]: ...

    def after(
        self, run: Run, it: int, batch: Batch, metrics: Mapping[str, float]
    ) -> dict[str, float]: ...


def run_loop(run: Run, hooks: Sequence[Hook], *, start: int, end: int) -> None:
    """Iterations ``start + 1 .. end``: each plans its games, plays them, lets every
    learner estimate advantages and update, then runs the hooks in order."""
    # Plans go ahead up to the run's last iteration, not this segment's: a segment that
    # stops early (``stop_after``) saves the plans the whole run had made by then.
    ahead = PlansAhead(run, max(end, run.cfg.train.iterations))
    with heap_frozen() if end - start >= FROZEN_FROM else nullcontext():
        for it in range(start + 1, end + 1):
            metrics: dict[str, float] = {}
            for hook in hooks:
                metrics |= hook.before(run, it)
            plan, planned = ahead.take(it)
            batch = run.source.play(plan, run.policies)
            ahead.submit_after(it)  # a source that plays ahead gets on while we learn
            metrics |= rollout_report(run, batch) | planned | observe(run, batch)
            # A source that plays ahead drops groups older than its bound: maybe all.
            learners = run.trainees if batch.episodes else []
            for trainee in learners:
                learned = trainee.learn(batch.episodes, run.rng)
                metrics |= scoped(learned, trainee.name) if run.scope else learned
            for hook in hooks:
                metrics |= hook.after(run, it, batch, metrics)


FROZEN_FROM = 50
"""Iterations from which a loop freezes the heap it starts with (``heap_frozen``).
Thawing it at the end costs one full pass of the collector soon after (its count of
long-lived objects leaves the thawed ones out, so a full pass comes due early and walks
them all), which a short loop does not win back: 20 tic-tac-toe
iterations saved 0.45 s inside the loop and spent 0.3 s after it, and a test suite of
many one-iteration loops ran 9% longer (``benchmarks/collector.py``)."""


@contextmanager
def heap_frozen() -> Iterator[None]:
    """What is alive when the loop starts (the libraries, the models, the run's parts)
    left out of the cyclic garbage collector's passes until it ends.

    Each iteration's records outlive a few young passes, so every few iterations the
    collector walks the whole heap, where torch and transformers alone hold some 400k
    objects: about 0.25 s a pass on a CPU. Frozen, a full pass walks only what the
    iterations made. Nothing is kept longer for it: reference counting frees as
    before, and the frozen objects return to the collector at the end, with any cycle
    among them that became garbage meanwhile (a run starts its loop with about ten
    such objects, so it is not collected first: that pass alone would cost 0.25 s)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@dataclass
class PlansAhead:
    """Plans made before their iteration, for a source that plays ahead of the learner
    (``lookahead`` k > 0, Ray workers with ``rollout.max_staleness: k``): after each
    play it is handed the next k iterations' plans, which its workers play with the
    weights they have while the learner updates. A source without ``lookahead`` gets
    each plan when its iteration comes, as made then."""

    run: Run
    end: int
    """The last iteration planned ahead for (the run's, see ``run_loop``)."""

    def __post_init__(self) -> None:
        # Plans a resumed run made before it stopped, with the games played for them
        # then (at the weights the uninterrupted run played them with). A state saved
        # before those were kept has none: its plans are played at the resumed weights.
        run = self.run
        if getattr(run.source, "lookahead", 0):
            for it, (plan, _) in sorted(run.ahead.items()):
                played = run.played_ahead.get(it)
                if played is None:
                    run.source.submit(plan, run.policies)
                else:
                    run.source.restore(plan, played)
        run.played_ahead = {}

    def take(self, it: int) -> tuple[Plan, dict[str, float]]:
        return self.run.ahead.pop(it, None) or make_plan(self.run, it)

    def submit_after(self, it: int) -> None:
        source, made = self.run.source, self.run.ahead
        for later in range(it + 1, min(it + getattr(source, "lookahead", 0), self.end) + 1):
            if later not in made:
                made[later] = make_plan(self.run, later)
                source.submit(made[later][0], self.run.policies)


def context(run: Run) -> PlanContext:
    return PlanContext(run.learner_ids, run.spec, run.cfg.rollout.group_size, run.rng)


SEATED = "seating"
"""``Run.plan_states`` key of the seating's ``Tally``: the seats are planned too."""


def make_plan(run: Run, it: int) -> tuple[Plan, dict[str, float]]:
    """The seating's games (group ``g`` has seed ``base + g``), then every planning
    part's reshaping in turn; returns the plan and the parts' metrics. The seating's
    tally advances by the groups the parts leave as seated, so the seats of the groups
    actually played follow the seating's sequence across iterations."""
    r = run.cfg.rollout
    base = (run.cfg.train.seed * 1_000_003 + it) * r.games_per_iter
    groups = -(-r.games_per_iter // r.group_size)
    tally = run.plan_states.get(SEATED, ())
    rows = run.seating.rows(groups, run.rng, tally)
    games = range(r.games_per_iter)
    seeds = tuple(base + i // r.group_size for i in games)
    seated = plan = Plan(
        seatings=tuple(rows[i // r.group_size] for i in games),
        seeds=seeds,
        group_ids=seeds,
        prefixes=((),) * r.games_per_iter,
        openings=(None,) * r.games_per_iter,
        learners=run.learner_ids,
    )
    metrics: dict[str, float] = {}
    for name, part in run.planning.items():
        plan, run.plan_states[name], m = part.plan(run.plan_states[name], plan, context(run))
        metrics |= m
    kept = -(-kept_games(seated, plan) // r.group_size)
    seats = run.seating.seats(groups, tally)[:kept]
    run.plan_states[SEATED] = tally_after(tally, seats, run.spec.num_players)
    return plan, metrics


def kept_games(seated: Plan, plan: Plan) -> int:
    """How many of ``plan``'s first games are still ``seated``'s: planning parts that
    replace games (restarts) replace the last ones, with seeds of earlier iterations."""
    for i, (a, b) in enumerate(zip(seated.seeds, plan.seeds, strict=False)):
        if a != b or plan.prefixes[i] or plan.openings[i] is not None:
            return i
    return min(len(seated.seeds), len(plan.seeds))


def observe(run: Run, batch: Batch) -> dict[str, float]:
    """Every planning part reads the played batch (restarts keep lost positions)."""
    metrics: dict[str, float] = {}
    for name, part in run.planning.items():
        run.plan_states[name], m = part.observe(run.plan_states[name], batch, context(run))
        metrics |= m
    return metrics


def rollout_report(run: Run, batch: Batch) -> dict[str, float]:
    """Each learner's rollout metrics (named per learner in a roster)."""
    if not run.scope:
        return rollout_metrics(batch.episodes, run.trainees[0].name, batch.seconds) | dict(
            batch.metrics
        )
    metrics = {"perf/rollout_s": batch.seconds, **batch.metrics}
    for trainee in run.trainees:
        m = rollout_metrics(batch.episodes, trainee.name, batch.seconds)
        metrics |= scoped(m, trainee.name)
    return metrics
