"""Progress of long commands: a live bar on a terminal, plain lines when piped.

Every long command (train, eval, tournament, league, psro) reports through ``track``:

    with track("eval", total=1000, unit="episodes") as advance:
        ...
        advance(400)            # completed so far, optionally with a status text

On a terminal this is a rich progress bar with the elapsed time and an ETA. When the
stream is not a terminal (a log file, CI, a pipe), a live bar would print nothing
useful, so a plain line is written at a steady interval instead::

    eval: 400/1000 episodes, 12 s elapsed, ETA 18 s

and one last line when the work is done. The interval is ``COPLAY_PROGRESS_EVERY_S``
seconds (default 10). Plain lines go to stderr, so results on a piped stdout stay
clean; the bar shares the terminal with the command's output, printed above it.

The ETA is at the rate of this process's work: work resumed part way (a run from its
saved iteration) leaves out the count it started at (``start``; ``start=None``: the
first count told, for a caller that learns it only once the work runs).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

INTERVAL_ENV = "COPLAY_PROGRESS_EVERY_S"
DEFAULT_INTERVAL_S = 10.0

Advance = Callable[..., None]
"""``advance(completed, status="")``: how much of the total is done, and a short status."""


def interval_s() -> float:
    """Seconds between plain progress lines (``COPLAY_PROGRESS_EVERY_S``, default 10)."""
    raw = os.environ.get(INTERVAL_ENV, "")
    try:
        value = float(raw) if raw.strip() else DEFAULT_INTERVAL_S
    except ValueError:
        raise ValueError(f"{INTERVAL_ENV} must be a number of seconds, got {raw!r}") from None
    if not math.isfinite(value):  # float() reads "nan" and "inf"; neither is an interval
        raise ValueError(f"{INTERVAL_ENV} must be a finite number of seconds, got {raw!r}")
    if value < 0:
        raise ValueError(f"{INTERVAL_ENV} must be >= 0 seconds, got {raw!r}")
    return value


def _seconds(s: float) -> str:
    s = round(s)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


@dataclass
class PlainProgress:
    """Progress as a plain line every ``every_s`` seconds (for logs and pipes)."""

    label: str
    total: int
    unit: str
    console: Console
    every_s: float
    clock: Callable[[], float] = time.monotonic
    baseline: int | None = 0
    """The count done before this process started on the work (a resumed run's
    iterations), which the ETA's rate leaves out; None: the first count ``advance`` is
    told, timed from when it is told (for callers that learn it only once running)."""
    start: float = field(init=False)
    last: float = field(init=False)
    since: float = field(init=False)
    """When the work stood at ``baseline``: the rate is counted from then."""
    completed: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.start = self.last = self.since = self.clock()

    def line(self, status: str = "") -> str:
        """``eval: 400/1000 episodes, 12 s elapsed, ETA 18 s`` (ETA once something is done)."""
        now = self.clock()
        text = f"{self.label}: {self.completed}/{self.total} {self.unit}, "
        text += f"{_seconds(now - self.start)} elapsed"
        done = self.completed - (self.baseline or 0)
        if done > 0 and self.completed < self.total:
            eta = (now - self.since) * (self.total - self.completed) / done
            text += f", ETA {_seconds(eta)}"
        return text + (f", {status}" if status else "")

    def advance(self, completed: int, status: str = "") -> None:
        if self.baseline is None:
            self.baseline, self.since = completed, self.clock()
        self.completed = completed
        now = self.clock()
        if now - self.last >= self.every_s and completed < self.total:
            self.last = now
            self.console.print(self.line(status), highlight=False, soft_wrap=True)

    def finish(self) -> None:
        self.completed = self.total
        self.console.print(self.line(), highlight=False, soft_wrap=True)


def _bar(console: Console) -> Progress:
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[unit]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[status]}"),
        console=console,
    )


@contextmanager
def track(
    label: str,
    total: int,
    unit: str,
    *,
    start: int | None = 0,
    console: Console | None = None,
    quiet: bool = False,
) -> Iterator[Advance]:
    """Report progress toward ``total`` ``unit`` (see the module docstring): a bar on
    ``console`` when it is a terminal, else plain lines on stderr; ``quiet`` reports
    nothing. ``start`` is the count already done when the work starts (None: the first
    count told), which the ETA leaves out. The plain form's last line is written only
    when the work completes."""
    console = console or Console()
    if quiet:
        yield lambda completed, status="": None
    elif console.is_terminal:
        with _bar(console) as bar:
            # rich's rate leaves out its first sample: with start=None, the first count
            # told (a resumed run's) is not taken for work done since the bar began.
            task = bar.add_task(label, total=total, completed=start or 0, unit=unit, status="")
            yield lambda completed, status="": bar.update(task, completed=completed, status=status)
    else:
        plain = PlainProgress(
            label, total, unit, Console(stderr=True), interval_s(), baseline=start
        )
        yield plain.advance
        plain.finish()
