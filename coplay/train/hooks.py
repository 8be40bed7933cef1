"""The loop's standard hooks: evaluate, log, save.

Each is a small object with ``before`` / ``after`` (``coplay.train.loop.Hook``); the
ones with state (``Evaluate``: the evaluations so far) have a ``name`` and
``state()`` / ``load(tree)``, which the run's saved state holds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coplay.report import sinks
from coplay.report.loggers import Loggers, Opening, open_loggers
from coplay.rollout.source import Batch
from coplay.train.checkpoints.state import save_state
from coplay.train.loop import Run

Progress = Callable[[int, dict[str, float]], None]


class Hook:
    """A hook that does nothing: subclasses override what they need."""

    name: str | None = None
    """Set by hooks with state, under which the run's saved state keeps it; such a
    hook also has ``state()`` (a tree of plain data, arrays and tensors) and
    ``load(tree, run)``."""

    def before(self, run: Run, it: int) -> dict[str, float]:
        return {}

    def after(
        self, run: Run, it: int, batch: Batch, metrics: Mapping[str, float]
    ) -> dict[str, float]:
        return {}


@dataclass
class Evaluate(Hook):
    """Every ``every`` iterations and at the last: ``evaluate(run)``'s metrics, and a
    few transcripts of the iteration's games."""

    evaluate: Callable[[Run], dict[str, float]]
    every: int
    last: int
    transcripts: int = 0
    evals: dict[str, dict[str, float]] = field(default_factory=dict)
    name: str | None = "evaluate"

    def initial(self, run: Run) -> dict[str, float]:
        self.evals = {"initial": (m := self.evaluate(run)), "last": m}
        return m

    def after(self, run, it, batch, metrics):
        if it % self.every and it != self.last:
            return {}
        self.evals["last"] = self.evaluate(run)
        if self.transcripts:
            file = run.out / "transcripts.jsonl"
            sinks.append_transcripts(file, batch.episodes[: self.transcripts], it)
        return self.evals["last"]

    def state(self) -> dict[str, Any]:
        return self.evals

    def load(self, tree: dict[str, Any], run: Run) -> None:
        self.evals = tree


@dataclass
class Log(Hook):
    """The iteration's metrics row, with the run's elapsed seconds (over every segment),
    sent to every sink of ``train.loggers`` (metrics.jsonl always)."""

    before_s: float = 0.0
    """Seconds earlier segments of a resumed run took."""
    start: float = field(default_factory=time.perf_counter)
    sinks: Sequence[str] = ()
    """The sinks besides metrics.jsonl (``train.loggers``)."""
    config: Mapping[str, Any] = field(default_factory=dict)
    """The run's config as plain data, for the sinks that keep it (wandb)."""
    loggers: Loggers | None = None
    """Opened by ``open`` once the run knows its first step (after a resume's load)."""

    def elapsed(self) -> float:
        return self.before_s + time.perf_counter() - self.start

    def open(self, out: Path, first_step: int) -> Loggers:
        opening = Opening(out, first_step=first_step, config=self.config)
        self.loggers = open_loggers(self.sinks, opening)
        return self.loggers

    def close(self) -> None:
        if self.loggers is not None:
            self.loggers.close()
            self.loggers = None

    def after(self, run, it, batch, metrics):
        row = {**metrics, "perf/elapsed_s": self.elapsed()}
        (self.loggers or self.open(run.out, it)).log(it, row)
        return {"perf/elapsed_s": row["perf/elapsed_s"]}


@dataclass
class Save(Hook):
    """Every ``every`` iterations (and at ``end``) a checkpoint of the run's policies
    (``checkpoint(run, folder)``, where ``every`` is set) and then the state: the state
    is the commit point, so a kill at any moment resumes into the same run."""

    every: int
    end: int
    hooks: Sequence[Hook]
    """Every hook of the run, whose states the saved state holds."""
    checkpoint: Callable[[Run, Path], None] | None = None
    saved: int | None = None

    def after(self, run, it, batch, metrics):
        due = bool(self.every) and it % self.every == 0
        if due and self.checkpoint is not None:
            self.checkpoint(run, run.out / "checkpoints" / f"iter_{it:06d}")
        if due or it == self.end:
            save_state(run, self.hooks, it)
            self.saved = it
        return {}


@dataclass
class Report(Hook):
    """Tells ``progress(iteration, metrics)`` after each iteration, and before the
    first the iterations already done (no metrics): a resumed run's ETA counts the
    iterations of this segment only (``coplay.report.progress``)."""

    progress: Progress
    started: bool = False

    def before(self, run, it):
        if not self.started:
            self.started = True
            self.progress(it - 1, {})
        return {}

    def after(self, run, it, batch, metrics):
        self.progress(it, dict(metrics))
        return {}


@dataclass
class WriteReport(Hook):
    """``train.report``: the run's HTML report (``report.html``) rewritten after every
    evaluation (every ``every`` iterations and at the ``last``), once the row is logged."""

    every: int
    last: int

    def after(self, run, it, batch, metrics):
        if it % self.every == 0 or it == self.last:
            from coplay.train.report import write_report

            write_report([run.out], run.out / "report.html")
        return {}
