"""Metric sinks (``train.loggers``): where each iteration's namespaced metrics go.

``metrics.jsonl`` is always written (resume, ``coplay report`` and ``coplay show`` read
it); TensorBoard and Weights & Biases (offline: files inside the run directory, synced
later with ``wandb sync``) are optional extras that receive the same keys and values.
A sink is chosen by name from the registry ``LOGGERS``; a missing extra is refused when
the config is built (``check_logger``), with the command that installs it.
"""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from coplay.report import sinks


class MetricLogger(Protocol):
    """Receives one row of metrics per logged step; ``close`` flushes its files."""

    def log(self, step: int, metrics: Mapping[str, float]) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Opening:
    """What a sink is opened with: the run directory, the JSONL file the run logs to,
    the first step this segment logs (earlier rows of a resumed run are kept, later
    ones are redone) and the run's config as plain data."""

    out: Path
    jsonl: str = "metrics.jsonl"
    first_step: int = 0
    config: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class JsonlLogger:
    """``metrics.jsonl``: one JSON object per step (``coplay.report.sinks``)."""

    path: Path

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        sinks.append_metrics(self.path, step, metrics)

    def close(self) -> None:
        pass


class TensorBoardLogger:
    """TensorBoard event files under ``out/tensorboard`` (one scalar per key and step).

    A resumed run opens its writer with ``purge_step``: TensorBoard's reader then drops
    the earlier segment's events from that step on, as ``metrics.jsonl`` drops its rows.
    """

    def __init__(self, opening: Opening) -> None:
        from torch.utils.tensorboard import SummaryWriter

        stem = Path(opening.jsonl).stem
        folder = opening.out / "tensorboard" / ("" if stem == "metrics" else stem)
        purge = opening.first_step or None
        self.writer = SummaryWriter(log_dir=str(folder), purge_step=purge)

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        for key, value in metrics.items():
            if isinstance(value, int | float) and math.isfinite(value):
                self.writer.add_scalar(key, float(value), global_step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbLogger:
    """A Weights & Biases run in offline mode, its files under ``out/wandb``; nothing is
    sent anywhere (``wandb sync out/wandb/offline-run-*`` uploads it later). Each
    segment of a resumed run is an offline run of its own, from its first step on.
    wandb's service process writes the records: they reach the file shortly after
    ``finish`` returns."""

    def __init__(self, opening: Opening) -> None:
        import wandb

        os.environ.setdefault("WANDB_SILENT", "true")
        stem = Path(opening.jsonl).stem
        self.run = wandb.init(
            mode="offline",
            dir=str(opening.out),
            project="coplay",
            name=opening.out.name if stem == "metrics" else f"{opening.out.name}-{stem}",
            config=dict(opening.config),
            settings=wandb.Settings(console="off"),
            reinit="create_new",
        )

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        finite = {k: float(v) for k, v in metrics.items() if _finite(v)}
        self.run.log(finite | {"iteration": step})

    def close(self) -> None:
        self.run.finish()


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


@dataclass(frozen=True)
class LoggerKind:
    """A registered sink: how it opens, and the module and extra it needs."""

    open: Callable[[Opening], MetricLogger]
    module: str | None = None
    """Imported when the sink opens; its absence is a config error."""
    extra: str | None = None
    """The optional dependency group of coplay that installs ``module``."""


LOGGERS: dict[str, LoggerKind] = {
    "jsonl": LoggerKind(lambda o: JsonlLogger(o.out / o.jsonl)),
    "tensorboard": LoggerKind(TensorBoardLogger, module="tensorboard", extra="tensorboard"),
    "wandb": LoggerKind(WandbLogger, module="wandb", extra="wandb"),
}


def check_logger(name: str) -> str:
    """``name`` if it is registered and its extra is installed; else one error line."""
    if name not in LOGGERS:
        raise ValueError(f"unknown logger {name!r}; available: {', '.join(LOGGERS)}")
    kind = LOGGERS[name]
    if kind.module and importlib.util.find_spec(kind.module) is None:
        raise ValueError(
            f"logger {name} needs the optional extra {kind.extra!r}: "
            f"pip install 'coplay[{kind.extra}]'"
        )
    return name


@dataclass
class Loggers:
    """Every sink of a run: ``log`` sends one row to each, in the order named. A sink
    that fails (its disk full) keeps no other from its row or from closing its files;
    the first failure is raised once every sink has had its turn."""

    sinks: list[MetricLogger]

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        _each(self.sinks, lambda sink: sink.log(step, metrics))

    def close(self) -> None:
        _each(self.sinks, lambda sink: sink.close())


def _each(sinks: Sequence[MetricLogger], call: Callable[[MetricLogger], None]) -> None:
    """``call`` on every sink, then the first error any of them raised."""
    failed: Exception | None = None
    for sink in sinks:
        try:
            call(sink)
        except Exception as err:
            failed = failed or err
    if failed is not None:
        raise failed


class Closable(Protocol):
    def close(self) -> None: ...


@contextmanager
def closed_after(sinks: Closable) -> Iterator[None]:
    """Run the block, then ``sinks.close()``. Where the block raised, a close that
    fails too (a full disk) is dropped: the block's error (a Ctrl-C's
    ``RunInterrupted``, the fault that stopped the run) is the one to report, where a
    ``finally`` would have raised the close's instead."""
    try:
        yield
    except BaseException:
        with suppress(Exception):
            sinks.close()
        raise
    sinks.close()


def open_loggers(names: Sequence[str], opening: Opening) -> Loggers:
    """The JSONL sink, then each other sink named (``jsonl`` is always on)."""
    chosen = ["jsonl", *(n for n in dict.fromkeys(names) if n != "jsonl")]
    return Loggers([LOGGERS[check_logger(n)].open(opening) for n in chosen])
