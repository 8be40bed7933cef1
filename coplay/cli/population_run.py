"""The run of ``coplay psro`` or ``coplay league``: its config and directory, new from
the command's options or resumed from what a stopped run saved; ``--out`` claimed for a
new run; the run's report."""

from __future__ import annotations

import argparse
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from coplay.cli.common import (
    POPULATIONS,
    check_model_path,
    check_opponents,
    claimed_run,
    resume_advice,
)

Options = dict[str, tuple[str, object]]
"""A command's settings options: ``--option`` -> (config field, value; None: not given)."""


def run_report(out: Path) -> Path:
    """``<out>/report.html`` of the run in ``out``, written atomically."""
    from coplay.train.report import write_report

    return write_report([out], out / "report.html")


def population_run(kind, name: str, args: argparse.Namespace, options: Options):
    """A league's or PSRO's config and run directory: from the options for a new run,
    or from what a stopped run saved (``--resume``, which refuses options that would
    change its settings rather than ignore them)."""
    from coplay.train.settings import build_config, load_yaml

    if args.resume is None:
        fields = {field: value for field, value in options.values() if value is not None}
        cfg = _population_config(kind, args, **fields)
        return cfg, Path(args.out if args.out is not None else f"runs/{name}")
    if args.force:
        raise ValueError("--force starts a new run; it cannot go with --resume")
    out = Path(args.resume)
    given = [f"--{o}" for o in ("preset", "config", "out") if getattr(args, o) is not None]
    given += [option for option, (_, value) in options.items() if value is not None]
    if given:
        raise ValueError(
            f"{given[0]} cannot go with --resume: a resumed {name} run keeps the settings "
            f"and directory it saved (key=value overrides still change its trainer)"
        )
    _check_resumable(out, name)
    load_yaml(out / "config.yaml", "the run's config", empty_ok=False)
    run = build_config(file=out / "config.yaml", overrides=args.overrides, recorded=True)
    settings = load_yaml(out / f"{name}.yaml", f"the {name}'s settings", empty_ok=False)
    return _validated(kind, run=run, **settings), out


def _check_resumable(out: Path, name: str) -> None:
    """Refuse in one line a ``--resume`` of a folder that is no ``name`` run, naming
    what it is and the command that continues it."""
    from coplay.report.runfiles import run_kind
    from coplay.train.config import ConfigError

    settings, config = out / f"{name}.yaml", out / "config.yaml"
    if settings.is_file() and config.is_file():
        return
    if settings.is_file():
        raise ConfigError(f"{out} holds no {name} run to resume (its config.yaml is missing)")
    kind = run_kind(out)
    if kind == name:  # its logs or folders say so
        raise ConfigError(f"{out} is a {name} run, but {resume_advice(out, name)}")
    if not config.is_file():
        raise ConfigError(
            f"{out} holds no {name} run to resume (it has no {settings.name} and "
            f"config.yaml); start one with --out {out}"
        )
    what = f"a {kind} run" if kind in POPULATIONS else "a training run"
    raise ConfigError(
        f"{out} is {what}, not a {name} run (it has no {settings.name}); {resume_advice(out, kind)}"
    )


def claimed(
    args: argparse.Namespace, cfg, out: Path, *, bots: list[str] | tuple[()]
) -> AbstractContextManager[None]:
    """``--out`` held for a new run (see ``claimed_run``); nothing to claim on resume."""
    if args.resume is not None:
        return nullcontext()
    g = cfg.run.game
    check_opponents(bots, g.name, g.params)  # before --force moves anything
    check_model_path(cfg.run.model.path)
    reads = [("--config", args.config), ("model.path", cfg.run.model.path)]
    return claimed_run(out, args.force, reads=[*reads, *(("--bots", b) for b in bots)])


def _population_config(kind, args: argparse.Namespace, **fields):
    """A PSRO or league config from the trainer preset, file and overrides; one-line errors."""
    from coplay.train.settings import base_preset, build_config

    preset = base_preset(args.preset, args.config)
    run = build_config(preset=preset, file=args.config, overrides=args.overrides)
    return _validated(kind, run=run, **fields)


def _validated(kind, **fields):
    from pydantic import ValidationError

    from coplay.train.config import ConfigError
    from coplay.train.config_errors import format_validation_error

    try:
        return kind(**fields)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err)) from None
