"""What the commands share: the console, help texts, the command record, and helpers
that claim output paths, read game parameters and resolve players."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from rich.console import Console
from rich.table import Table
from rich.text import Text

from coplay.types import MAX_SEED

if TYPE_CHECKING:
    from coplay.models.checkpoints import SavedPolicy

console = Console(markup=False, emoji=False)
"""Where the commands print. Its strings are never read as markup or emoji codes: they
hold data (paths, config values, game text) in which ``[word]`` or ``:name:`` is text;
a style is given as ``rich.text.Text`` (see ``heading``)."""
PIPED_WIDTH = 1000
"""Console width when stdout is no terminal: wide enough that rich never truncates a
key or a column header to fit (it would use 80 columns)."""
PIPED_PANEL_WIDTH = 100
"""Width of framed output (``coplay show``'s panels) when stdout is no terminal: a
panel fills the width it is given, and ``PIPED_WIDTH`` would make every line 1000
columns wide."""
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
"""A port to listen on; 0 lets the system pick a free one (``play --web`` says which)."""
serve_port = int_in("port", 1, 65535)
"""A port that others are told to connect to, so never 0."""


def path_arg(text: str) -> str:
    """An argparse type: a path, not empty (an empty one would name the current
    directory, or read as "not given")."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path names nothing; give a path")
    return text


path_arg.__name__ = "path"


def heading(command: str, what: str) -> Text:
    """``coplay train kuhn_poker -> runs/x``, the command's name in bold."""
    return Text.assemble((f"coplay {command}", "bold"), f" {what}")


def titled_table(title: str) -> Table:
    """A table whose title stays on one line (wrapped, a long path would break up)."""
    return Table(title=Text(title, no_wrap=True, overflow="ignore"))


@contextmanager
def claimed_run(
    out: Path,
    force: bool,
    *,
    reads: Iterable[tuple[str, str | Path | None]] = (),
    resumable: bool = True,
) -> Iterator[None]:
    """Hold ``out`` for a new run made inside the block: refuse one that holds a run
    unless ``force``, which moves it aside (never with what the new run ``reads``,
    ``("--roster", path)`` pairs), and back again if the block fails before writing there:
    a setting refused while the run is set up must not cost the old run its place."""
    from coplay.train.checkpoints.rundir import claim

    moved = claim(out, force=force, resumable=resumable, reads=reads)
    if moved is not None:
        console.print(f"moved the old run in {out} to {moved}")
    with _put_back_on_failure(out, moved, "run"):
        yield


@contextmanager
def claimed_file(path: Path, force: bool) -> Iterator[None]:
    """Hold the results file ``path`` for the block: refuse one that exists unless
    ``force``, which moves it aside (and back, if the block fails before writing it),
    and a path no file can be written to, before any work is done."""
    from coplay.train.checkpoints.rundir import RunDirError, move_aside

    if path.is_dir():
        raise RunDirError(f"--out {path} is a directory; name a file for the results")
    folder = check_parent(path)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise RunDirError(f"cannot write {path}: {folder} is not writable")
    moved = None
    if path.exists():
        if not force:
            raise RunDirError(f"{path} already exists; pass --force to move it aside")
        moved = move_aside(path)
        console.print(f"moved the old {path} to {moved}")
    with _put_back_on_failure(path, moved, "file"):
        yield


POPULATIONS = ("league", "psro")
"""Runs resumed by their own command, with the settings they saved in ``<kind>.yaml``."""


def resume_advice(out: Path, kind: str) -> str:
    """How to continue the run of ``kind`` (``coplay.report.runfiles.run_kind``) in
    ``out``: its command, after putting back the settings file a league or PSRO run
    cannot resume without."""
    command = f"coplay {kind if kind in POPULATIONS else 'train'} --resume {out}"
    settings = out / f"{kind}.yaml"
    if kind in POPULATIONS and not settings.is_file():
        return f"its settings file {settings.name} is missing: put it back, then {command}"
    return f"resume it with {command}"


def check_parent(path: Path) -> Path:
    """Refuse, before any work, an output file whose folder cannot exist because a file
    stands in its path; returns the nearest folder that exists."""
    from coplay.train.checkpoints.rundir import RunDirError, existing_ancestor

    if not (folder := existing_ancestor(path.parent)).is_dir():
        raise RunDirError(f"cannot write {path}: {folder} is a file")
    return folder


