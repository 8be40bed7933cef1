"""``coplay play``: a person against an agent, or policies watched, at the prompt or in
a local web page (coplay.play)."""

from __future__ import annotations

import argparse
import secrets
from pathlib import Path

from coplay.cli.common import (
    Command,
    build_player,
    game_params,
    is_checkpoint_player,
    players_game,
    port,
    seed,
)

WEB_HOST, WEB_PORT = "127.0.0.1", 8765
"""Where ``--web`` serves the page unless ``--host`` or ``--port`` says otherwise."""


def _play_arguments(pl: argparse.ArgumentParser) -> None:
    pl.add_argument(
        "agent",
        nargs="?",
        help="who you play: a run directory, checkpoint, random, nash, perfect, optimal or "
        "remote:URL#model[@ENV_VAR]; it takes every seat but yours",
    )
    pl.add_argument("--game", default=None, help="game (default: the one the run records)")
    pl.add_argument("--watch", nargs="+", metavar="POLICY", help="watch these play, one a seat")
    pl.add_argument(
        "--seat",
        default=None,
        help="your seat: a number, or 'alternate' (default: 0); with --watch, 'alternate' "
        "turns the watched policies' seats every game",
    )
    pl.add_argument(
        "--games", type=int, default=None, help="games to play in the terminal (default: 1)"
    )
    pl.add_argument(
        "--seed",
        type=seed,
        default=None,
        help="seed of the first deal (default: drawn at random, so deals are not those of "
        "seed 0, nor of the replays on the page, which show their seeds)",
    )
    pl.add_argument(
        "--show-probs", action="store_true", help="show each agent move's distribution and text"
    )
    pl.add_argument("--web", action="store_true", help="play in a local web page instead")
    pl.add_argument(
        "--host", default=None, help=f"address the web page is served on (default: {WEB_HOST})"
    )
    pl.add_argument(
        "--port",
        type=port,
        default=None,
        help=f"port of the web page (default: {WEB_PORT}; 0: any free)",
    )
    pl.add_argument("params", nargs="*", help="game parameters as key=value, e.g. players=3")


def cmd_play(args: argparse.Namespace) -> int:
    """A person against an agent (or policies watched) at the prompt or in a web page."""
    from coplay.envs.probe import resolve_factory
    from coplay.play.setup import play, seating

    # argparse may hand a game parameter (key=value) to the agent or to --watch, and a
    # player to the parameters; a path with '=' in it is still a player.
    items = [x for x in [args.agent, *args.params] if x]
    agents = [x for x in items if not _is_game_param(x)]
    watched = [w for w in args.watch or [] if not _is_game_param(w)]
    if len(agents) > 1:
        raise ValueError(
            f"name one agent to play against, got {' '.join(agents)} (game parameters look "
            "like key=value, e.g. players=3)"
        )
    if bool(agents) == bool(watched):
        raise ValueError("name one agent to play against, or the policies to --watch (not both)")
    _check_options(args)
    specs = agents or watched
    for spec in specs:
        _check_player(spec)
    if args.seed is None:  # below 2**30: the deals after it (seed + games) stay seeds
        args.seed = secrets.randbelow(2**30)
    game, params = players_game(args.game, specs)
    params |= game_params([x for x in [*items, *(args.watch or [])] if _is_game_param(x)])
    make_env = resolve_factory(game, params)
    built = {
        spec: build_player(spec, game, params, seed=args.seed + i) for i, spec in enumerate(specs)
    }
    num_players = make_env().spec.num_players
    if args.watch and len(specs) > num_players:
        raise ValueError(f"--watch names {len(specs)} policies but {game} has {num_players} seats")
    seats = seating(specs, num_players, seat=None if args.watch else args.seat or "0")
    return play(
        make_env,
        {name: None if spec is None else built[spec] for name, spec in seats.items()},
        rotate=args.seat == "alternate",
        games=1 if args.games is None else args.games,
        seed=args.seed,
        show_probs=args.show_probs,
        web=_web_address(args) if args.web else None,
        transcripts=_recorded_games(specs),
    )


def _recorded_games(specs: list[str]) -> Path | None:
    """The games the web page replays: those of the run the first saved player comes
    from, given as its run directory or as a checkpoint inside it
    (``RUN/checkpoints/final``, a roster's role folder below that)."""
    from coplay.report.runfiles import transcripts_file

    for spec in specs:
        if is_checkpoint_player(spec):
            path = Path(spec)
            run = next((p.parent for p in (path, *path.parents) if p.name == "checkpoints"), path)
            return transcripts_file(run)
    return None


def _check_options(args: argparse.Namespace) -> None:
    """Refuse an option that the chosen screen would ignore, and a ``--host`` that no
    page can be served on (before any player is built)."""
    if args.watch and args.seat not in (None, "alternate"):
        raise ValueError(
            f"--seat {args.seat} is your seat, and with --watch you have none; drop it "
            "(--seat alternate turns the watched policies' seats every game)"
        )
    if args.web:
        if args.games is not None:
            raise ValueError(
                "--games counts the games played in the terminal; the web page deals until "
                "you stop it: drop --games or --web"
            )
        from coplay.play.web import check_host

        check_host(*_web_address(args))
        return
    for option in ("--host", "--port"):
        if getattr(args, option.removeprefix("--")) is not None:
            raise ValueError(f"{option} is where the web page is served; add --web or drop it")


def _web_address(args: argparse.Namespace) -> tuple[str, int]:
    """The host and port ``--web`` serves the page on."""
    return args.host or WEB_HOST, WEB_PORT if args.port is None else args.port


def _is_game_param(item: str) -> bool:
    """``key=value`` with a Python name for the key, and no player of that name (an
    existing path such as ``runs/lr=0.1``, or a remote endpoint)."""
    key, sep, _ = item.partition("=")
    names_player = item.startswith("remote:") or Path(item).exists()
    return bool(sep) and key.strip().isidentifier() and not names_player


def _check_player(spec: str) -> None:
    """A player that names no bot must be a path that exists (one line if not)."""
    from coplay.population.opponents import SCRIPTED_NAMES

    if spec not in SCRIPTED_NAMES and not spec.startswith("remote:") and not Path(spec).exists():
        raise FileNotFoundError(
            f"{spec} does not exist (expected a run directory, a checkpoint or one of "
            f"{', '.join(SCRIPTED_NAMES)})"
        )


PLAY = Command(
    "play",
    "play a game against an agent, or watch policies play",
    _play_arguments,
    cmd_play,
)
