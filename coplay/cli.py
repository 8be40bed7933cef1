"""The ``coplay`` command: train, eval, games, presets.

Every user error (bad config, unknown game, missing checkpoint, an output path that
cannot be written) ends in one line on stderr and exit status 2, never a traceback
(``coplay --debug ...`` shows it). Ctrl-C ends in one line too, exit status 130.
``key=value`` overrides may stand anywhere on the command line, before or after the
options. Long commands report progress on stderr (``coplay.report.progress``); tables
go to stdout, whole even when piped.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table
from rich.text import Text

from coplay.report.progress import track

USER_ERRORS = (ValueError, KeyError, TypeError, OSError)
"""Shown as one line; OSError covers missing files, permissions and unreachable hosts."""
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


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="coplay", description=__doc__.splitlines()[0])
    p.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train an agent; writes a run directory")
    t.add_argument("--preset", default=None, help=PRESET_HELP)
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
    t.add_argument(
        "--report",
        action="store_true",
        help="write the HTML report to <run>/report.html at each evaluation and at the end "
        "(sets train.report=true)",
    )
    t.add_argument("overrides", nargs="*", help=OVERRIDES_HELP)

    e = sub.add_parser("eval", help="evaluate a run or checkpoint against an opponent")
    e.add_argument("path", help="run directory, checkpoint or LoRA adapter folder")
    e.add_argument("--game", default=None, help="game (default: the one the checkpoint records)")
    e.add_argument(
        "--role",
        default=None,
        help="the policy of a roster run to evaluate (a learner's name, or 'base': the "
        "untrained base of a LoRA run)",
    )
    e.add_argument("--opponent", default="random", help="random, nash, perfect, optimal or a path")
    e.add_argument("--episodes", type=int, default=1000)
    e.add_argument("--seed", type=int, default=0)
    e.add_argument(
        "--exact",
        action="store_true",
        help="also the exact win/draw/loss per seat by walking the game tree (OpenSpiel games)",
    )
    e.add_argument(
        "--samples",
        type=int,
        default=32,
        metavar="K",
        help="a text-mode policy's answers per information state for its sampled "
        "exploitability and exact rows, with bootstrap intervals (coplay/eval/sampled.py)",
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
    c.add_argument("--preset", default=None, help=PRESET_HELP)
    c.add_argument("--config", default=None, help="YAML file merged over the preset")
    c.add_argument("overrides", nargs="*", help=OVERRIDES_HELP)

    tm = sub.add_parser("tournament", help="cross-play a population; Elo, OpenSkill, α-rank")
    tm.add_argument(
        "--game",
        default=None,
        help="registered game, openspiel:<name> or package.module:factory "
        "(default: the game the checkpoint players record)",
    )
    tm.add_argument(
        "--players",
        nargs="+",
        required=True,
        help="scripted names (random, nash, perfect, optimal), checkpoint or run paths, or "
        "remote:URL#model[@ENV_VAR] (an OpenAI-compatible endpoint; its API key is read "
        "from ENV_VAR, and sent over http:// only to localhost)",
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

    _warm_start_parsers(sub)
    _report_parsers(sub)
    _play_parser(sub)
    sub.add_parser("games", help="list registered games and game families")
    sub.add_parser("presets", help="list bundled presets: game and purpose")
    _population_parsers(sub)
    for command in sub.choices.values():  # `coplay train ... --debug` works as well
        command.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP
        )
    return p


def _report_parsers(sub) -> None:
    r = sub.add_parser("report", help="one self-contained HTML page of one or more runs")
    r.add_argument("runs", nargs="+", metavar="RUN", help="run directories (several overlay)")
    r.add_argument(
        "--out",
        default=None,
        metavar="FILE.html",
        help="where to write it (default: RUN/report.html for one run, report.html for several)",
    )
    r.add_argument("--games", type=int, default=8, help="latest sample games shown per run")
    sh = sub.add_parser("show", help="print a run's sample games as conversations")
    sh.add_argument("run", metavar="RUN", help="run directory")
    sh.add_argument("--iteration", type=int, default=None, help="games of this iteration only")
    sh.add_argument("--games", type=int, default=2, help="how many (the latest)")


POPULATION_RESUME_HELP = (
    "continue a stopped run from its saved state, with the settings it saved (the other "
    "options are ignored; key=value overrides still apply to the trainer)"
)


SEAT_WEIGHTS_HELP = (
    "share of the learner's game groups per seat, one weight per seat, e.g. 1 3: a "
    "quarter in seat 0, three quarters in seat 1 (default: seats rotate evenly)"
)


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


def _warm_start_parsers(sub) -> None:
    """``coplay sft`` and ``coplay demos`` (coplay.sft): warm starts before RL."""
    from coplay.policies.answer import ANSWER_FORMATS

    sf = sub.add_parser("sft", help="fine-tune on chat JSONL (loss on assistant turns)")
    sf.add_argument("--data", required=True, help="chat-format JSONL, one conversation a line")
    sf.add_argument("--out", required=True, help="run directory (a new one: see --force)")
    sf.add_argument("--preset", default=None, help=PRESET_HELP)
    sf.add_argument("--config", default=None, help="YAML file merged over the preset")
    sf.add_argument("--force", action="store_true", help=FORCE_HELP)
    sf.add_argument("--quiet", action="store_true", help="no progress bar")
    sf.add_argument(
        "overrides", nargs="*", help="key=value overrides, e.g. sft.epochs=3 sft.lora={}"
    )
    dm = sub.add_parser("demos", help="narrated demonstrations of a scripted player, as JSONL")
    dm.add_argument("--game", required=True, help="registered game or openspiel:<name>")
    dm.add_argument(
        "--player", default="random", help="random, nash, perfect, optimal or a checkpoint path"
    )
    dm.add_argument("--games", type=int, default=100, help="games to play")
    dm.add_argument("--out", required=True, help="JSONL file to write (see --force)")
    dm.add_argument(
        "--context",
        default="turn",
        choices=("turn", "chat"),
        help="turn: one conversation per decision; chat: one per player and game",
    )
    dm.add_argument(
        "--answer",
        default="think",
        help="answer format of the written answers (model.text.answer): "
        + ", ".join(sorted(ANSWER_FORMATS)),
    )
    dm.add_argument("--seed", type=int, default=0)
    dm.add_argument("--force", action="store_true", help="move an existing --out to OUT.old-<time>")
    dm.add_argument("params", nargs="*", help="game parameters as key=value, e.g. players=3")


def _play_parser(sub) -> None:
    pl = sub.add_parser("play", help="play a game against an agent, or watch policies play")
    pl.add_argument(
        "agent",
        nargs="?",
        help="who you play: a run directory, checkpoint, random, nash, perfect, optimal or "
        "remote:URL#model[@ENV_VAR]; it takes every seat but yours",
    )
    pl.add_argument("--game", default=None, help="game (default: the one the run records)")
    pl.add_argument("--watch", nargs="+", metavar="POLICY", help="watch these play, one a seat")
    pl.add_argument("--seat", default="0", help="your seat: a number, or 'alternate' (default 0)")
    pl.add_argument("--games", type=int, default=1, help="games to play in the terminal")
    pl.add_argument("--seed", type=int, default=0, help="seed of the first deal")
    pl.add_argument(
        "--show-probs", action="store_true", help="show each agent move's distribution and text"
    )
    pl.add_argument("--web", action="store_true", help="play in a local web page instead")
    pl.add_argument("--host", default="127.0.0.1", help="address the web page is served on")
    pl.add_argument("--port", type=int, default=8765, help="port of the web page (0: any free)")
    pl.add_argument("params", nargs="*", help="game parameters as key=value, e.g. players=3")


POPULATION_REPORT_HELP = "write the HTML report (meta-game, weights, curves) to <run>/report.html"


def _population_parsers(sub) -> None:
    from coplay.eval.metasolvers import META_SOLVERS
    from coplay.population.league import SAMPLERS
    from coplay.population.psro import INITIAL_MEMBERS, ORACLES

    ps = sub.add_parser("psro", help="PSRO/JPSRO: grow a population of LM best responses")
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
    sv = sub.add_parser("serve", help="serve a run as an OpenAI-compatible endpoint (vLLM)")
    sv.add_argument("run", help="run directory (its final checkpoint) or checkpoint folder")
    sv.add_argument("--host", default="127.0.0.1", help="address to bind (default: local only)")
    sv.add_argument("--port", type=int, default=8000)
    lg = sub.add_parser("league", help="train against a league of frozen snapshots")
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    _take_leftovers(parser, args, [*getattr(args, "after_numbers", []), *extra])
    console.width = None if console.is_terminal else PIPED_WIDTH
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


LEFTOVER_FIELDS = ("overrides", "params")
"""The '*' positionals (key=value items) a command may have."""


def _table(title: str) -> Table:
    """A table whose title stays on one line (wrapped, a long path would break up)."""
    return Table(title=Text(title, no_wrap=True, overflow="ignore"))


def _take_leftovers(parser: argparse.ArgumentParser, args, extra: list[str]) -> None:
    """Put key=value items that follow an option into the command's '*' positional.

    argparse before 3.12 stops filling a '*' positional at the first option, so in
    ``train --out runs/x train.iterations=5`` the override is left over; it belongs
    with the others, in command-line order. Anything else left over is an error.
    """
    if not extra:
        return
    field = next((f for f in LEFTOVER_FIELDS if isinstance(getattr(args, f, None), list)), None)
    if field is None or any(e.startswith("-") for e in extra):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    getattr(args, field).extend(extra)


def cmd_train(args: argparse.Namespace) -> int:
    from coplay.train.config import ConfigError, base_preset, build_config
    from coplay.train.trainer import train

    if args.resume:
        if args.force:
            raise ValueError("--force starts a new run; it cannot go with --resume")
        out = Path(args.resume)
        if not (out / "config.yaml").is_file():
            raise ConfigError(
                f"{out} holds no run to resume (it has no config.yaml); start one with --out {out}"
            )
        overrides = [*args.overrides, *(["train.report=true"] if args.report else [])]
        cfg = build_config(file=out / "config.yaml", overrides=overrides)
    else:
        preset = base_preset(args.preset, args.config)
        overrides = [*args.overrides, *(["train.report=true"] if args.report else [])]
        cfg = build_config(preset=preset, file=args.config, overrides=overrides)
        out = Path(args.out or f"runs/{preset or Path(args.config).stem}")
        _claim(out, args.force)
    console.print(f"[bold]coplay train[/] {cfg.game.name} -> {out}")
    if args.roster or (args.resume and (out / "roster.yaml").is_file()):
        summary = _with_progress(_roster_run(args, cfg, out), cfg.train.iterations, args.quiet)
    else:
        run = lambda progress: train(cfg, out, resume=bool(args.resume), progress=progress)  # noqa: E731
        summary = _with_progress(run, cfg.train.iterations, args.quiet, status=_status)
    _print_summary(summary)
    if cfg.train.report:
        console.print(f"report: {out / 'report.html'}")
    console.print(f"run directory: {out}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from coplay.train.report import write_report

    if args.games < 0:
        raise ValueError(f"--games must be 0 or more, got {args.games}")
    default = Path(args.runs[0]) / "report.html" if len(args.runs) == 1 else Path("report.html")
    out = Path(args.out) if args.out else default
    if out.is_dir():
        raise ValueError(f"--out {out} is a directory; name an .html file")
    written = write_report(args.runs, out, games=args.games)
    console.print(f"written: {written} ({written.stat().st_size / 1024:.0f} kB)")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from coplay.report.runfiles import load_run
    from coplay.report.show import show_games

    if args.games <= 0:
        raise ValueError(f"--games must be positive, got {args.games}")
    run = load_run(args.run)
    if not run.transcripts:
        raise ValueError(f"{run.path} has no transcripts (train.transcripts: 0, or no evaluation)")
    shown = show_games(run.transcripts, console, games=args.games, iteration=args.iteration)
    if not shown:
        found = sorted({r.get("iteration") for r in run.transcripts})
        raise ValueError(
            f"{run.path} has no transcripts of iteration {args.iteration}; "
            f"it has {', '.join(map(str, found))}"
        )
    return 0


def _claim(out: Path, force: bool, *, resumable: bool = True) -> None:
    """Refuse an ``--out`` that holds a run unless ``--force``, which moves it aside."""
    from coplay.train.checkpoints.rundir import claim

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
    """``run(progress)`` reporting progress over ``total`` iterations, or none if quiet."""
    if quiet:
        return run(None)
    with track("train", total, "iterations", console=console) as advance:
        return run(lambda it, m: advance(it, status(m)))


def _status(m: dict[str, float]) -> str:
    keys = ("eval/exploitability", "rollout/return_seat0", "perf/decisions_per_s")
    return "  ".join(f"{k.split('/')[-1]}={m[k]:.3f}" for k in keys if k in m)


def _print_summary(summary: dict) -> None:
    table = _table("evaluation (before -> after training)")
    table.add_column("metric", no_wrap=True)
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
    from coplay.envs.probe import resolve_factory
    from coplay.eval.exact import decide_exact, exploitability
    from coplay.eval.matches import play_match
    from coplay.models.checkpoints import find_policy
    from coplay.population.opponents import build_opponent

    if args.episodes <= 0:
        raise ValueError(f"--episodes must be positive, got {args.episodes}")
    if args.costly < 0:
        raise ValueError(f"--costly must be 0 (off) or positive, got {args.costly}")
    saved = find_policy(args.path, args.role)
    game, params = _game_of(saved, args.game)
    make = resolve_factory(game, params)
    policy = saved.load(seed=args.seed)
    spec = make().spec
    opponent = build_opponent(args.opponent, game, seed=args.seed + 1, params=params)
    with track("eval", args.episodes, "episodes", console=console) as advance:
        res = play_match(
            make,
            policy,
            [opponent] * (spec.num_players - 1),
            episodes=args.episodes,
            seed=args.seed,
            on_progress=advance,
        )
    table = _table(f"{saved.folder} vs {args.opponent} on {game}")
    table.add_column("", no_wrap=True)
    table.add_column("value [95% CI]", justify="right")
    for name in ("win", "draw", "loss", "mean_return"):
        table.add_row(name, str(getattr(res, name)))
    for seat, r in enumerate(res.mean_return_by_seat):
        table.add_row(f"mean return, seat {seat}", f"{r:.3f}")
    table.add_row("episodes", str(res.episodes))
    table.add_row("invalid-action rate", f"{res.invalid_rate:.3f}")
    if getattr(policy, "mode", "choice") == "text":
        return _eval_text(args, table, policy, opponent, spec, game, params)
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


def _eval_text(args, table: Table, policy, opponent, spec, game: str, params: dict) -> int:
    """``coplay eval`` of a text-mode policy: its exact rows are those of its sampled
    distribution (``--samples`` answers per state), each with a bootstrap interval."""
    from coplay.eval.exact import decide_exact
    from coplay.eval.sampled import SampledPolicy, bootstrap, exploitability_metric, outcomes_metric

    if args.samples <= 0:
        raise ValueError(f"--samples must be positive, got {args.samples}")
    sampled = SampledPolicy(policy, k=args.samples)
    metrics = []
    if decide_exact("auto", spec, game, params):
        metrics.append(exploitability_metric(game, params))
    if args.exact:
        metrics.append(outcomes_metric(opponent, game, params))
    for metric in metrics:
        for name, e in bootstrap(metric, sampled, seed=args.seed).items():
            table.add_row(
                f"{name.replace('_', ' ')} (sampled, K={e.k})",
                f"{e.value:.4f} [{e.ci_low:.4f}, {e.ci_high:.4f}]",
            )
    if metrics:
        table.add_row(
            f"invalid answers (sampled, K={args.samples})", f"{sampled.invalid_rate():.3f}"
        )
    console.print(table)
    if args.costly:
        _print_costly(sampled, opponent, game, params, args.costly)
    return 0


def _print_costly(policy, opponent, game: str, params: dict, top: int) -> None:
    from coplay.eval.costly import costly_positions

    for seat, found in enumerate(costly_positions(policy, opponent, game, params=params, top=top)):
        table = _table(f"costliest positions, seat {seat} (exact gain in expected return)")
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


def _game_of(saved, game: str | None) -> tuple[str, dict]:
    """The game to evaluate on: --game, else the one the checkpoint (or its run) records
    (with its parameters, when --game names that same game)."""
    played = saved.game()
    if game and (played is None or played.name != game):
        return game, {}
    if played is None:
        raise ValueError(f"cannot tell which game {saved.folder} plays; pass --game")
    return played.name, dict(played.params)


def cmd_sft(args: argparse.Namespace) -> int:
    from coplay.sft.data import read_conversations
    from coplay.sft.trainer import build_sft_config, run_sft, steps_total
    from coplay.train.config import base_preset

    preset = base_preset(args.preset, args.config)
    cfg = build_sft_config(preset=preset, file=args.config, overrides=args.overrides)
    total = steps_total(len(read_conversations(args.data)), cfg.sft)
    out = Path(args.out)
    _claim(out, args.force, resumable=False)
    console.print(f"[bold]coplay sft[/] {args.data} -> {out}")
    with track("sft", total, "steps", console=console, quiet=args.quiet) as advance:
        summary = run_sft(
            cfg, args.data, out, progress=lambda s, m: advance(s, f"loss={m['sft/loss']:.3f}")
        )
    console.print(
        f"{summary['steps']} steps on {summary['conversations']} conversations "
        f"({summary['trained_tokens']} assistant tokens): loss {summary['first/sft/loss']:.4f} "
        f"-> {summary['final/sft/loss']:.4f}"
    )
    console.print(f"checkpoint: {summary['checkpoint']} (coplay train model.path=...)")
    return 0


def cmd_demos(args: argparse.Namespace) -> int:
    from coplay.sft.demos import write_demos

    if args.games <= 0:
        raise ValueError(f"--games must be positive, got {args.games}")
    out = Path(args.out)
    _claim_file(out, args.force)
    count = write_demos(
        out,
        game=args.game,
        player=args.player,
        games=args.games,
        seed=args.seed,
        params=_game_params(args.params),
        context=args.context,
        answer=args.answer,
    )
    console.print(f"written: {out} ({count} conversations; train on it with coplay sft)")
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    from coplay.train.config import base_preset, build_config, describe

    preset = base_preset(args.preset, args.config)
    cfg = build_config(preset=preset, file=args.config, overrides=args.overrides)
    base = " + ".join(x for x in (preset and f"preset {preset}", args.config) if x)
    table = _table(f"config ({base or 'built-in defaults'})")
    table.add_column("key", no_wrap=True)
    table.add_column("value")
    table.add_column("meaning", max_width=PROSE_WIDTH)
    for key, value, doc in describe(cfg):
        table.add_row(key, value, doc)
    console.print(table)
    return 0


def cmd_tournament(args: argparse.Namespace) -> int:
    from coplay.envs.probe import resolve_factory
    from coplay.eval.crossplay import (
        CrossPlayInterrupted,
        cross_play,
        games_total,
        rate_cross_play,
        to_json,
    )

    if args.episodes <= 0:
        raise ValueError(f"--episodes must be positive, got {args.episodes}")
    if len(set(args.players)) != len(args.players):
        raise ValueError(f"list each player once, got {' '.join(args.players)}")
    game, params = _tournament_game(args.game, args.players)
    seats = resolve_factory(game, params)().spec.num_players
    policies = {
        spec: _player(spec, game, params, seed=args.seed + i) for i, spec in enumerate(args.players)
    }
    total = games_total(len(policies), seats, args.episodes)
    if args.out:
        _claim_file(Path(args.out), args.force)
    try:
        with track("tournament", total, "games", console=console) as advance:
            res = cross_play(
                game,
                policies,
                episodes=args.episodes,
                seed=args.seed,
                params=params,
                on_progress=lambda done, _total: advance(done),
            )
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


def _player(spec: str, game: str, params: dict, *, seed: int):
    """A tournament player: a remote endpoint, a scripted bot or a checkpoint."""
    from coplay.policies.remote import remote_from_spec
    from coplay.population.opponents import build_opponent

    if spec.startswith("remote:"):
        return remote_from_spec(spec)
    return build_opponent(spec, game, seed=seed, params=params)


def _tournament_game(game: str | None, players: Sequence[str]) -> tuple[str, dict]:
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


def _claim_file(path: Path, force: bool) -> None:
    """Refuse an existing results file unless ``--force``, which moves it aside."""
    from coplay.train.checkpoints.rundir import RunDirError, move_aside

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
    from coplay.train.checkpoints.rundir import RunDirError, existing_ancestor

    if not (blocker := existing_ancestor(path.parent)).is_dir():
        raise RunDirError(f"cannot write {what} to {path}: {blocker} is a file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps(data, indent=2, allow_nan=False))
    except OSError as err:
        raise RunDirError(f"cannot write {what} to {path}: {err.strerror or err}") from None
    console.print(f"written: {path}")


def _crossplay_table(res) -> Table:
    table = _table(f"{res.game}: mean return of row vs column [95% CI], {res.episodes} games")
    table.add_column("", no_wrap=True)
    for name in res.names:
        table.add_column(name, justify="right")
    for name, row in zip(res.names, res.results, strict=True):
        table.add_row(name, *(str(r.mean_return) if r.episodes else "-" for r in row))
    return table


def _ratings_table(ratings) -> Table:
    table = _table("ratings")
    for col in ("player", "Elo", "OpenSkill mu ± sigma", "ordinal", "α-rank"):
        table.add_column(col, justify="left" if col == "player" else "right", no_wrap=True)
    for i, name in enumerate(ratings.names):
        skill = ratings.openskill[i]
        table.add_row(
            name,
            _elo(ratings.elo[i]),
            f"{skill.mu:.2f} ± {skill.sigma:.2f}",
            f"{skill.ordinal:.2f}",
            f"{ratings.alpharank[i]:.3f}",
        )
    return table


def _elo(value: float | None) -> str:
    """An Elo rating, or a dash for a player without games (no rating)."""
    return "-" if value is None or math.isnan(value) else f"{value:.1f}"


def cmd_check_env(args: argparse.Namespace) -> int:
    """Exit 0 when every check passes, 1 when the game has a defect."""
    from coplay.envs.check import check_env
    from coplay.envs.probe import resolve_factory

    factory = resolve_factory(args.game, _game_params(args.params))
    report = check_env(factory, episodes=args.episodes, seed=args.seed)
    table = _table(f"check-env {args.game}: {report.episodes} episodes from seed {args.seed}")
    table.add_column("check", no_wrap=True)
    table.add_column("result")
    table.add_column("details", max_width=PROSE_WIDTH)
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


def cmd_play(args: argparse.Namespace) -> int:
    """A person against an agent (or policies watched) at the prompt or in a web page."""
    from coplay.envs.probe import resolve_factory
    from coplay.play.setup import play, seating

    # argparse may hand a game parameter (key=value) to the agent or to --watch.
    named = [x for x in [args.agent, *(args.watch or [])] if x]
    agent = args.agent if args.agent and "=" not in args.agent else None
    if bool(agent) == bool(args.watch):
        raise ValueError("name one agent to play against, or the policies to --watch (not both)")
    specs = [agent] if agent else [w for w in args.watch if "=" not in w]
    for spec in specs:
        _check_player(spec)
    game, params = _tournament_game(args.game, specs)
    params |= _game_params([*args.params, *(w for w in named if "=" in w)])
    make_env = resolve_factory(game, params)
    built = {spec: _player(spec, game, params, seed=args.seed + i) for i, spec in enumerate(specs)}
    seats = seating(specs, make_env().spec.num_players, seat=None if args.watch else args.seat)
    return play(
        make_env,
        {name: None if spec is None else built[spec] for name, spec in seats.items()},
        rotate=args.seat == "alternate",
        games=args.games,
        seed=args.seed,
        show_probs=args.show_probs,
        web=(args.host, args.port) if args.web else None,
        transcripts=Path(specs[0]) / "transcripts.jsonl",
    )


def _check_player(spec: str) -> None:
    """A player that names no bot must be a path that exists (one line if not)."""
    from coplay.population.opponents import SCRIPTED_NAMES

    if spec not in SCRIPTED_NAMES and not spec.startswith("remote:") and not Path(spec).exists():
        raise FileNotFoundError(
            f"{spec} does not exist (expected a run directory, a checkpoint or one of "
            f"{', '.join(SCRIPTED_NAMES)})"
        )


def cmd_games(args: argparse.Namespace) -> int:
    from coplay.envs.registry import list_families, list_games

    table = _table("games")
    table.add_column("name", no_wrap=True)
    table.add_column("players")
    table.add_column("kind")
    table.add_column("description", max_width=PROSE_WIDTH)
    for g in list_games():
        table.add_row(g.name, str(g.num_players), str(g.kind), g.description)
    for form, description in list_families():
        table.add_row(form, "-", "-", description)
    table.add_row(
        "package.module:function",
        "-",
        "-",
        "your own game (docs/envs.md); importing it runs its code, as a Python file does",
    )
    console.print(table)
    return 0


def cmd_presets(args: argparse.Namespace) -> int:
    from coplay.train.config import preset_info, preset_names

    table = _table("presets (coplay train --preset NAME)")
    table.add_column("name", no_wrap=True)
    table.add_column("game", no_wrap=True)
    table.add_column("purpose", max_width=PROSE_WIDTH + 10)
    for name in preset_names():
        info = preset_info(name)
        table.add_row(info.name, info.game, info.purpose)
    console.print(table)
    return 0


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


def _run_report(out: Path) -> Path:
    """``<out>/report.html`` of the run in ``out``, written atomically."""
    from coplay.train.report import write_report

    return write_report([out], out / "report.html")


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
            progress=lambda it, m: advance(it, _status(m)),
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


def _population_run(kind, name: str, args: argparse.Namespace, **fields):
    """A league's or PSRO's config and run directory: from the options for a new run
    (claiming ``--out``), or from what a stopped run saved (``--resume``)."""
    from coplay.train.config import ConfigError, build_config, load_yaml

    if not args.resume:
        cfg = _population_config(kind, args, **fields)
        _claim(Path(args.out), args.force)
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


def cmd_serve(args) -> int:
    from coplay.serve import serve

    return serve(args.run, host=args.host, port=args.port)


COMMANDS = {
    "train": cmd_train,
    "eval": cmd_eval,
    "config": cmd_config,
    "sft": cmd_sft,
    "demos": cmd_demos,
    "tournament": cmd_tournament,
    "check-env": cmd_check_env,
    "games": cmd_games,
    "report": cmd_report,
    "show": cmd_show,
    "presets": cmd_presets,
    "play": cmd_play,
    "psro": cmd_psro,
    "league": cmd_league,
    "serve": cmd_serve,
}

if __name__ == "__main__":
    sys.exit(main())
