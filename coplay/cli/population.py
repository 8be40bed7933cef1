"""``coplay psro`` and ``coplay league`` (coplay.population): training against a
population, new or resumed from what a stopped run saved."""

from __future__ import annotations

import argparse
from pathlib import Path

from coplay.cli.common import (
    FORCE_HELP,
    OVERRIDES_HELP,
    PRESET_HELP,
    Command,
    claim_run,
    console,
    train_status,
)
from coplay.report.progress import track

POPULATION_RESUME_HELP = (
    "continue a stopped run from its saved state, with the settings it saved (the other "
    "options are ignored; key=value overrides still apply to the trainer)"
)
SEAT_WEIGHTS_HELP = (
    "share of the learner's game groups per seat, one weight per seat, e.g. 1 3: a "
    "quarter in seat 0, three quarters in seat 1 (default: seats rotate evenly)"
)
POPULATION_REPORT_HELP = "write the HTML report (meta-game, weights, curves) to <run>/report.html"


class _Numbers(argparse.Action):
    """``nargs="+"`` numbers ending at the first item that is none: that item and the
    rest are key=value overrides (argparse hands an option every item up to the next
    option, so ``--seat-weights 1 3 train.iterations=5`` would fail to read a number)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        count = next((i for i, v in enumerate(values) if not _is_number(v)), len(values))
        if count == 0:
            parser.error(f"argument {option_string}: expected numbers, got {values[0]!r}")
        setattr(namespace, self.dest, [float(v) for v in values[:count]])
        namespace.after_numbers = [*getattr(namespace, "after_numbers", []), *values[count:]]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _psro_arguments(ps: argparse.ArgumentParser) -> None:
    from coplay.eval.metasolvers import META_SOLVERS
    from coplay.population.psro import INITIAL_MEMBERS, ORACLES

    ps.add_argument("--preset", default=None, help=f"trainer {PRESET_HELP}")
    ps.add_argument("--config", default=None, help="YAML file merged over the preset")
    ps.add_argument("--out", default="runs/psro", help="run directory (a new one: see --force)")
    ps.add_argument("--force", action="store_true", help=FORCE_HELP)
    ps.add_argument("--resume", metavar="RUN_DIR", help=POPULATION_RESUME_HELP)
    ps.add_argument("--iterations", type=int, default=8, help="best responses to add")
    ps.add_argument("--meta-solver", default="nash", help=", ".join(META_SOLVERS))
    # Names are checked by the config against its registries (one error line), so the
    # choices show in the metavar instead of argparse's ``choices``.
    ps.add_argument(
        "--initial", default="lm", metavar="|".join(INITIAL_MEMBERS), help="first member"
    )
    ps.add_argument("--cold", action="store_true", help="train each response from scratch")
    ps.add_argument(
        "--oracle",
        default="lm",
        metavar="|".join(ORACLES),
        help="best-response oracle (exact: OpenSpiel best responses)",
    )
    ps.add_argument("--restarts", type=int, default=1, help="responses trained per iteration")
    ps.add_argument(
        "--seat-weights", nargs="+", action=_Numbers, metavar="W", help=SEAT_WEIGHTS_HELP
    )
    ps.add_argument(
        "--report", action="store_true", help=f"{POPULATION_REPORT_HELP} after every iteration"
    )
    ps.add_argument("overrides", nargs="*", help=f"trainer {OVERRIDES_HELP}")


def cmd_psro(args: argparse.Namespace) -> int:
    from coplay.population.psro import PsroConfig, run_psro

    cfg, out = _population_run(
        PsroConfig,
        "psro",
        args,
        iterations=args.iterations,
        meta_solver=args.meta_solver,
        initial=args.initial,
        warm_start=not args.cold,
        oracle=args.oracle,
        restarts=args.restarts,
        seat_weights=args.seat_weights,
    )
    console.print(f"[bold]coplay psro[/] {cfg.run.game.name} -> {out}")
    with track("psro", cfg.iterations + 1, "iterations", console=console) as advance:
        res = run_psro(
            cfg,
            out,
            progress=lambda step: _psro_step(step, advance, out if args.report else None),
            resume=bool(args.resume),
        )
    console.print(f"members: {' '.join(res.members)}; run directory: {out}")
    if args.report:
        console.print(f"report: {_run_report(out)}")
    return 0


def _psro_step(s, advance, report_to: Path | None) -> None:
    """Print what a PSRO iteration measured and count it done; rewrite the run's
    report when asked."""
    console.print(
        f"iteration {s.iteration}: {s.members} members, "
        f"exploitability {s.exploitability:.4f}, response value {s.response_value:.4f} "
        f"(best {s.best_value:.4f}), {s.elapsed_s:.0f} s"
    )
    if report_to is not None:
        _run_report(report_to)
    advance(s.iteration + 1)


def _league_arguments(lg: argparse.ArgumentParser) -> None:
    from coplay.population.league import SAMPLERS

    lg.add_argument("--preset", default=None, help=f"the learner's trainer {PRESET_HELP}")
    lg.add_argument("--config", default=None, help="YAML file merged over the preset")
    lg.add_argument("--out", default="runs/league", help="run directory (a new one: see --force)")
    lg.add_argument("--force", action="store_true", help=FORCE_HELP)
    lg.add_argument("--resume", metavar="RUN_DIR", help=POPULATION_RESUME_HELP)
    lg.add_argument(
        "--sampler", default="pfsp", metavar="|".join(SAMPLERS), help="opponent sampler"
    )
    lg.add_argument("--snapshot-every", type=int, default=20, help="0: only on the threshold")
    lg.add_argument("--win-threshold", type=float, default=0.7)
    lg.add_argument("--self-play", type=float, default=0.2, help="share of plain self-play")
    lg.add_argument(
        "--bots",
        type=lambda text: [b for b in text.split(",") if b],
        default=[],
        help="scripted members, comma-separated, e.g. random,nash",
    )
    lg.add_argument(
        "--seat-weights", nargs="+", action=_Numbers, metavar="W", help=SEAT_WEIGHTS_HELP
    )
    lg.add_argument("--report", action="store_true", help=f"{POPULATION_REPORT_HELP} at the end")
    lg.add_argument("overrides", nargs="*", help=f"trainer {OVERRIDES_HELP}")


def cmd_league(args: argparse.Namespace) -> int:
    from coplay.population.league import LeagueConfig, run_league

    cfg, out = _population_run(
        LeagueConfig,
        "league",
        args,
        sampler=args.sampler,
        snapshot_every=args.snapshot_every,
        win_threshold=args.win_threshold,
        self_play=args.self_play,
        bots=args.bots,
        seat_weights=args.seat_weights,
    )
    console.print(f"[bold]coplay league[/] {cfg.run.game.name} -> {out}")
    with track("league", cfg.run.train.iterations, "iterations", console=console) as advance:
        res = run_league(
            cfg,
            out,
            progress=lambda it, m: advance(it, train_status(m)),
            resume=bool(args.resume),
        )
    console.print(f"snapshots: {', '.join(f'{it} ({why})' for it, why in res.snapshots)}")
    for name, elo in zip(("learner", *res.members), res.elo, strict=True):
        rating = "not rated (no games)" if elo is None else f"Elo {elo:7.1f}"
        console.print(f"  {name:>12}  {rating}")
    if args.report:
        console.print(f"report: {_run_report(out)}")
    console.print(f"run directory: {out}")
    return 0


def _run_report(out: Path) -> Path:
    """``<out>/report.html`` of the run in ``out``, written atomically."""
    from coplay.train.report import write_report

    return write_report([out], out / "report.html")


def _population_run(kind, name: str, args: argparse.Namespace, **fields):
    """A league's or PSRO's config and run directory: from the options for a new run
    (claiming ``--out``), or from what a stopped run saved (``--resume``)."""
    from coplay.train.config import ConfigError, build_config, load_yaml

    if not args.resume:
        cfg = _population_config(kind, args, **fields)
        claim_run(Path(args.out), args.force)
        return cfg, Path(args.out)
    if args.force:
        raise ValueError("--force starts a new run; it cannot go with --resume")
    out = Path(args.resume)
    settings = out / f"{name}.yaml"
    if not settings.is_file() or not (out / "config.yaml").is_file():
        raise ConfigError(
            f"{out} holds no {name} run to resume (it has no {settings.name} and config.yaml); "
            f"start one with --out {out}"
        )
    run = build_config(file=out / "config.yaml", overrides=args.overrides)
    return _validated(kind, run=run, **load_yaml(settings)), out


def _population_config(kind, args: argparse.Namespace, **fields):
    """A PSRO or league config from the trainer preset, file and overrides; one-line errors."""
    from coplay.train.config import base_preset, build_config

    preset = base_preset(args.preset, args.config)
    run = build_config(preset=preset, file=args.config, overrides=args.overrides)
    return _validated(kind, run=run, **fields)


def _validated(kind, **fields):
    from pydantic import ValidationError

    from coplay.train.config import ConfigError, format_validation_error

    try:
        return kind(**fields)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err)) from None


PSRO = Command(
    "psro", "PSRO/JPSRO: grow a population of LM best responses", _psro_arguments, cmd_psro
)
LEAGUE = Command(
    "league", "train against a league of frozen snapshots", _league_arguments, cmd_league
)
