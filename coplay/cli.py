"""The ``coplay`` command: train, eval, games, presets.

Every user error (bad config, unknown game, missing checkpoint, an output path that
cannot be written) ends in one line on stderr and exit status 2, never a traceback
(``coplay --debug ...`` shows it). Ctrl-C ends in one line too, exit status 130.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

import yaml
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

USER_ERRORS = (ValueError, KeyError, TypeError, OSError)
"""Shown as one line; OSError covers missing files, permissions and unreachable hosts."""
console = Console()
DEBUG_HELP = "show an error's traceback instead of one line"
FORCE_HELP = (
    "replace a run already in --out: the old run is moved to OUT.old-<time> (nothing is "
    "deleted) and a new one starts"
)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="coplay", description=__doc__.splitlines()[0])
    p.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train an agent; writes a run directory")
    t.add_argument("--preset", default=None, help="bundled preset (default: kuhn-selfplay)")
    t.add_argument("--config", default=None, help="YAML file merged over the preset")
    t.add_argument(
        "--out",
        default=None,
        help="run directory (default: runs/<preset>); one that already holds a run is "
        "refused: continue it with --resume, or replace it with --force",
    )
    t.add_argument("--force", action="store_true", help=FORCE_HELP)
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.add_argument(
        "--resume",
        default=None,
        metavar="RUN_DIR",
        help="continue a run from its saved state (its config.yaml plus any overrides)",
    )
    t.add_argument(
        "--roster",
        default=None,
        metavar="ROSTER_YAML",
        help="seat a roster (docs/roster.md): a policy per seat or role, several learners",
    )
    t.add_argument("overrides", nargs="*", help="key=value overrides, e.g. train.iterations=50")

    e = sub.add_parser("eval", help="evaluate a run or checkpoint against an opponent")
    e.add_argument("path", help="run directory or checkpoint folder")
    e.add_argument("--game", default=None, help="game (default: the run's game)")
    e.add_argument("--opponent", default="random", help="random, nash, perfect, optimal or a path")
    e.add_argument("--episodes", type=int, default=1000)
    e.add_argument("--seed", type=int, default=0)
    e.add_argument(
        "--exact",
        action="store_true",
        help="also the exact win/draw/loss per seat by walking the game tree (OpenSpiel games)",
    )
    e.add_argument(
        "--costly",
        type=int,
        default=0,
        metavar="N",
        help="also the N positions per seat where changing the policy's answer gains the "
        "most against the opponent, exactly (OpenSpiel games; coplay/eval/costly.py)",
    )

    c = sub.add_parser("config", help="show every config key with its value and meaning")
    c.add_argument("--preset", default="kuhn-selfplay")
    c.add_argument("--config", default=None, help="YAML file merged over the preset")
    c.add_argument("overrides", nargs="*", help="key=value overrides")

    tm = sub.add_parser("tournament", help="cross-play a population; Elo, OpenSkill, α-rank")
    tm.add_argument("--game", required=True, help="registered game, e.g. kuhn_poker")
    tm.add_argument(
        "--players",
        nargs="+",
        required=True,
        help="scripted names (random, nash, perfect, optimal), checkpoint or run paths, or "
        "remote:URL#model (an OpenAI-compatible endpoint; key from OPENAI_API_KEY)",
    )
    tm.add_argument("--episodes", type=int, default=200, help="games per pairing")
    tm.add_argument("--seed", type=int, default=0)
    tm.add_argument(
        "--out",
        default=None,
        help="write the matrix and ratings as JSON here (partial results if a player fails); "
        "an existing file is refused unless --force",
    )
    tm.add_argument(
        "--force", action="store_true", help="move an existing --out file to OUT.old-<time>"
    )

    ce = sub.add_parser("check-env", help="check that a game keeps the Env contract")
    ce.add_argument(
        "game", help="registered game, openspiel:<name>, or package.module:factory (your own)"
    )
    ce.add_argument("--episodes", type=int, default=20, help="random episodes per check")
    ce.add_argument("--seed", type=int, default=0, help="first episode seed")
    ce.add_argument("params", nargs="*", help="game parameters as key=value, e.g. size=8")

    sub.add_parser("games", help="list registered games")
    sub.add_parser("presets", help="list bundled presets")
    _population_parsers(sub)
    for command in sub.choices.values():  # `coplay train ... --debug` works as well
        command.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP
        )
    return p


def _population_parsers(sub) -> None:
    ps = sub.add_parser("psro", help="PSRO/JPSRO: grow a population of LM best responses")
    ps.add_argument("--preset", default="kuhn-selfplay", help="trainer preset of each response")
    ps.add_argument("--config", default=None, help="YAML file merged over the preset")
    ps.add_argument("--out", default="runs/psro", help="run directory (a new one: see --force)")
    ps.add_argument("--force", action="store_true", help=FORCE_HELP)
    ps.add_argument("--iterations", type=int, default=8, help="best responses to add")
    ps.add_argument("--meta-solver", default="nash", help="nash, uniform, prd, alpharank, ce, cce")
    ps.add_argument("--initial", default="lm", choices=["lm", "random"], help="first member")
    ps.add_argument("--cold", action="store_true", help="train each response from scratch")
    ps.add_argument(
        "--oracle", default="lm", choices=["lm", "exact"], help="exact: OpenSpiel best responses"
    )
    ps.add_argument("--restarts", type=int, default=1, help="responses trained per iteration")
    ps.add_argument("overrides", nargs="*", help="trainer overrides, e.g. train.iterations=30")
    lg = sub.add_parser("league", help="train against a league of frozen snapshots")
    lg.add_argument("--preset", default="kuhn-selfplay", help="the learner's trainer preset")
    lg.add_argument("--config", default=None, help="YAML file merged over the preset")
    lg.add_argument("--out", default="runs/league", help="run directory (a new one: see --force)")
    lg.add_argument("--force", action="store_true", help=FORCE_HELP)
    lg.add_argument("--sampler", default="pfsp", help="uniform, pfsp or meta")
    lg.add_argument("--snapshot-every", type=int, default=20, help="0: only on the threshold")
    lg.add_argument("--win-threshold", type=float, default=0.7)
    lg.add_argument("--self-play", type=float, default=0.2, help="share of plain self-play")
    lg.add_argument(
        "--bots",
        type=lambda text: [b for b in text.split(",") if b],
        default=[],
        help="scripted members, comma-separated, e.g. random,nash",
    )
    lg.add_argument("overrides", nargs="*", help="trainer overrides, e.g. train.iterations=30")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        # argparse before 3.12 stops filling a '*' positional at the first option, so
        # `check-env GAME --episodes 3 size=8` leaves the game parameters over.
        if getattr(args, "params", None) is None or any(e.startswith("-") for e in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.params += extra
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    if args.debug:
        return COMMANDS[args.command](args)
    with warnings.catch_warnings():
        warnings.showwarning = _warning_line(args.command)
        try:
            return COMMANDS[args.command](args)
        except KeyboardInterrupt as err:  # RunInterrupted says what was saved
            print(f"coplay {args.command}: {str(err) or 'interrupted'}", file=sys.stderr)
            return 130
        except USER_ERRORS as err:
            print(f"coplay {args.command}: error: {_error_line(err)}", file=sys.stderr)
            return 2


def _error_line(err: BaseException) -> str:
    """The first line of an error; an OS error as "<what went wrong>: <path>"."""
    if isinstance(err, OSError) and err.strerror and err.filename:
        return f"{err.strerror}: {err.filename}"
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def _warning_line(command: str):
    def show(message, category, filename, lineno, file=None, line=None) -> None:
        print(f"coplay {command}: warning: {message}", file=file or sys.stderr)

    return show


def cmd_train(args: argparse.Namespace) -> int:
    from coplay.train.config import build_config
    from coplay.train.trainer import train

    if args.resume:
        if args.force:
            raise ValueError("--force starts a new run; it cannot go with --resume")
        out = Path(args.resume)
        cfg = build_config(file=out / "config.yaml", overrides=args.overrides)
    else:
        preset = args.preset or (None if args.config else "kuhn-selfplay")
        cfg = build_config(preset=preset, file=args.config, overrides=args.overrides)
        out = Path(args.out or f"runs/{preset or Path(args.config).stem}")
        _claim(out, args.force)
    console.print(f"[bold]coplay train[/] {cfg.game.name} -> {out}")
    if args.roster or (args.resume and (out / "roster.yaml").is_file()):
        summary = _with_progress(_roster_run(args, cfg, out), cfg.train.iterations, args.quiet)
    else:
        run = lambda progress: train(cfg, out, resume=bool(args.resume), progress=progress)  # noqa: E731
        summary = _with_progress(run, cfg.train.iterations, args.quiet, status=_status)
    _print_summary(summary)
    console.print(f"run directory: {out}")
    return 0


def _claim(out: Path, force: bool, *, resumable: bool = True) -> None:
    """Refuse an ``--out`` that holds a run unless ``--force``, which moves it aside."""
    from coplay.train.rundir import claim

    moved = claim(out, force=force, resumable=resumable)
    if moved is not None:
        console.print(f"moved the old run in {out} to {moved}")


def _roster_run(args: argparse.Namespace, cfg, out: Path):
    """``coplay train --roster``: the roster trainer on the same run config; a resumed
    roster run keeps the roster it saved (``roster.yaml`` in its directory)."""
    from coplay.train.roster import load_roster, train_roster

    if args.resume and args.roster:
        raise ValueError(f"a resumed run keeps its roster ({out / 'roster.yaml'}); drop --roster")
    roster = load_roster(out / "roster.yaml" if args.resume else args.roster)
    resume = bool(args.resume)
    return lambda progress: train_roster(roster, cfg, out, progress=progress, resume=resume)


def _with_progress(run, total: int, quiet: bool, status=lambda m: ""):
    """``run(progress)`` with a progress bar over ``total`` iterations, or none if quiet."""
    if quiet:
        return run(None)
    with _progress() as bar:
        task = bar.add_task("training", total=total, status="")
        return run(lambda it, m: bar.update(task, completed=it, status=status(m)))


def _progress() -> Progress:
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"),
        console=console,
    )


def _status(m: dict[str, float]) -> str:
    keys = ("eval/exploitability", "rollout/return_seat0", "perf/decisions_per_s")
    return "  ".join(f"{k.split('/')[-1]}={m[k]:.3f}" for k in keys if k in m)


def _print_summary(summary: dict) -> None:
    table = Table(title="evaluation (before -> after training)")
    table.add_column("metric")
    table.add_column("before", justify="right")
    table.add_column("after", justify="right")
    for key, after in summary.items():
        if key.startswith("final/"):
            name = key.removeprefix("final/")
            before = summary.get(f"initial/{name}")
            table.add_row(name, "-" if before is None else f"{before:.4f}", f"{after:.4f}")
    console.print(table)
    console.print(f"wall time: {summary['wall_s']:.1f} s")


def cmd_eval(args: argparse.Namespace) -> int:
    from coplay.envs.registry import make_env
    from coplay.eval.exact import decide_exact, exploitability
    from coplay.eval.matches import play_match
    from coplay.models.loading import load_policy, resolve_checkpoint
    from coplay.train.opponents import build_opponent

    if args.episodes <= 0:
        raise ValueError(f"--episodes must be positive, got {args.episodes}")
    if args.costly < 0:
        raise ValueError(f"--costly must be 0 (off) or positive, got {args.costly}")
    game, params = _game_of(Path(args.path), args.game)
    policy = load_policy(args.path, seed=args.seed)
    make = lambda: make_env(game, **params)  # noqa: E731
    spec = make().spec
    opponent = build_opponent(args.opponent, game, seed=args.seed + 1, params=params)
    res = play_match(
        make, policy, [opponent] * (spec.num_players - 1), episodes=args.episodes, seed=args.seed
    )
    table = Table(title=f"{resolve_checkpoint(args.path)} vs {args.opponent} on {game}")
    table.add_column("")
    table.add_column("value [95% CI]", justify="right")
    for name in ("win", "draw", "loss", "mean_return"):
        table.add_row(name, str(getattr(res, name)))
    for seat, r in enumerate(res.mean_return_by_seat):
        table.add_row(f"mean return, seat {seat}", f"{r:.3f}")
    table.add_row("episodes", str(res.episodes))
    table.add_row("invalid-action rate", f"{res.invalid_rate:.3f}")
    if decide_exact("auto", spec, game, params):
        ex = exploitability(policy, game, params=params)
        table.add_row("exploitability (exact)", f"{ex.exploitability:.4f}")
        table.add_row("NashConv (exact)", f"{ex.nash_conv:.4f}")
    if args.exact:
        _exact_rows(table, policy, opponent, game, params)
    console.print(table)
    if args.costly:
        _print_costly(policy, opponent, game, params, args.costly)
    return 0


def _print_costly(policy, opponent, game: str, params: dict, top: int) -> None:
    from coplay.eval.costly import costly_positions

    for seat, found in enumerate(costly_positions(policy, opponent, game, params=params, top=top)):
        table = Table(title=f"costliest positions, seat {seat} (exact gain in expected return)")
        for name in ("observation", "reach", "plays", "better", "gain"):
            table.add_column(name, justify="left" if name == "observation" else "right")
        for c in found:
            table.add_row(
                c.observation.strip(),
                f"{c.reach:.4f}",
                f"{c.played} ({c.played_prob:.2f})",
                c.best,
                f"{c.cost:.4f}",
            )
        console.print(table)


def _exact_rows(table: Table, policy, opponent, game: str, params: dict) -> None:
    from coplay.eval.exact_match import sampled_and_greedy_outcomes

    sampled, greedy = sampled_and_greedy_outcomes(policy, opponent, game, params=params)
    for o, g in zip(sampled, greedy, strict=True):
        table.add_row(
            f"win / draw / loss, seat {o.seat} (exact)",
            f"{o.win:.4f} / {o.draw:.4f} / {o.loss:.4f}",
        )
        table.add_row(f"loss of the argmax, seat {o.seat} (exact)", f"{g.loss:.4f}")


def _game_of(path: Path, game: str | None) -> tuple[str, dict]:
    """The game to evaluate on: --game, else the run's config, else the checkpoint's record."""
    if game:
        return game, {}
    for cfg_file in (path / "config.yaml", path.parent.parent / "config.yaml"):
        if cfg_file.is_file():
            data = yaml.safe_load(cfg_file.read_text()) or {}
            g = data.get("game", {})
            return g.get("name", "kuhn_poker"), g.get("params", {}) or {}
    meta = path / "coplay_policy.json"
    if meta.is_file() and "game" in json.loads(meta.read_text()):
        return json.loads(meta.read_text())["game"], {}
    raise ValueError(f"cannot tell which game {path} plays; pass --game")


def cmd_config(args: argparse.Namespace) -> int:
    from coplay.train.config import build_config, describe

    cfg = build_config(preset=args.preset, file=args.config, overrides=args.overrides)
    table = Table(title=f"config ({args.preset})")
    for col in ("key", "value", "meaning"):
        table.add_column(col)
    for key, value, doc in describe(cfg):
        table.add_row(key, value, doc)
    console.print(table)
    return 0


def cmd_tournament(args: argparse.Namespace) -> int:
    import os

    from coplay.eval.crossplay import CrossPlayInterrupted, cross_play, rate_cross_play, to_json
    from coplay.policies.remote import remote_from_spec
    from coplay.train.opponents import build_opponent

    if args.episodes <= 0:
        raise ValueError(f"--episodes must be positive, got {args.episodes}")
    if len(set(args.players)) != len(args.players):
        raise ValueError(f"list each player once, got {' '.join(args.players)}")
    key = os.environ.get("OPENAI_API_KEY")
    policies = {
        spec: remote_from_spec(spec, api_key=key)
        if spec.startswith("remote:")
        else build_opponent(spec, args.game, seed=args.seed + i)
        for i, spec in enumerate(args.players)
    }
    if args.out:
        _claim_file(Path(args.out), args.force)
    try:
        res = cross_play(args.game, policies, episodes=args.episodes, seed=args.seed)
    except CrossPlayInterrupted as stop:
        console.print(_crossplay_table(stop.partial))
        cause = stop.__cause__ or stop
        if args.out:
            data = to_json(stop.partial) | {"complete": False, "stopped": f"{stop}: {cause}"}
            _write_results(Path(args.out), data, what="partial results")
        raise cause from None
    ratings = rate_cross_play(res)
    console.print(_crossplay_table(res))
    console.print(_ratings_table(ratings))
    if args.out:
        _write_results(Path(args.out), to_json(res, ratings) | {"complete": True})
    return 0


def _claim_file(path: Path, force: bool) -> None:
    """Refuse an existing results file unless ``--force``, which moves it aside."""
    from coplay.train.rundir import RunDirError, move_aside

    if path.is_dir():
        raise RunDirError(f"--out {path} is a directory; name a file for the results")
    if path.exists():
        if not force:
            raise RunDirError(f"{path} already exists; pass --force to move it aside")
        console.print(f"moved the old {path} to {move_aside(path)}")


def _write_results(path: Path, data: dict, *, what: str = "results") -> None:
    """Write ``data`` as JSON atomically; a failure is one line naming the path (the
    results were printed already)."""
    from coplay.report.atomic import write_text
    from coplay.train.rundir import RunDirError

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps(data, indent=2, allow_nan=False))
    except OSError as err:
        raise RunDirError(f"cannot write {what} to {path}: {err.strerror or err}") from None
    console.print(f"written: {path}")


def _crossplay_table(res) -> Table:
    table = Table(title=f"{res.game}: mean return of row vs column [95% CI], {res.episodes} games")
    table.add_column("")
    for name in res.names:
        table.add_column(name, justify="right")
    for name, row in zip(res.names, res.results, strict=True):
        table.add_row(name, *(str(r.mean_return) if r.episodes else "-" for r in row))
    return table


def _ratings_table(ratings) -> Table:
    table = Table(title="ratings")
    for col in ("player", "Elo", "OpenSkill mu ± sigma", "ordinal", "α-rank"):
        table.add_column(col, justify="left" if col == "player" else "right")
    for i, name in enumerate(ratings.names):
        skill = ratings.openskill[i]
        table.add_row(
            name,
            f"{ratings.elo[i]:.1f}",
            f"{skill.mu:.2f} ± {skill.sigma:.2f}",
            f"{skill.ordinal:.2f}",
            f"{ratings.alpharank[i]:.3f}",
        )
    return table


def cmd_check_env(args: argparse.Namespace) -> int:
    """Exit 0 when every check passes, 1 when the game has a defect."""
    from coplay.envs.check import check_env
    from coplay.envs.probe import resolve_factory

    factory = resolve_factory(args.game, _game_params(args.params))
    report = check_env(factory, episodes=args.episodes, seed=args.seed)
    table = Table(title=f"check-env {args.game}: {report.episodes} episodes from seed {args.seed}")
    for col in ("check", "result", "details"):
        table.add_column(col)
    colours = {"pass": "green", "fail": "red", "blocked": "red", "skip": "yellow"}
    for r in report.results:
        details = [f"{f.message}\n  fix: {f.fix}" for f in r.findings] + [r.note] * bool(r.note)
        result = f"[{colours[r.status]}]{r.status}[/]"
        table.add_row(r.check, result, "\n".join(details) or r.description)
    console.print(table)
    return 0 if report.passed else 1


def _game_params(items: Sequence[str]) -> dict[str, object]:
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


def cmd_games(args: argparse.Namespace) -> int:
    from coplay.envs.registry import list_games

    table = Table(title="games")
    for col in ("name", "players", "kind", "description"):
        table.add_column(col)
    for g in list_games():
        table.add_row(g.name, str(g.num_players), str(g.kind), g.description)
    console.print(table)
    return 0


def cmd_presets(args: argparse.Namespace) -> int:
    from coplay.train.config import preset_names

    for name in preset_names():
        console.print(name)
    return 0


def _population_config(kind, args: argparse.Namespace, **fields):
    """A PSRO or league config from the trainer preset, file and overrides; one-line errors."""
    from pydantic import ValidationError

    from coplay.train.config import ConfigError, build_config, format_validation_error

    run = build_config(preset=args.preset, file=args.config, overrides=args.overrides)
    try:
        return kind(run=run, **fields)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err)) from None


def cmd_psro(args: argparse.Namespace) -> int:
    from coplay.train.psro import PsroConfig, run_psro

    cfg = _population_config(
        PsroConfig,
        args,
        iterations=args.iterations,
        meta_solver=args.meta_solver,
        initial=args.initial,
        warm_start=not args.cold,
        oracle=args.oracle,
        restarts=args.restarts,
    )
    _claim(Path(args.out), args.force, resumable=False)
    console.print(f"[bold]coplay psro[/] {cfg.run.game.name} -> {args.out}")
    res = run_psro(
        cfg,
        args.out,
        progress=lambda s: console.print(
            f"iteration {s.iteration}: {s.members} members, "
            f"exploitability {s.exploitability:.4f}, response value {s.response_value:.4f} "
            f"(best {s.best_value:.4f}), {s.elapsed_s:.0f} s"
        ),
    )
    console.print(f"members: {' '.join(res.members)}; run directory: {args.out}")
    return 0


def cmd_league(args: argparse.Namespace) -> int:
    from coplay.train.league import LeagueConfig, run_league

    cfg = _population_config(
        LeagueConfig,
        args,
        sampler=args.sampler,
        snapshot_every=args.snapshot_every,
        win_threshold=args.win_threshold,
        self_play=args.self_play,
        bots=args.bots,
    )
    _claim(Path(args.out), args.force, resumable=False)
    console.print(f"[bold]coplay league[/] {cfg.run.game.name} -> {args.out}")
    res = run_league(cfg, args.out)
    console.print(f"snapshots: {', '.join(f'{it} ({why})' for it, why in res.snapshots)}")
    for name, elo in zip(("learner", *res.members), res.elo, strict=True):
        console.print(f"  {name:>12}  Elo {elo:7.1f}")
    console.print(f"run directory: {args.out}")
    return 0


COMMANDS = {
    "train": cmd_train,
    "eval": cmd_eval,
    "config": cmd_config,
    "tournament": cmd_tournament,
    "check-env": cmd_check_env,
    "games": cmd_games,
    "presets": cmd_presets,
    "psro": cmd_psro,
    "league": cmd_league,
}

if __name__ == "__main__":
    sys.exit(main())
