"""The rules of a run directory: no run is ever silently destroyed.

* A directory that already holds a run is never trained into afresh: the command
  refuses and names ``--resume`` and ``--force``; ``--force`` moves the old run aside
  to ``DIR.old-<time>`` (nothing is deleted, nothing stale is mixed into the new run),
  but never a file the new run reads, and puts it back when the new run fails before
  writing anything (``put_back``).
* A resumed run is checked before anything is written: the merged config must keep
  what the saved weights were built for (game, model shape, tokenizer seed).
* Files a kill can tear are repaired on resume: a half-written last line of a JSONL
  file is dropped with a warning naming the file, a folder replaced half way is put
  back (``coplay.report.atomic``).
* An interrupted run says where it stopped and how to continue (``RunInterrupted``).
"""

from __future__ import annotations

import json
import math
import os
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from coplay.report import atomic, sinks
from coplay.train.checkpoints.state import STATE_DIR
from coplay.train.config import ConfigError, RunConfig
from coplay.train.settings import load_yaml, to_yaml, validate

RUN_FILES = (
    "config.yaml",
    "metrics.jsonl",
    "transcripts.jsonl",
    "summary.json",
    "psro.jsonl",
    "roster.yaml",
    "state",
    "checkpoints",
    "members",
    "responses",
    "snapshots",
)
"""What coplay writes into a run directory; a directory holding any of them is a run."""

WEIGHT_KEYS = ("game.name", "game.params", "model.path", "model.tiny", "train.seed")
"""Config keys the saved weights depend on: the game and its text (the tokenizer is
trained on random play seeded by ``train.seed``) and the model's shape."""


class RunDirError(ValueError):
    """An output path that cannot take the run; the message is one line naming it."""