@contextmanager
def _put_back_on_failure(out: Path, moved: Path | None, what: str) -> Iterator[None]:
    from coplay.train.checkpoints.rundir import put_back

    try:
        yield
    except BaseException:  # Ctrl-C as well: the old run was not replaced
        if moved is not None and put_back(out, moved):
            console.print(f"put the old {what} back in {out}: the new one wrote nothing")
        raise


def game_params(items: Sequence[str]) -> dict[str, object]:
    """``["size=8", "slippery=true"]`` -> ``{"size": 8, "slippery": True}`` (YAML scalars)."""
    params = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"game parameter {item!r} must look like key=value (e.g. size=8)")
        if key in params:  # which one was meant is not ours to guess
            raise ValueError(f"game parameter {key!r} is given twice")
        try:
            params[key] = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            params[key] = raw  # not a YAML scalar: the game sees the text
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


def is_checkpoint_player(spec: str) -> bool:
    """Whether a player names a saved policy: not a remote endpoint, and not a scripted
    bot's name, which wins over a folder of that name (as in ``build_opponent``)."""
    from coplay.population.opponents import SCRIPTED_NAMES

    return not spec.startswith("remote:") and spec not in SCRIPTED_NAMES and Path(spec).exists()


def saved_player(spec: str) -> SavedPolicy:
    """The saved policy a player path means (``find_policy``). These commands take no
    ``--role``, so a roster run's refusal names the role folders to pass instead."""
    from coplay.models.checkpoints import find_policy, lora_roles_of, roles_in

    try:
        return find_policy(spec)
    except ValueError:
        final = Path(spec) / "checkpoints" / "final"
        holder = final if final.is_dir() else Path(spec)
        if roles := roles_in(holder):
            where = [holder / r for r in roles]
            what = f"{spec} is a roster run with policies {', '.join(roles)}"
        elif roles := lora_roles_of(holder):
            where = [holder.parent / r for r in roles]
            what = f"{spec} is the untrained base of a LoRA roster run"
        else:
            raise
        raise ValueError(f"{what}: pass one policy's folder, e.g. {where[0]}") from None


def players_game(game: str | None, players: Sequence[str]) -> tuple[str, dict]:
    """--game, else the one game that the checkpoint players record (with its
    parameters, also when --game names that same game), however each spells it."""
    from coplay.envs.registry import same_game

    recorded: dict[str, dict] = {}  # one entry a game, under its first spelling
    checkpoints = [spec for spec in players if is_checkpoint_player(spec)]
    for spec in checkpoints:
        played = saved_player(spec).game()
        if played is None:
            continue
        name = next((n for n in recorded if same_game(n, played.name)), played.name)
        if recorded.setdefault(name, played.params) != played.params:
            raise ValueError(f"the checkpoints play {played.name} with different parameters")
    if game:  # the recorded game's parameters however --game spells it
        mine = (params for name, params in recorded.items() if same_game(name, game))
        return game, dict(next(mine, {}))
    if not checkpoints:
        raise ValueError("pass --game: no player is a checkpoint, so none records a game")
    if len(recorded) != 1:
        found = f"they record {', '.join(sorted(recorded))}" if recorded else "none records one"
        raise ValueError(f"pass --game: the checkpoint players must record one game ({found})")
    name, params = next(iter(recorded.items()))
    return name, dict(params)


def check_opponents(names: Iterable[str], game: str, params: Mapping[str, object]) -> None:
    """Refuse, before a match is played or ``--force`` moves anything, an opponent that
    is neither a scripted bot fit for the game (built here, which is quick), a saved
    policy that a path alone names, nor a well-formed remote endpoint."""
    from coplay.policies.remote import remote_from_spec
    from coplay.population.opponents import build_opponent

    for name in names:
        if is_checkpoint_player(name):
            saved_player(name)
        elif name.startswith("remote:"):
            remote_from_spec(name)  # the spec and its key; the endpoint answers in play
        else:
            build_opponent(name, game, params=params)


def check_model_path(path: str | None) -> None:
    """Check the checkpoint ``model.path`` names, when it is a local folder (else it is a
    Hugging Face Hub name, found only when loaded), before ``--force`` moves anything."""
    from coplay.models.hf_folder import check_checkpoint

    if path and Path(path).exists():
        check_checkpoint(Path(path))


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
