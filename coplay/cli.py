"""The ``coplay`` command: train, eval, games, presets.

Every user error (bad config, unknown game, missing checkpoint) ends in one line on
stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

USER_ERRORS = (ValueError, FileNotFoundError, KeyError, TypeError)
console = Console()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="coplay", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train an agent; writes a run directory")
    t.add_argument("--preset", default=None, help="bundled preset (default: kuhn-selfplay)")
    t.add_argument("--config", default=None, help="YAML file merged over the preset")
    t.add_argument("--out", default=None, help="run directory (default: runs/<preset>)")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.add_argument(
        "--resume",
        default=None,
        metavar="RUN_DIR",
        help="continue a run from its saved state (its config.yaml plus any overrides)",
    )
    t.add_argument("overrides", nargs="*", help="key=value overrides, e.g. train.iterations=50")

    e = sub.add_parser("eval", help="evaluate a run or checkpoint against an opponent")
    e.add_argument("path", help="run directory or checkpoint folder")
    e.add_argument("--game", default=None, help="game (default: the run's game)")
    e.add_argument("--opponent", default="random", help="random, nash, perfect, optimal or a path")
    e.add_argument("--episodes", type=int, default=1000)
    e.add_argument("--seed", type=int, default=0)

    c = sub.add_parser("config", help="show every config key with its value and meaning")
    c.add_argument("--preset", default="kuhn-selfplay")
    c.add_argument("--config", default=None, help="YAML file merged over the preset")
    c.add_argument("overrides", nargs="*", help="key=value overrides")

    sub.add_parser("games", help="list registered games")
    sub.add_parser("presets", help="list bundled presets")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    from coplay.train.config import ConfigError

    try:
        return COMMANDS[args.command](args)
    except (ConfigError, *USER_ERRORS) as err:
        msg = str(err).splitlines()[0] if str(err) else type(err).__name__
        print(f"coplay {args.command}: error: {msg}", file=sys.stderr)
        return 2


def cmd_train(args: argparse.Namespace) -> int:
    from coplay.train.config import build_config
    from coplay.train.trainer import train

    if args.resume:
        out = Path(args.resume)
        cfg = build_config(file=out / "config.yaml", overrides=args.overrides)
    else:
        preset = args.preset or (None if args.config else "kuhn-selfplay")
        cfg = build_config(preset=preset, file=args.config, overrides=args.overrides)
        out = Path(args.out or f"runs/{preset or Path(args.config).stem}")
    console.print(f"[bold]coplay train[/] {cfg.game.name} -> {out}")
    resume = bool(args.resume)
    if args.quiet:
        summary = train(cfg, out, resume=resume)
    else:
        with _progress() as bar:
            task = bar.add_task("training", total=cfg.train.iterations, status="")
            summary = train(
                cfg,
                out,
                resume=resume,
                progress=lambda it, m: bar.update(task, completed=it, status=_status(m)),
            )
    _print_summary(summary)
    console.print(f"run directory: {out}")
    return 0


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
    from coplay.eval.exact import exploitability
    from coplay.eval.matches import play_match
    from coplay.models.loading import load_policy, resolve_checkpoint
    from coplay.train.opponents import build_opponent

    if args.episodes <= 0:
        raise ValueError(f"--episodes must be positive, got {args.episodes}")
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
    if spec.openspiel_name and not spec.perfect_information:
        ex = exploitability(policy, game, params=params)
        table.add_row("exploitability (exact)", f"{ex.exploitability:.4f}")
        table.add_row("NashConv (exact)", f"{ex.nash_conv:.4f}")
    console.print(table)
    return 0


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


COMMANDS = {
    "train": cmd_train,
    "eval": cmd_eval,
    "config": cmd_config,
    "games": cmd_games,
    "presets": cmd_presets,
}

if __name__ == "__main__":
    sys.exit(main())
