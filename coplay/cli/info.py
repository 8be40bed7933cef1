"""What there is and how it is set: ``coplay config``, ``games``, ``presets`` and
``check-env``."""

from __future__ import annotations

import argparse

from rich.text import Text

from coplay.cli.common import (
    OVERRIDES_HELP,
    PRESET_HELP,
    PROSE_WIDTH,
    Command,
    console,
    game_params,
    no_arguments,
    path_arg,
    seed,
    titled_table,
)


def _config_arguments(c: argparse.ArgumentParser) -> None:
    c.add_argument("--preset", default=None, help=PRESET_HELP)
    c.add_argument("--config", type=path_arg, default=None, help="YAML file merged over the preset")
    c.add_argument("overrides", nargs="*", help=OVERRIDES_HELP)


def cmd_config(args: argparse.Namespace) -> int:
    from coplay.train.settings import base_preset, build_config, describe

    preset = base_preset(args.preset, args.config)
    cfg = build_config(preset=preset, file=args.config, overrides=args.overrides)
    base = " + ".join(x for x in (preset and f"preset {preset}", args.config) if x)
    table = titled_table(f"config ({base or 'built-in defaults'})")
    table.add_column("key", no_wrap=True)
    table.add_column("value")
    table.add_column("meaning", max_width=PROSE_WIDTH)
    for key, value, doc in describe(cfg):
        table.add_row(key, value, doc)
    console.print(table)
    return 0


def _check_env_arguments(ce: argparse.ArgumentParser) -> None:
    ce.add_argument(
        "game", help="registered game, openspiel:<name>, or package.module:factory (your own)"
    )
    ce.add_argument(
        "--episodes", type=int, default=20, help="random episodes per check (default: %(default)s)"
    )
    ce.add_argument(
        "--seed", type=seed, default=0, help="first episode seed (default: %(default)s)"
    )
    ce.add_argument(
        "params",
        nargs="*",
        default=[],  # without one, a missing game is said as "required: game, params"
        help="game parameters as key=value, e.g. size=8",
    )


def cmd_check_env(args: argparse.Namespace) -> int:
    """Exit 0 when every check passes, 1 when the game has a defect."""
    from coplay.envs.check import check_env
    from coplay.envs.probe import resolve_factory

    factory = resolve_factory(args.game, game_params(args.params))
    report = check_env(factory, episodes=args.episodes, seed=args.seed)
    table = titled_table(f"check-env {args.game}: {report.episodes} episodes from seed {args.seed}")
    table.add_column("check", no_wrap=True)
    table.add_column("result")
    table.add_column("details", max_width=PROSE_WIDTH)
    colours = {"pass": "green", "fail": "red", "blocked": "red", "skip": "yellow"}
    for r in report.results:
        details = [f"{f.message}\n  fix: {f.fix}" for f in r.findings] + [r.note] * bool(r.note)
        result = Text(r.status, style=colours[r.status])
        table.add_row(r.check, result, "\n".join(details) or r.description)
    console.print(table)
    return 0 if report.passed else 1


def cmd_games(args: argparse.Namespace) -> int:
    from coplay.envs.registry import list_families, list_games

    table = titled_table("games")
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
    from coplay.train.settings import preset_info, preset_names

    table = titled_table("presets (coplay train --preset NAME)")
    table.add_column("name", no_wrap=True)
    table.add_column("game", no_wrap=True)
    table.add_column("purpose", max_width=PROSE_WIDTH + 10)
    for name in preset_names():
        info = preset_info(name)
        table.add_row(info.name, info.game, info.purpose)
    console.print(table)
    return 0


CONFIG = Command(
    "config",
    "show every config key with its value and meaning",
    _config_arguments,
    cmd_config,
)
CHECK_ENV = Command(
    "check-env", "check that a game keeps the Env contract", _check_env_arguments, cmd_check_env
)
GAMES = Command("games", "list registered games and game families", no_arguments, cmd_games)
PRESETS = Command("presets", "list bundled presets: game and purpose", no_arguments, cmd_presets)
