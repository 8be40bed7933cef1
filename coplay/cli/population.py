"""``coplay psro`` and ``coplay league`` (coplay.population): training against a
population, new or resumed from what a stopped run saved."""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from pathlib import Path

from coplay.cli.common import (
    FORCE_HELP,
    OVERRIDES_HELP,
    PRESET_HELP,
    Command,
    console,
    heading,
    path_arg,
    train_status,
)
from coplay.cli.population_run import Options, claimed, population_run, run_report
from coplay.report.progress import track

POPULATION_RESUME_HELP = (
    "continue a stopped run from its saved state, with the settings it saved (options "
    "that would change them are refused; key=value overrides still apply to the trainer, "
    "and --report writes the report)"
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


def _field_help(config, name: str, *, choices: Sequence[str] = ()) -> str:
    """A settings option's help: the config field's docstring (the names ``choices``
    lists, if any) and its default."""
    field = config.model_fields[name]
    text = " ".join(field.description.replace("``", "").split()).rstrip(".")
    listed = f": {', '.join(choices)}" if choices else ""
    return f"{text}{listed} (default: {field.default})"


def _psro_arguments(ps: argparse.ArgumentParser) -> None:
    from coplay.eval.metasolvers import META_SOLVERS
    from coplay.population.metagame import RECOMMENDATIONS
    from coplay.population.oracles import ORACLES
    from coplay.population.psro_config import PsroConfig
    from coplay.population.psro_members import INITIAL_MEMBERS

    # Settings default to None (not given), so that a resume can refuse them; a new run
    # takes PsroConfig's defaults.
    default = {name: f.default for name, f in PsroConfig.model_fields.items()}
    ps.add_argument("--preset", default=None, help=f"trainer {PRESET_HELP}")
    ps.add_argument(
        "--config", type=path_arg, default=None, help="YAML file merged over the preset"
    )
    ps.add_argument(
        "--out", type=path_arg, default=None, help="run directory (default: runs/psro; see --force)"
    )
    ps.add_argument("--force", action="store_true", help=FORCE_HELP)
    ps.add_argument("--resume", type=path_arg, metavar="RUN_DIR", help=POPULATION_RESUME_HELP)
    ps.add_argument(
        "--iterations",
        type=int,
        help="PSRO iterations, each adding one best response (with --recommendations each, "
        "one per recommended member, copies of members left out); one meta-game more is "
        f"solved, the final population's (default: {default['iterations']})",
    )
    ps.add_argument(
        "--meta-solver",
        help=f"{', '.join(META_SOLVERS)} (default: {default['meta_solver']})",
    )
    # Names are checked by the config against its registries (one error line), so the
    # choices show in the metavar instead of argparse's ``choices``.
    ps.add_argument(
        "--initial",
        metavar="|".join(INITIAL_MEMBERS),
        help=f"first member (default: {default['initial']})",
    )
    ps.add_argument(
        "--cold",
        dest="warm_start",
        action="store_false",
        default=None,
        help="train each response from scratch",
    )
    ps.add_argument(
        "--oracle",
        metavar="|".join(ORACLES),
        help=f"best-response oracle (exact: OpenSpiel best responses; default: "
        f"{default['oracle']})",
    )
    ps.add_argument(
        "--restarts",
        type=int,
        help=f"responses trained for each member added (default: {default['restarts']})",
    )
    ps.add_argument(
        "--recommendations",
        metavar="|".join(RECOMMENDATIONS),
        help=_field_help(PsroConfig, "recommendations"),
    )
    ps.add_argument(
        "--seat-weights", nargs="+", action=_Numbers, metavar="W", help=SEAT_WEIGHTS_HELP
    )
    ps.add_argument(
        "--crossplay-episodes",
        type=int,
        metavar="N",
        help=_field_help(PsroConfig, "crossplay_episodes"),
    )
    ps.add_argument(
        "--report", action="store_true", help=f"{POPULATION_REPORT_HELP} after every iteration"
    )
    ps.add_argument("overrides", nargs="*", help=f"trainer {OVERRIDES_HELP}")


def cmd_psro(args: argparse.Namespace) -> int:
    from coplay.population.psro import run_psro
    from coplay.population.psro_config import PsroConfig

    options: Options = {
        "--iterations": ("iterations", args.iterations),
        "--meta-solver": ("meta_solver", args.meta_solver),
        "--initial": ("initial", args.initial),
        "--cold": ("warm_start", args.warm_start),
        "--oracle": ("oracle", args.oracle),
        "--restarts": ("restarts", args.restarts),
        "--recommendations": ("recommendations", args.recommendations),
        "--seat-weights": ("seat_weights", args.seat_weights),
        "--crossplay-episodes": ("crossplay_episodes", args.crossplay_episodes),
    }
    if args.resume is None:  # a resume refuses these options anyway
        _check_oracle_options(options)
    cfg, out = population_run(PsroConfig, "psro", args, options)
    report_to = out if args.report else None
    with claimed(args, cfg, out, bots=()):
        console.print(heading("psro", f"{cfg.run.game.name} -> {out}"))
        # Iterations 0..N: each solves the meta-game and, but for the last, adds a response.
        with track("psro", cfg.iterations + 1, "meta-games", console=console) as advance:
            res = run_psro(
                cfg,
                out,
                progress=lambda step: _psro_step(step, cfg.iterations, advance, report_to),
                resume=args.resume is not None,
            )
    console.print(f"members: {' '.join(res.members)}; run directory: {out}")
    if args.report:
        console.print(f"report: {run_report(out)}")
    return 0


def _psro_step(s, iterations: int, advance, report_to: Path | None) -> None:
    """Print what a PSRO iteration measured and count it done; rewrite the run's
    report when asked. Only the numbers known are printed: exploitability and the
    exact best response's value need exact evaluation, a sampled meta-game measures the
    response's value only to choose among restarts, and the last iteration (number
    ``iterations``) trains no response."""
    parts = [f"{s.members} member{'s' * (s.members != 1)}"]
    if math.isfinite(s.exploitability):
        parts.append(f"exploitability {s.exploitability:.4f}")
    if s.correlated and math.isfinite(s.cce_gap):  # a product joint's is the NashConv
        parts.append(f"joint's CCE gap {s.cce_gap:.4f}")
    if s.correlated and math.isfinite(s.ce_gap):  # measured for the CE solvers only
        parts.append(f"CE gap {s.ce_gap:.4f}")
    if s.iteration == iterations:
        parts.append("the final meta-game, no response trained")
    elif not math.isfinite(s.response_value):  # sampled, with no restarts to judge
        parts.append("response value n/a")
    else:
        best = f" (best {s.best_value:.4f})" if math.isfinite(s.best_value) else ""
        n = len(s.response_values)
        # recommendations=each: a copy of a member is answered but does not join
        several = f"{n} recommendations answered, mean " if n > 1 else ""
        parts.append(f"{several}response value {s.response_value:.4f}{best}")
    console.print(f"iteration {s.iteration}: {', '.join(parts)}, {s.elapsed_s:.0f} s")
    if report_to is not None:
        run_report(report_to)
    advance(s.iteration + 1)


def _check_oracle_options(options: Options) -> None:
    """Refuse, in the options' words, what ``PsroConfig`` refuses in its keys: response
    settings that an oracle training no language model would ignore."""
    from coplay.population.psro_config import UNTRAINED_ORACLES, PsroConfig

    oracle = options["--oracle"][1]
    if oracle not in UNTRAINED_ORACLES:
        return
    for option in ("--restarts", "--seat-weights", "--cold"):
        field, value = options[option]
        if value is not None and value != PsroConfig.model_fields[field].default:
            given = option if isinstance(value, bool) else f"{option} {_words(value)}"
            raise ValueError(
                f"--oracle {oracle} trains no language model: {given} would have no "
                "effect; drop it or use --oracle lm"
            )


def _words(value: object) -> str:
    """An option's value as it is typed: ``1 3`` for the list [1.0, 3.0].

    >>> _words([1.0, 3.5]), _words(2)
    ('1 3.5', '2')
    """
    values = value if isinstance(value, list) else [value]
    return " ".join(f"{v:g}" for v in values)


def _league_arguments(lg: argparse.ArgumentParser) -> None:
    from coplay.eval.metasolvers import META_SOLVERS
    from coplay.population.league_config import LeagueConfig
    from coplay.population.league_samplers import PFSP_WEIGHTINGS, SAMPLERS

    # Settings default to None (not given), so that a resume can refuse them; a new run
    # takes LeagueConfig's defaults.
    default = {name: f.default for name, f in LeagueConfig.model_fields.items()}
    lg.add_argument("--preset", default=None, help=f"the learner's trainer {PRESET_HELP}")
    lg.add_argument(
        "--config", type=path_arg, default=None, help="YAML file merged over the preset"
    )
    lg.add_argument(
        "--out",
        type=path_arg,
        default=None,
        help="run directory (default: runs/league; see --force)",
    )
    lg.add_argument("--force", action="store_true", help=FORCE_HELP)
    lg.add_argument("--resume", type=path_arg, metavar="RUN_DIR", help=POPULATION_RESUME_HELP)
    lg.add_argument(
        "--sampler",
        metavar="|".join(SAMPLERS),
        help=f"opponent sampler (default: {default['sampler']})",
    )
    lg.add_argument(
        "--pfsp-weighting",
        metavar="|".join(PFSP_WEIGHTINGS),
        help=_field_help(LeagueConfig, "pfsp_weighting"),
    )
    lg.add_argument(
        "--pfsp-power", type=float, metavar="P", help=_field_help(LeagueConfig, "pfsp_power")
    )
    lg.add_argument(
        "--meta-solver",
        metavar="NAME",
        help=_field_help(LeagueConfig, "meta_solver", choices=list(META_SOLVERS)),
    )
    lg.add_argument(
        "--meta-episodes",
        type=int,
        metavar="N",
        help=_field_help(LeagueConfig, "meta_episodes"),
    )
    lg.add_argument(
        "--snapshot-every",
        type=int,
        help=f"0: only on the threshold (default: {default['snapshot_every']})",
    )
    lg.add_argument(
        "--win-threshold",
        type=float,
        help="the learner's score against the league since the last snapshot that adds "
        f"one (default: {default['win_threshold']})",
    )
    lg.add_argument(
        "--min-games", type=int, metavar="N", help=_field_help(LeagueConfig, "min_games")
    )
    lg.add_argument(
        "--self-play",
        type=float,
        help=f"share of plain self-play (default: {default['self_play']})",
    )
    lg.add_argument(
        "--bots",
        type=lambda text: [b for b in text.split(",") if b],
        help="scripted members, comma-separated, e.g. random,nash",
    )
    lg.add_argument(
        "--seat-weights", nargs="+", action=_Numbers, metavar="W", help=SEAT_WEIGHTS_HELP
    )
    lg.add_argument("--report", action="store_true", help=f"{POPULATION_REPORT_HELP} at the end")
    lg.add_argument("overrides", nargs="*", help=f"trainer {OVERRIDES_HELP}")


def cmd_league(args: argparse.Namespace) -> int:
    from coplay.population.league import run_league
    from coplay.population.league_config import LeagueConfig

    options: Options = {
        "--sampler": ("sampler", args.sampler),
        "--pfsp-weighting": ("pfsp_weighting", args.pfsp_weighting),
        "--pfsp-power": ("pfsp_power", args.pfsp_power),
        "--meta-solver": ("meta_solver", args.meta_solver),
        "--meta-episodes": ("meta_episodes", args.meta_episodes),
        "--snapshot-every": ("snapshot_every", args.snapshot_every),
        "--win-threshold": ("win_threshold", args.win_threshold),
        "--min-games": ("min_games", args.min_games),
        "--self-play": ("self_play", args.self_play),
        "--bots": ("bots", args.bots),
        "--seat-weights": ("seat_weights", args.seat_weights),
    }
    cfg, out = population_run(LeagueConfig, "league", args, options)
    with claimed(args, cfg, out, bots=cfg.bots):
        console.print(heading("league", f"{cfg.run.game.name} -> {out}"))
        with track("league", cfg.run.train.iterations, "iterations", console=console) as advance:
            res = run_league(
                cfg,
                out,
                progress=lambda it, m: advance(it, train_status(m)),
                resume=args.resume is not None,
            )
    console.print(f"snapshots: {', '.join(f'{it} ({why})' for it, why in res.snapshots)}")
    for name, elo in zip(("learner", *res.members), res.elo, strict=True):
        rating = "not rated (no games)" if elo is None else f"Elo {elo:7.1f}"
        console.print(f"  {name:>12}  {rating}")
    if args.report:
        console.print(f"report: {run_report(out)}")
    console.print(f"run directory: {out}")
    return 0


PSRO = Command(
    "psro", "PSRO/JPSRO: grow a population of LM best responses", _psro_arguments, cmd_psro
)
LEAGUE = Command(
    "league", "train against a league of frozen snapshots", _league_arguments, cmd_league
)