class RunRepaired(UserWarning):
    """A file torn by a kill was repaired on resume."""


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during training; says what was saved and how to continue."""

    def __init__(self, out: Path, saved: int | None, command: str = "train") -> None:
        super().__init__(interrupted_message(out, saved, command))
        self.out, self.saved = out, saved


def interrupted_message(out: Path, saved: int | None, command: str = "train") -> str:
    if saved is None:
        return f"interrupted before any state was saved; start again with --out {out} --force"
    return (
        f"interrupted; last saved iteration {saved}; continue with: coplay {command} --resume {out}"
    )


def holds_run(path: Path) -> bool:
    """Whether ``path`` is a directory holding something coplay wrote."""
    return path.is_dir() and any((path / name).exists() for name in RUN_FILES)


def existing_ancestor(path: Path) -> Path:
    """``path`` itself if it exists, else its nearest parent that does."""
    return next(p for p in (path, *path.parents) if p.exists())


def check_writable(path: Path) -> None:
    """``path`` is, or can be created as, a folder we may write into; else one line."""
    if path.exists() and not path.is_dir():
        raise RunDirError(f"output {path} is a file, not a directory")
    probe = existing_ancestor(path)
    if not probe.is_dir():
        raise RunDirError(f"cannot create {path}: {probe} is a file")
    if not os.access(probe, os.R_OK | os.W_OK | os.X_OK):
        raise RunDirError(f"cannot write to {probe}: permission denied")


def claim(
    out: Path,
    *,
    force: bool,
    resumable: bool = True,
    reads: Iterable[tuple[str, str | Path | None]] = (),
) -> Path | None:
    """Make ``out`` ready for a new run: refuse one that holds a run unless ``force``,
    which moves the old run aside; returns where it went (None: nothing was there).

    ``reads`` names what the new run will read (``("--roster", path)`` pairs): ``force``
    never moves one of them aside with the old run, where the new run would not find it."""
    out = Path(out)
    check_writable(out)
    if not holds_run(out):
        return None
    if not force:
        # --resume only where there is a saved state to continue from.
        saved = resumable and (out / STATE_DIR).exists()
        resume = f"continue it with --resume {out}, or " if saved else ""
        raise RunDirError(
            f"{out} already holds a run; {resume}pass --force to move it to "
            f"{out}.old-<time> and start afresh"
        )
    for what, path in reads:
        if path and Path(path).exists() and Path(path).resolve().is_relative_to(out.resolve()):
            raise RunDirError(
                f"{what} {path} is inside {out}, which --force would move aside; "
                "put it elsewhere or use another --out"
            )
    return move_aside(out)


def move_aside(out: Path) -> Path:
    """Rename ``out`` to ``out.old-<YYYYmmdd-HHMMSS>`` (a free name); returns it.

    ``out`` is made absolute first, so that ``.`` or ``run/..`` has a name to extend;
    a folder holding the current directory is refused: this process (and the user's
    shell) would go on working inside the moved run."""
    out = Path(os.path.abspath(out))  # not resolve(): a symlink is moved, not its target
    if Path.cwd().resolve().is_relative_to(out.resolve()):
        raise RunDirError(
            f"cannot move {out} aside: it holds the current directory; run from outside it"
        )
    stamp = time.strftime("%Y%m%d-%H%M%S")
    dest = out.with_name(f"{out.name}.old-{stamp}")
    n = 1
    while dest.exists():
        dest, n = out.with_name(f"{out.name}.old-{stamp}-{n}"), n + 1
    out.rename(dest)
    return dest


def put_back(out: Path, moved: Path) -> bool:
    """Undo ``move_aside`` when the new run wrote nothing to ``out`` (it failed while
    being set up); returns whether ``moved`` is back in ``out``."""
    if os.path.lexists(out) or not moved.exists():
        return False
    moved.rename(out)
    return True


def check_resume(cfg: RunConfig, out: Path) -> None:
    """Refuse, before anything is written, a resume whose config the saved weights do not
    fit; names each differing key with its saved and new value."""
    out = Path(out)
    if not (out / "config.yaml").is_file():
        return  # no run at all: loading its state says what is missing
    check_writable(out)
    saved, new = _saved_and_new(out, cfg)
    weights = WEIGHT_KEYS
    if saved.get("model.path") is not None:  # the checkpoint's shape, whatever model.tiny says
        weights = tuple(k for k in WEIGHT_KEYS if k != "model.tiny")
    changed = [k for k in _changed(saved, new) if k.startswith(weights)]
    # The tiny model's tokenizer is trained for its mode (text mode adds the answer
    # formats' words): another mode is another vocabulary. A checkpoint's is its own.
    if saved.get("model.path") is None and saved.get("model.mode") != new.get("model.mode"):
        changed.append("model.mode")
    if changed:
        diffs = ", ".join(f"{k}: {saved.get(k)!r} -> {new.get(k)!r}" for k in changed)
        raise ConfigError(
            f"cannot resume {out}: the saved weights do not fit the new config ({diffs}); "
            "start a new run instead"
        )


def changed_keys(out: Path, cfg: RunConfig) -> list[str]:
    """The keys whose values ``cfg`` changes from the run's ``config.yaml``."""
    return _changed(*_saved_and_new(out, cfg))


def _changed(saved: dict[str, object], new: dict[str, object]) -> list[str]:
    return [k for k in sorted(set(saved) | set(new)) if saved.get(k) != new.get(k)]


def _saved_and_new(out: Path, cfg: RunConfig) -> tuple[dict[str, object], dict[str, object]]:
    """The run's ``config.yaml`` and ``cfg``, each flattened to dotted keys."""
    saved = _flat(validate(load_yaml(out / "config.yaml")).model_dump(mode="json"))
    return saved, _flat(cfg.model_dump(mode="json"))


