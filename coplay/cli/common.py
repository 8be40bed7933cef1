"""What the commands share: the console, help texts, the command record, and helpers
that claim output paths, read game parameters and resolve players."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table
from rich.text import Text

from coplay.types import MAX_SEED

console = Console()
PIPED_WIDTH = 1000
"""Console width when stdout is no terminal: wide enough that rich never truncates a
key or a column header to fit (it would use 80 columns)."""
PROSE_WIDTH = 80
"""Widest a column of explanations grows before it wraps (keys never wrap)."""
PRESET_HELP = "bundled preset (default: kuhn-selfplay; with --config, none: the file alone)"
OVERRIDES_HELP = "key=value overrides, before or after the options, e.g. train.iterations=50"
DEBUG_HELP = "show an error's traceback instead of one line"
FORCE_HELP = (
    "replace a run already in --out: the old run is moved to OUT.old-<time> (nothing is "
    "deleted) and a new one starts"
)


def no_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of a command that takes none."""


@dataclass(frozen=True)
class Command:
    """One ``coplay`` subcommand: its name and one-line help in ``coplay --help``, what
    adds its options to its parser, and what runs it (returning the exit status).

    ``add_arguments`` may import what its choices come from; ``run`` imports the heavy
    modules it needs, so that ``coplay --help`` stays quick."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def int_in(name: str, low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer from ``low`` to ``high``, ``name`` in its one-line
    errors (argparse's own for a text that is no number, the range's otherwise)."""

    def parse(text: str) -> int:
        value = int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"a {name} is {low} to {high}, got {value}")
        return value

    parse.__name__ = name  # argparse says "invalid <name> value" for a non-number
    return parse


seed = int_in("seed", 0, MAX_SEED)
port = int_in("port", 0, 65535)


def titled_table(title: str) -> Table:
    """A table whose title stays on one line (wrapped, a long path would break up)."""
    return Table(title=Text(title, no_wrap=True, overflow="ignore"))


def claim_run(out: Path, force: bool, *, resumable: bool = True) -> None:
    """Refuse an ``--out`` that holds a run unless ``--force``, which moves it aside."""
    from coplay.train.checkpoints.rundir import claim

    moved = claim(out, force=force, resumable=resumable)
    if moved is not None:
        console.print(f"moved the old run in {out} to {moved}")


def claim_file(path: Path, force: bool) -> None:
    """Refuse an existing results file unless ``--force``, which moves it aside."""
    from coplay.train.checkpoints.rundir import RunDirError, move_aside

    if path.is_dir():
        raise RunDirError(f"--out {path} is a directory; name a file for the results")
    if path.exists():
        if not force:
            raise RunDirError(f"{path} already exists; pass --force to move it aside")
        console.print(f"moved the old {path} to {move_aside(path)}")


def game_params(items: Sequence[str]) -> dict[str, object]:
    """``["size=8", "slippery=true"]`` -> ``{"size": 8, "slippery": True}`` (YAML scalars)."""
    params = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"game parameter {item!r} must look like key=value (e.g. size=8)")
        try:
            params[key.strip()] = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            params[key.strip()] = raw  # not a YAML scalar: the game sees the text
    return params


def train_status(m: dict[str, float]) -> str:
    """The progress bar's status line of a training iteration's metrics."""
    keys = ("eval/exploitability", "rollout/return_seat0", "perf/decisions_per_s")
    return "  ".join(f"{k.split('/')[-1]}={m[k]:.3f}" for k in keys if k in m)


def build_player(spec: str, game: str, params: dict, *, seed: int):
    """A player of ``tournament`` or ``play``: a remote endpoint, a scripted bot or a
    checkpoint."""
    from coplay.policies.remote import remote_from_spec
    from coplay.population.opponents import build_opponent

    if spec.startswith("remote:"):
        return remote_from_spec(spec)
    return build_opponent(spec, game, seed=seed, params=params)


def players_game(game: str | None, players: Sequence[str]) -> tuple[str, dict]:
    """--game, else the one game that the checkpoint players record (with its
    parameters, also when --game names that same game)."""
    from coplay.models.checkpoints import find_policy

    recorded: dict[str, dict] = {}
    for spec in players:
        if spec.startswith("remote:") or not Path(spec).exists():
            continue
        played = find_policy(spec).game()
        if played is not None and recorded.setdefault(played.name, played.params) != played.params:
            raise ValueError(f"the checkpoints play {played.name} with different parameters")
    if game:
        return game, dict(recorded.get(game, {}))
    if len(recorded) != 1:
        found = f"they record {', '.join(sorted(recorded))}" if recorded else "none records one"
        raise ValueError(f"pass --game: the checkpoint players must record one game ({found})")
    name, params = next(iter(recorded.items()))
    return name, dict(params)


def check_workers(args: argparse.Namespace) -> None:
    """``--workers N`` and ``--ray-address``: N not negative, an address only with
    workers, and Ray installed when N > 0 (checked before anything heavy is built)."""
    from coplay.distributed import require_ray

    if args.workers < 0:
        raise ValueError(f"--workers must be 0 or more, got {args.workers}")
    if args.ray_address is not None and not args.workers:
        raise ValueError("--ray-address needs --workers N (N > 0)")
    if args.workers:
        require_ray(f"--workers {args.workers}")
