"""Learning-rate schedules by name: the factor on ``optim.lr`` after some updates.

A schedule is a pure function ``(done, total, optim) -> factor`` of the updates done, the
updates it spans and the optimizer settings it reads (``final_lr_frac``), registered in
``SCHEDULES`` and chosen by ``optim.lr_schedule``. ``lr_factor`` puts the linear warm-up
of ``optim.warmup_updates`` before it: the schedule then spans the updates after the
warm-up. A decay reaches ``final_lr_frac`` at the run's last update, not one past it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from coplay.train.config import OptimConfig

__all__ = ["SCHEDULES", "Schedule", "check_schedule", "check_warmup", "lr_factor"]

Schedule = Callable[[int, int, "OptimConfig"], float]
"""(updates done, updates the schedule spans, settings) -> factor on the learning rate."""


def constant(done: int, total: int, optim: OptimConfig) -> float:
    """The learning rate as set."""
    return 1.0


def linear(done: int, total: int, optim: OptimConfig) -> float:
    """From 1 at the first update down a straight line to ``final_lr_frac`` at the last
    (``total - 1``), held there after.

    >>> from types import SimpleNamespace
    >>> [round(linear(t, 3, SimpleNamespace(final_lr_frac=0.1)), 3) for t in range(4)]
    [1.0, 0.55, 0.1, 0.1]
    """
    end, span = optim.final_lr_frac, max(1, total - 1)
    return 1.0 - (1.0 - end) * min(done, span) / span


def cosine(done: int, total: int, optim: OptimConfig) -> float:
    """From 1 at the first update along half a cosine to ``final_lr_frac`` at the last,
    held there after: transformers' ``get_cosine_with_min_lr_schedule_with_warmup``
    (``min_lr_rate`` = ``final_lr_frac``), its end at the last update as ``linear``'s.

    >>> from types import SimpleNamespace
    >>> [round(cosine(t, 3, SimpleNamespace(final_lr_frac=0.1)), 3) for t in range(4)]
    [1.0, 0.55, 0.1, 0.1]
    """
    end, span = optim.final_lr_frac, max(1, total - 1)
    return end + (1.0 - end) * 0.5 * (1.0 + math.cos(math.pi * min(done, span) / span))


SCHEDULES: dict[str, Schedule] = {"constant": constant, "linear": linear, "cosine": cosine}
"""Schedules by name (``optim.lr_schedule``); register your own under a new name."""


def check_schedule(name: str) -> str:
    """``name`` if it names a registered schedule, else a ValueError listing them."""
    if name not in SCHEDULES:
        raise ValueError(f"unknown lr schedule {name!r}; registered: {', '.join(SCHEDULES)}")
    return name


def check_warmup(warmup: int, total: int) -> None:
    """A ValueError where the warm-up would take every update of the run, leaving the
    schedule none (and a run of one update at a learning rate of 0)."""
    if warmup >= total:
        raise ValueError(
            f"optim.warmup_updates={warmup} would take all of train.iterations={total} "
            f"updates, leaving none to optim.lr_schedule: set it below {total}"
        )


def lr_factor(optim: OptimConfig, total: int) -> Callable[[int], float] | None:
    """The factor on ``optim.lr`` after ``done`` of ``total`` updates, or None where it
    is 1 throughout (a constant schedule without warm-up: no scheduler to run or save).

    The warm-up rises from 0 by ``1 / warmup_updates`` per update, as transformers'
    ``get_linear_schedule_with_warmup`` (TRL's ``warmup_steps``): its first update
    moves no weight, only Adam's moments.

    >>> from types import SimpleNamespace
    >>> optim = SimpleNamespace(lr_schedule="linear", warmup_updates=2, final_lr_frac=0.1)
    >>> [round(lr_factor(optim, 5)(t), 3) for t in range(5)]
    [0.0, 0.5, 1.0, 0.55, 0.1]
    """
    schedule, warmup = SCHEDULES[check_schedule(optim.lr_schedule)], optim.warmup_updates
    if schedule is constant and not warmup:
        return None
    check_warmup(warmup, total)

    def factor(done: int) -> float:
        if done < warmup:
            return done / warmup
        return schedule(done - warmup, total - warmup, optim)

    return factor