def _flat(data: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in data.items():
        if isinstance(v, dict):
            out |= _flat(v, f"{prefix}{k}.")
        else:
            out[f"{prefix}{k}"] = v
    return out


def check_done(done: int, cfg: RunConfig, out: Path) -> None:
    """A resumed run cannot end before the iteration it saved."""
    if done > cfg.train.iterations:
        raise ConfigError(
            f"{out} has already trained {done} iterations; train.iterations="
            f"{cfg.train.iterations} would end before that (pass train.iterations>={done})"
        )


def start(out: Path, cfg: RunConfig, files: Sequence[str]) -> None:
    """A fresh run: its config and empty ``files`` (metrics, transcripts). A folder that
    holds a run is refused here too, for callers of the Python API, who pass no
    ``--force`` through ``claim``: a new run written over an old one would keep the old
    checkpoints beside the new logs."""
    if holds_run(out):
        raise RunDirError(
            f"{out} already holds a run; continue it with resume=True, or pass "
            f"force=True to move it to {out}.old-<time> and start afresh"
        )
    out.mkdir(parents=True, exist_ok=True)
    write_config(out, cfg)
    for name in files:
        (out / name).write_text("")


def resume(
    out: Path, cfg: RunConfig, logs: Sequence[str], load: Callable[[], tuple[int, dict]]
) -> tuple[int, dict, float]:
    """Continue a run: repair what a kill tore, ``load()`` its state (iteration,
    evaluations), and only then write: the merged config, and the ``logs`` cut back to
    the saved iteration (rows after it belong to work that is being redone). Returns
    the iteration, the evaluations and the seconds earlier segments took."""
    repair(out, logs)
    done, evals = load()
    check_done(done, cfg, out)
    before = elapsed_before(out / "metrics.jsonl", out / "summary.json")
    if done < cfg.train.iterations:
        write_config(out, cfg)
    elif changed := changed_keys(out, cfg):
        # No iteration is left to use them: config.yaml keeps the settings it trained with.
        warnings.warn(
            f"{out} has already trained all {done} iterations, so the changed settings "
            f"({', '.join(changed)}) train nothing and config.yaml keeps the run's; raise "
            "train.iterations to go on with them",
            stacklevel=2,
        )
    for name in logs:
        sinks.keep_until(out / name, done)
    return done, evals, before


def write_config(out: Path, cfg: RunConfig) -> None:
    atomic.write_text(out / "config.yaml", to_yaml(cfg))


def repair(out: Path, files: Sequence[str]) -> None:
    """Mend what a kill may have torn: the state folder and checkpoints replaced half
    way, the last line of each JSONL file in ``files`` (each repair warns)."""
    if atomic.recover_dir(out / STATE_DIR):
        _warn(f"{out / STATE_DIR}: put back the state a kill cut off while replacing it")
    for tmp in (out / "checkpoints").glob(f"*{atomic.TMP_SUFFIX}"):
        atomic.recover_dir(tmp.with_name(tmp.name.removesuffix(atomic.TMP_SUFFIX)))
    for name in files:
        if dropped := sinks.repair_jsonl(out / name):
            _warn(f"{out / name}: dropped a half-written last line ({dropped} bytes)")


def _warn(message: str) -> None:
    warnings.warn(message, RunRepaired, stacklevel=3)


def elapsed_before(metrics: Path, summary: Path | None = None) -> float:
    """Seconds the earlier segments of a run took (the largest ``perf/elapsed_s``, or a
    finished segment's ``wall_s`` in ``summary``, which also counts what it did after
    its last row: the final checkpoint), so that ``wall_s`` and ``perf/elapsed_s``
    count every segment."""
    times = [0.0]
    if metrics.is_file():
        times += [r.get("perf/elapsed_s") or 0.0 for r in sinks.read_metrics(metrics)]
    if summary is not None and summary.is_file():
        try:  # a summary is written again at the end: a damaged one only loses its time
            wall = json.loads(summary.read_text(encoding="utf-8")).get("wall_s")
        except (ValueError, AttributeError):
            wall = None
        if isinstance(wall, int | float) and math.isfinite(wall):
            times.append(float(wall))
    return float(max(times))
