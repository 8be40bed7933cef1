"""Tiny run configs and loop helpers shared by the training tests."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from coplay.rollout.source import Batch
from coplay.train.hooks import Hook
from coplay.train.loop import Run, make_plan, observe, rollout_report, run_loop

TINY = [
    "train.iterations=2",
    "train.eval_every=2",
    "train.eval_episodes=10",
    "train.eval_opponents=[]",
    "rollout.games_per_iter=8",
    "model.tiny.hidden_size=32",
    "model.tiny.intermediate_size=64",
]
"""A run of two iterations of eight Kuhn games with a model of a few thousand weights."""

RESTARTS = [
    *TINY,
    "game.name=tic_tac_toe",
    "train.opponent=perfect",
    "rollout.games_per_iter=16",
    "rollout.group_size=4",
    "rollout.restarts.share=0.5",
    "algo.estimator=grpo",
]
"""Tic-tac-toe against the perfect player, 4 groups of 4, half of them restarted."""


@dataclass
class Capture(Hook):
    """Keeps every iteration's batch and metrics (all the hooks before it added)."""

    batches: list[Batch] = field(default_factory=list)
    metrics: list[dict[str, float]] = field(default_factory=list)

    def after(self, run: Run, it: int, batch: Batch, metrics: Mapping[str, float]):
        self.batches.append(batch)
        self.metrics.append(dict(metrics))
        return {}


def iterate(run: Run, it: int) -> tuple[Batch, dict[str, float]]:
    """Iteration ``it`` of the loop (plan, play, learn): its batch and metrics."""
    capture = Capture()
    run_loop(run, [capture], start=it - 1, end=it)
    return capture.batches[0], capture.metrics[0]


def play(run: Run, it: int) -> tuple[Batch, dict[str, float]]:
    """Iteration ``it``'s games played and observed as the loop does, without learning."""
    plan, planned = make_plan(run, it)
    batch = run.source.play(plan, run.policies)
    return batch, rollout_report(run, batch) | planned | observe(run, batch)


def rows(metrics_file) -> list[dict]:
    """The logged rows of a run, without the timings (which differ between runs)."""
    lines = metrics_file.read_text().splitlines()
    return [{k: v for k, v in json.loads(x).items() if not k.startswith("perf/")} for x in lines]
